"""Which audit items a calibration run judges: per family, both human verdicts represented, in id order."""

import pytest

from judge.calibration import AuditItem, calibration_sample


def item(item_id: str, family: str, accept: bool) -> AuditItem:
    return AuditItem(item_id, family, ({"role": "user", "content": item_id},), None, accept, "")


# Two families; sql has 3 accepts and 3 rejects, json 2 accepts and no reject.
AUDIT = [
    *(item(f"s{i}", "sql", i % 2 == 0) for i in range(6)),  # s0, s2, s4 accepted; s1, s3, s5 rejected
    item("j1", "json", True),
    item("j0", "json", True),
]


@pytest.mark.parametrize(
    ("per_family", "ids"),
    [
        # No limit: every item, in the audit set's own order.
        (None, ["s0", "s1", "s2", "s3", "s4", "s5", "j1", "j0"]),
        # 2 per family: one accept and one reject of sql (the first by id); json has no reject to take.
        (2, ["j0", "s0", "s1"]),
        # 4 per family: two of each verdict.
        (4, ["j0", "j1", "s0", "s1", "s2", "s3"]),
        # 1 per family still takes one of each verdict (at least one), so agreement can be measured both ways.
        (1, ["j0", "s0", "s1"]),
        # An odd limit rounds down per verdict: 5 // 2 = 2 of each.
        (5, ["j0", "j1", "s0", "s1", "s2", "s3"]),
        # More than there is: everything, sorted by id.
        (100, ["j0", "j1", "s0", "s1", "s2", "s3", "s4", "s5"]),
    ],
)
def test_calibration_sample(per_family, ids):
    assert [i.id for i in calibration_sample(AUDIT, per_family)] == ids


def test_calibration_sample_of_nothing_is_nothing():
    assert calibration_sample([], 4) == []
