"""Programmatic generators on every bundled seed: valid variants, lineage, determinism, isolation; and rejects."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from generators.base import GenerationResult, Generator
from generators.programmatic import (
    PROGRAMMATIC_GENERATORS,
    ArithmeticResample,
    JsonExtractionResample,
    PythonFunctionRespec,
    SqlLiteralSwap,
    ToolCallResample,
    generate_variants,
    programmatic_generators,
)
from generators.programmatic.arithmetic import analyse, render
from generators.programmatic.gsm8k import ReplayError
from tests.paths import SEEDS
from validators.registry import VerifyContext
from validators.seeds import load_seeds
from validators.tasks import compute_task_id, task_problems

CONTEXT = VerifyContext(seeds_dir=SEEDS)
N = 3


def _generators() -> dict[str, Generator]:
    return programmatic_generators(CONTEXT)


@pytest.fixture(scope="module")
def seeds() -> list[dict[str, Any]]:
    seed_set = load_seeds([SEEDS], context=CONTEXT)
    assert not seed_set.problems
    return seed_set.tasks


@pytest.fixture(scope="module")
def generated(seeds: list[dict[str, Any]]) -> dict[str, GenerationResult]:
    """Each seed's output at random_seed 0, keyed by task_id (python_function runs the sandbox: run it once)."""
    generators = _generators()
    return {s["task_id"]: generators[s["family"]].generate(s, n=N, random_seed=0) for s in seeds}


def test_every_family_has_a_default_generator(seeds: list[dict[str, Any]]) -> None:
    assert {s["family"] for s in seeds} <= set(PROGRAMMATIC_GENERATORS)
    for family, generator in PROGRAMMATIC_GENERATORS.items():
        assert family in generator.families


@pytest.mark.slow
def test_every_variant_is_a_valid_task_descending_from_its_seed(
    seeds: list[dict[str, Any]], generated: dict[str, GenerationResult]
) -> None:
    problems = []
    for seed in seeds:
        result = generated[seed["task_id"]]
        ids = [v["task_id"] for v in result.tasks]
        assert len(ids) <= N
        assert len(set(ids)) == len(ids), seed["origin"]
        assert seed["task_id"] not in ids
        for variant in result.tasks:
            assert variant["lineage"]["seed_id"] == seed["task_id"]
            assert variant["lineage"]["parent_id"] == seed["task_id"]
            assert variant["lineage"]["source"] == "generated"
            assert variant["lineage"]["generator"]["params"]
            assert variant["family"] == seed["family"]
            found = task_problems(variant, CONTEXT, check_wrong_answer=True)
            problems += [f"{seed['origin']}: {p}" for p in found]
        for reject in result.rejects:
            assert reject["parent_id"] == seed["task_id"] and reject["reason"].startswith(reject["reason_code"])
    assert problems == []


# Yield floors per family, measured on the bundled seeds (seeds yielding >= 1 variant); a drop is a regression.
@pytest.mark.parametrize(
    ("family", "floor"),
    [
        ("arithmetic", 18),  # 20/32: algebra, unexplained constants, ambiguous operands and word-only numbers
        ("json_extraction", 18),  # 21/28: documents with no id, e-mail or free person name are left alone
        ("sql", 13),  # 15/31: only questions that state a literal of their gold query are templates
        ("python_function", 30),  # 32/33: every spec can be renamed; one has only date inputs that mutate badly
        ("tool_call", 23),  # 23/27: relative dates, unit conversions and locations with alternatives stay
        ("episode", 8),  # 8/10: every files seed is renamed; two shop seeds have no other fitting customer
    ],
)
def test_yield_per_family(
    family: str, floor: int, seeds: list[dict[str, Any]], generated: dict[str, GenerationResult]
) -> None:
    yielded = sum(1 for s in seeds if s["family"] == family and generated[s["task_id"]].tasks)
    assert yielded >= floor


@pytest.mark.parametrize("family", ["arithmetic", "json_extraction", "sql", "tool_call"])
def test_same_random_seed_same_output_and_another_differs(family: str, seeds: list[dict[str, Any]]) -> None:
    generator = _generators()[family]
    family_seeds = [s for s in seeds if s["family"] == family]
    first = [generator.generate(s, n=N, random_seed=7) for s in family_seeds]
    again = [generator.generate(s, n=N, random_seed=7) for s in family_seeds]
    other = [generator.generate(s, n=N, random_seed=8) for s in family_seeds]
    assert [(r.tasks, r.rejects) for r in first] == [(r.tasks, r.rejects) for r in again]
    assert [v["task_id"] for r in first for v in r.tasks] != [v["task_id"] for r in other for v in r.tasks]


