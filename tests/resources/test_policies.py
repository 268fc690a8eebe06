"""Resources check their config before any work or LLM call, with the fix in the message."""

import pytest
from upath import UPath

from resources import CurationPolicy, FailureInbox, VariantPlan

FAMILIES = {"arithmetic", "sql"}


@pytest.mark.parametrize(
    ("plan", "message"),
    [
        # A family no seed has: probably a typo.
        (VariantPlan(families=["arithmetc"]), r"unknown families \['arithmetc'\] in the variant plan; seeds have"),
        # Nothing to make at all.
        (VariantPlan(per_seed=0, rewrites_per_kind=0), "makes no variants: set per_seed or rewrites_per_kind"),
        (VariantPlan(per_seed=0, rewrite_kinds=[]), "makes no variants"),
        # Negative counts.
        (VariantPlan(per_seed=-1), r"per_seed \(-1\) and rewrites_per_kind \(1\) must be >= 0"),
        # A rewrite kind that does not exist.
        (VariantPlan(rewrite_kinds=["summarize"]), r"unknown rewrite kinds \['summarize'\]; use paraphrase, harder"),
    ],
)
def test_bad_plans_fail_with_the_fix(plan, message):
    with pytest.raises(ValueError, match=message):
        plan.check(FAMILIES)


def test_a_good_plan_passes():
    VariantPlan(per_seed=2, families=["sql"], rewrite_kinds=["harder"]).check(FAMILIES)


@pytest.mark.parametrize(
    ("url", "storage"),
    [
        ("", None),  # in memory
        ("redis://10.0.0.5/2", {"type": "redis", "redis": {"host": "10.0.0.5", "port": 6379, "db": 2}}),
        (
            "redis://:s3cret@cache:6380",  # a password travels to the client, never into a table
            {"type": "redis", "redis": {"host": "cache", "port": 6380, "db": 0, "password": "s3cret"}},
        ),
    ],
)
def test_the_lsh_storage_comes_from_a_redis_url(url, storage):
    assert CurationPolicy(lsh_redis_url=url).lsh_storage() == storage


def test_a_bad_redis_url_names_the_expected_form():
    with pytest.raises(ValueError, match="redis://host:6379/0"):
        CurationPolicy(lsh_redis_url="http://cache:6379").lsh_storage()


def test_the_inbox_leaves_a_log_that_changed_since_it_was_read(tmp_path):
    (tmp_path / "a.jsonl").write_text("{}\n")
    inbox = FailureInbox(path=str(tmp_path))
    read = inbox.stamp("a.jsonl")
    with open(tmp_path / "a.jsonl", "a") as handle:  # lines appended after the run read the file
        handle.write("{}\n")
    assert inbox.retire("a.jsonl", read, "run-1") is None  # left for the run its new stamp gets
    assert (tmp_path / "a.jsonl").exists()
    assert inbox.retire("a.jsonl", inbox.stamp("a.jsonl"), "run-2") == "deleted"
    assert inbox.files() == []


def test_the_inbox_moves_a_log_to_a_quarantine_on_another_file_system(tmp_path):
    (tmp_path / "a.jsonl").write_text("raw\n")
    inbox = FailureInbox(path=str(tmp_path), quarantine="memory://quarantine")
    assert inbox.retire("a.jsonl", inbox.stamp("a.jsonl"), "run-1") == "moved to memory://quarantine/run-1/a.jsonl"
    assert UPath("memory://quarantine/run-1/a.jsonl").read_text() == "raw\n"
    assert not (tmp_path / "a.jsonl").exists()
