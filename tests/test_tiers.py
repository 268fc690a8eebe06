"""The tiers plugin (tests/tiers.py) on small generated test files, run by pytester in this process."""

import pytest

from tests import tiers
from tests.paths import REPO

SUITE = """
import time
import pytest

from tests.tiers import skip_for_accelerator

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
    skip_for_accelerator("no GPU on this machine")

def test_skips_for_vllm():
    skip_for_accelerator("vLLM is not installed (the GPU extra)")

def test_skips_naming_the_gpu_but_for_data():
    pytest.skip("shared data not found at /mnt/gpu-datasets")

@pytest.mark.xfail(reason="a known bug", strict=True)
def test_known_bug():
    assert False
"""


@pytest.fixture
def run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):
    pytester.makepyfile(test_suite=SUITE)
    monkeypatch.setattr(tiers, "load_stretch", lambda: 1.0)  # a quiet machine, whatever runs beside this test
    for name in ("CI", "SEEDWHEEL_REQUIRE_SERVICES"):
        monkeypatch.delenv(name, raising=False)

    def run(*args: str) -> pytest.RunResult:
        return pytester.runpytest("-p", "tests.tiers", "-o", "fast_tier_limit_s=0.2", "-rA", *args)

    return run


def test_a_slow_unmarked_test_fails_and_names_the_fix(run):
    result = run("-k", "lingers or quick")
    result.assert_outcomes(passed=2, failed=1, deselected=7)
    result.stdout.fnmatch_lines(["FAILED test_suite.py::test_lingers - took *s, over the fast tier's 0.2 s*"])


def test_under_load_the_limit_stretches_by_the_load_per_core(run, monkeypatch):
    monkeypatch.setattr(tiers, "load_stretch", lambda: 2.0)  # a load of 4 on 2 cores: 0.3 s is within 2 x 0.2 s
    run("-k", "lingers or quick").assert_outcomes(passed=3, deselected=7)
    monkeypatch.setattr(tiers, "load_stretch", lambda: 1.2)
    result = run("-k", "test_lingers and not says")
    result.assert_outcomes(failed=1, deselected=9)
    result.stdout.fnmatch_lines(
        ["*took *s, over the fast tier's 0.2 s (fast_tier_limit_s, stretched x1.2 for the load)*"]
    )


def test_a_real_model_fixture_marks_the_test_slow(run):
    result = run("--collect-only", "-q", "-m", "slow")
    assert sorted(line for line in result.outlines if "::" in line) == [
        "test_suite.py::test_lingers_and_says_so",
        "test_suite.py::test_uses_the_real_model",
    ]


def test_skips_stay_skips_off_ci(run):
    run("-k", "skips").assert_outcomes(skipped=5, deselected=5)


@pytest.mark.parametrize(
    ("variable", "value", "named"),
    [("SEEDWHEEL_REQUIRE_SERVICES", "1", "SEEDWHEEL_REQUIRE_SERVICES=1"), ("CI", "true", "CI")],
)
def test_under_ci_only_gpu_and_vllm_skips_stay_skips(run, monkeypatch, variable, value, named):
    monkeypatch.setenv(variable, value)
    result = run("-k", "skips or known_bug")
    # A skipif mark skips in setup, so it becomes an error there; a skip in the test body becomes a failure.
    result.assert_outcomes(failed=2, errors=1, skipped=2, xfailed=1, deselected=4)
    result.stdout.fnmatch_lines_random(
        [
            f"skipped under {named}: shared GSM8K data not found at ../shared/data",
            f"skipped under {named}: no network namespace (no root, no user namespaces)",
            f"skipped under {named}: shared data not found at /mnt/gpu-datasets",  # naming a GPU is not enough
            "SKIPPED * accelerator: no GPU on this machine",
            "SKIPPED * accelerator: vLLM is not installed (the GPU extra)",
        ]
    )


MODULE_SKIPS = {
    "test_needs_a_package": "import pytest\npytest.importorskip('no_such_package_here')\n\ndef test_x():\n    pass\n",
    "test_needs_data": (
        "import pytest\npytest.skip('data not found', allow_module_level=True)\n\ndef test_y():\n    pass\n"
    ),
    "test_needs_a_gpu": (
        "from tests.tiers import skip_for_accelerator\n"
        "skip_for_accelerator('no GPU here')\n\ndef test_z():\n    pass\n"
    ),
}


def test_a_module_skipped_at_import_fails_collection_under_ci(run, pytester, monkeypatch):
    pytester.makepyfile(**MODULE_SKIPS)
    files = [f"{name}.py" for name in MODULE_SKIPS]
    run(*files).assert_outcomes(skipped=3)  # off CI, a skip
    monkeypatch.setenv("CI", "true")
    result = run(*files)
    result.assert_outcomes(errors=2, skipped=1)
    result.stdout.fnmatch_lines_random(
        [
            "ERROR test_needs_a_package.py*",
            "ERROR test_needs_data.py*",
            "skipped under CI: could not import 'no_such_package_here'*",
            "skipped under CI: data not found",
        ]
    )


def test_ci_false_is_not_ci(run, monkeypatch):
    monkeypatch.setenv("CI", "false")
    run("-k", "skips").assert_outcomes(skipped=5, deselected=5)


def test_slow_tests_share_one_worker_under_xdist(run):
    # Two workers, two tests: unless grouped, each would get one.
    result = run("-n", "2", "--dist", "loadgroup", "-v", "-k", "lingers_and_says_so or uses_the_real_model")
    result.assert_outcomes(passed=2)
    workers = {line.split()[0] for line in result.outlines if " PASSED test_suite.py::" in line}
    assert len(workers) == 1, result.outlines


SIGNALS = """
import signal

def test_leaves_sigterm_ignored():
    signal.signal(signal.SIGTERM, signal.SIG_IGN)

def test_finds_sigterm_as_it_was():
    assert signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN

def test_puts_sigterm_back():
    old = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, old)
"""


def test_a_test_that_leaves_sigterm_ignored_fails_and_the_next_finds_it_restored(pytester):
    pytester.makepyfile(test_signals=SIGNALS)
    result = pytester.runpytest("-p", "tests.tiers", "-rA")
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_leaves_sigterm_ignored*",
            "the test left the stop signals changed: SIGTERM handler <Handlers.SIG_DFL: 0> -> <Handlers.SIG_IGN: 1>.*",
        ]
    )


HANG = """
import signal, subprocess, sys

def test_waits_for_a_child_that_ignores_sigterm():
    ignoring = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(flush=True); time.sleep(60)"
    child = subprocess.Popen([sys.executable, "-c", ignoring], stdout=subprocess.PIPE)
    child.stdout.readline()
    try:
        child.terminate()
        child.wait()
    finally:
        child.kill()
"""


def test_a_test_that_times_out_names_the_processes_it_waited_for(pytester, monkeypatch):
    pytester.makepyfile(test_hang=HANG)
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # a process of its own: pytest-timeout's alarm is per process
    result = pytester.runpytest_subprocess("-p", "tests.tiers", "--timeout", "3")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*processes running under this test at its timeout*", "* ignores SIGTERM: *signal.SIG_IGN*time.sleep(60)*"]
    )
