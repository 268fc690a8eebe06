"""Splits by seed lineage: variants follow their seed, sides are stable, strata get both sides, leaks are found."""

import math
from collections import Counter

import pytest

from core.tables import frame_from_records, from_arrow, to_arrow
from curation.splits import (
    EVAL,
    TRAIN,
    LineageError,
    SplitConfig,
    SplitConfigError,
    assign_splits,
    failure_count,
    failure_tasks,
    hash_sample,
    lineage_leaks,
    plan_splits,
    root_hash,
    task_roots,
)


def task(task_id, family="sql", seed_id=None, failure_id=None, difficulty=None, source=None):
    """A task record with just what splitting reads (a seed is its own root unless told otherwise)."""
    if seed_id is None and failure_id is None:
        seed_id = task_id
    return {
        "task_id": task_id,
        "family": family,
        "difficulty": difficulty,
        "lineage": {
            "seed_id": seed_id,
            "parent_id": None if seed_id == task_id else seed_id,
            "generator": None,
            "source": source or ("seed" if seed_id == task_id else "generated"),
            "failure_id": failure_id,
        },
    }


def seeds(prefix, n, family="sql", difficulty=None):
    return [task(f"{prefix}{i}", family, difficulty=difficulty) for i in range(n)]


BULK_ONLY = SplitConfig(eval_fraction=0.2, salt="t", min_eval_per_stratum=0, min_train_per_stratum=0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        # Zero holds nothing out: no evaluation possible.
        ({"eval_fraction": 0}, r"strictly between 0 and 1, got 0; e\.g\. 0\.2"),
        # One trains on nothing.
        ({"eval_fraction": 1.0}, r"got 1\.0"),
        # A percentage instead of a fraction.
        ({"eval_fraction": 20}, r"got 20"),
        # A bool is an int in Python but never a meant fraction.
        ({"eval_fraction": True}, r"got True"),
        # Text from a config file that was never parsed.
        ({"eval_fraction": "0.2"}, r"got '0\.2'"),
        # An empty salt would make every project's split the same.
        ({"salt": ""}, r"salt must be a non-empty string"),
        # A bare string would be read as one field per character.
        ({"stratify_by": "family"}, r"write \('family',\)"),
        # Nested columns make no strata.
        ({"stratify_by": ("family", "prompt")}, r"cannot use \['prompt'\]"),
        # task_id puts every root in its own stratum.
        ({"stratify_by": ("task_id",)}, r"cannot use \['task_id'\]"),
        # A repeated field is a typo.
        ({"stratify_by": ("family", "family")}, r"repeats a field"),
        # The failures' share is checked the same way.
        ({"failure_eval_fraction": 1}, r"failure_eval_fraction must be a number strictly between 0 and 1, got 1"),
        # Negative minimums mean nothing.
        ({"min_eval_per_stratum": -1}, r"min_eval_per_stratum must be an integer >= 0, got -1"),
        # Minimums count roots.
        ({"min_train_per_stratum": 1.5}, r"min_train_per_stratum must be an integer >= 0, got 1\.5"),
    ],
)
def test_config_checks_itself(kwargs, message):
    with pytest.raises(SplitConfigError, match=message):
        SplitConfig(**kwargs)


def test_config_accepts_a_list_of_fields_as_a_tuple():
    # YAML/JSON config gives lists; the frozen config stores a hashable tuple.
    assert SplitConfig(stratify_by=["family", "difficulty"]).stratify_by == ("family", "difficulty")


