"""The review page as a person uses it: `seedwheel review` on loopback, headless Chromium, real model outputs.

One server for the module, on one storage root: the tiny random model's answers to arithmetic training tasks
(garbage, but real outputs of a policy, verified by the real verifier), two of the judge's verdicts and one failure
waiting in the review queue. In the browser:

- **Rewards.** A reviewer agrees with the verifier on three outputs and disagrees on one; the page's agreement moves
  from 1.00 to 0.75, and the reward audit run on the label files scores the same.
- **Judge.** A reviewer rejects a task the judge accepted and labels a hand-written item; the label file holds
  both, the page shows the kappa against the hand-written set, and `judge_calibration`'s items include the verdict.
- **Review queue.** Saved as it stands, the failure's stub is refused with each TODO named; completed, it becomes a
  seed that `seedwheel seeds validate` passes, keeps the failure id, and the failure leaves the queue.

SIGTERM then stops the server. A screenshot goes to `$SEEDWHEEL_TEST_ARTIFACTS/review/` (else a pytest tmp dir).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from core.tables import frame_from_records, write_table
from judge import audit_labels as judge_labels
from judge.calibration import load_audit_set
from pipeline.cli import main
from resources import JudgePolicy
from review.judging import CALIBRATION, REVIEWED_TAG, VERDICT, calibration_items, judge_items, label_sources
from review.queue import QUEUE_TABLE, open_items
from review.rewards import REVIEWED, audit_labels
from review.sampling import sample_outputs, write_outputs
from tests.paths import REPO, copy_seeds
from tests.review.test_queue import completed, review_item
from tests.services import free_port, headless_chromium, require_chromium
from training.reward_audit import RewardAuditPolicy, audit_reward
from validators.registry import VerifyContext
from validators.rewards import build_reward_funcs
from validators.seeds import AUDIT_DIR, load_seeds
from validators.tasks import TASK_FIELDS

pytestmark = pytest.mark.slow

OUTPUTS = 4
STOP_S = 10


@pytest.fixture(scope="module")
def review_home(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> tuple[Path, Path]:
    """A storage root with arithmetic training tasks and a batch of the tiny model's outputs on them, the judge's
    verdicts on two of the tasks (an accept, a reject) and one failure in the review queue; its seeds."""
    require_chromium()
    root = tmp_path_factory.mktemp("review")
    seeds = copy_seeds(root / "seeds", ["arithmetic"], audit=["arithmetic"])
    context = VerifyContext(seeds_dir=seeds)
    tasks = [{k: t[k] for k in TASK_FIELDS} for t in load_seeds([seeds / "arithmetic"], context=context).tasks]
    home = root / "home"
    write_table(frame_from_records(tasks, TASK_FIELDS), home / "train_tasks.parquet")
    judged = [
        {**task, "judge_verdict": verdict, "judge_rationale": f"the judge's {verdict}"}
        for task, verdict in zip(tasks, ["accept", "reject"], strict=False)
    ]
    write_table(frame_from_records(judged), home / "judged_tasks.parquet")
    write_table(frame_from_records([review_item()]), home / QUEUE_TABLE)
    outputs = sample_outputs(
        str(tiny_model_dir), tasks, log_dir=root / "logs", n=OUTPUTS, max_tokens=16, context=context
    )
    assert len(outputs) == OUTPUTS and all(o["model"] == str(tiny_model_dir) for o in outputs)
    write_outputs(home, outputs)
    return home, seeds


@pytest.fixture(scope="module")
def review_url(review_home: tuple[Path, Path]) -> Iterator[str]:
    """`seedwheel review` on a free port, stopped by SIGTERM after the module (it must exit 0 within STOP_S)."""
    home, seeds = review_home
    port = free_port()
    command = [str(Path(sys.executable).with_name("seedwheel")), "review", "--home", str(home), "--port", str(port)]
    env = {**os.environ, "SEEDWHEEL_SEEDS": str(seeds)}
    log = home.parent / "review.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, log.read_text()
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2):
                    break
            except OSError:
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.2)
        yield url
        process.send_signal(signal.SIGTERM)
        assert process.wait(STOP_S) == 0, log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = os.environ.get("SEEDWHEEL_TEST_ARTIFACTS")
    path = Path(root) / "review" if root else tmp_path_factory.mktemp("review-artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    with headless_chromium(window_size=(1400, 1000)) as driver:
        yield driver


def _wait(browser: WebDriver) -> WebDriverWait:
    """A wait that looks again when the page re-rendered what it was looking at (every label re-renders it)."""
    return WebDriverWait(browser, 30, ignored_exceptions=(StaleElementReferenceException,))


def _label(browser: WebDriver, cards: str, index: int, button: str, reason: str) -> None:
    """Type a reason into the `index`th card `cards` selects and press `button` (agree or disagree on an output,
    accept or reject on a judge item), once the card is stable."""
    for _ in range(10):
        try:
            card = browser.find_elements(By.CSS_SELECTOR, cards)[index]
            field = card.find_element(By.CSS_SELECTOR, "input.reason")
            field.clear()
            field.send_keys(reason)
            card.find_element(By.CSS_SELECTOR, f"button.{button}").click()
            return
        except StaleElementReferenceException:
            time.sleep(0.2)
    raise AssertionError(f"card {index} of {cards} kept changing")


def _tab(browser: WebDriver, url: str, reviewer: str, tab: str) -> None:
    """Open the page as `reviewer` on `tab` (rewards, judge or queue)."""
    browser.get(f"{url}/?reviewer={reviewer}")
    _wait(browser).until(lambda b: b.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "1")
    browser.find_element(By.CSS_SELECTOR, f"nav button[data-tab={tab}]").click()


def _agreement(browser: WebDriver, expected: str) -> None:
    _wait(browser).until(
        lambda b: b.find_element(By.ID, "reward-agreement").text.startswith(expected),
        f"agreement {expected}",
    )


def test_labelling_real_outputs_on_the_page_moves_the_reward_audit(
    review_url: str, review_home: tuple[Path, Path], browser: WebDriver, artifacts: Path
) -> None:
    _, seeds = review_home
    browser.get(f"{review_url}/?reviewer=ana")
    _wait(browser).until(lambda b: len(b.find_elements(By.CSS_SELECTOR, ".card.output")) == OUTPUTS)
    assert browser.find_element(By.ID, "reward-agreement").text == "n/a"
    for i in range(OUTPUTS - 1):
        _label(browser, ".card.output", i, "agree", "the verifier is right")
        _wait(browser).until(
            lambda b, i=i: "done" in b.find_elements(By.CSS_SELECTOR, ".card.output")[i].get_attribute("class")
        )
    _agreement(browser, f"1.00 ({OUTPUTS - 1}/{OUTPUTS - 1}")
    _label(browser, ".card.output", OUTPUTS - 1, "disagree", "I would pay this one")
    _agreement(browser, f"0.75 ({OUTPUTS - 1}/{OUTPUTS}")
    browser.execute_script("window.scrollTo(0, 0)")
    browser.save_screenshot(str(artifacts / "review-rewards.png"))
    assert browser.find_elements(By.CSS_SELECTOR, ".card.output.disagree")

    # The reward audit, run on the label files as reward_sound runs it, scores the reviewed rows the same.
    context = VerifyContext(seeds_dir=seeds)
    labels = audit_labels(seeds, seeds / "audit" / "reward_audit.jsonl", context)
    assert labels.reviewed == OUTPUTS
    funcs, weights = build_reward_funcs({"*": 1.0}, context=context)
    audit = audit_reward(funcs, weights, [], labels.rows, policy=RewardAuditPolicy(hack_probes=False, probes=()))
    reviewed = [row for row in audit.rows if "review/" in row["id"]]
    assert sum(bool(row["agree"]) for row in reviewed) == OUTPUTS - 1
    assert REVIEWED in {tag for row in labels.rows for tag in row.tags}


def test_a_judge_verdict_labelled_on_the_page_is_judged_by_judge_calibration(
    review_url: str, review_home: tuple[Path, Path], browser: WebDriver
) -> None:
    home, seeds = review_home
    items = judge_items(home, seeds)
    accepted = next(i for i in items if i["source"] == VERDICT and i["judge"]["verdict"] == "accept")
    hand = next(i for i in items if i["source"] == CALIBRATION)
    hand_accepts = {item.id: item.accept for item in load_audit_set(seeds / AUDIT_DIR)}[hand["id"]]
    _tab(browser, review_url, "ben", "judge")
    _wait(browser).until(lambda b: len(b.find_elements(By.CSS_SELECTOR, ".card.judge-item")) == len(items))
    card = f'.card.judge-item[data-id="{accepted["id"]}"]'
    _label(browser, card, 0, "reject", "the reference answers another question")
    _wait(browser).until(lambda b: "done" in b.find_element(By.CSS_SELECTOR, card).get_attribute("class"))
    # A hand-written item, labelled as its set labels it: the page compares the reviewer with the set.
    _label(
        browser, f'.card.judge-item[data-id="{hand["id"]}"]', 0, "accept" if hand_accepts else "reject", "as I see it"
    )
    _wait(browser).until(lambda b: b.find_element(By.ID, "judge-labelled").text == "2")
    _wait(browser).until(
        lambda b: any(
            li.text.startswith("hand-written vs ben: 1/1 labels agree")
            for li in b.find_elements(By.CSS_SELECTOR, "#kappa li")
        ),
        "the reviewer's kappa against the hand-written set",
    )

    path = seeds / "audit" / "review" / "judge" / "ben.jsonl"
    labels = {row["id"]: row for row in map(json.loads, path.read_text(encoding="utf-8").splitlines())}
    label = labels[accepted["id"]]
    assert label["source"] == VERDICT and label["judge"]["verdict"] == "accept"
    assert label["human"] == {"accept": False, "reason": "the reference answers another question"}
    # What judge_calibration judges: the hand-written sample, then the verdict the person labelled, with the label.
    chosen = calibration_items(seeds, JudgePolicy().calibration_per_family)
    (reviewed,) = [item for item in chosen if REVIEWED_TAG in item.tags]
    assert reviewed.id == accepted["id"] and judge_labels(chosen)[reviewed.id] is False
    assert label_sources(chosen)[-1] == str(path)


def test_a_failure_completed_on_the_page_becomes_a_valid_seed_and_leaves_the_queue(
    review_url: str, review_home: tuple[Path, Path], browser: WebDriver
) -> None:
    home, seeds = review_home
    item = review_item()
    _tab(browser, review_url, "ana", "queue")
    card = f'.card.queue-item[data-id="{item["failure_id"]}"]'
    result = f"{card} .result"
    _wait(browser).until(lambda b: b.find_elements(By.CSS_SELECTOR, card))

    # Saved as it stands, the stub is refused: the page names each TODO left, and no seed is written.
    browser.find_element(By.CSS_SELECTOR, f"{card} button.save-seed").click()
    _wait(browser).until(lambda b: b.find_elements(By.CSS_SELECTOR, f"{result}.problems li"))
    assert [li.text for li in browser.find_elements(By.CSS_SELECTOR, f"{result} li")] == [
        "/verifier/params/answer: TODO: the expected number",
        "/reference: TODO: a known-good completion that passes the verifier",
    ]
    assert not list(seeds.glob("*/failure-*"))

    # Completed as a person types it: the seed is written, and the failure leaves the queue.
    stub = browser.find_element(By.CSS_SELECTOR, f"{card} textarea.seed")
    stub.clear()
    stub.send_keys(completed(item["seed_stub"]))
    browser.find_element(By.CSS_SELECTOR, f"{card} button.save-seed").click()
    path = seeds / "arithmetic" / f"failure-{item['failure_id']}.jsonl"
    _wait(browser).until(lambda b: b.find_element(By.ID, "queue").text == "The review queue is empty.")
    assert open_items(home, seeds) == []
    validated = CliRunner().invoke(
        main, ["seeds", "validate", str(seeds / "arithmetic")], env={"SEEDWHEEL_SEEDS": str(seeds)}
    )
    assert validated.exit_code == 0 and ", 0 problems" in validated.output, validated.output
    (seed,) = load_seeds([path], context=VerifyContext(seeds_dir=seeds)).tasks
    assert seed["lineage"]["failure_id"] == item["failure_id"]
