"""The reward audit: the shipped labelled set against the registry reward, planted broken rewards, and probes."""

import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.paths import SEEDS
from training.reward_audit import (
    PROBES,
    LabelledCompletion,
    RewardAuditInputError,
    RewardAuditPolicy,
    RewardAuditPolicyError,
    audit_reward,
    load_labelled,
    probe_completions,
)
from validators.registry import VerifyContext
from validators.rewards import VerifierReward, build_reward_funcs
from validators.seeds import discover_seed_files, read_seed_file

AUDIT_SET = SEEDS / "audit" / "reward_audit.jsonl"
CONTEXT = VerifyContext(seeds_dir=SEEDS)


class ConstantReward:
    """A planted broken reward: the same value for every completion (picklable, with a stable name)."""

    def __init__(self, value: float) -> None:
        self.value = value
        self.__name__ = f"constant_{value}"

    def __call__(self, prompts: list[Any], completions: list[Any], **columns: Any) -> list[float]:
        return [self.value] * len(completions)


class SqlAcceptsAnything:
    """The registry reward, except that every sql row gets full reward (a verifier broken for one family)."""

    __name__ = "sql_accepts_anything"

    def __call__(self, prompts: list[Any], completions: list[Any], **columns: Any) -> list[float | None]:
        real = VerifierReward(context=CONTEXT)(prompts, completions, **columns)
        return [1.0 if family == "sql" else score for family, score in zip(columns["family"], real, strict=True)]


class Raises:
    __name__ = "raises"

    def __call__(self, prompts: list[Any], completions: list[Any], **columns: Any) -> list[float]:
        raise KeyError("answer")


class TooShort:
    __name__ = "too_short"

    def __call__(self, prompts: list[Any], completions: list[Any], **columns: Any) -> list[float]:
        return [0.0]


@pytest.fixture(scope="module")
def labelled() -> list[LabelledCompletion]:
    return load_labelled(AUDIT_SET, context=CONTEXT)


@pytest.fixture(scope="module")
def seed_tasks() -> list[dict[str, Any]]:
    """The bundled seeds as probe tasks, standing in for the training tasks.

    Read raw rather than through `load_seeds`: the probes need only prompt, family, verifier and reference, and
    skipping the loader's reference checks (a sandbox run per code seed) keeps the test fast.
    """
    tasks = []
    for path in discover_seed_files([SEEDS]):
        records, problems = read_seed_file(path)
        assert not problems, problems
        tasks += [{"task_id": r.origin, "family": r.family, **r.raw} for r in records]
    return tasks


def registry_reward() -> tuple[list[VerifierReward], list[float]]:
    return build_reward_funcs({"*": 1.0}, context=CONTEXT)


def test_shipped_audit_set_spans_the_families_and_tricky_cases(labelled: list[LabelledCompletion]) -> None:
    families = Counter(row.family for row in labelled)

    assert 30 <= len(labelled) <= 80
    assert set(families) == {"arithmetic", "json_extraction", "sql", "python_function", "tool_call", "episode"}
    assert min(families.values()) >= 5
    assert 0.3 <= sum(row.accept for row in labelled) / len(labelled) <= 0.7
    assert all(row.reason and row.tags for row in labelled)


@pytest.mark.slow
def test_shipped_audit_set_passes_with_the_registry_reward(
    labelled: list[LabelledCompletion], seed_tasks: list[dict[str, Any]]
) -> None:
    funcs, weights = registry_reward()

    audit = audit_reward(funcs, weights, seed_tasks, labelled)

    assert audit.passed, audit.reasons
    assert audit.numbers["labelled/rows"] == len(labelled)
    # The registry reward agrees with every human verdict, the hard-coded and hedged rows included.
    assert [row["id"] for row in audit.rows if not row["agree"]] == []
    for probe in PROBES:
        assert audit.numbers[f"probe/{probe}/mean"] <= 0.1
    assert audit.numbers["probe/tasks_without_reward"] == 0
    # Every family's hack probes ran on every seed, and none was paid.
    for name in (
        *("hedge_or", "always_equal", "forged_report", "literal_values", "schema_skeleton", "hedged_values"),
        *("claim_success", "empty_episode", "repeat_last_call", "call_every_tool"),
    ):
        assert audit.numbers[f"hack_probe/{name}/runs"] > 0, name
    assert audit.numbers["hack_probe/paid"] == 0