def test_python_function_is_deterministic(seeds: list[dict[str, Any]], generated: dict[str, GenerationResult]) -> None:
    seed = next(s for s in seeds if s["verifier"]["params"].get("entry_point") == "slugify")
    generator = PythonFunctionRespec(CONTEXT)
    assert generator.generate(seed, n=N, random_seed=0).tasks == generated[seed["task_id"]].tasks
    other = generator.generate(seed, n=N, random_seed=1).tasks
    assert {v["task_id"] for v in other} != {v["task_id"] for v in generated[seed["task_id"]].tasks}


def test_adding_a_seed_does_not_change_the_variants_of_the_others(seeds: list[dict[str, Any]]) -> None:
    generators = _generators()
    fast = [s for s in seeds if s["family"] in ("arithmetic", "sql", "tool_call")]
    alone = generate_variants(fast[1:], per_seed=N, random_seed=3, generators=generators)
    together = generate_variants(fast, per_seed=N, random_seed=3, generators=generators)
    first = {v["task_id"] for v in together.tasks if v["lineage"]["parent_id"] == fast[0]["task_id"]}
    assert [v for v in together.tasks if v["task_id"] not in first] == alone.tasks


def test_a_family_without_a_generator_borrows_its_verifiers_or_is_a_reject_row() -> None:
    conversion = _task(
        "unit_conversion", "How many grams are in 1.25 kilograms?", "numeric_answer", {"answer": 1250},
        "1.25 * 1000 = 1250 grams.\n#### 1250",
    )  # fmt: skip
    borrowed = generate_variants([conversion], per_seed=N, random_seed=0)
    assert (len(borrowed.tasks), borrowed.rejects) == (N, [])
    assert {v["lineage"]["generator"]["name"] for v in borrowed.tasks} == {"arithmetic_resample"}
    assert {v["family"] for v in borrowed.tasks} == {"unit_conversion"}

    triage = _task("triage", "Which team owns the storage alert?", "text_answer", {"answers": ["storage"]}, "storage")
    result = generate_variants([triage], per_seed=N, random_seed=0)
    assert result.tasks == []
    [reject] = result.rejects
    assert reject["reason_code"] == "no_generator"
    assert "'triage' or its verifier 'text_answer'" in reject["reason"] and "LLM rewrites" in reject["reason"]


# --- unit cases per family: the sanity rejects ---------------------------------------------------------------


def _task(family: str, user: str, verifier: str, params: Mapping[str, Any], reference: str) -> dict[str, Any]:
    prompt = [{"role": "system", "content": "Answer."}, {"role": "user", "content": user}]
    v = {"name": verifier, "version": 1, "params": dict(params)}
    task_id = compute_task_id(prompt, v)
    lineage = {"seed_id": task_id, "parent_id": None, "generator": None, "source": "seed", "failure_id": None}
    return {"task_id": task_id, "family": family, "prompt": prompt, "verifier": v, "reference": reference,
            "lineage": lineage, "difficulty": 1, "tags": []}  # fmt: skip


def _arithmetic(question: str, reference: str, answer: int) -> dict[str, Any]:
    return _task("arithmetic", question, "numeric_answer", {"answer": answer}, reference)


def _codes(result: GenerationResult) -> set[str]:
    return {r["reason_code"] for r in result.rejects}


@pytest.mark.parametrize(
    ("question", "reference", "answer", "code"),
    [
        # no digits at all: nothing to re-sample
        ("Roque walks two hours and rides one hour. How long in all?", "2+1 = 3\n#### 3", 3, "unsupported_seed"),
        # the reasoning is algebra over a letter: replaying its numbers without the unknown would be wrong
        ("Three ships carried 847 people, each twice the last.", "7S = 847\n#### 121", 121, "unsupported_seed"),
        # 3 = 60/20 computed in prose: a constant no wording explains, so the replay refuses
        ("Joy reads 8 pages in 20 minutes. How many in an hour?", "8 x 3 = 24\n#### 24", 24, "replay_failed"),
        # the stated result does not match its expression
        ("Tom has 12 apples and buys 5 more. How many now?", "12 + 5 = 18\n#### 18", 18, "replay_failed"),
        # the only numbers repeat (which 2 is which?) and equal an implicit constant: all frozen
        ("Tim has 2 cats and 2 dogs. How many pets?", "2 + 2 = 4\n#### 4", 4, "unsupported_seed"),
        # no equation of the reasoning produces the final answer
        ("Tom has 12 apples and eats 5.", "He ate 5 of 12.\n12 - 5 = 7\n#### 8", 8, "replay_failed"),
    ],
)
def test_arithmetic_rejects(question: str, reference: str, answer: int, code: str) -> None:
    result = ArithmeticResample().generate(_arithmetic(question, reference, answer), n=2, random_seed=0)
    assert result.tasks == []
    assert code in _codes(result)