@pytest.mark.parametrize(
    ("tasks", "expected"),
    [
        # A seed is its own root.
        ([task("s1")], ["s1"]),
        # A variant's root is its seed, whatever its parent.
        ([task("v1", seed_id="s1")], ["s1"]),
        # A production failure traced to a seed belongs to that seed's lineage.
        ([task("p1", seed_id="s1", failure_id="f1", source="production_failure")], ["s1"]),
        # A failure no seed explains is rooted at its failure_id.
        ([task("p1", failure_id="f1", source="production_failure")], ["f1"]),
        # Tasks sharing a failure_id stay together even when only one of them names the seed.
        (
            [task("p1", failure_id="f1"), task("p2", seed_id="s1", failure_id="f1"), task("v2", seed_id="s1")],
            ["s1", "s1", "s1"],
        ),
        # Two seeds linked by one failure: the group is named by the smaller seed id.
        (
            [task("a", seed_id="s2", failure_id="f1"), task("b", seed_id="s1", failure_id="f1")],
            ["s1", "s1"],
        ),
    ],
)
def test_task_roots(tasks, expected):
    assert task_roots(tasks) == expected


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        # Neither a seed nor a failure to follow: no side is safe.
        ({"task_id": "x", "lineage": {"seed_id": None, "failure_id": None}}, r"task x \(row 1\) has neither"),
        # Lineage as JSON text: the table was read without decoding.
        ({"task_id": "x", "lineage": '{"seed_id": "s"}'}, r"not a mapping; read tables with"),
    ],
)
def test_tasks_without_a_root_are_refused(bad, message):
    with pytest.raises(LineageError, match=message):
        assign_splits([task("s0"), bad], SplitConfig())


def lineage_corpus():
    """90 seeds in 3 families, 3 variants each, failures traced to seeds and failures of their own."""
    tasks = []
    for family in ("sql", "arithmetic", "tool_call"):
        for i in range(30):
            seed_id = f"{family}-s{i}"
            tasks.append(task(seed_id, family, difficulty=1 + i % 3))
            tasks += [task(f"{seed_id}-v{k}", family, seed_id=seed_id, difficulty=2) for k in range(3)]
            if i % 5 == 0:
                tasks.append(task(f"{seed_id}-p", family, seed_id=seed_id, failure_id=f"{seed_id}-f"))
        for i in range(4):
            failure = f"{family}-f{i}"
            tasks += [task(f"{failure}-t{k}", family, failure_id=failure, source="production_failure") for k in (0, 1)]
    return tasks


@pytest.mark.parametrize("stratify_by", [("family",), ("family", "difficulty")])
def test_every_task_lands_on_its_roots_side(stratify_by):
    tasks = lineage_corpus()
    plan = plan_splits(tasks, SplitConfig(stratify_by=stratify_by))
    by_id = dict(zip((t["task_id"] for t in tasks), plan.splits, strict=True))
    for t, side in zip(tasks, plan.splits, strict=True):
        root = t["lineage"]["seed_id"] or t["lineage"]["failure_id"]
        # Seeds exist as tasks; failure roots have no task of their own, so compare with the plan's root side.
        assert side == by_id.get(root, plan.sides[root])
    train = [t for t, s in zip(tasks, plan.splits, strict=True) if s == TRAIN]
    eval_ = [t for t, s in zip(tasks, plan.splits, strict=True) if s == EVAL]
    assert lineage_leaks(train, eval_) == []


def test_bulk_rule_is_the_hash_and_never_moves_a_root():
    old = [r for f in ("sql", "arithmetic", "tool_call") for r in seeds(f"{f}-", 30, f)]
    new = [r for f in ("sql", "arithmetic", "tool_call", "json") for r in seeds(f"new-{f}-", 25, f)]
    before = plan_splits(old, BULK_ONLY).sides
    after = plan_splits(old + new, BULK_ONLY).sides
    assert len(new) == 100
    # A root's side is its own hash against the fraction, so newcomers cannot move it.
    assert all(side == (EVAL if root_hash(root, "t") < 0.2 else TRAIN) for root, side in after.items())
    assert {root: after[root] for root in before} == before


def test_same_salt_same_split_anywhere():
    # Order of the input and the machine do not matter: only the root and the salt.
    tasks = lineage_corpus()
    config = SplitConfig(stratify_by=("family", "difficulty"))
    forward = dict(zip((t["task_id"] for t in tasks), assign_splits(tasks, config), strict=True))
    backward = dict(zip((t["task_id"] for t in tasks[::-1]), assign_splits(tasks[::-1], config), strict=True))
    assert forward == backward


