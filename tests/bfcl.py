"""BFCL's data as `tool_call` tasks, calls generated from its ground truth, and BFCL's own AST checker on them.

The Berkeley Function Calling Leaderboard's PyPI wheel `bfcl-eval` (Apache-2.0) ships its questions, function
docs and ground truth (`possible_answer/`) under `bfcl_eval/data/`. `make install-dev` installs it with
`--no-deps`: reading the data needs nothing, and the AST checker needs only its model registry, which imports
every provider's SDK to read one flag (whether a model's API turned dots in function names into underscores).
`bfcl_ast_checker` imports the checker with a stand-in registry that answers "no" for every model.

Per task, `cases` builds calls whose right verdict is known without any checker: every combination of the
ground truth's acceptable values (at most `MAX_COMBINATIONS`, sampled deterministically; parallel calls
shuffled) and the `VARIANTS` of a right answer, which must pass, and one call list per kind in `MUTATIONS`,
which must fail. Irrelevance tasks
get a plain-text answer (passes) and a call to each offered function (fails). `measure` judges every case with
seedwheel's `tool_call` verifier and with BFCL's checker (irrelevance: BFCL's rule, an output that decodes into
a call fails) and keeps both verdicts. Used by `tests/validators/test_tool_call_bfcl.py` and
`bench/bfcl_agreement.py`.
"""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import json
import math
import random
import re
import sys
import types
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from validators.registry import REGISTRY, Completion, VerifyContext, spec_problems

CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance")
MAX_COMBINATIONS = 16
ACCEPTABLE = "acceptable"
# Right answers written another way, which must pass as BFCL passes them.
VARIANTS = (
    "int_for_float",  # 2 where the doc declares a float and the ground truth says 2.0
    "string_case",  # a string argument (without an enum) in upper case, under BFCL's string comparison
)
MUTATIONS = (
    "wrong_function",  # another offered function (a made-up name when every offered one is expected)
    "missing_required",  # a required argument left out
    "wrong_type",  # a value of another JSON type than the doc declares
    "float_for_integer",  # 2.0 where the doc declares an integer
    "wrong_value",  # a value of the right type that no acceptable value equals
    "unknown_argument",  # an argument the function does not declare
    "unasked_argument",  # an optional argument the function declares and the ground truth does not list
    "extra_call",  # the first call once more
    "missing_call",  # the last call left out
)
# Irrelevance tasks expect no call: a plain-text answer passes, a call to an offered function fails.
IRRELEVANCE_KINDS = ("text_answer", "call")
_OMIT = object()
# A model name for the checker's one registry lookup (see the module docstring); any name would do.
_MODEL = "seedwheel-agreement"
# BFCL's python-ish types: a value of another JSON type for each (None: "any" has no wrong type).
_WRONG_TYPE: dict[str, Any] = {
    "string": 42,
    "integer": "7",
    "float": "2.5",
    "boolean": "true",
    "array": "x",
    "tuple": "x",
    "dict": "x",
    "any": None,
}
_PLACEHOLDER = {"string": "x", "integer": 1, "float": 1.5, "boolean": True, "array": [], "tuple": [], "dict": {}}


INSTALL_HINT = "pip install --no-deps bfcl-eval==2026.3.23 (make install-dev does)"


def bfcl_data() -> Path | None:
    """`bfcl_eval/data` of the installed `bfcl-eval`, or None when it is not installed."""
    if importlib.util.find_spec("bfcl_eval") is None:
        return None
    return Path(str(resources.files("bfcl_eval") / "data"))


def require_bfcl_data() -> Path:
    """`bfcl_data()`, or a skip naming the install (a failure under CI: tests/tiers.py)."""
    data = bfcl_data()
    if data is None:
        pytest.skip(f"bfcl-eval is not installed: {INSTALL_HINT}")
    return data


def bfcl_ast_checker() -> Callable[..., dict[str, Any]]:
    """BFCL's `ast_checker(functions, model_output, possible_answer, language, category, model)`, ready to call.

    Returns:
        A function of (functions, model_output as `[{name: arguments}]`, ground truth, category) -> bool.
    """
    registry = types.ModuleType("bfcl_eval.constants.model_config")
    mapping = defaultdict(lambda: types.SimpleNamespace(underscore_to_dot=False))
    registry.MODEL_CONFIG_MAPPING = mapping  # type: ignore[attr-defined]  # a blank stand-in module, filled here
    with mock.patch.dict(sys.modules, {registry.__name__: registry}):
        checker = importlib.import_module("bfcl_eval.eval_checker.ast_eval.ast_checker")
        language = importlib.import_module("bfcl_eval.constants.enums").Language.PYTHON

    def check(functions: list[dict], output: list[dict], ground_truth: list[dict], category: str) -> bool:
        return bool(checker.ast_checker(functions, output, ground_truth, language, category, _MODEL)["valid"])

    return check