def test_planted_constant_reward_fails_with_clear_reasons(
    labelled: list[LabelledCompletion], seed_tasks: list[dict[str, Any]]
) -> None:
    audit = audit_reward([ConstantReward(1.0)], [1.0], seed_tasks, labelled)

    assert not audit.passed
    assert audit.numbers["labelled/false_accept_rate"] == 1.0
    assert any(r.startswith("false-accept rate 1.00") and "pays for wrong answers" in r for r in audit.reasons)
    assert any(r.startswith("probe empty mean reward 1.00") and "ignores the task" in r for r in audit.reasons)
    assert any(r.startswith("probe constant ('42') mean reward 1.00") for r in audit.reasons)


def tasks_of(rows: list[LabelledCompletion]) -> list[dict[str, Any]]:
    """One task per labelled row: a cheap probe set for tests that do not need the whole seed set."""
    return [{"task_id": r.id, "family": r.family, "prompt": r.prompt, "verifier": r.verifier} for r in rows]


@pytest.mark.parametrize(
    ("reward", "expected_reasons"),
    [
        # Always zero: fails every right answer (and, rightly, passes the probes).
        (ConstantReward(0.0), ["false-reject rate 1.00 (26 of 26", "agreement 0.61"]),
        # Half reward for everything never reaches the accept threshold, and probes still see 0.5 for garbage.
        (ConstantReward(0.5), ["false-reject rate 1.00", "probe random mean reward 0.50"]),
        # A reward that raises would stop training; the audit names it instead.
        (Raises(), ["labelled set: reward 'raises' raised KeyError", "probe empty: reward 'raises' raised"]),
        # One value for a whole batch is a shape bug.
        (TooShort(), ["returned 1 values for 66 completions"]),
        # A reward for a verifier no row uses scores nothing: no agreement to measure, and training tasks go unpaid.
        (
            VerifierReward("format_tags", context=CONTEXT),
            ["no row is scored", "get no reward from any function (arithmetic 11"],
        ),
    ],
)
def test_broken_rewards_fail(labelled: list[LabelledCompletion], reward: Any, expected_reasons: list[str]) -> None:
    audit = audit_reward([reward], None, tasks_of(labelled), labelled)

    assert not audit.passed
    for expected in expected_reasons:
        assert any(expected in reason for reason in audit.reasons), (expected, audit.reasons)


def test_always_zero_passes_probes_but_fails_on_false_rejects(labelled: list[LabelledCompletion]) -> None:
    audit = audit_reward([ConstantReward(0.0)], None, tasks_of(labelled), labelled)

    assert audit.numbers["labelled/false_reject_rate"] == 1.0
    assert audit.numbers["labelled/false_accept_rate"] == 0.0
    assert all(audit.numbers[f"probe/{p}/mean"] == 0.0 for p in PROBES)
    assert audit.numbers["hack_probe/paid"] == 0


def test_a_reward_broken_for_one_small_family_is_caught_by_family(labelled: list[LabelledCompletion]) -> None:
    # 40 arithmetic tasks and 2 sql tasks: the overall empty-probe mean stays under 0.1, sql's is 1.0.
    arithmetic = [t for t in tasks_of(labelled) if t["family"] == "arithmetic"] * 4
    sql = [t for t in tasks_of(labelled) if t["family"] == "sql"][:2]

    audit = audit_reward([SqlAcceptsAnything()], None, arithmetic + sql, labelled)

    assert not audit.passed
    assert audit.numbers["probe/empty/mean"] < 0.1
    assert any("probe empty" in r and "in sql 1.00 (2 tasks)" in r for r in audit.reasons), audit.reasons