def move_stats(sizes, added, strata=500, previous=False):
    """Per stratum size: share of strata where an existing root moved, and how, after adding roots."""
    config = SplitConfig(eval_fraction=0.2, salt="moves")
    old = [r for n in sizes for s in range(strata) for r in seeds(f"n{n}s{s}r", n, f"n{n}s{s}")]
    new = [r for n in sizes for s in range(strata) for r in seeds(f"n{n}s{s}x", added, f"n{n}s{s}")]
    before = plan_splits(old, config)
    after = plan_splits(old + new, config, before.sides if previous else None).sides
    stats = {}
    for n in sizes:
        moves = Counter()
        for s in range(strata):
            moved = [r for r in (f"n{n}s{s}r{i}" for i in range(n)) if before.sides[r] != after[r]]
            moves["strata_moved"] += bool(moved)
            moves["max_per_stratum"] = max(moves["max_per_stratum"], len(moved))
            moves["train_to_eval"] += sum(before.sides[r] == TRAIN for r in moved)
            # Only strata where the guarantee rule placed a root (or that just reached its threshold) can move.
            if moved and n >= 2:
                assert any(f"n{n}s{s}r{i}" in before.guaranteed for i in range(n))
        stats[n] = {k: v / strata if k != "max_per_stratum" else v for k, v in moves.items()}
    return stats


def test_guarantee_rule_moves_are_rare_and_bounded():
    # The table in curation/splits.py's docstring (there with 2,000 strata per size); eval_fraction 0.2.
    grown = move_stats((2, 5, 10, 20, 30), added=5)
    new_stratum = move_stats((1,), added=1)
    rates = {n: round(s["strata_moved"], 3) for n, s in (grown | new_stratum).items()}
    # The guarantee fires with probability 0.8 ** n, so moves fade with stratum size.
    assert 0.5 < rates[2] < 0.75
    assert 0.15 < rates[5] < 0.35
    assert rates[10] < 0.12
    assert rates[20] < 0.03
    assert rates[30] < 0.01
    # At most min_eval_per_stratum roots move per stratum.
    assert max(s["max_per_stratum"] for s in grown.values()) == 1
    # Train -> eval (the harmful way) needs every root hashed into eval (0.2 ** n) ...
    assert grown[2]["train_to_eval"] < 0.08
    assert grown[5]["train_to_eval"] == grown[10]["train_to_eval"] == 0
    # ... or a stratum that grows from 1 root to 2 and now needs an eval root (0.8 * 0.8 / 2).
    assert 0.25 < new_stratum[1]["train_to_eval"] < 0.40


@pytest.mark.parametrize(("sizes", "added"), [((1, 2, 5), 1), ((2, 5, 10), 5)])
def test_sticky_mode_never_moves_a_root(sizes, added):
    # With the previous sides passed in, the guarantee rule only places new roots.
    for n, stats in move_stats(sizes, added, strata=300, previous=True).items():
        assert stats["strata_moved"] == 0, n


def stratified_corpus():
    """Families of the bundled seed sets' sizes plus tiny ones, with difficulties 1-5 and some unknown."""
    tasks = []
    for family, n in (("arithmetic", 32), ("sql", 31), ("tool_call", 27), ("pair", 2), ("trio", 3), ("one", 1)):
        difficulties = [None if i % 7 == 6 else 1 + i % 5 for i in range(n)]
        tasks += [task(f"{family}-{i}", family, difficulty=d) for i, d in enumerate(difficulties)]
    return tasks


@pytest.mark.parametrize(
    "config",
    [
        # Defaults: the guarantee fills strata the hash left one-sided.
        SplitConfig(salt="a"),
        SplitConfig(salt="b", stratify_by=("family", "difficulty")),
        SplitConfig(salt="c", stratify_by=("family", "difficulty")),
        # Almost nothing hashes into eval: promotion does all the work.
        SplitConfig(eval_fraction=0.01, stratify_by=("family", "difficulty")),
        # Almost everything hashes into eval: demotion keeps one train root.
        SplitConfig(eval_fraction=0.99, stratify_by=("family", "difficulty")),
        # Two eval roots wanted where a stratum has room for them.
        SplitConfig(salt="d", min_eval_per_stratum=2),
    ],
)
def test_every_stratum_gets_both_sides(config):
    tasks = stratified_corpus()
    plan = plan_splits(tasks, config)
    # Recounted from the sides themselves (seeds only here: one task per root), not read from the plan's summary.
    counts: dict[tuple, Counter] = {}
    for t, side in zip(tasks, plan.splits, strict=True):
        counts.setdefault(tuple(t[f] for f in config.stratify_by), Counter())[side] += 1
    for stratum, sides in counts.items():
        if sides.total() >= config.min_eval_per_stratum + config.min_train_per_stratum:
            assert sides[EVAL] >= config.min_eval_per_stratum, stratum
            assert sides[TRAIN] >= config.min_train_per_stratum, stratum
    # The summary reports those counts.
    summarized = {tuple(row[f] for f in config.stratify_by): row for row in plan.summary}
    assert summarized.keys() == counts.keys()
    for stratum, row in summarized.items():
        n_eval, n_train = counts[stratum][EVAL], counts[stratum][TRAIN]
        assert (row["roots"], row["eval_roots"], row["train_roots"]) == (n_eval + n_train, n_eval, n_train)
        assert (row["eval_tasks"], row["train_tasks"]) == (n_eval, n_train)


