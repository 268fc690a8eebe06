"""Which production-failure roots near-copy another root's task, and so must take its side of the split."""

from curation.curate import NearCopies, near_copy_roots
from curation.dedup import MinHashConfig

CONFIG = MinHashConfig()
QUESTION = "Noah rides his bike to work for each of his {n} workdays. His work is 20 miles away. How far does he ride?"


def task(task_id, text, seed_id=None, failure_id=None):
    lineage = {"seed_id": seed_id, "failure_id": failure_id}
    return {"task_id": task_id, "prompt": [{"role": "user", "content": text}], "lineage": lineage}


def test_a_failure_that_near_copies_a_seed_follows_the_seed():
    tasks = [
        task("s", QUESTION.format(n=5), seed_id="seed-1"),
        task("v", QUESTION.format(n=6), seed_id="seed-1"),  # the seed's variant
        task("f", QUESTION.format(n=7), failure_id="failure-1"),  # a user asking the same with other numbers
        task("g", "Write a SQL query that lists every customer in Paris.", failure_id="failure-2"),  # unrelated
    ]
    assert near_copy_roots(tasks, CONFIG).follows == {"failure-1": "seed-1"}


def test_failures_that_near_copy_each_other_follow_one_leader_and_a_known_root_leads():
    tasks = [task(f"f{n}", QUESTION.format(n=n), failure_id=f"failure-{n}") for n in (3, 4, 5)]
    assert near_copy_roots(tasks, CONFIG).follows == {"failure-4": "failure-3", "failure-5": "failure-3"}
    # A root that has a side already leads, and never follows.
    assert near_copy_roots(tasks, CONFIG, known={"failure-5": "eval"}).follows == {
        "failure-3": "failure-5",
        "failure-4": "failure-5",
    }


def test_seeds_never_follow():
    tasks = [task("a", QUESTION.format(n=5), seed_id="seed-a"), task("b", QUESTION.format(n=6), seed_id="seed-b")]
    assert near_copy_roots(tasks, CONFIG) == NearCopies()


def test_a_failure_bridging_both_sides_is_torn():
    # Night 1 put a seed in train and a failure (not close enough to the seed to follow it) in eval; night 2's
    # failure near-copies both: on either side it would sit beside a near-copy on the other.
    tasks = [
        task("s", QUESTION.format(n=5), seed_id="seed-1"),
        task("f", QUESTION.format(n=7), failure_id="failure-new"),
        task("e", QUESTION.format(n=8), failure_id="failure-old"),
    ]
    found = near_copy_roots(tasks, CONFIG, known={"seed-1": "train", "failure-old": "eval"})
    assert found.torn == {"failure-new"} and found.follows == {}