def test_a_paraphrase_sharing_its_seeds_reference_is_no_majority_hole(
    labelled: list[LabelledCompletion], seed_tasks: list[dict[str, Any]]
) -> None:
    # A small family where a paraphrase keeps its seed's reference: that reference is the family's majority, and
    # the gold of both. Paying it there is right; the probe sends it to the other tasks only.
    sql = [t for t in seed_tasks if t["family"] == "sql"][:6]
    paraphrase = {**sql[0], "task_id": "paraphrase", "prompt": [{"role": "user", "content": "Reworded question?"}]}
    funcs, weights = registry_reward()

    audit = audit_reward(funcs, weights, [*sql, paraphrase], labelled)

    assert audit.numbers["probe/majority_reference/sql/mean"] == 0.0, audit.reasons
    assert audit.numbers["probe/majority_reference/mean"] == 0.0


def test_weights_combine_as_a_normalised_mean(labelled: list[LabelledCompletion]) -> None:
    # The registry reward at weight 3 plus a constant 0 at weight 1: right answers score 0.75, below threshold 1.
    funcs = [VerifierReward(context=CONTEXT), ConstantReward(0.0)]

    quick = {"probes": ("empty",), "hack_probes": False}  # this test is about the labelled rates
    strict = audit_reward(funcs, [3.0, 1.0], tasks_of(labelled), labelled, policy=RewardAuditPolicy(**quick))
    lenient = audit_reward(
        funcs, [3.0, 1.0], tasks_of(labelled), labelled, policy=RewardAuditPolicy(accept_threshold=0.75, **quick)
    )

    assert strict.numbers["labelled/mean_score_human_accept"] == pytest.approx(0.75)
    assert strict.numbers["labelled/false_reject_rate"] == 1.0
    assert lenient.numbers["labelled/false_reject_rate"] == 0.0


class PaysTheNumberAnywhere:
    """A planted hole: arithmetic rows pay when the gold number appears anywhere (hedges included)."""

    __name__ = "pays_the_number_anywhere"

    def __call__(self, prompts: list[Any], completions: list[Any], **columns: Any) -> list[float | None]:
        real = VerifierReward(context=CONTEXT)(prompts, completions, **columns)
        texts = [completion[-1]["content"] for completion in completions]
        return [
            float(str(spec["params"]["answer"]) in text) if spec["name"] == "numeric_answer" else score
            for spec, text, score in zip(columns["verifier"], texts, real, strict=True)
        ]


@pytest.mark.parametrize(
    ("reward", "family", "probe"),
    [
        # A number found anywhere pays every hedge.
        (PaysTheNumberAnywhere(), "arithmetic", "hedge_or"),
        # A verifier broken for one family pays that family's literal SQL.
        (SqlAcceptsAnything(), "sql", "literal_select"),
    ],
)
def test_a_planted_hole_is_caught_by_the_hack_probes(
    labelled: list[LabelledCompletion], reward: Any, family: str, probe: str
) -> None:
    tasks = [t for t in tasks_of(labelled) if t["family"] == family][:2]
    quick = RewardAuditPolicy(probes=("empty",))  # the hole is one the generic probes miss for arithmetic

    audit = audit_reward([reward], None, tasks, labelled, policy=quick)

    assert not audit.passed
    assert audit.numbers[f"hack_probe/{probe}/paid"] == 2
    reason = next(r for r in audit.reasons if r.startswith(f"hack probe {probe} paid"))
    assert tasks[0]["task_id"] in reason and "does not solve the task" in reason


