"""One error base: every error the project raises on purpose is a `SeedwheelError`, and the CLI shows its hint."""

import importlib
import inspect
import pkgutil

import click
import pytest
from click.testing import CliRunner

from core import SeedwheelError
from pipeline.cli import main, seedwheel_errors

PACKAGES = [
    "core",
    "langmodels",
    "sandbox",
    "validators",
    "curation",
    "judge",
    "failures",
    "interop",
    "generators",
    "training",
    "review",
    "resources",
    "simulation",
    "pipeline",
    "assets",
]


class _Broken(SeedwheelError, ValueError):
    """A stand-in for any package's error."""


@pytest.fixture(scope="module")
def project_errors() -> list[type[Exception]]:
    """Every exception class defined in the project's modules (importing them all is set-up, not the test)."""
    found = []
    for name in PACKAGES:
        package = importlib.import_module(name)
        modules = [name, *(m.name for m in pkgutil.walk_packages(package.__path__, f"{name}."))]
        for module_name in modules:
            if module_name.endswith("__main__"):
                continue  # importing it would run it
            module = importlib.import_module(module_name)
            for value in vars(module).values():
                # Exceptions, not control-flow signals (BaseException) or warning categories.
                if (
                    inspect.isclass(value)
                    and value.__module__ == module_name
                    and issubclass(value, Exception)
                    and not issubclass(value, Warning)
                ):
                    found.append(value)
    return found


def test_every_project_error_is_a_seedwheel_error(project_errors):
    assert len(project_errors) > 40  # the walk found the packages' errors, not nothing
    outside = sorted(f"{e.__module__}.{e.__qualname__}" for e in project_errors if not issubclass(e, SeedwheelError))
    assert outside == [], f"derive these from core.SeedwheelError (keeping their builtin base): {outside}"


def test_error_names_are_unique(project_errors):
    # Two classes with one name (there were two LineageErrors) make `except X` mean whichever was imported.
    names = [e.__qualname__ for e in project_errors]
    assert sorted({n for n in names if names.count(n) > 1}) == []


def test_the_builtin_base_still_catches_it_and_str_carries_the_hint():
    error = _Broken("seeds/a.jsonl:3: missing field 'verifier'", hint="add the field")
    assert isinstance(error, ValueError)  # existing `except ValueError` callers keep working
    assert error.hint == "add the field"
    assert str(error) == "seeds/a.jsonl:3: missing field 'verifier'; add the field"
    assert str(_Broken("no hint")) == "no hint"


@pytest.mark.parametrize(("usage", "exit_code"), [(False, 1), (True, 2)])
def test_seedwheel_errors_turns_one_into_a_click_error_with_its_hint(usage, exit_code):
    @click.command()
    @seedwheel_errors(usage=usage)
    def command() -> None:
        raise _Broken("the thing is broken", hint="fix the thing")

    result = CliRunner().invoke(command, [])
    assert result.exit_code == exit_code
    assert isinstance(result.exception, SystemExit)  # a ClickException, not a crash
    assert "Error: the thing is broken; fix the thing" in result.output
    assert "Traceback" not in result.output


def test_the_cli_shows_a_commands_error_and_hint_without_a_traceback(tmp_path):
    # `seedwheel lineage` catches nothing itself: the group turns its LineageNotFoundError into exit 1.
    result = CliRunner().invoke(main, ["lineage", "no-such-id", "--home", str(tmp_path)])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    [error] = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert "'no-such-id' is neither a task id" in error
    assert error.endswith(
        "; pass a task_id, a failure_id, a checkpoint path (.../final), or its manifest name (grpo-<digest>)"
    )
