"""Every docstring example (`>>>`) in the packages runs and shows what it says, one test per module.

An example that needs files or a model is written to make its own (a temporary folder) or marked
`# doctest: +SKIP`; prose in a ``` fence without `>>>` is not run.
"""

import doctest
import importlib
import re
from types import ModuleType

import pytest

from tests.paths import REPO

# Every first-party package, bottom layer first (pyproject.toml's import-linter layers).
PACKAGES = (
    *("core", "langmodels", "sandbox", "validators"),
    *("curation", "judge", "failures", "generators", "training"),
    *("review", "interop", "resources", "assets", "simulation", "pipeline"),
)
EXAMPLE = re.compile(r"^\s*>>> ", re.MULTILINE)
# Modules known to have examples, a few per package: discovery that finds none of them is broken, not clean.
KNOWN = {
    *("langmodels.cache", "langmodels.types", "langmodels.generation"),
    *("validators.passk", "validators.tasks", "validators.seeds", "validators.verifiers.sql"),
    *("validators.verifiers.numeric", "validators.verifiers.tool_call"),
    *("curation.splits", "curation.dedup.minhash", "curation.curate"),
    *("judge.prompt", "judge.calibration", "judge.rubric"),
    *("failures.log", "failures.derive", "failures.batch", "failures.traffic"),
    *("simulation.pool", "simulation.app"),
    *("generators.base", "generators.rewrite", "generators.programmatic.sql"),
    *("training.grpo", "training.promotion", "training.reward_audit"),
}


def modules_with_examples() -> list[str]:
    """Dotted names of the modules under PACKAGES whose source has a `>>>` line."""
    modules = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            if EXAMPLE.search(path.read_text(encoding="utf-8")):
                parts = path.relative_to(REPO).with_suffix("").parts
                modules.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return modules


MODULES = modules_with_examples()
# Modules an example imports on first use (`grpo_config_class()` imports trl's GRPOConfig), imported in setup.
EXAMPLE_IMPORTS = {"training.grpo": ("trl.trainer.grpo_config",)}


def test_discovery_finds_the_modules_known_to_have_examples():
    assert set(MODULES) >= KNOWN, f"not discovered: {sorted(KNOWN - set(MODULES))}"


@pytest.fixture
def module(request: pytest.FixtureRequest) -> ModuleType:
    """The module named by the test's parameter, imported in setup: a slow import (torch, trl) is not the examples'
    time, which the fast tier limits (tests/tiers.py)."""
    for library in EXAMPLE_IMPORTS.get(request.param, ()):
        importlib.import_module(library)
    return importlib.import_module(request.param)


@pytest.mark.parametrize("module", MODULES, indirect=True)
def test_docstring_examples(module, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # an example that writes a relative path writes it here, not in the working tree
    tests = doctest.DocTestFinder().find(module)
    # A `>>>` line doctest does not see (a comment, a string that is not a docstring) would never run.
    assert any(test.examples for test in tests), f"{module.__name__} has a '>>>' line, but no docstring example"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    report: list[str] = []
    for test in tests:
        runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)
