"""The UI as a person uses it: `dagster dev` on loopback, headless Chromium, a run launched from the asset graph.

The generation stage's inputs (seeds, production-failure tasks) are materialized from Python first; the browser
then opens the global asset lineage, checks that every group is drawn, filters the graph to the generation group,
opens the launchpad from the Materialize menu, narrows the variant plan to one small family and the answers to
16 tokens (the tiny local model then writes a few dozen short rewrites instead of ~150 long ones) and launches.
The run must succeed, and the webserver's GraphQL API must report the materialization's metadata as the Parquet
files on disk have it.

Screenshots go to `$SEEDWHEEL_TEST_ARTIFACTS/ui/` (else a pytest tmp dir); their paths are printed. The UI has
no `data-testid`s in production builds, so the selectors are visible text, ARIA labels and the CodeMirror
instance of the launchpad's config editor (`SELECTORS` below lists them all).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest
import yaml
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from assets import groups
from core.tables import read_table
from pipeline.runs import materialize
from pipeline.settings import Settings
from tests.paths import quickstart_settings
from tests.services import graphql, headless_chromium, require_chromium, seedwheel_ui

pytestmark = pytest.mark.slow

# Every group constant in assets/groups.py: a new group must show up in the graph too.
GROUPS = tuple(value for name, value in vars(groups).items() if name.isupper() and isinstance(value, str))
# What the generation stage reads (seeds, production-failure tasks), materialized from Python before the browser.
UPSTREAM = f"+group:{groups.GENERATION} and not group:{groups.GENERATION}"
# The tables task_variants takes its parents from.
PARENT_TABLES = ("seed_tasks", "failure_tasks")
# Set in the launchpad: the smallest seed family (27 seeds) and short answers keep the LLM rewrites of the run to
# about a minute on 2 cores; the whole plan (5 families, 64 tokens) takes 7-8 minutes there.
FAMILY = "tool_call"
LAUNCHPAD_OVERRIDES = {"plan": {"families": [FAMILY]}, "llm": {"max_tokens": 16}}
RUN_TIMEOUT_S = 600
TERMINAL = {"SUCCESS", "FAILURE", "CANCELED"}

# Everything the test finds in the page. They are the fragile part: Dagster's UI strips its data-testids from
# production builds (ui-core/src/testing/testId.tsx), so these are visible texts, ARIA labels and roles.
SELECTORS = {
    # A group or asset node drawn in the lineage graph (an SVG of foreignObjects), not the sidebar's tree.
    "graph_node": "//*[local-name()='svg']//*[local-name()='foreignObject']//*[normalize-space(text())='{name}']",
    # The asset selection input above the graph: a CodeMirror whose hidden textarea carries the ARIA label.
    "selection_editor": (By.CSS_SELECTOR, ".CodeMirror:has(textarea[aria-label='Search and filter assets'])"),
    "selection_input": (By.CSS_SELECTOR, "textarea[aria-label='Search and filter assets']"),
    # "Materialize all", or "Materialize all..." when the selection holds partitioned assets.
    "materialize_all": (By.XPATH, "//button[starts-with(normalize-space(), 'Materialize all')]"),
    # The caret button right of it opens its menu.
    "materialize_menu": (By.XPATH, "//button[starts-with(normalize-space(), 'Materialize all')]/following::button[1]"),
    "open_launchpad": (By.XPATH, "//*[normalize-space(text())='Open launchpad']"),
    # The launchpad dialog's YAML editor (CodeMirror 5, theme class `cm-s-config-editor`).
    "config_editor": (By.CSS_SELECTOR, "[role='dialog'] .CodeMirror.cm-s-config-editor"),
    "launch": (By.XPATH, "//*[@role='dialog']//button[normalize-space()='Materialize']"),
    # The run page's status tag.
    "run_success": (By.XPATH, "//*[normalize-space(text())='Success']"),
}

RUN_STATUS = """
query RunStatus($runId: ID!) {
  runOrError(runId: $runId) {
    __typename
    ... on Run { status runConfigYaml assetSelection { path } }
    ... on PythonError { message }
  }
}
"""
RUN_FAILURES = """
query RunFailures($runId: ID!) {
  logsForRun(runId: $runId) {
    __typename
    ... on EventConnection {
      events {
        __typename
        ... on ExecutionStepFailureEvent { stepKey error { message causes { message } } }
        ... on RunFailureEvent { message }
      }
    }
  }
}
"""
LATEST_MATERIALIZATION = """
query LatestMaterialization($key: AssetKeyInput!) {
  assetOrError(assetKey: $key) {
    __typename
    ... on Asset {
      assetMaterializations(limit: 1) {
        runId
        metadataEntries {
          label
          __typename
          ... on IntMetadataEntry { intValue }
          ... on FloatMetadataEntry { floatValue }
          ... on JsonMetadataEntry { jsonString }
          ... on PathMetadataEntry { path }
        }
      }
    }
  }
}
"""


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where screenshots go: `$SEEDWHEEL_TEST_ARTIFACTS/ui` (CI uploads it), else a pytest tmp dir."""
    root = os.environ.get("SEEDWHEEL_TEST_ARTIFACTS")
    path = Path(root) / "ui" if root else tmp_path_factory.mktemp("ui-artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def ui_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """Quickstart settings under a tmp dir, with the generation stage's inputs already materialized."""
    require_chromium()  # skip before the minute of set-up below
    root = tmp_path_factory.mktemp("ui")
    settings = quickstart_settings(root)
    summary = materialize(settings, UPSTREAM)
    assert summary.success, summary.failures
    return settings


@pytest.fixture(scope="module")
def webserver(ui_settings: Settings) -> Iterator[str]:
    """The base URL of `seedwheel ui` serving the project, stopped by SIGTERM after the module."""
    with seedwheel_ui(ui_settings, ui_settings.home.parent) as url:
        yield url


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    with headless_chromium(window_size=(1600, 1000)) as driver:
        yield driver


def test_asset_graph_shows_every_group(webserver: str, browser: WebDriver, artifacts: Path) -> None:
    browser.get(f"{webserver}/asset-groups")
    with _screenshot_on_failure(browser, artifacts / "asset-graph-failure.png"):
        for name in GROUPS:
            xpath = SELECTORS["graph_node"].format(name=name)
            _wait(browser, 120).until(ec.visibility_of_element_located((By.XPATH, xpath)), f"group {name!r}")
        _save(browser, artifacts / "asset-graph.png")


def test_generation_launched_from_the_ui_succeeds(
    webserver: str, ui_settings: Settings, browser: WebDriver, artifacts: Path
) -> None:
    with _screenshot_on_failure(browser, artifacts / "generation-failure.png"):
        browser.get(f"{webserver}/asset-groups")
        # Filter the graph to the generation group, as a person types it into the selection box.
        _wait(browser, 120).until(ec.element_to_be_clickable(SELECTORS["selection_editor"])).click()
        browser.find_element(*SELECTORS["selection_input"]).send_keys(f"group:{groups.GENERATION}", Keys.ENTER)
        for asset in ("task_variants", "variant_rejects"):  # drawn as asset nodes once the filter applies
            xpath = SELECTORS["graph_node"].format(name=asset)
            _wait(browser, 60).until(ec.visibility_of_element_located((By.XPATH, xpath)), f"asset {asset!r}")
        _save(browser, artifacts / "generation-group.png")

        # Materialize all -> Open launchpad: the config comes prefilled with the profile's resource values.
        _wait(browser, 30).until(ec.element_to_be_clickable(SELECTORS["materialize_all"]))
        browser.find_element(*SELECTORS["materialize_menu"]).click()
        _wait(browser, 30).until(ec.element_to_be_clickable(SELECTORS["open_launchpad"])).click()
        editor = _wait(browser, 60).until(ec.visibility_of_element_located(SELECTORS["config_editor"]))
        _wait(browser, 60).until(lambda _: "plan:" in _editor_text(browser, editor), "the prefilled launchpad")
        config = yaml.safe_load(_editor_text(browser, editor))
        for resource, fields in LAUNCHPAD_OVERRIDES.items():
            config["resources"][resource]["config"].update(fields)
        plan = config["resources"]["plan"]["config"]
        browser.execute_script("arguments[0].CodeMirror.setValue(arguments[1])", editor, yaml.safe_dump(config))
        _save(browser, artifacts / "launchpad.png")
        _wait(browser, 30).until(ec.element_to_be_clickable(SELECTORS["launch"])).click()

        # The launchpad navigates to the new run's page.
        _wait(browser, 60).until(ec.url_contains("/runs/"))
        run_id = browser.current_url.split("/runs/", 1)[1].split("?")[0].strip("/")
        print(f"launched run {run_id} from the UI")
        status = _wait_for_run(webserver, run_id)
        assert status == "SUCCESS", f"run {run_id} ended {status}: {_failures(webserver, run_id)}"
        _wait(browser, 60).until(ec.visibility_of_element_located(SELECTORS["run_success"]))
        _save(browser, artifacts / "generation-run.png")

    run = graphql(webserver, RUN_STATUS, {"runId": run_id})["runOrError"]
    assert {tuple(key["path"]) for key in run["assetSelection"]} == {("task_variants",), ("variant_rejects",)}
    resources = yaml.safe_load(run["runConfigYaml"])["resources"]
    for resource, fields in LAUNCHPAD_OVERRIDES.items():  # what was typed in the launchpad reached the run
        assert fields.items() <= resources[resource]["config"].items()

    asset = graphql(webserver, LATEST_MATERIALIZATION, {"key": {"path": ["task_variants"]}})["assetOrError"]
    assert asset["__typename"] == "Asset", asset
    (latest,) = asset["assetMaterializations"]
    assert latest["runId"] == run_id
    metadata = {entry["label"]: entry for entry in latest["metadataEntries"]}
    for label in ("rows", "dagster/row_count", "parents", "llm_calls_made", "llm_calls_cached", "llm"):
        assert label in metadata, f"task_variants metadata lacks {label!r}: {sorted(metadata)}"

    variants = read_table(ui_settings.home / "task_variants.parquet")
    assert metadata["rows"]["intValue"] == metadata["dagster/row_count"]["intValue"] == len(variants) > 0
    assert set(variants["family"]) == {FAMILY}  # the launchpad's plan took effect
    tables = [ui_settings.home / f"{name}.parquet" for name in PARENT_TABLES]
    parents = sum(int((read_table(path)["family"] == FAMILY).sum()) for path in tables if path.exists())
    assert metadata["parents"]["intValue"] == parents
    # A fresh cache: every planned rewrite (one per rewritten parent, kind and sample) is a call made, none cached.
    rewritten = min(parents, plan.get("rewrite_max_per_family") or parents)  # the profile caps parents per family
    made, cached = metadata["llm_calls_made"]["intValue"], metadata["llm_calls_cached"]["intValue"]
    assert (made, cached) == (rewritten * len(plan["rewrite_kinds"]) * plan["rewrites_per_kind"], 0)
    assert json.loads(metadata["llm"]["jsonString"])["calls"] == made


def _wait(browser: WebDriver, timeout_s: float) -> WebDriverWait:
    return WebDriverWait(browser, timeout_s, poll_frequency=0.5)


def _editor_text(browser: WebDriver, editor: object) -> str:
    return browser.execute_script("return arguments[0].CodeMirror.getValue()", editor)


def _wait_for_run(url: str, run_id: str) -> str:
    """Poll GraphQL until the run ends (the generation step calls the local tiny model server); its status."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while True:
        run = graphql(url, RUN_STATUS, {"runId": run_id})["runOrError"]
        assert run["__typename"] == "Run", run
        if run["status"] in TERMINAL:
            return run["status"]
        if time.monotonic() > deadline:
            return f"still {run['status']} after {RUN_TIMEOUT_S} s"
        time.sleep(2)


def _failures(url: str, run_id: str) -> list[str]:
    """Why a run failed: each failed step's error (innermost cause last) and the run's failure message."""
    logs = graphql(url, RUN_FAILURES, {"runId": run_id})["logsForRun"]
    found = []
    for event in logs.get("events", []):
        if event["__typename"] == "ExecutionStepFailureEvent":
            causes = [c["message"].strip() for c in event["error"]["causes"]]
            found.append(f"{event['stepKey']}: {event['error']['message'].strip()} {causes}")
        elif event["__typename"] == "RunFailureEvent":
            found.append(event["message"])
    return found


def _save(browser: WebDriver, path: Path) -> None:
    browser.save_screenshot(str(path))
    print(f"screenshot: {path}")


@contextmanager
def _screenshot_on_failure(browser: WebDriver, path: Path) -> Iterator[None]:
    """Keep what the page showed when a step failed, beside the other screenshots."""
    try:
        yield
    except BaseException:
        with suppress(WebDriverException):  # the browser itself may be what failed
            _save(browser, path)
        raise
