"""A pytest plugin that keeps the test tiers true (loaded by tests/conftest.py).

- **The fast tier stays fast.** `make test-fast` runs `-m "not slow"`. A test that is not marked `slow` and whose
  call takes longer than the `fast_tier_limit_s` ini option (pyproject.toml) fails, naming the fix. Tests that
  use a fixture in `SLOW_FIXTURES` (a real server, a browser, the real model) are marked `slow` at collection.
- **The slow tests run one at a time**, on one pytest-xdist worker (`SLOW_GROUP`), beside the fast ones.
- **CI skips nothing silently.** With `CI` or `SEEDWHEEL_REQUIRE_SERVICES=1` set, a skip is a failure unless its
  reason is a missing GPU or vLLM: a missing service, data file, sandbox layer or package must be installed,
  not stepped over.
"""

import os
import re

import pytest

# Fixtures that start something a unit test should not: the real model, a loopback server, a database, a browser.
SLOW_FIXTURES = frozenset(
    {"real_model_dir", "real_engine", "real_server", "webserver", "browser", "postgres_url", "s3_endpoint"}
)
# Under `pytest -n N --dist loadgroup` (`make test`) the slow tests share one worker, one after another: each keeps
# both cores busy (model servers, training, whole runs), and two at once only slow each other down (measured: the
# slow tier took 587 s on two workers against 645 s on one). The fast tests fill the other workers meanwhile.
SLOW_GROUP = "slow"
# The only skips CI accepts: this machine has no accelerator, or vLLM (the GPU extra) is absent or present.
ALLOWED_CI_SKIP = re.compile(r"\b(gpu|cuda|vllm)\b", re.IGNORECASE)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("fast_tier_limit_s", "longest call a test not marked slow may take, in seconds", default="10")


def strict_skips() -> str | None:
    """The variable that makes skips fail (`CI` or `SEEDWHEEL_REQUIRE_SERVICES=1`), or None."""
    if os.environ.get("SEEDWHEEL_REQUIRE_SERVICES") == "1":
        return "SEEDWHEEL_REQUIRE_SERVICES=1"
    if os.environ.get("CI", "").lower() not in ("", "0", "false"):
        return "CI"
    return None


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("slow") is not None:
            item.add_marker(pytest.mark.xdist_group(SLOW_GROUP))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reason = reason.removeprefix("Skipped: ")
        strict = strict_skips()
        if strict and not ALLOWED_CI_SKIP.search(reason):
            report.outcome = "failed"
            report.longrepr = (
                f"skipped under {strict}: {reason}\n"
                "CI runs every test but the GPU and vLLM ones: install what the reason names (`make test` does it "
                "on a fresh machine), or fix the test."
            )
    elif report.when == "call" and report.passed and item.get_closest_marker("slow") is None:
        limit = float(item.config.getini("fast_tier_limit_s"))
        if report.duration > limit:
            report.outcome = "failed"
            report.longrepr = (
                f"took {report.duration:.1f} s, over the fast tier's {limit:g} s (fast_tier_limit_s): mark it "
                "@pytest.mark.slow, so it leaves `make test-fast` and stays in `make test`, or make it faster."
            )