def test_summary_counts_tasks_and_roots_per_stratum():
    tasks = [task("s1", "sql", difficulty=2), task("v1", "sql", seed_id="s1", difficulty=3)]
    tasks += [task("s2", "sql", difficulty=2), task("a1", "arithmetic")]
    plan = plan_splits(tasks, SplitConfig(stratify_by=("family", "difficulty")))
    rows = {(r["family"], r["difficulty"]): r for r in plan.summary}
    # The variant counts in its seed's stratum (difficulty 2), not its own difficulty.
    assert set(rows) == {("arithmetic", None), ("sql", 2)}
    assert rows[("sql", 2)]["roots"] == 2
    assert rows[("sql", 2)]["train_tasks"] + rows[("sql", 2)]["eval_tasks"] == 3
    assert rows[("sql", 2)]["train_roots"] == rows[("sql", 2)]["eval_roots"] == 1


def test_eval_fraction_on_10000_roots():
    # Each root is a Bernoulli(0.2) draw by hash: sd sqrt(0.2 * 0.8 / n) is 0.004 over 10,000 roots and 0.009
    # per family of 2,000. 4 sd (0.016 and 0.036) is missed by chance with probability 6e-5 per salt, and the
    # guarantee rule never fires in strata this large.
    families = ("arithmetic", "sql", "tool_call", "json_extraction", "python_function")
    tasks = [t for f in families for t in seeds(f"{f}-", 2000, f)]
    plan = plan_splits(tasks, SplitConfig(eval_fraction=0.2, salt="fraction"))
    assert abs(plan.splits.count(EVAL) / len(tasks) - 0.2) < 4 * math.sqrt(0.2 * 0.8 / 10_000)
    for row in plan.summary:
        assert abs(row["eval_roots"] / row["roots"] - 0.2) < 4 * math.sqrt(0.2 * 0.8 / 2000), row
    assert plan.guaranteed == {}


def failures(prefix, n, family="sql"):
    """Tasks made from production failures no seed explains: each is its own lineage root."""
    return [task(f"{prefix}{i}", family, failure_id=f"{prefix}{i}", source="production_failure") for i in range(n)]


def test_production_failures_are_held_out_at_their_own_fraction_in_their_own_stratum():
    # 2,000 failure roots at 0.5 (sd 0.011) beside 2,000 seed roots at 0.2 (sd 0.009): 4 sd each.
    tasks = [*seeds("s", 2000), *failures("f", 2000)]
    plan = plan_splits(tasks, SplitConfig(eval_fraction=0.2, failure_eval_fraction=0.5, salt="failures"))
    rows = {row["source"]: row for row in plan.summary}
    assert set(rows) == {"seed", "failure"} and rows["failure"]["family"] is None  # one stratum for all failures
    assert abs(rows["seed"]["eval_roots"] / 2000 - 0.2) < 4 * math.sqrt(0.2 * 0.8 / 2000)
    assert abs(rows["failure"]["eval_roots"] / 2000 - 0.5) < 4 * math.sqrt(0.5 * 0.5 / 2000)
    # The bulk rule is still the hash, at the failures' fraction.
    for root, side in plan.sides.items():
        fraction = 0.5 if root.startswith("f") else 0.2
        assert side == (EVAL if root_hash(root, "failures") < fraction else TRAIN)


