"""The review page as a person uses it: `seedwheel review` on loopback, headless Chromium, real model outputs.

The tiny random model answers arithmetic training tasks through the local model server (its outputs are garbage,
but they are real outputs of a policy, verified by the real verifier). In the browser a reviewer agrees with the
verifier on three outputs and disagrees on one; the page's agreement moves from 1.00 to 0.75, and the reward audit
run on the label files scores the same. SIGTERM then stops the server. A screenshot goes to
`$SEEDWHEEL_TEST_ARTIFACTS/review/` (else a pytest tmp dir).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from core.tables import frame_from_records, write_table
from review.rewards import REVIEWED, audit_labels
from review.sampling import sample_outputs, write_outputs
from tests.paths import REPO, copy_seeds
from tests.services import free_port, headless_chromium, require_chromium
from training.reward_audit import RewardAuditPolicy, audit_reward
from validators.registry import VerifyContext
from validators.rewards import build_reward_funcs
from validators.seeds import load_seeds
from validators.tasks import TASK_FIELDS

pytestmark = pytest.mark.slow

OUTPUTS = 4
STOP_S = 10


@pytest.fixture(scope="module")
def review_home(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> tuple[Path, Path]:
    """A storage root with arithmetic training tasks and a batch of the tiny model's outputs on them; its seeds."""
    require_chromium()
    root = tmp_path_factory.mktemp("review")
    seeds = copy_seeds(root / "seeds", ["arithmetic"], audit=["arithmetic"])
    context = VerifyContext(seeds_dir=seeds)
    tasks = [{k: t[k] for k in TASK_FIELDS} for t in load_seeds([seeds / "arithmetic"], context=context).tasks]
    home = root / "home"
    write_table(frame_from_records(tasks, TASK_FIELDS), home / "train_tasks.parquet")
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


def _label(browser: WebDriver, index: int, button: str, reason: str) -> None:
    """Type a reason into output `index`'s card and press `button` (agree or disagree), once the card is stable."""
    for _ in range(10):
        try:
            card = browser.find_elements(By.CSS_SELECTOR, ".card.output")[index]
            field = card.find_element(By.CSS_SELECTOR, "input.reason")
            field.clear()
            field.send_keys(reason)
            card.find_element(By.CSS_SELECTOR, f"button.{button}").click()
            return
        except StaleElementReferenceException:
            time.sleep(0.2)
    raise AssertionError(f"output {index}'s card kept changing")


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
        _label(browser, i, "agree", "the verifier is right")
        _wait(browser).until(
            lambda b, i=i: "done" in b.find_elements(By.CSS_SELECTOR, ".card.output")[i].get_attribute("class")
        )
    _agreement(browser, f"1.00 ({OUTPUTS - 1}/{OUTPUTS - 1}")
    _label(browser, OUTPUTS - 1, "disagree", "I would pay this one")
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
