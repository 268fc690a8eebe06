"""The split ledger: a root keeps its side across nights, re-splits are explicit epochs, history stays readable."""

import json

import pytest

from curation.split_ledger import LEDGER, PLANS, SplitLedger, SplitLedgerError
from curation.splits import EVAL, TRAIN, SplitConfig, plan_splits, root_hash
from tests.curation.test_splits import seeds, task

CONFIG = SplitConfig(salt="ledger-test")


def failures_hashing(side: str, count: int, start: int = 0) -> list[str]:
    """Failure ids whose hash alone sends them to `side` (failure_eval_fraction 0.5)."""
    found, i = [], start
    while len(found) < count:
        ident = f"fail-{i}"
        if (root_hash(ident, CONFIG.salt) < CONFIG.failure_eval_fraction) == (side == EVAL):
            found.append(ident)
        i += 1
    return found


def failure_tasks(ids: list[str]) -> list[dict]:
    return [task(f"t-{ident}", failure_id=ident) for ident in ids]


def test_a_root_the_guarantee_rule_moved_never_moves_back(tmp_path):
    # The night sequence: two failures hash to eval, the guarantee rule demotes one to train; a third
    # failure then hashes to train. Re-derived without the ledger the demoted one returns to eval (the model
    # trained on it would be evaluated on it); with the ledger it stays.
    first, second = failures_hashing(EVAL, 2)
    [third] = failures_hashing(TRAIN, 1)
    ledger = SplitLedger(tmp_path)
    night1 = ledger.assign(failure_tasks([first, second]), CONFIG, run_id="night-1")
    demoted = [root for root, how in night1.plan.guaranteed.items() if how == "demoted"]
    assert len(demoted) == 1 and night1.state.sides[demoted[0]] == TRAIN

    fresh = plan_splits(failure_tasks([first, second, third]), CONFIG)
    assert fresh.sides[demoted[0]] == EVAL  # the hazard the ledger exists for

    night2 = ledger.assign(failure_tasks([first, second, third]), CONFIG, run_id="night-2")
    assert night2.state.sides[demoted[0]] == night2.plan.sides[demoted[0]] == TRAIN
    assert night2.new_roots == [third] and night2.state.seq == 2


def test_nights_only_append_and_each_plan_is_recorded_with_its_run(tmp_path):
    ledger = SplitLedger(tmp_path)
    one = ledger.assign(seeds("a", 20), CONFIG, run_id="run-1")
    same = ledger.assign(seeds("a", 20), CONFIG, run_id="run-2")
    assert same.state == one.state and same.new_roots == []  # nothing new: no plan, no row
    two = ledger.assign([*seeds("a", 20), *seeds("b", 5)], CONFIG, run_id="run-3")
    rows = ledger.rows()
    assert len(rows) == 25 and rows["root"].is_unique
    assert {r: s for r, s in two.state.sides.items() if r in one.state.sides} == one.state.sides
    assert [p["run_id"] for p in ledger.plans()] == ["run-1", "run-3"]
    assert ledger.state(1).sides == one.state.sides and ledger.state().seq == 2
    assert one.state.plan_id != two.state.plan_id


def test_a_new_salt_in_the_config_is_noted_not_applied(tmp_path):
    ledger = SplitLedger(tmp_path)
    ledger.assign(seeds("a", 10), CONFIG, run_id="run-1")
    entry = ledger.assign(seeds("a", 12), SplitConfig(salt="another"), run_id="run-2")
    assert "resplit" in entry.notes[0]
    assert ledger.plans()[-1]["salt"] == CONFIG.salt
    expected = plan_splits(seeds("a", 12), CONFIG, previous=ledger.state(1).sides).sides
    assert entry.state.sides == expected


def test_a_resplit_is_a_new_epoch_keeps_trained_roots_in_train_and_history(tmp_path):
    ledger = SplitLedger(tmp_path)
    tasks = seeds("a", 40)
    before = ledger.assign(tasks, CONFIG, run_id="run-1").state
    trained = [root for root, side in before.sides.items() if side == TRAIN][:10]
    entry = ledger.resplit(tasks, SplitConfig(salt="new"), pinned=trained, run_id="alice", note="new salt")
    assert entry.state.epoch == 1 and entry.moved
    assert all(entry.state.sides[root] == TRAIN for root in trained)
    assert all(
        before.sides[root] == was and entry.state.sides[root] == now for root, (was, now) in entry.moved.items()
    )
    assert ledger.state(before.seq).sides == before.sides  # the split in force then is still known
    assert ledger.plans()[-1]["kind"] == "resplit" and ledger.plans()[-1]["moved"]
    # A night after the re-split hashes new roots with the epoch's salt.
    night = ledger.assign([*tasks, *seeds("b", 3)], SplitConfig(salt="new"), run_id="run-2")
    assert night.notes == [] and night.state.epoch == 1


def test_a_crash_between_the_plan_record_and_the_ledger_leaves_the_old_split(tmp_path):
    ledger = SplitLedger(tmp_path)
    ledger.assign(seeds("a", 10), CONFIG, run_id="run-1")
    orphan = {"seq": 2, "plan_id": "x", "epoch": 0, "salt": "s", "kind": "assign", "run_id": "dead"}
    (tmp_path / PLANS / "000002.json").write_text(json.dumps(orphan))  # written, then the run died
    assert ledger.state().seq == 1 and [p["run_id"] for p in ledger.plans()] == ["run-1"]
    entry = ledger.assign(seeds("a", 11), CONFIG, run_id="run-2")
    assert entry.state.seq == 2 and ledger.plans()[-1]["run_id"] == "run-2"


def test_a_damaged_ledger_is_an_error_never_a_silent_resplit(tmp_path):
    ledger = SplitLedger(tmp_path)
    ledger.assign(seeds("a", 10), CONFIG, run_id="run-1")
    (tmp_path / LEDGER).write_bytes(b"not parquet")
    with pytest.raises(SplitLedgerError, match="restore it from a backup"):
        ledger.assign(seeds("a", 10), CONFIG, run_id="run-2")