def test_the_gate_gets_a_held_out_failure_as_soon_as_there_are_two():
    # Two failures of different families, both hashing to train: the failure stratum still holds one out.
    config = SplitConfig(failure_eval_fraction=0.5, salt="t")
    both_train = [f"f{i}" for i in range(100) if root_hash(f"f{i}", "t") >= 0.5][:2]
    tasks = [
        *seeds("s", 10),
        task(both_train[0], "a", failure_id=both_train[0]),
        task(both_train[1], "b", failure_id=both_train[1]),
    ]
    plan = plan_splits(tasks, config)
    assert sorted(plan.sides[root] for root in both_train) == [EVAL, TRAIN]
    assert plan.guaranteed == {min(both_train, key=lambda root: root_hash(root, "t")): "promoted"}
    # A failure traced to a seed is that seed's lineage: it follows the seed, whatever its own id hashes to.
    traced = task("fx", "sql", seed_id="s3", failure_id="fx")
    assert plan_splits([*tasks, traced], config).sides["s3"] == plan.sides["s3"]
    assert "fx" not in plan_splits([*tasks, traced], config).sides


def test_salt_reshuffles():
    tasks = seeds("r", 1000)
    first = assign_splits(tasks, SplitConfig(salt="v1"))
    assert assign_splits(tasks, SplitConfig(salt="v1")) == first
    changed = sum(a != b for a, b in zip(first, assign_splits(tasks, SplitConfig(salt="v2")), strict=True))
    # Independent draws disagree with probability 2 * 0.2 * 0.8 = 0.32 (sd 0.015 over 1,000 roots).
    assert 0.25 < changed / len(tasks) < 0.39


def test_previous_sides_must_be_train_or_eval():
    with pytest.raises(SplitConfigError, match=r"'train' or 'eval'.*\('s1', 'test'\)"):
        plan_splits(seeds("s", 3), SplitConfig(), previous={"s1": "test"})


def test_dataframe_input_from_a_parquet_round_trip():
    # The pipeline hands DataFrames read from Parquet; difficulty comes back as whatever pandas made of it.
    tasks = lineage_corpus()
    frame = from_arrow(to_arrow(frame_from_records(tasks)))
    config = SplitConfig(stratify_by=("family", "difficulty"))
    assert assign_splits(frame, config) == assign_splits(tasks, config)


@pytest.mark.parametrize(
    ("train", "eval_", "expected"),
    [
        # Clean: different seeds on each side.
        ([task("s1"), task("v1", seed_id="s1")], [task("s2"), task("v2", seed_id="s2")], []),
        # Planted: a variant of an eval seed in train.
        (
            [task("s1"), task("v2", seed_id="s2")],
            [task("s2"), task("v3", seed_id="s2")],
            [
                {
                    "train_task_id": "v2",
                    "eval_task_id": "s2",
                    "shared_root": "s2",
                    "root_kind": "seed_id",
                    "eval_tasks_sharing": 2,
                }
            ],
        ),
        # Planted: two tasks from one production failure, one per side, with no seed to link them.
        (
            [task("p1", failure_id="f1")],
            [task("p2", failure_id="f1")],
            [
                {
                    "train_task_id": "p1",
                    "eval_task_id": "p2",
                    "shared_root": "f1",
                    "root_kind": "failure_id",
                    "eval_tasks_sharing": 1,
                }
            ],
        ),
        # A failure traced to a different seed on each side still leaks through its failure_id only.
        (
            [task("p1", seed_id="s1", failure_id="f1")],
            [task("p2", seed_id="s2", failure_id="f1")],
            [
                {
                    "train_task_id": "p1",
                    "eval_task_id": "p2",
                    "shared_root": "f1",
                    "root_kind": "failure_id",
                    "eval_tasks_sharing": 1,
                }
            ],
        ),
        # A seed id that equals some failure id is a different kind of root, not a leak.
        ([task("x", seed_id="same")], [task("y", failure_id="same")], []),
    ],
)
def test_lineage_leaks(train, eval_, expected):
    assert lineage_leaks(train, eval_) == expected