@pytest.mark.parametrize(
    ("question", "reference", "answer", "code"),
    [
        # 100 - 95: most new prices exceed the budget
        ("Kim has $100 and buys a coat for $95. How much is left?", "100 - 95 = 5\n#### 5", 5, "negative_answer"),
        # 48/2 with a new odd count gives half a clip
        ("Kim sold 47 clips, then half as many. How many in May?", "47/2 = 23.5\n#### 23.5", 23.5, None),
        # 8/2 = 4 is whole: odd re-samples would give half a cake
        ("Kim splits 8 cakes between her two friends.", "8/2 = 4\n#### 4", 4, "fractional_answer"),
        # a product of two ten-thousands jumps the magnitude
        ("A farm has 9000 rows of 8000 plants.", "9000 * 8000 = 72000000\n#### 72000000", 72000000, "absurd_answer"),
    ],
)
def test_arithmetic_sanity_rejects_keep_only_sane_variants(
    question: str, reference: str, answer: float, code: str | None
) -> None:
    result = ArithmeticResample(attempts_per_variant=20).generate(
        _arithmetic(question, reference, answer), n=3, random_seed=0
    )
    if code is not None:
        assert code in _codes(result)
    for variant in result.tasks:
        assert task_problems(variant, CONTEXT, check_wrong_answer=True) == []
        new = Fraction(str(variant["verifier"]["params"]["answer"]))
        assert new >= 0 and new <= 10**7


def test_arithmetic_replays_with_new_numbers_and_rewrites_every_step() -> None:
    seed = _arithmetic(
        "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May.",
        "Natalia sold 48/2 = 24 clips in May.\nNatalia sold 48+24 = 72 clips altogether.\n#### 72",
        72,
    )
    (variant,) = ArithmeticResample().generate(seed, n=1, random_seed=0).tasks
    new = int(variant["lineage"]["generator"]["params"]["substitutions"]["48"])
    assert variant["verifier"]["params"]["answer"] == new + new // 2
    assert f"{new}/2 = {new // 2}" in variant["reference"]
    assert variant["reference"].endswith(f"#### {new + new // 2}")


@pytest.mark.parametrize(
    ("value", "template", "text"),
    [
        (Fraction(27000), "22,500", "27,000"),  # thousands separators kept
        (Fraction(9), "18.00", "9.00"),  # money keeps its cents
        (Fraction(1, 4), ".4", ".25"),  # a leading dot stays, more places when needed
        (Fraction(5, 2), "2.5", "2.5"),  # decimals as written
    ],
)
def test_render(value: Fraction, template: str, text: str) -> None:
    assert render(value, template) == text


def test_render_refuses_a_repeating_decimal() -> None:
    with pytest.raises(ReplayError, match="fractional_answer"):
        render(Fraction(1, 3), "0.2")


def test_analyse_freezes_numbers_whose_role_is_ambiguous() -> None:
    # "2 different friends twice a week": the 2 in the steps may be the friends or "twice"; it stays 2.
    problem = analyse(
        "James writes a 3-page letter to 2 different friends twice a week. How many pages a year?",
        "3*2=6 pages\n6*2=12 pages\n12*52=624\n#### 624",
        Fraction(624),
    )
    assert [problem.numbers[i].text for i in problem.free] == ["3"]


