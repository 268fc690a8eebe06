"""The verifier registry: lookup errors that list what exists, user verifiers by dotted path, params checks."""

import subprocess
import sys

import pytest

from validators.registry import (
    REGISTRY,
    Completion,
    UnknownVerifierError,
    Verdict,
    Verifier,
    VerifyContext,
    load_verifier,
    spec_problems,
    verify,
)

BUILT_INS = {"format_tags", "json_schema", "json_valid", "numeric_answer", "tool_call", "weighted"}


@pytest.fixture
def isolated_registry(monkeypatch):
    """A registry copy for the test, so test-only verifiers never leak into other tests."""
    REGISTRY.names()  # load the built-ins before copying
    monkeypatch.setattr(REGISTRY, "_verifiers", dict(REGISTRY._verifiers))
    return REGISTRY


class ExactText(Verifier):
    """A user verifier living outside the package: the completion equals `params.text`."""

    name = "exact_text_test"
    version = 2
    params_schema = {  # noqa: RUF012 - a test fixture, never mutated
        "type": "object",
        "required": ["text"],
        "additionalProperties": False,
        "properties": {"text": {"type": "string"}},
    }

    def check(self, params, completion: Completion, context: VerifyContext) -> Verdict:
        return Verdict.ok() if completion.text == params["text"] else Verdict.fail("text_mismatch")


class NotAVerifier:
    """Something a config could point at by mistake."""


def test_built_ins_are_registered():
    # Importing the registry is enough; the built-ins load on first use.
    assert set(REGISTRY.names()) >= BUILT_INS


def test_unknown_name_lists_registered_names():
    with pytest.raises(UnknownVerifierError) as info:
        REGISTRY.get("numerc_answer")
    message = str(info.value)
    assert "unknown verifier 'numerc_answer'" in message
    assert all(name in message for name in BUILT_INS)


def test_unknown_version_lists_versions():
    with pytest.raises(
        UnknownVerifierError, match=r"verifier 'numeric_answer' has no version 7; registered versions: 3$"
    ):
        REGISTRY.get("numeric_answer", 7)


def test_a_superseded_version_resolves_to_the_fix():
    # Tasks stored under numeric_answer 1 are judged by the latest version, which refuses the hedge version 1 paid
    # for.
    task = {"verifier": {"name": "numeric_answer", "version": 1, "params": {"answer": 72}}}
    assert REGISTRY.get("numeric_answer", 1).version == REGISTRY.get("numeric_answer").version > 1
    assert verify(task, "#### 72 or 73").reason.startswith("ambiguous_answer")


def test_load_verifier_by_dotted_path(isolated_registry):
    # A user verifier from config ("package.module:Class") becomes usable by name in tasks.
    cls = load_verifier(f"{__name__}:ExactText")
    assert cls is ExactText
    task = {"verifier": {"name": "exact_text_test", "version": 2, "params": {"text": "hi"}}}
    assert verify(task, "hi").passed
    assert verify(task, "hello").reason == "text_mismatch"
    # Without a version the latest registered one is used.
    assert isinstance(isolated_registry.get("exact_text_test"), ExactText)


@pytest.mark.parametrize(
    ("path", "error", "message"),
    [
        # The class part is required.
        (__name__, ValueError, "must look like 'package.module:ClassName'"),
        # The target must be a Verifier subclass.
        (f"{__name__}:NotAVerifier", TypeError, "is not a subclass of validators.registry.Verifier"),
        # A missing module is an import error, as Python reports it.
        ("no_such_module_xyz:Thing", ModuleNotFoundError, "no_such_module_xyz"),
    ],
)
def test_load_verifier_errors(isolated_registry, path, error, message):
    with pytest.raises(error, match=message):
        load_verifier(path)


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        # Params are checked against the verifier's schema when the task is loaded, with a pointer.
        ({"name": "numeric_answer", "params": {"answer": [1]}}, "(/verifier/params/answer)"),
        # A missing required param points at params itself.
        ({"name": "numeric_answer", "params": {}}, "'answer' is a required property (/verifier/params)"),
        # An unknown verifier name points at the name.
        ({"name": "nope", "params": {}}, "(/verifier/name)"),
        # An unknown version too.
        ({"name": "numeric_answer", "version": 99, "params": {"answer": 1}}, "has no version 99"),
    ],
)
def test_spec_problems(spec, problem):
    problems = spec_problems(spec)
    assert any(problem in p for p in problems), problems


@pytest.mark.parametrize(
    "spec",
    [
        # A numeric string answer (a mixed number) is valid.
        {"name": "numeric_answer", "params": {"answer": "1 1/2"}},
        # A schema plus expected values.
        {"name": "json_schema", "params": {"schema": {"type": "object"}, "expected": {"a": 1}}},
        # json_valid takes no params.
        {"name": "json_valid", "params": {}},
        # Ordered tags.
        {"name": "format_tags", "params": {"tags": ["think", "answer"], "order": True}},
        # One tool, expected without arguments.
        {
            "name": "tool_call",
            "params": {
                "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
                "expected": {"name": "f", "arguments": {}},
            },
        },
        # A single weighted component with a threshold.
        {
            "name": "weighted",
            "params": {"components": [{"name": "json_valid", "params": {}, "weight": 1}], "pass_threshold": 0.5},
        },
    ],
)
def test_valid_specs_have_no_problems(spec):
    assert spec_problems(spec) == []


FIRST_USE_FROM_THREADS = """
import threading
from concurrent.futures import ThreadPoolExecutor
from validators.registry import REGISTRY
barrier = threading.Barrier(8)
def first_lookup(_):
    barrier.wait()
    return REGISTRY.get("numeric_answer").name
with ThreadPoolExecutor(8) as pool:
    print(sorted(set(pool.map(first_lookup, range(8)))))
"""


def test_first_use_from_many_threads_sees_every_builtin():
    # verify_many's worker threads are often the first to touch the registry: none may see it half-loaded.
    # A fresh interpreter, so the registry is really unloaded when the threads meet it.
    for _ in range(3):
        done = subprocess.run(
            [sys.executable, "-c", FIRST_USE_FROM_THREADS], capture_output=True, text=True, check=True
        )
        assert done.stdout.strip() == "['numeric_answer']", done.stderr