def _category_files(folder: Path, category: str) -> list[Path]:
    """`BFCL_v4_<category>.json` (any version), not `..._live_<category>` nor `..._parallel_<category>`."""
    return [path for path in folder.glob("BFCL_v*.json") if re.fullmatch(rf"BFCL_v\d+_{category}\.json", path.name)]


def load_items(data: Path, category: str) -> list[dict[str, Any]]:
    """One category's tasks: `{id, category, functions, ground_truth, question}` (ground truth [] for irrelevance)."""
    [questions] = _category_files(data, category)
    answers: dict[str, list[dict]] = {}
    if category != "irrelevance":
        [truth] = _category_files(data / "possible_answer", category)
        answers = {row["id"]: row["ground_truth"] for row in map(json.loads, truth.read_text().splitlines())}
    return [
        {
            "id": row["id"],
            "category": category,
            "functions": row["function"],
            "ground_truth": answers.get(row["id"], []),
            "question": row["question"],
        }
        for row in map(json.loads, questions.read_text().splitlines())
    ]


def task_params(item: Mapping[str, Any]) -> dict[str, Any]:
    """The `tool_call` params of a BFCL task: its function docs, its ground truth, BFCL's string comparison."""
    return {"tools": item["functions"], "possible_answer": item["ground_truth"], "string_match": "bfcl"}


@dataclass(frozen=True)
class Case:
    """A completion for one task whose right verdict is known: `calls` (None: a plain-text answer)."""

    item_id: str
    kind: str
    calls: tuple[dict[str, Any], ...] | None
    should_pass: bool


def _expand(value: Any) -> list[Any]:
    """Every plain value a ground-truth value stands for: objects list acceptable values per key."""
    if isinstance(value, Mapping):
        keys = list(value)
        options = [_choices(value[key]) for key in keys]
        combos = itertools.islice(itertools.product(*options), MAX_COMBINATIONS)
        return [{k: v for k, v in zip(keys, combo, strict=True) if v is not _OMIT} for combo in combos]
    if isinstance(value, list):
        return [list(combo) for combo in itertools.islice(itertools.product(*map(_expand, value)), MAX_COMBINATIONS)]
    return [value]


def _choices(alternatives: list[Any], may_omit: bool = True) -> list[Any]:
    """Every plain value an argument may take; `_OMIT` where it may be left out."""
    out: list[Any] = []
    for alternative in alternatives:
        if alternative == "" and not isinstance(alternative, bool):
            if may_omit:
                out.append(_OMIT)
        else:
            out += _expand(alternative)
    return out


