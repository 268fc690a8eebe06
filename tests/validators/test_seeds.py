"""Seed files: every problem located as `path:line: what (pointer) - fix`, good rows flow, bad rows are kept."""

import json
import textwrap
from pathlib import Path

import pytest

from tests.paths import SEEDS
from validators.registry import REGISTRY, VerifyContext
from validators.seeds import load_seeds

GOOD = {
    "prompt": [{"role": "user", "content": "Tom has 2 apples and buys 3 more. How many apples does he have?"}],
    "verifier": {"name": "numeric_answer", "params": {"answer": 5}},
    "reference": "2 + 3 = 5\n#### 5",
}


def variant(n: int, **changes) -> dict:
    """A distinct valid seed (different numbers), with optional changes."""
    record = json.loads(json.dumps(GOOD).replace("buys 3", f"buys {n}").replace(": 5", f": {2 + n}"))
    record["reference"] = f"2 + {n} = {2 + n}\n#### {2 + n}"
    record.update(changes)
    return record


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / "seeds" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def jsonl(*records) -> str:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records)


def problems_of(tmp_path: Path) -> list[str]:
    seeds = load_seeds([tmp_path / "seeds"], root=tmp_path, context=VerifyContext(seeds_dir=tmp_path / "seeds"))
    return [str(p) for p in seeds.problems]


def test_bundled_seed_sets_are_valid():
    seeds = load_seeds([SEEDS], root=SEEDS.parent, context=VerifyContext(seeds_dir=SEEDS))
    assert [str(p) for p in seeds.problems] == []
    per_family = {}
    for task in seeds.tasks:
        per_family[task["family"]] = per_family.get(task["family"], 0) + 1
    # At least five families with 20+ seeds each, every seed with a reference.
    assert {f for f, n in per_family.items() if n >= 20} >= {
        "arithmetic",
        "json_extraction",
        "sql",
        "python_function",
        "tool_call",
    }
    assert all(task["reference"] for task in seeds.tasks)


