"""The split ledger: a root keeps its side across nights, re-splits are explicit epochs, history stays readable;
in files and in PostgreSQL (`state_store`), also with processes writing at once or killed mid-write."""

import json
import logging
import subprocess
import sys

import pytest

from curation.split_ledger import LEDGER, PLANS, SplitLedger, SplitLedgerError
from curation.splits import EVAL, TRAIN, SplitConfig, plan_splits, root_hash
from tests.curation.test_splits import seeds, task
from tests.paths import REPO
from tests.services import released_together

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


def test_a_root_the_guarantee_rule_moved_never_moves_back(tmp_path, state_store):
    # The night sequence: two failures hash to eval, the guarantee rule demotes one to train; a third
    # failure then hashes to train. Re-derived without the ledger the demoted one returns to eval (the model
    # trained on it would be evaluated on it); with the ledger it stays.
    first, second = failures_hashing(EVAL, 2)
    [third] = failures_hashing(TRAIN, 1)
    ledger = SplitLedger(tmp_path, state_store)
    night1 = ledger.assign(failure_tasks([first, second]), CONFIG, run_id="night-1")
    demoted = [root for root, how in night1.plan.guaranteed.items() if how == "demoted"]
    assert len(demoted) == 1 and night1.state.sides[demoted[0]] == TRAIN

    fresh = plan_splits(failure_tasks([first, second, third]), CONFIG)
    assert fresh.sides[demoted[0]] == EVAL  # the hazard the ledger exists for

    night2 = ledger.assign(failure_tasks([first, second, third]), CONFIG, run_id="night-2")
    assert night2.state.sides[demoted[0]] == night2.plan.sides[demoted[0]] == TRAIN
    assert night2.new_roots == [third] and night2.state.seq == 2


def test_nights_only_append_and_each_plan_is_recorded_with_its_run(tmp_path, state_store):
    ledger = SplitLedger(tmp_path, state_store)
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


def test_a_new_salt_in_the_config_is_noted_not_applied(tmp_path, state_store):
    ledger = SplitLedger(tmp_path, state_store)
    ledger.assign(seeds("a", 10), CONFIG, run_id="run-1")
    entry = ledger.assign(seeds("a", 12), SplitConfig(salt="another"), run_id="run-2")
    assert "resplit" in entry.notes[0]
    assert ledger.plans()[-1]["salt"] == CONFIG.salt
    # The ten roots of run 1 keep their sides; the two new ones hash with the recorded salt, where the new salt
    # would send each to the other side.
    assert {r: s for r, s in entry.state.sides.items() if r in ledger.state(1).sides} == ledger.state(1).sides
    assert entry.new_roots == ["a10", "a11"] and not entry.plan.guaranteed
    for root in entry.new_roots:
        by_recorded, by_new = (root_hash(root, salt) < CONFIG.eval_fraction for salt in (CONFIG.salt, "another"))
        assert by_recorded != by_new
        assert entry.state.sides[root] == (EVAL if by_recorded else TRAIN)


def test_an_entry_gives_its_numbers_and_its_log_lines(tmp_path):
    ledger = SplitLedger(tmp_path)
    ledger.assign(seeds("a", 10), CONFIG, run_id="run-1")
    failure = task("t-fail", failure_id="fail-x")
    entry = ledger.assign(
        [*seeds("a", 12), failure], SplitConfig(salt="another"), run_id="run-2", follows={"fail-x": "a0"}
    )
    assert entry.as_metadata() == {
        "split_plan": 2,
        "split_epoch": 0,
        "split_plan_id": entry.state.plan_id,
        "new_roots": 3,  # a10, a11 and the failure
        "followed_roots": 1,
        "ledger_roots": 13,
    }
    # The notes are warnings; a root that took another's side is news, not a problem.
    assert entry.log_lines() == [
        (logging.WARNING, f"split: {entry.notes[0]}"),
        (logging.INFO, "split: failure root fail-x near-copies a task of a0: it takes its side"),
    ]
    assert len(entry.notes) == 1 and "resplit" in entry.notes[0]


def test_a_resplit_is_a_new_epoch_keeps_trained_roots_in_train_and_history(tmp_path, state_store):
    ledger = SplitLedger(tmp_path, state_store)
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