def _docs(item: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {doc["name"]: doc["parameters"] for doc in item["functions"]}


def _acceptable_calls(item: Mapping[str, Any], rng: random.Random) -> list[tuple[dict[str, Any], ...]]:
    """Up to MAX_COMBINATIONS acceptable call lists: all when there are that few, else a deterministic sample."""
    docs = _docs(item)
    slots: list[tuple[int, str, list[Any]]] = []
    for index, call in enumerate(item["ground_truth"]):
        ((name, arguments),) = call.items()
        required = docs[name].get("required", [])
        slots += [(index, key, _choices(values, key not in required)) for key, values in arguments.items()]
    total = math.prod(len(options) for _, _, options in slots)
    picks = (
        range(total) if total <= MAX_COMBINATIONS else [0, *sorted(rng.sample(range(1, total), MAX_COMBINATIONS - 1))]
    )
    combos = []
    for pick in picks:
        calls = [{"name": next(iter(call)), "arguments": {}} for call in item["ground_truth"]]
        for index, key, options in slots:
            pick, chosen = divmod(pick, len(options))
            if options[chosen] is not _OMIT:
                calls[index]["arguments"][key] = options[chosen]
        if "parallel" in item["category"]:
            rng.shuffle(calls)
        combos.append(tuple(calls))
    return combos


def _mutations(item: Mapping[str, Any], base: list[dict[str, Any]]) -> Iterator[tuple[str, list[dict]]]:
    """(kind, calls) for each kind in VARIANTS and MUTATIONS that applies; `base` is in ground-truth order."""
    docs = _docs(item)
    truth = [call[base[i]["name"]] for i, call in enumerate(item["ground_truth"])]

    def replaced(i: int, call: dict[str, Any]) -> list[dict[str, Any]]:
        return [*base[:i], call, *base[i + 1 :]]

    first = base[0]
    other = next((name for name in docs if name not in {call["name"] for call in base}), f"{first['name']}_v2")
    yield "wrong_function", replaced(0, {**first, "name": other})
    for i, call in enumerate(base):
        present = [key for key in docs[call["name"]].get("required", []) if key in call["arguments"]]
        if present:
            arguments = {k: v for k, v in call["arguments"].items() if k != present[0]}
            yield "missing_required", replaced(i, {**call, "arguments": arguments})
            break
    for kind, change in _CHANGES.items():
        for i, call in enumerate(base):
            properties = docs[call["name"]]["properties"]
            changed = {key: change(v, properties[key], truth[i][key]) for key, v in call["arguments"].items()}
            key = next((key for key, new in changed.items() if new is not _OMIT), None)
            if key is not None:
                yield kind, replaced(i, {**call, "arguments": {**call["arguments"], key: changed[key]}})
                break
    yield "unknown_argument", replaced(0, {**first, "arguments": {**first["arguments"], "seedwheel_extra": "x"}})
    for i, call in enumerate(base):
        unasked = [key for key in docs[call["name"]]["properties"] if key not in truth[i]]
        if unasked:
            declared = docs[call["name"]]["properties"][unasked[0]].get("type", "string")
            yield (
                "unasked_argument",
                replaced(i, {**call, "arguments": {**call["arguments"], unasked[0]: _PLACEHOLDER.get(declared, "x")}}),
            )
            break
    yield "extra_call", [*base, first]
    yield "missing_call", base[:-1]


def _fold(value: Any) -> Any:
    """Strings as BFCL compares them (case, spaces and ,./-_*^ ignored), for telling a new value from the old."""
    if isinstance(value, str):
        return "".join(ch for ch in value.lower() if ch not in " ,./-_*^").replace("'", '"')
    return value


def _wrong_type(value: Any, schema: Mapping[str, Any], alternatives: list[Any]) -> Any:
    wrong = _WRONG_TYPE.get(schema.get("type", "any"))
    return _OMIT if wrong is None else wrong


def _wrong_value(value: Any, schema: Mapping[str, Any], alternatives: list[Any]) -> Any:
    """A value of the same type that no acceptable value equals (BFCL's string folding included), or _OMIT."""
    taken = [_fold(a) for a in alternatives]
    if isinstance(value, bool):
        return _OMIT if (not value) in alternatives else (not value)
    if isinstance(value, int | float):
        new = value + 1 if schema.get("type") == "integer" else value + 1.5
        while any(new == a and not isinstance(a, bool) for a in alternatives):
            new += 1
        return new
    if isinstance(value, str):
        new = value + "zq"
        while _fold(new) in taken:
            new += "q"
        return new
    if isinstance(value, list) and value:
        return [*value, value[-1]]
    return _OMIT


def _float_for_integer(value: Any, schema: Mapping[str, Any], alternatives: list[Any]) -> Any:
    integral = schema.get("type") == "integer" and isinstance(value, int) and not isinstance(value, bool)
    return float(value) if integral else _OMIT


def _int_for_float(value: Any, schema: Mapping[str, Any], alternatives: list[Any]) -> Any:
    integral = schema.get("type") == "float" and isinstance(value, float) and value.is_integer()
    return int(value) if integral else _OMIT


def _string_case(value: Any, schema: Mapping[str, Any], alternatives: list[Any]) -> Any:
    free = schema.get("type") == "string" and "enum" not in schema and isinstance(value, str)
    return value.upper() if free and value.upper() != value else _OMIT


# One argument value changed, by kind: the first argument (in ground-truth order) the change applies to.
_CHANGES: dict[str, Callable[[Any, Mapping[str, Any], list[Any]], Any]] = {
    "int_for_float": _int_for_float,
    "string_case": _string_case,
    "wrong_type": _wrong_type,
    "float_for_integer": _float_for_integer,
    "wrong_value": _wrong_value,
}


def cases(item: Mapping[str, Any]) -> list[Case]:
    """The task's acceptable combinations (should pass) and mutations (should fail); see the module docstring."""
    rng = random.Random(item["id"])
    if not item["ground_truth"]:
        calls = [
            Case(
                item["id"],
                "call",
                ({"name": doc["name"], "arguments": _required_placeholders(doc)},),
                should_pass=False,
            )
            for doc in item["functions"]
        ]
        return [Case(item["id"], "text_answer", None, should_pass=True), *calls]
    combos = _acceptable_calls(item, rng)
    base = [
        {"name": next(iter(call)), "arguments": args}
        for call, args in zip(item["ground_truth"], _first_values(item), strict=True)
    ]
    out = [Case(item["id"], ACCEPTABLE, combo, should_pass=True) for combo in combos]
    out += [Case(item["id"], kind, tuple(calls), kind in VARIANTS) for kind, calls in _mutations(item, base)]
    return out


def _first_values(item: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The first acceptable value of every argument, in ground-truth order (the base of the mutations)."""
    docs = _docs(item)
    out = []
    for call in item["ground_truth"]:
        ((name, arguments),) = call.items()
        required = docs[name].get("required", [])
        chosen = {key: _choices(values, key not in required)[0] for key, values in arguments.items()}
        out.append({key: value for key, value in chosen.items() if value is not _OMIT})
    return out


def _required_placeholders(doc: Mapping[str, Any]) -> dict[str, Any]:
    properties = doc["parameters"].get("properties", {})
    return {key: _PLACEHOLDER.get(properties[key].get("type"), "x") for key in doc["parameters"].get("required", [])}


def completion(case: Case, shape: int) -> str | dict[str, Any]:
    """The case as a completion in one of three shapes: OpenAI tool_calls, a JSON array, Hermes blocks."""
    if case.calls is None:
        return "None of the functions offered can answer this; here is what I know instead."
    if shape % 3 == 0:
        items = [
            {"type": "function", "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}}
            for c in case.calls
        ]
        return {"role": "assistant", "content": "", "tool_calls": items}
    if shape % 3 == 1:
        return json.dumps(list(case.calls))
    return "\n".join(f"<tool_call>\n{json.dumps(call)}\n</tool_call>" for call in case.calls)


@dataclass
class CategoryResult:
    """One category's verdicts: each case with seedwheel's and BFCL's, and the tasks left out (invalid gold)."""

    category: str
    items: int = 0
    excluded: dict[str, str] = field(default_factory=dict)
    verdicts: list[tuple[Case, bool, bool]] = field(default_factory=list)

    @property
    def agreement(self) -> float:
        """Share of cases where seedwheel's verdict equals BFCL's."""
        return sum(ours == theirs for _, ours, theirs in self.verdicts) / max(1, len(self.verdicts))

    def wrong(self) -> list[tuple[Case, bool]]:
        """Cases seedwheel judges against their known verdict (an acceptable call failed, a mutation passed)."""
        return [(case, ours) for case, ours, _ in self.verdicts if ours != case.should_pass]

    def disagreements(self) -> list[tuple[Case, bool, bool]]:
        return [row for row in self.verdicts if row[1] != row[2]]


def measure(data: Path, categories: tuple[str, ...] = CATEGORIES) -> dict[str, CategoryResult]:
    """Every case of every task in `categories`, judged by seedwheel's `tool_call` and by BFCL's checker.

    Tasks whose params seedwheel refuses (`spec_problems`: a ground truth no call can meet) are left out and
    listed with their first problem.
    """
    verifier = REGISTRY.get("tool_call")
    context = VerifyContext()
    bfcl = bfcl_ast_checker()
    results = {}
    for category in categories:
        result = results[category] = CategoryResult(category)
        for item in load_items(data, category):
            result.items += 1
            params = task_params(item)
            problems = spec_problems({"name": "tool_call", "params": params}, context)
            if problems:
                result.excluded[item["id"]] = problems[0]
                continue
            for shape, case in enumerate(cases(item)):
                ours = verifier.check(params, Completion.from_any(completion(case, shape)), context).passed
                if case.calls is None or category == "irrelevance":
                    theirs = not case.calls  # BFCL's irrelevance rule: an output that decodes into a call fails
                else:
                    output = [{c["name"]: json.loads(json.dumps(c["arguments"]))} for c in case.calls]
                    theirs = bfcl(item["functions"], output, item["ground_truth"], category)
                result.verdicts.append((case, ours, theirs))
    return results