def test_derived_fields_are_filled(tmp_path):
    write(tmp_path, "arithmetic/a.jsonl", jsonl(variant(1, prompt="How much is 2 + 1?")))
    seeds = load_seeds([tmp_path / "seeds"], root=tmp_path)
    [task] = seeds.tasks
    assert task["family"] == "arithmetic"  # from the folder
    assert task["prompt"] == [{"role": "user", "content": "How much is 2 + 1?"}]  # string shorthand
    assert task["verifier"]["version"] == REGISTRY.get("numeric_answer").version  # latest registered
    assert task["lineage"] == {
        "seed_id": task["task_id"],
        "parent_id": None,
        "generator": None,
        "source": "seed",
        "failure_id": None,
    }
    assert task["origin"] == "seeds/arithmetic/a.jsonl:1"


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        # Bad JSON on line 7: the other lines still load; the message gives the column.
        (
            {"arithmetic/a.jsonl": jsonl(*(variant(n) for n in range(1, 7)), '{"prompt": "x" "verifier": {}}')},
            [
                "seeds/arithmetic/a.jsonl:7: invalid JSON: Expecting ',' delimiter at column 16 (/)"
                " - fix the JSON syntax; a .jsonl file holds one complete JSON object per line"
            ],
        ),
        # A missing field.
        (
            {"arithmetic/a.jsonl": jsonl({"prompt": "2+2?", "reference": "#### 4"})},
            ["seeds/arithmetic/a.jsonl:1: missing field 'verifier' (/verifier) - add the field"],
        ),
        # No reference, or a null one: the check that the verifier can be passed would never run.
        (
            {
                "arithmetic/a.jsonl": jsonl(
                    {"prompt": "2+2?", "verifier": {"name": "numeric_answer", "params": {"answer": 4}}},
                    variant(2, reference=None),
                )
            },
            [
                f"seeds/arithmetic/a.jsonl:{line}: no reference: without a known-good completion, nothing shows that"
                " the verifier can be passed (/reference) - add `reference`: an answer that passes this seed's"
                " verifier, as the model should write it"
                for line in (1, 2)
            ],
        ),
        # A wrong type.
        (
            {"arithmetic/a.jsonl": jsonl(variant(1), variant(2, difficulty="hard"))},
            [
                "seeds/arithmetic/a.jsonl:2: expected ['integer', 'null'], got str \"hard\" (/difficulty)"
                " - change the value to the expected type"
            ],
        ),
        # The same task in two files names both places.
        (
            {"arithmetic/a.jsonl": jsonl(variant(1)), "arithmetic/b.jsonl": jsonl(variant(2), variant(1))},
            [
                "seeds/arithmetic/b.jsonl:2: duplicate task_id 7f4246a9ff354754: same prompt and verifier as"
                " seeds/arithmetic/a.jsonl:1 (/) - remove one of the two records"
            ],
        ),
        # A family that contradicts the folder.
        (
            {"arithmetic/a.jsonl": jsonl(variant(1, family="sql"))},
            [
                "seeds/arithmetic/a.jsonl:1: family 'sql' does not match its folder 'arithmetic' (/family)"
                " - move the file to seeds/sql/ or drop the family field"
            ],
        ),
        # A task_id written by hand that is not the content hash.
        (
            {"arithmetic/a.jsonl": jsonl(variant(1, task_id="0123456789abcdef"))},
            [
                "seeds/arithmetic/a.jsonl:1: task_id 0123456789abcdef is not the content hash of prompt + verifier"
                " (7f4246a9ff354754) (/task_id) - remove task_id from the seed file (it is derived)"
            ],
        ),
        # Params break the verifier's schema: caught at load time.
        (
            {"arithmetic/a.jsonl": jsonl(variant(1, verifier={"name": "numeric_answer", "params": {"answr": 3}}))},
            [
                "seeds/arithmetic/a.jsonl:1: 'answer' is a required property (/verifier/params)"
                " - fix the verifier params as the message says",
                "seeds/arithmetic/a.jsonl:1: Additional properties are not allowed ('answr' was unexpected)"
                " (/verifier/params) - fix the verifier params as the message says",
            ],
        ),
        # Not even a JSON object.
        (
            {"arithmetic/a.jsonl": jsonl("[1, 2]")},
            ["seeds/arithmetic/a.jsonl:1: a seed record must be an object (/) - write it as a mapping"],
        ),
        # YAML: the line is the offending field's, not the record's.
        (
            {
                "arithmetic/a.yaml": textwrap.dedent(
                    """\
                    - prompt: How much is 2 + 2?
                      verifier: {name: numeric_answer, params: {answer: 4}}
                      reference: "#### 4"
                      tags: [easy, easy]
                    """
                )
            },
            ["seeds/arithmetic/a.yaml:4: ['easy', 'easy'] has non-unique elements (/tags) - remove the repeated item"],
        ),
        # YAML syntax errors carry the parser's line.
        (
            {"arithmetic/a.yaml": "- prompt: ok\n  verifier: {name: numeric_answer\n  reference: x\n"},
            ["seeds/arithmetic/a.yaml:3: invalid YAML: expected ',' or '}', but got ':' (/) - fix the YAML syntax"],
        ),
        # A YAML document that is not a list.
        (
            {"arithmetic/a.yaml": "prompt: hi\n"},
            [
                "seeds/arithmetic/a.yaml:1: a YAML seed file must be a list of records (/)"
                " - start each record with '- '"
            ],
        ),
        # Bytes that are not UTF-8, with the line they are on.
        (
            {"arithmetic/a.jsonl": jsonl(variant(1)) + "\udcff\n"},
            ["seeds/arithmetic/a.jsonl:2: not UTF-8 text (invalid start byte) (/) - save the file as UTF-8"],
        ),
    ],
)
def test_broken_seed_files(tmp_path, files, expected):
    for name, text in files.items():
        path = tmp_path / "seeds" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode("utf-8", errors="surrogateescape"))
    assert problems_of(tmp_path) == expected


@pytest.mark.parametrize(
    ("record", "code"),
    [
        # A reference that fails its own verifier is a wrong gold label.
        (variant(1, reference="2 + 1 = 4\n#### 4"), "reference_failed"),
        # Unknown verifiers list what is registered.
        (variant(1, verifier={"name": "telepathy", "params": {}}), "unknown_verifier"),
    ],
)
def test_rejects_keep_the_row_and_the_reason(tmp_path, record, code):
    write(tmp_path, "arithmetic/a.jsonl", jsonl(variant(2), record))
    seeds = load_seeds([tmp_path / "seeds"], root=tmp_path)
    assert len(seeds.tasks) == 1
    [reject] = seeds.rejects
    assert reject["origin"] == "seeds/arithmetic/a.jsonl:2"
    assert reject["reason_code"] == code
    assert json.loads(reject["record"]) == record
    if code == "unknown_verifier":
        assert "registered: " in reject["reason"] and "numeric_answer" in reject["reason"]


def test_missing_path_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such seed file or folder"):
        load_seeds([tmp_path / "nope"])


def test_audit_folder_is_not_seeds(tmp_path):
    # seeds/audit/ holds labelled judge/reward audit data, a different record type.
    write(tmp_path, "audit/labels.jsonl", jsonl({"not": "a task"}))
    write(tmp_path, "arithmetic/a.jsonl", jsonl(variant(1)))
    assert len(load_seeds([tmp_path / "seeds"], root=tmp_path).tasks) == 1
