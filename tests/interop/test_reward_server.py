"""`seedwheel reward-server`, started for real on a loopback port, scores NeMo Gym's own rollouts (nemo-gym 0.4.0's
example_rollouts.jsonl, vendored) as `seedwheel verify` scores the same completions, refuses bad requests with a
4xx and one line, and stops on SIGTERM."""

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner

from interop.nemo_gym import input_key, read_jsonl, response_messages, row_verifier
from langmodels.launcher import stop_group, wait_group_gone
from pipeline.cli import main
from tests.paths import REPO
from tests.services import free_port

DATA = Path(__file__).parent / "data" / "nemo_gym"
SERVERS = ("xlam_fc", "structured_outputs", "math_with_judge")
STOP_S = 10.0


def _requests(server: str) -> list[dict]:
    """Each rollout of `server` as NeMo Gym's verify request: its row's fields (joined on the prompt; the xlam_fc
    and structured_outputs rollouts do not repeat them) and the rollout's own, its reward left out."""
    rows = {input_key(row["responses_create_params"]): row for _, row in read_jsonl(DATA / server / "example.jsonl")}
    requests = []
    for _, rollout in read_jsonl(DATA / server / "example_rollouts.jsonl"):
        row = rows.get(input_key(rollout["responses_create_params"]), {})
        requests.append(
            {**row, **{k: v for k, v in rollout.items() if k != "reward"}, "nemo_reward": rollout["reward"]}
        )
    return requests


@contextmanager
def reward_server(*args: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """`seedwheel reward-server` on a free loopback port until the body ends; then SIGTERM, and it must be gone."""
    port = free_port()
    command = [str(Path(sys.executable).with_name("seedwheel")), "reward-server", "--port", str(port), *args]
    process = subprocess.Popen(
        command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    stopped = False
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, process.stdout.read().decode() if process.stdout else ""
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as answer:
                    assert json.load(answer)["status"] == "ok"
                break
            except OSError:
                assert time.monotonic() < deadline, "the reward server did not answer within 60 s"
                time.sleep(0.1)
        yield url, process
        process.send_signal(signal.SIGTERM)
        stopped = wait_group_gone(process, process.pid, STOP_S)
        assert stopped, f"seedwheel reward-server was still running {STOP_S:g} s after SIGTERM"
        assert process.wait(timeout=5) == 0  # a clean stop, not a death by the signal
    finally:
        if not stopped:
            stop_group(process, 5, "seedwheel reward-server")


def _post(url: str, body: bytes, path: str = "/verify") -> tuple[int, dict]:
    request = urllib.request.Request(f"{url}{path}", data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, json.load(answer)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def _verify_cli(tmp_path: Path, requests: dict[str, dict]) -> dict[str, dict]:
    """`seedwheel verify` on the same rollouts: each request's verifier as a task, its response as a completion."""
    tasks, completions = tmp_path / "tasks.jsonl", tmp_path / "completions.jsonl"
    tasks.write_text(
        "".join(json.dumps({"task_id": key, "verifier": row_verifier(r)}) + "\n" for key, r in requests.items())
    )
    completions.write_text(
        "".join(
            json.dumps({"task_id": key, "completion": response_messages(r["response"])}) + "\n"
            for key, r in requests.items()
        )
    )
    verdicts = tmp_path / "verdicts.jsonl"
    result = CliRunner().invoke(main, ["verify", str(tasks), str(completions), "-o", str(verdicts)])
    assert result.exit_code == 0, result.output
    return {row["task_id"]: row for _, row in read_jsonl(verdicts)}


# NeMo Gym's reward against seedwheel's, each disagreement explained in docs/interop.md ("Agreement").
EXPECTED = {
    # xlam_fc: the same verdict on the four it scores; rollout 5's row is refused (422), its gold breaks its tool.
    "xlam_fc": {1: (1.0, 1.0), 2: (1.0, 1.0), 3: (1.0, 1.0), 4: (0.0, 0.0), 5: (0.0, 422)},
    # structured_outputs: rollouts 1 and 2 answer in a ```json fence, which NeMo Gym does not parse and seedwheel does.
    "structured_outputs": {1: (0.0, 1.0), 2: (0.0, 1.0), 3: (1.0, 1.0), 4: (0.0, 0.0), 5: (0.0, 0.0)},
    # math_with_judge: math_answer agrees on all five (NeMo Gym's library_reward is math-verify's, as here).
    "math_with_judge": {1: (0.0, 0.0), 2: (1.0, 1.0), 3: (1.0, 1.0), 4: (1.0, 1.0), 5: (0.0, 0.0)},
}


@pytest.mark.slow  # ~20 s: math_with_judge's rollout 2 compares two expressions in (2 + sqrt 3)^2016 symbolically
def test_the_server_scores_nemo_gyms_rollouts_as_seedwheel_verify_does(tmp_path: Path) -> None:
    served: dict[str, tuple[float, int | float]] = {}
    scorable: dict[str, dict] = {}
    with reward_server() as (url, _):
        for server in SERVERS:
            for n, request in enumerate(_requests(server), start=1):
                status, answer = _post(url, json.dumps(request).encode())
                key = f"{server}:{n}"
                if status == 200:
                    assert answer["responses_create_params"] == request["responses_create_params"]  # echoed
                    served[key] = (float(request["nemo_reward"]), answer["reward"])
                    scorable[key] = request
                    assert answer["passed"] is (answer["reason"] == "ok")
                    assert server != "math_with_judge" or answer["verifier"]["name"] == "math_answer", answer
                else:
                    assert status == 422 and "\n" not in answer["error"], answer
                    served[key] = (float(request["nemo_reward"]), status)
    verdicts = _verify_cli(tmp_path, scorable)
    assert {key: verdicts[key]["score"] for key in scorable} == {key: served[key][1] for key in scorable}
    for server, expected in EXPECTED.items():
        assert {n: served[f"{server}:{n}"] for n in expected} == expected, server


def test_a_bad_request_gets_a_4xx_and_one_line(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    spec = {"name": "numeric_answer", "params": {"answer": 4}}
    tasks.write_text(json.dumps({"task_id": "t1", "verifier": spec}) + "\n")
    right = {"output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "4"}]}]}
    with reward_server("--tasks", str(tasks)) as (url, _):
        cases = [
            (b"not json", 400, "not UTF-8 JSON"),
            (b"[1, 2]", 400, "not a JSON object"),
            (json.dumps({"verifier": spec}).encode(), 400, "no response object"),
            (json.dumps({"response": {"output": "x"}, "verifier": spec}).encode(), 400, "no output list"),
            (json.dumps({"response": right}).encode(), 422, "no gold seedwheel reads"),
            (json.dumps({"response": right, "task_id": "t9"}).encode(), 422, "task_id t9 is not among the 1 tasks"),
            (json.dumps({"response": right, "verifier": {"name": "nope"}}).encode(), 422, "unknown verifier 'nope'"),
            (
                json.dumps({"response": right, "verifier": {"name": "numeric_answer"}}).encode(),
                422,
                "bad verifier spec",
            ),
        ]
        for body, status, reason in cases:
            got, answer = _post(url, body)
            assert (got, reason in answer["error"], "\n" in answer["error"]) == (status, True, False), (body, answer)
            assert "Traceback" not in answer["error"]
        assert _post(url, b"{}", path="/score")[0] == 404
        # The task id resolves against --tasks, and the server still answers after the refusals.
        assert _post(url, json.dumps({"response": right, "task_id": "t1"}).encode()) == (
            200,
            {"response": right, "task_id": "t1", "reward": 1.0, "passed": True, "reason": "ok", "verifier": spec},
        )