def test_a_failure_root_that_follows_another_takes_its_side_and_the_guarantee_rule_leaves_it():
    config = SplitConfig(salt="t", failure_eval_fraction=0.5)
    failures = [task(f"f{i}", failure_id=f"failure-{i}") for i in range(40)]
    tasks = [*seeds("s", 20), *failures]
    free = plan_splits(tasks, config)
    eval_seed = next(r for r, side in free.sides.items() if side == EVAL and r.startswith("s"))
    train_seed = next(r for r, side in free.sides.items() if side == TRAIN and r.startswith("s"))
    # Every failure follows a seed of the other side than its hash gave it.
    follows = {f"failure-{i}": train_seed if free.sides[f"failure-{i}"] == EVAL else eval_seed for i in range(40)}
    plan = plan_splits(tasks, config, follows=follows)
    assert all(plan.sides[root] == free.sides[leader] for root, leader in follows.items())
    assert plan.followed == follows and not set(plan.guaranteed) & set(follows)
    # A root with a side already keeps it, and a leader nobody knows leaves the hash in charge.
    kept = plan_splits(tasks, config, previous={"failure-0": free.sides["failure-0"]}, follows=follows)
    assert kept.sides["failure-0"] == free.sides["failure-0"] and "failure-0" not in kept.followed
    unknown = plan_splits(tasks, config, follows={"failure-1": "no-such-root"})
    assert unknown.sides["failure-1"] == free.sides["failure-1"] and not unknown.followed


def test_a_hash_sample_is_uniform_and_keeps_its_tasks_as_the_set_grows():
    tasks = [task(f"t{i}", family="sql" if i % 5 else "arithmetic") for i in range(2000)]
    chosen = hash_sample(tasks, 400, "gate")
    assert len(chosen) == 400 == len(set(chosen)) and chosen == sorted(chosen)
    # Uniform: each family in about its share (a fifth are arithmetic), nothing by position or difficulty.
    assert 60 <= sum(tasks[i]["family"] == "arithmetic" for i in chosen) <= 100
    assert 120 <= sum(i < 1000 for i in chosen) <= 280
    # Tasks added later take a place only by hashing lower: most of the first sample stays.
    grown = [*tasks, *(task(f"new{i}") for i in range(200))]
    kept = {tasks[i]["task_id"] for i in chosen} & {grown[i]["task_id"] for i in hash_sample(grown, 400, "gate")}
    assert len(kept) >= 330
    assert hash_sample(tasks, None, "gate") == list(range(2000)) and hash_sample(tasks, 0, "gate") == []


def test_a_plans_sides_as_tables_and_the_production_failures_among_them():
    # A seed with a variant (two tasks, one root), more seeds, and two production failures, one with a variant.
    tasks = [
        *seeds("s", 8),
        task("v", seed_id="s0"),
        task("f1", failure_id="failure-1"),
        task("f1v", failure_id="failure-1"),
        task("f2", failure_id="failure-2"),
    ]
    plan = plan_splits(tasks, SplitConfig(salt="t", failure_eval_fraction=0.5))
    frame = frame_from_records(tasks).set_axis(range(100, 100 + len(tasks)))  # a filtered table's labels
    parts = plan.side_tasks(frame)
    assert list(parts) == [TRAIN, EVAL]
    for side, part in parts.items():
        assert list(part["task_id"]) == [t["task_id"] for t, s in zip(tasks, plan.splits, strict=True) if s == side]
        assert list(part.index) == list(range(len(part)))  # numbered from 0
        assert plan.root_count(side) == sum(s == side for s in plan.sides.values())
    assert plan.root_count(TRAIN) + plan.root_count(EVAL) == len(tasks) - 2  # v and f1v share their roots
    failures = failure_tasks(frame)
    assert list(failures["task_id"]) == ["f1", "f1v", "f2"] and list(failures.index) == [0, 1, 2]
    assert failure_count(failures) == 2  # a failure's variants count once
    assert failure_tasks(frame.iloc[:8]).empty
    # An empty side (no eval task this night) has no failures, and keeps its columns for failure_eval.
    empty = failure_tasks(frame.iloc[:0])
    assert empty.empty and list(empty.columns) == list(frame.columns) and failure_count(empty) == 0