def test_a_task_whose_probes_cannot_be_built_fails_the_audit(labelled: list[LabelledCompletion]) -> None:
    # An SQL task whose database is missing: the probes need its gold rows, so the audit cannot vouch for it.
    broken = {
        "task_id": "sql-missing-db",
        "family": "sql",
        "prompt": "How many?",
        "verifier": {"name": "sql_result", "params": {"database": "sql/missing.sqlite", "gold_query": "SELECT 1"}},
    }
    policy = RewardAuditPolicy(probes=("empty",))

    audit = audit_reward([VerifierReward(context=CONTEXT)], None, [broken], labelled, policy=policy)

    assert not audit.passed
    assert any(
        r.startswith("hack probes could not be built for 1 tasks (sql-missing-db: SqlTaskError") for r in audit.reasons
    )


def test_hack_probes_find_a_task_database_through_the_audit_context(
    labelled: list[LabelledCompletion], tmp_path: Path
) -> None:
    # The database lives only under another seeds folder: the probes find it through the context they are given.
    task = next(t for t in tasks_of(labelled) if t["family"] == "sql")
    params = task["verifier"]["params"]
    (tmp_path / "sql").mkdir()
    shutil.copy(SEEDS / params["database"], tmp_path / "sql" / "moved.sqlite")
    moved = {**task, "verifier": {**task["verifier"], "params": {**params, "database": "sql/moved.sqlite"}}}
    context = VerifyContext(seeds_dir=tmp_path)
    policy = RewardAuditPolicy(probes=("empty",))

    found = audit_reward([VerifierReward(context=context)], None, [moved], labelled, policy=policy, context=context)
    default = audit_reward([VerifierReward(context=context)], None, [moved], labelled, policy=policy)

    assert found.numbers["hack_probe/literal_select/runs"] == 1
    assert found.numbers["hack_probe/paid"] == 0
    assert not any(r.startswith("hack probes could not be built") for r in found.reasons)
    assert any(r.startswith("hack probes could not be built for 1 tasks") for r in default.reasons)


def test_probe_completions() -> None:
    tasks = [
        {
            "family": "a",
            "prompt": [{"role": "system", "content": "S"}, {"role": "user", "content": "Q1"}],
            "reference": "R1",
        },
        {"family": "a", "prompt": "Q2", "reference": "R2"},
        {"family": "a", "prompt": "Q3", "reference": "R2"},
        {"family": "b", "prompt": "Q4", "reference": None},
    ]

    assert probe_completions(tasks, "empty") == ["", "", "", ""]
    assert probe_completions(tasks, "constant", constant_text="7") == ["7"] * 4
    # Family a's most common reference is R2, sent to the tasks it is not the gold of; family b has none, so its
    # probe is empty.
    assert probe_completions(tasks, "majority_reference") == ["R2", None, None, ""]
    assert probe_completions(tasks, "echo_prompt") == ["Q1", "Q2", "Q3", "Q4"]
    noise = probe_completions(tasks, "random", seed=1)
    assert noise == probe_completions(tasks, "random", seed=1) != probe_completions(tasks, "random", seed=2)
    assert len(set(noise)) == 4


GOOD_ROW = {
    "id": "r1",
    "family": "arithmetic",
    "prompt": [{"role": "user", "content": "2+2?"}],
    "verifier": {"name": "numeric_answer", "params": {"answer": 4}},
    "completion": "#### 4",
    "human": {"accept": True, "reason": "right"},
}


