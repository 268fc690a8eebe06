"""tool_call on BFCL's own data: every acceptable call passes, every mutation fails, and BFCL's checker agrees.

The cases and BFCL's verdicts come from `tests.bfcl` (its docstring says how); `bench/bfcl_agreement.py` prints
the same figures as a table. Needs `bfcl-eval` (make install-dev); without it the tests skip, and fail under CI.
"""

import pytest

from tests.bfcl import (
    ACCEPTABLE,
    CATEGORIES,
    IRRELEVANCE_KINDS,
    MUTATIONS,
    VARIANTS,
    CategoryResult,
    bfcl_ast_checker,
    load_items,
    measure,
    require_bfcl_data,
    task_params,
)
from validators.registry import REGISTRY, Completion, VerifyContext

AGREEMENT_FLOOR = 0.995
# Tasks whose ground truth breaks its own function doc (a value outside the doc's enum, a boolean where it
# declares a string, an argument it does not declare) are refused as tasks, as a seed with that gold would be.
MAX_EXCLUDED_SHARE = 0.015


@pytest.fixture(scope="module")
def results() -> dict[str, CategoryResult]:
    return measure(require_bfcl_data())


@pytest.mark.parametrize("category", CATEGORIES)
def test_acceptable_calls_and_variants_pass_and_mutations_fail(results, category):
    result = results[category]
    assert len(result.verdicts) > result.items  # every kept task has several cases
    wrong = [(case.item_id, case.kind, ours, case.calls) for case, ours in result.wrong()]
    assert wrong == []


def test_every_kind_of_case_is_exercised(results):
    # Each mutation applies to at least one task (an optional argument the ground truth leaves out is rare).
    kinds = {case.kind for result in results.values() for case, _, _ in result.verdicts}
    assert kinds == {ACCEPTABLE, *VARIANTS, *MUTATIONS, *IRRELEVANCE_KINDS}


def test_agreement_with_bfcls_checker(results):
    verdicts = [row for result in results.values() for row in result.verdicts]
    agreement = sum(ours == theirs for _, ours, theirs in verdicts) / len(verdicts)
    assert agreement >= AGREEMENT_FLOOR


def _in_gold_order(checker, item, calls):
    """The calls reordered so the i-th fits the i-th ground-truth call by BFCL's own single-call check, or None."""
    one = [{call["name"]: call["arguments"]} for call in calls]
    fits = [[checker(item["functions"], [c], [gold], "multiple") for gold in item["ground_truth"]] for c in one]

    def place(j, used):
        if j == len(one):
            return []
        for i in range(len(one)):
            if i not in used and fits[i][j] and (rest := place(j + 1, used | {i})) is not None:
                return [one[i], *rest]
        return None

    return place(0, frozenset())


def test_every_disagreement_is_bfcls_first_fit_pairing(results):
    # BFCL pairs parallel calls first-fit in output order; seedwheel finds a maximum matching. So the only
    # disagreements are right answers BFCL refuses in the order given and accepts in the ground truth's order.
    checker = bfcl_ast_checker()
    data = require_bfcl_data()
    disagreements = [(category, row) for category, result in results.items() for row in result.disagreements()]
    items = {item["id"]: item for category in {c for c, _ in disagreements} for item in load_items(data, category)}
    for category, (case, ours, theirs) in disagreements:
        assert (case.kind, ours, theirs) == (ACCEPTABLE, True, False)
        item = items[case.item_id]
        ordered = _in_gold_order(checker, item, case.calls)
        assert ordered is not None and checker(item["functions"], ordered, item["ground_truth"], category)


def test_only_tasks_whose_ground_truth_breaks_its_function_doc_are_left_out(results):
    for result in results.values():
        for item_id, problem in result.excluded.items():
            assert "expected arguments break the tool's" in problem, (item_id, problem)
    excluded = sum(len(result.excluded) for result in results.values())
    assert excluded <= MAX_EXCLUDED_SHARE * sum(result.items for result in results.values())


def test_hack_probes_fail_on_every_bfcl_task(results):
    # The spraying attacks (every tool, every argument, the call twice) on a peer's tasks, not only on ours.
    verifier = REGISTRY.get("tool_call")
    data = require_bfcl_data()
    probed = kept = 0
    for category, result in results.items():
        for item in load_items(data, category):
            if item["id"] in result.excluded:
                continue
            kept += 1
            params = task_params(item)
            for probe in verifier.hack_probes(params, None, VerifyContext()):
                verdict = verifier.check(params, Completion.from_any(probe.completion), VerifyContext())
                assert not verdict.passed, (item["id"], probe.name)
                probed += 1
    assert probed > kept  # every task gets one probe at least (the call twice, or every tool when none is due)


def test_a_missing_bfcl_eval_skips_naming_the_install(monkeypatch):
    # A skip off CI; tests/tiers.py makes every such skip a failure under CI (tests/test_tiers.py).
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(pytest.skip.Exception, match="pip install --no-deps bfcl-eval"):
        require_bfcl_data()
