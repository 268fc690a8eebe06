"""The tiers plugin (tests/tiers.py) on small generated test files, run by pytester in this process."""

import pytest

SUITE = """
import time
import pytest

@pytest.fixture
def real_model_dir():
    return "model"

def test_quick():
    pass

def test_lingers():
    time.sleep(0.3)

@pytest.mark.slow
def test_lingers_and_says_so():
    time.sleep(0.3)

def test_uses_the_real_model(real_model_dir):
    pass

def test_skips_for_data():
    pytest.skip("shared GSM8K data not found at ../shared/data")

@pytest.mark.skipif(True, reason="no network namespace (no root, no user namespaces)")
def test_skips_for_a_sandbox_layer():
    pass

def test_skips_for_the_gpu():
    pytest.skip("no GPU on this machine")

def test_skips_for_vllm():
    pytest.skip("vLLM is not installed (the gpu extra)")

@pytest.mark.xfail(reason="a known bug", strict=True)
def test_known_bug():
    assert False
"""


@pytest.fixture
def run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):
    pytester.makepyfile(test_suite=SUITE)
    for name in ("CI", "SEEDWHEEL_REQUIRE_SERVICES"):
        monkeypatch.delenv(name, raising=False)

    def run(*args: str) -> pytest.RunResult:
        return pytester.runpytest("-p", "tests.tiers", "-o", "fast_tier_limit_s=0.2", "-rA", *args)

    return run


def test_a_slow_unmarked_test_fails_and_names_the_fix(run):
    result = run("-k", "lingers or quick")
    result.assert_outcomes(passed=2, failed=1, deselected=6)
    result.stdout.fnmatch_lines(["FAILED test_suite.py::test_lingers - took *s, over the fast tier's 0.2 s*"])


def test_a_real_model_fixture_marks_the_test_slow(run):
    result = run("--collect-only", "-q", "-m", "slow")
    assert sorted(line for line in result.outlines if "::" in line) == [
        "test_suite.py::test_lingers_and_says_so",
        "test_suite.py::test_uses_the_real_model",
    ]


def test_skips_stay_skips_off_ci(run):
    run("-k", "skips").assert_outcomes(skipped=4, deselected=5)


@pytest.mark.parametrize(
    ("variable", "value", "named"),
    [("SEEDWHEEL_REQUIRE_SERVICES", "1", "SEEDWHEEL_REQUIRE_SERVICES=1"), ("CI", "true", "CI")],
)
def test_under_ci_only_gpu_and_vllm_skips_stay_skips(run, monkeypatch, variable, value, named):
    monkeypatch.setenv(variable, value)
    result = run("-k", "skips or known_bug")
    # A skipif mark skips in setup, so it becomes an error there; a skip in the test body becomes a failure.
    result.assert_outcomes(failed=1, errors=1, skipped=2, xfailed=1, deselected=4)
    result.stdout.fnmatch_lines_random(
        [
            f"skipped under {named}: shared GSM8K data not found at ../shared/data",
            f"skipped under {named}: no network namespace (no root, no user namespaces)",
            "SKIPPED * no GPU on this machine",
            "SKIPPED * vLLM is not installed (the gpu extra)",
        ]
    )


def test_ci_false_is_not_ci(run, monkeypatch):
    monkeypatch.setenv("CI", "false")
    run("-k", "skips").assert_outcomes(skipped=4, deselected=5)


def test_slow_tests_share_one_worker_under_xdist(run):
    # Two workers, two tests: unless grouped, each would get one.
    result = run("-n", "2", "--dist", "loadgroup", "-v", "-k", "lingers_and_says_so or uses_the_real_model")
    result.assert_outcomes(passed=2)
    workers = {line.split()[0] for line in result.outlines if " PASSED test_suite.py::" in line}
    assert len(workers) == 1, result.outlines