# Assigns a night's roots `rounds` times, each night adding shared roots and roots of its own, once the parent says
# go; prints the new roots of each plan it made. argv: folder, database URL ("" for files), name, rounds.
ASSIGNER = """
import json, sys
from pathlib import Path
from core.state import StateStore
from curation.split_ledger import SplitLedger
from tests.curation.test_split_ledger import CONFIG
from tests.curation.test_splits import seeds
folder, url, name, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
ledger = SplitLedger(Path(folder), StateStore(url))
print("ready", flush=True)
sys.stdin.readline()
made = []
for night in range(rounds):
    tasks = [*seeds("shared", 6 * (night + 1)), *seeds(name, 4 * (night + 1))]
    entry = ledger.assign(tasks, CONFIG, run_id=f"{name}-{night}")
    if entry.new_roots:
        made.append({"run_id": f"{name}-{night}", "seq": entry.state.seq, "new_roots": entry.new_roots})
print(json.dumps(made))
"""


def test_two_processes_assigning_at_once_give_each_root_one_side_and_lose_no_plan(tmp_path, state_store):
    # Both plan the same shared roots night after night, released together: without the run-level lock they read
    # the same ledger and both write plan n (files: one overwrites the other; PostgreSQL: a duplicate key).
    rounds = 8
    scripts = [[ASSIGNER, str(tmp_path), state_store.database_url, name, str(rounds)] for name in ("left", "right")]
    made = [plan for out in released_together(scripts) for plan in json.loads(out)]

    ledger = SplitLedger(tmp_path, state_store)
    rows, plans = ledger.rows(), ledger.plans()
    planned = [*seeds("shared", 6 * rounds), *seeds("left", 4 * rounds), *seeds("right", 4 * rounds)]
    expected_roots = {t["task_id"] for t in planned}  # a seed is its own root
    assert rows["root"].is_unique and set(rows["root"]) == expected_roots  # each root once: one side, for good
    # Every plan a process made is in the ledger under the number it was given, with exactly its roots.
    assert sorted(p["seq"] for p in plans) == list(range(1, len(plans) + 1)) == sorted(m["seq"] for m in made)
    by_seq = {p["seq"]: p for p in plans}
    for plan in made:
        assert by_seq[plan["seq"]]["run_id"] == plan["run_id"]
        assert (
            by_seq[plan["seq"]]["new_roots"] == plan["new_roots"] == sorted(rows[rows["seq"] == plan["seq"]]["root"])
        )


# Assigns once more with the ledger's commit write replaced by SIGKILL: files die after the plan's record and before
# the ledger; PostgreSQL after inserting the plan's record, inside the transaction, before its rows.
KILLED = """
import os, signal, sys
from pathlib import Path
import psycopg2.extras
import curation.split_ledger
from core.state import StateStore
from curation.split_ledger import SplitLedger
from tests.curation.test_split_ledger import CONFIG
from tests.curation.test_splits import seeds

def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

curation.split_ledger.write_table = psycopg2.extras.execute_values = die
SplitLedger(Path(sys.argv[1]), StateStore(sys.argv[2])).assign(seeds("a", 14), CONFIG, run_id="killed")
"""


def test_a_run_killed_while_writing_a_plan_leaves_the_split_before_it(tmp_path, state_store):
    ledger = SplitLedger(tmp_path, state_store)
    before = ledger.assign(seeds("a", 10), CONFIG, run_id="run-1").state
    killed = subprocess.run(
        [sys.executable, "-c", KILLED, str(tmp_path), state_store.database_url], cwd=REPO, capture_output=True
    )
    assert killed.returncode == -9, killed.stderr.decode()
    assert ledger.state() == before and [p["run_id"] for p in ledger.plans()] == ["run-1"]
    # The next run plans as if the killed one never started (its plan number is free again).
    after = ledger.assign(seeds("a", 12), CONFIG, run_id="run-2")
    assert after.state.seq == 2 and after.new_roots == ["a10", "a11"]
    assert [p["run_id"] for p in ledger.plans()] == ["run-1", "run-2"]