@pytest.mark.parametrize(
    ("lines", "match"),
    [
        # Not JSON at all.
        (["{oops"], r":1: not valid JSON"),
        # The human verdict is the point of the row.
        ([json.dumps({**GOOD_ROW, "human": {}})], r":1: human.accept must be true or false"),
        # A verdict written as a string is not a boolean.
        ([json.dumps({**GOOD_ROW, "human": {"accept": "yes"}})], r"human.accept"),
        # Tags are a list of labels, not one string.
        ([json.dumps({**GOOD_ROW, "tags": "hard_coded"})], r"tags must be a list"),
        # Ids name rows in reasons, so they must be unique.
        ([json.dumps(GOOD_ROW), json.dumps(GOOD_ROW)], r":2: id 'r1' repeats line 1"),
        # The embedded task's verifier is checked like a seed's.
        ([json.dumps({**GOOD_ROW, "verifier": {"name": "nope", "params": {}}})], r":1: verifier: unknown verifier"),
        # A row without a completion has nothing to audit.
        ([json.dumps({k: v for k, v in GOOD_ROW.items() if k != "completion"})], r"completion must be"),
        # An empty file audits nothing.
        ([""], r"no labelled rows"),
    ],
)
def test_load_labelled_names_the_line_and_fix(tmp_path: Path, lines: list[str], match: str) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_text("\n".join(lines) + "\n")

    with pytest.raises(RewardAuditInputError, match=match):
        load_labelled(path, context=CONTEXT)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        # Rates are shares.
        ({"min_agreement": 1.5}, "min_agreement"),
        ({"max_probe_score": -0.1}, "max_probe_score"),
        # A threshold of 0 accepts everything.
        ({"accept_threshold": 0.0}, "accept_threshold"),
        # Typos in probe names would silently skip a probe.
        ({"probes": ("empty", "constnat")}, "unknown probes"),
    ],
)
def test_policy_checks_itself(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(RewardAuditPolicyError, match=match):
        RewardAuditPolicy(**kwargs)


def test_weights_must_match_functions(labelled: list[LabelledCompletion]) -> None:
    with pytest.raises(RewardAuditPolicyError, match="2 weights for 1 reward functions"):
        audit_reward([ConstantReward(1.0)], [1.0, 2.0], [], labelled)


QUICK = RewardAuditPolicy(probes=("empty", "constant"), hack_probes=False)  # about the records, not the probes


def test_every_check_is_a_record_a_caller_reads_without_parsing(labelled: list[LabelledCompletion]) -> None:
    funcs, weights = registry_reward()

    audit = audit_reward(funcs, weights, tasks_of(labelled), labelled, policy=QUICK)

    by_name = {check.name: check for check in audit.checks}
    assert list(by_name) == ["agreement", "false_accept_rate", "false_reject_rate", "probe/empty", "probe/constant"]
    assert audit.passed and audit.failures == [] and all(check.passed for check in audit.checks)
    assert by_name["agreement"].figures == {"value": 1.0, "limit": 0.95, "agreed": 66, "scored": 66}
    # The lines people read are the checks' messages, unchanged: a passing one still ends in ": ok".
    assert audit.reasons == [check.message for check in audit.checks]
    assert by_name["agreement"].message == "agreement 1.00 (66/66 labelled rows) >= 0.95: ok"


def test_failed_checks_are_named_and_carry_their_figures(labelled: list[LabelledCompletion]) -> None:
    audit = audit_reward([ConstantReward(1.0)], None, tasks_of(labelled), labelled, policy=QUICK)

    assert not audit.passed
    assert [check.name for check in audit.failures] == [
        "agreement",
        "false_accept_rate",
        "probe/empty",
        "probe/constant",
    ]
    false_accepts = next(check for check in audit.failures if check.name == "false_accept_rate")
    assert (false_accepts.severity, false_accepts.figures["value"], false_accepts.figures["limit"]) == (
        "error",
        1.0,
        0.05,
    )
    assert (
        false_accepts.message.startswith("false-accept rate 1.00")
        and "pays for wrong answers" in false_accepts.message
    )


def test_a_warning_is_reported_and_never_fails_the_audit(labelled: list[LabelledCompletion]) -> None:
    # A training family the labelled set has no rows for: nobody checked the reward accepts its answers.
    tasks = [*tasks_of(labelled), {**tasks_of(labelled)[0], "task_id": "new-1", "family": "arithmetic_v2"}]
    funcs, weights = registry_reward()

    audit = audit_reward(funcs, weights, tasks, labelled, policy=QUICK)

    [warning] = [check for check in audit.checks if check.severity == "warning"]
    assert (warning.name, warning.passed, warning.blocks) == ("labelled_families", False, False)
    assert warning.message == "note: no labelled rows for families arithmetic_v2; add some to the audit set"
    assert audit.passed and audit.failures == []