# --- sql -----------------------------------------------------------------------------------------------------


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    path = tmp_path / "mini.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, country TEXT, score INTEGER);
        INSERT INTO customers VALUES (1, 'Ann', 'France', 5), (2, 'Bo', 'France', 5), (3, 'Cy', 'Spain', 7),
                                     (4, 'Di', 'Italy', 9), (5, 'Ed', 'Italy', 9), (6, 'Flo', 'Peru', NULL);
        """
    )
    conn.commit()
    conn.close()
    return path


def _sql(question: str, gold: str, database: Path, ordered: bool = False) -> dict[str, Any]:
    params: dict[str, Any] = {"database": str(database), "gold_query": gold}
    if ordered:
        params["ordered"] = True
    return _task("sql", question, "sql_result", params, f"```sql\n{gold}\n```")


@pytest.mark.parametrize(
    ("question", "gold", "ordered", "code"),
    [
        # no literal of the query is stated in the question
        ("How many customers are there?", "SELECT COUNT(*) FROM customers", False, "unsupported_seed"),
        # Peru's only customer has no score: the aggregate over no rows is empty
        (
            "Scores of customers in Spain?",
            "SELECT score FROM customers WHERE country = 'Spain' AND score IS NOT NULL",
            False,
            "empty_result",
        ),
        # France and Italy both have two customers: same count as the parent
        (
            "How many customers in France?",
            "SELECT COUNT(*) FROM customers WHERE country = 'France'",
            False,
            "same_result",
        ),
        # Italy's two customers tie on score at the LIMIT 1 cut-off
        (
            "Top customer by score in Spain?",
            "SELECT name FROM customers WHERE country = 'Spain' ORDER BY score DESC LIMIT 1",
            True,
            "ambiguous_order",
        ),
    ],
)
def test_sql_rejects(shop: Path, question: str, gold: str, ordered: bool, code: str) -> None:
    result = SqlLiteralSwap(CONTEXT).generate(_sql(question, gold, shop, ordered), n=3, random_seed=0)
    assert code in _codes(result)
    for variant in result.tasks:
        assert task_problems(variant, CONTEXT, check_wrong_answer=True) == []


def test_sql_swaps_the_literal_in_question_query_and_reference(shop: Path) -> None:
    seed = _sql("Names of customers in Spain?", "SELECT name FROM customers WHERE country = 'Spain'", shop)
    result = SqlLiteralSwap(CONTEXT).generate(seed, n=3, random_seed=0)
    assert result.tasks
    for variant in result.tasks:
        new = variant["lineage"]["generator"]["params"]["substitutions"]["Spain"]
        assert new in variant["prompt"][-1]["content"] and f"'{new}'" in variant["verifier"]["params"]["gold_query"]
        assert f"'{new}'" in variant["reference"]


# --- tool_call, json_extraction, python_function ------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_text", "arguments", "code"),
    [
        # the date is relative to a stated weekday: left alone, and nothing else is stated
        ("Today is Friday. Remind me on Sunday.", {"when": "2024-12-08"}, "unsupported_seed"),
        # the value is not in the request at all (a unit conversion)
        ("Set it to 64.4 F.", {"when": "2024-12-08"}, "unsupported_seed"),
    ],
)
def test_tool_call_rejects(request_text: str, arguments: dict[str, Any], code: str) -> None:
    tool = {"type": "function", "function": {"name": "remind", "parameters": {
        "type": "object", "properties": {"when": {"type": "string"}}, "additionalProperties": False}}}  # fmt: skip
    params = {"tools": [tool], "expected": {"name": "remind", "arguments": arguments}}
    seed = _task("tool_call", request_text, "tool_call", params, json.dumps(params["expected"]))
    result = ToolCallResample().generate(seed, n=3, random_seed=0)
    assert result.tasks == [] and code in _codes(result)


def test_tool_call_keeps_the_alternatives_of_a_possible_answer_seed() -> None:
    # BFCL's format: the location has two acceptable spellings, so only the date (one value) is re-sampled.
    tool = {"name": "forecast", "parameters": {"type": "dict", "properties": {
        "location": {"type": "string"}, "date": {"type": "string"}}, "required": ["location", "date"]}}  # fmt: skip
    gold = [{"forecast": {"location": ["Kyoto", "Kyoto, Japan"], "date": ["2024-10-12"]}}]
    reference = json.dumps({"name": "forecast", "arguments": {"location": "Kyoto", "date": "2024-10-12"}})
    seed = _task(
        "tool_call", "Rain in Kyoto on 2024-10-12?", "tool_call", {"tools": [tool], "possible_answer": gold}, reference
    )
    result = ToolCallResample().generate(seed, n=3, random_seed=0)
    assert len(result.tasks) == 3
    for variant in result.tasks:
        [call] = variant["verifier"]["params"]["possible_answer"]
        assert call["forecast"]["location"] == ["Kyoto", "Kyoto, Japan"]
        [date] = call["forecast"]["date"]
        assert date != "2024-10-12" and date in variant["prompt"][-1]["content"]
        assert json.loads(variant["reference"]) == {
            "name": "forecast",
            "arguments": {"location": "Kyoto", "date": date},
        }


def test_tool_call_rejects_a_gold_of_several_calls() -> None:
    # Parallel calls: a re-sampled value would have to be told apart from its twin in the other call.
    tool = {"name": "play", "parameters": {"type": "dict", "properties": {"artist": {"type": "string"}}}}
    gold = [{"play": {"artist": ["Taylor Swift"]}}, {"play": {"artist": ["Maroon 5"]}}]
    seed = _task(
        "tool_call", "Play Taylor Swift and Maroon 5.", "tool_call", {"tools": [tool], "possible_answer": gold}, ""
    )
    result = ToolCallResample().generate(seed, n=3, random_seed=0)
    assert result.tasks == [] and _codes(result) == {"unsupported_seed"}


def test_tool_call_keeps_dates_in_order(seeds: list[dict[str, Any]]) -> None:
    seed = next(
        s
        for s in seeds
        if s["family"] == "tool_call"
        and "return_date" in s["verifier"]["params"].get("expected", {}).get("arguments", {})
    )
    for variant in ToolCallResample().generate(seed, n=3, random_seed=5).tasks:
        arguments = variant["verifier"]["params"]["expected"]["arguments"]
        assert arguments["departure_date"] < arguments["return_date"]


@pytest.mark.parametrize(
    ("document", "expected", "code"),
    [
        # free text only: nothing we can sample safely
        ("Dinner was lovely.", {"summary": "Dinner was lovely."}, "unsupported_seed"),
        # the person is also addressed by first name alone: renaming would leave "Dear Tomasz" behind
        ("Employee: Tomasz Nowak. Dear Tomasz,", {"employee_name": "Tomasz Nowak"}, "unsupported_seed"),
    ],
)
def test_json_extraction_rejects(document: str, expected: dict[str, Any], code: str) -> None:
    schema = {"type": "object", "properties": {k: {"type": "string"} for k in expected}}
    params = {"schema": schema, "expected": expected}
    seed = _task("json_extraction", document, "json_schema", params, json.dumps(expected))
    result = JsonExtractionResample().generate(seed, n=3, random_seed=0)
    assert result.tasks == [] and code in _codes(result)


def test_json_extraction_rewrites_document_expected_and_reference_together() -> None:
    expected = {"employee_name": "Tomasz Nowak", "employee_id": "KL-00318"}
    schema = {"type": "object", "properties": {"employee_name": {"type": "string"},
              "employee_id": {"type": "string", "pattern": "^KL-\\d{5}$"}}}  # fmt: skip
    seed = _task("json_extraction", "Employee: Tomasz Nowak, ID KL-00318.", "json_schema",
                 {"schema": schema, "expected": expected}, json.dumps(expected))  # fmt: skip
    result = JsonExtractionResample().generate(seed, n=3, random_seed=0)
    assert len(result.tasks) == 3
    for variant in result.tasks:
        new = variant["verifier"]["params"]["expected"]
        assert new["employee_id"] in variant["prompt"][-1]["content"] and "KL-00318" not in variant["reference"]
        assert task_problems(variant, CONTEXT, check_wrong_answer=True) == []


def test_python_function_without_literal_calls_is_unsupported() -> None:
    params = {"entry_point": "f", "tests": "x = 3\nassert f(x) == 4\n"}
    seed = _task("python_function", "Write f.", "python_tests", params, "```python\ndef f(x):\n    return x + 1\n```")
    result = PythonFunctionRespec(CONTEXT).generate(seed, n=2, random_seed=0)
    assert result.tasks == [] and _codes(result) == {"unsupported_seed"}


def test_python_function_renames_everywhere_and_adds_oracle_tests(
    seeds: list[dict[str, Any]], generated: dict[str, GenerationResult]
) -> None:
    seed = next(s for s in seeds if s["verifier"]["params"].get("entry_point") == "slugify")
    for variant in generated[seed["task_id"]].tasks:
        params = variant["verifier"]["params"]
        name = params["entry_point"]
        assert name != "slugify" and "slugify" not in json.dumps(variant["prompt"]) + params["tests"]
        assert f"def {name}(" in variant["reference"]
        assert params["tests"].count("assert ") > seed["verifier"]["params"]["tests"].count("assert ")
