"""Near-duplicate detection: config, normalisation, labels, datasketch compatibility, the persisted index, JSONL."""

from __future__ import annotations

import json
import multiprocessing
import zlib
from pathlib import Path

import numpy as np
import pytest
import redis
from datasketch import MinHash, MinHashLSH

from core.state import StateStore
from curation.dedup import (
    DedupConfigError,
    DedupIndex,
    DedupInputError,
    MinHashConfig,
    as_lean_minhash,
    compute_signatures,
    dedup_jsonl,
    label_duplicates,
    near_duplicate_pairs,
    normalize_text,
)
from curation.dedup import index as index_module
from curation.dedup.minhash import EMPTY_HASH, shingle_hashes, signatures_from_shingles
from tests.paths import GSM8K
from tests.services import redis_server

CONFIG = MinHashConfig()
BASE = "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May."


# -- config --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"shingle_size": 0}, "shingle_size must be an integer in 1..16, got 0"),  # no words per shingle
        ({"num_perm": 1}, "num_perm must be an integer in 2..1024, got 1"),  # too few permutations for LSH
        ({"threshold": 1.0}, "threshold must be in (0, 1), got 1.0"),  # 1.0 is exact dedup's job
        ({"threshold": 0}, "threshold must be in (0, 1), got 0"),  # everything would match
        ({"bands": 32}, "give both bands and rows or neither"),  # half an explicit layout
        ({"bands": 30, "rows": 4}, "30 * 4 = 120 != 128"),  # layout must use every permutation
        ({"bands": 1, "rows": 128}, "bands must be >= 2"),  # one band is not LSH
        ({"seed": -1}, "seed must be an integer in [0, 2**32)"),  # numpy's RandomState range
    ],
)
def test_config_rejects_impossible_values_with_numbers_and_fix(kwargs: dict, message: str) -> None:
    with pytest.raises(DedupConfigError, match=None) as error:
        MinHashConfig(**kwargs)
    assert message in str(error.value)
    assert " - " in str(error.value)  # every message ends with how to fix it


@pytest.mark.parametrize(
    ("config", "name"),
    [
        (MinHashConfig(), "w3_p128_b32r4_s1"),  # the measured default
        (MinHashConfig(threshold=0.8), "w3_p128_b16r8_s1"),  # a higher threshold derives longer bands
        (MinHashConfig(bands=64, rows=2), "w3_p128_b64r2_s1"),  # explicit layout
        (MinHashConfig(shingle_size=5, num_perm=64, seed=7), "w5_p64_b16r4_s7"),  # every parameter named
        (MinHashConfig(threshold=0.45), "w3_p128_b32r4_s1"),  # threshold alone keeps the index (not stored)
    ],
)
def test_config_name_names_every_stored_parameter(config: MinHashConfig, name: str) -> None:
    assert config.name == name == str(config)


# -- normalisation -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Hello,   World!", "hello world"),  # case, punctuation, repeated spaces
        ("Janet\u2019s ducks", "janet s ducks"),  # curly apostrophe is punctuation too
        ("\uff21\uff22\uff23 \u2460", "abc 1"),  # NFKC: full-width letters, circled digit
        ("tab\tand\nnewline", "tab and newline"),  # all whitespace collapses
        ("$2.50 <<9*2=18>>", "2 50 9 2 18"),  # symbols and calculator annotations become spaces
        ("snake_case", "snake case"),  # underscore counts as punctuation
        ("  ... !!! ", ""),  # nothing but punctuation: empty
        ("Ünïcödé ÉCOLE", "ünïcödé école"),  # non-ASCII letters kept, lowercased
        ("bad \udcff byte", "bad byte"),  # a surrogate-escaped byte is not a word character: dropped, no crash
    ],
)
def test_normalize_text(text: str, expected: str) -> None:
    assert normalize_text(text) == expected


def test_ascii_fast_path_matches_the_unicode_path() -> None:
    # The byte-table fast path must give exactly what NFKC + lower + regex give on ASCII input.
    text = "".join(chr(c) for c in range(128)) * 2
    from curation.dedup.minhash import _NON_WORD

    assert normalize_text(text) == " ".join(_NON_WORD.sub(" ", text.lower()).split())


# -- labels --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("other", "duplicate", "kind"),
    [
        (BASE, True, "exact"),  # identical
        (
            "  natalia SOLD clips to 48 of her friends in april and then she sold half as many clips in may ",
            True,
            "exact",
        ),  # case, spacing, punctuation
        (BASE.replace("April", "June"), True, "near"),  # one word changed
        ("Weng earns $12 an hour for babysitting. Yesterday, she did 50 minutes.", False, None),  # unrelated
        ("", False, None),  # empty: never a duplicate
        ("!!!", False, None),  # empty after normalisation
    ],
)
def test_label_second_row_against_first(other: str, duplicate: bool, kind: str | None) -> None:
    first, second = label_duplicates(["a", "b"], [BASE, other], None, CONFIG)
    assert first.is_duplicate is False and first.cluster_id == "a"
    assert second.is_duplicate is duplicate
    assert second.kind == kind
    assert second.duplicate_of == ("a" if duplicate else None)
    assert second.cluster_id == ("a" if duplicate else "b")


def test_empty_rows_are_not_duplicates_of_each_other() -> None:
    labels = label_duplicates([1, 2, 3], ["", "  ", "?"], None, CONFIG)
    assert [(x.is_duplicate, x.cluster_id) for x in labels] == [(False, "1"), (False, "2"), (False, "3")]


def test_huge_text_is_labelled_without_blowing_up() -> None:
    # One ~10 MB row: token hashing and permutations run in bounded chunks; a 1 MB copy with a tail is near.
    words = " ".join(f"w{i % 5000} x{i % 7919}" for i in range(800_000))
    assert len(words) > 9_000_000
    labels = label_duplicates(
        ["big", "mb", "mb copy", "small"], [words, words[:1_000_000], words[:1_000_000] + " tail", BASE], None, CONFIG
    )
    assert [x.is_duplicate for x in labels] == [False, False, True, False]
    assert labels[2].kind == "near" and labels[2].duplicate_of == "mb"


def test_near_duplicates_chain_into_one_cluster() -> None:
    # B is near A and C is near B: one cluster, kept row A (first by default priority).
    a = "the quick brown fox jumps over the lazy dog near the old river bank today"
    b = a.replace("today", "again")
    c = b.replace("quick", "slow")
    labels = label_duplicates(["a", "b", "c"], [a, b, c], None, CONFIG)
    assert {x.cluster_id for x in labels} == {"a"}
    assert [x.duplicate_of for x in labels] == [None, "a", "a"]


@pytest.mark.parametrize(
    ("priority", "kept"),
    [
        (None, "v1"),  # default: input order
        ([(1, 2, "v1"), (0, 0, "s"), (1, 1, "v2")], "s"),  # seeds first, wherever they are
        ([(1, 2, "v1"), (1, 3, "s"), (1, 1, "v2")], "v2"),  # then the earliest lineage
        ([(1, 1, "v1"), (1, 1, "s"), (1, 1, "v2")], "s"),  # then the smallest key
    ],
)
def test_keeper_is_chosen_by_priority(priority: list | None, kept: str) -> None:
    keys = ["v1", "s", "v2"]
    texts = [BASE, BASE.replace("April", "June"), BASE + " Why?"]
    labels = label_duplicates(keys, texts, priority, CONFIG)
    assert {x.cluster_id for x in labels} == {kept}
    assert [x.is_duplicate for x in labels] == [k != kept for k in keys]
    # The same rows in another order keep the same row (with a priority; without one, the new first row).
    order = [2, 0, 1]
    shuffled_priority = None if priority is None else [priority[i] for i in order]
    again = label_duplicates([keys[i] for i in order], [texts[i] for i in order], shuffled_priority, CONFIG)
    assert {x.cluster_id for x in again} == ({kept} if priority is not None else {"v2"})


@pytest.mark.parametrize(
    ("keys", "texts", "priority", "message"),
    [
        (["a", "a"], ["x", "y"], None, "keys must be unique"),  # a repeated key
        (["a"], ["x", "y"], None, "got 1 keys, 2 texts"),  # lengths differ
        (["a", "b"], ["x", "y"], [1], "1 priorities"),  # priority length differs
    ],
)
def test_label_input_errors(keys: list, texts: list, priority: list | None, message: str) -> None:
    with pytest.raises(DedupInputError, match=None) as error:
        label_duplicates(keys, texts, priority, CONFIG)
    assert message in str(error.value)


def test_near_duplicate_pairs_crosses_sides_only() -> None:
    train = [BASE, BASE.replace("April", "June"), "completely different words in this row here"]
    evals = ["Unrelated question about trains and their speed in miles per hour.", BASE]
    pairs = near_duplicate_pairs(train, evals, CONFIG)
    assert [(i, j) for i, j, _ in pairs] == [(0, 1), (1, 1)]  # train 0 ~ train 1 is not reported
    assert pairs[0][2] == 1.0 and 0.5 <= pairs[1][2] < 1.0


# -- datasketch compatibility --------------------------------------------------------------------------------


@pytest.mark.parametrize("config", [MinHashConfig(), MinHashConfig(num_perm=64, seed=42, shingle_size=2)])
def test_signatures_equal_datasketch_minhash_on_the_same_shingles(config: MinHashConfig) -> None:
    texts = [BASE, "short", "a b", "", "Weng earns $12 an hour for babysitting."]
    shingles = shingle_hashes([normalize_text(t) for t in texts], config.shingle_size)
    ours = signatures_from_shingles(shingles, config)
    for row in range(len(texts)):
        theirs = MinHash(num_perm=config.num_perm, seed=config.seed, hashfunc=lambda h: h)
        theirs.update_batch(shingles.hashes[shingles.offsets[row] : shingles.offsets[row + 1]].tolist())
        assert np.array_equal(theirs.hashvalues, ours[row])
    assert (ours[3] == EMPTY_HASH).all()  # the empty text: datasketch's untouched state


def test_datasketch_lsh_accepts_our_signatures() -> None:
    signatures = compute_signatures([BASE, BASE.replace("April", "June"), "unrelated words only here"], CONFIG)
    lsh = MinHashLSH(num_perm=CONFIG.num_perm, params=CONFIG.lsh_params)
    with lsh.insertion_session() as session:
        for key, signature in enumerate(signatures):
            session.insert(key, as_lean_minhash(signature, CONFIG))
    assert sorted(lsh.query(as_lean_minhash(signatures[0], CONFIG))) == [0, 1]


# -- persisted index -----------------------------------------------------------------------------------------


def _tasks(prefix: str, count: int) -> tuple[list[str], list[str]]:
    words = ["apples", "pears", "trains", "boats", "coins", "stamps", "cards", "shells", "books", "cups"]
    texts = [
        f"{prefix} {i} has {words[i % 10]} and {words[(i * 7) % 10]} worth {i * 13 % 97} coins each"
        for i in range(count)
    ]
    return [f"{prefix}{i}" for i in range(count)], texts


def test_incremental_run_matches_new_rows_against_stored_signatures(tmp_path: Path, monkeypatch) -> None:
    folder = tmp_path / "dedup_index" / CONFIG.name
    keys, texts = _tasks("run one task", 30)
    index = DedupIndex.open(folder, CONFIG)
    first = label_duplicates(keys, texts, None, CONFIG, index=index)
    assert not any(x.is_duplicate for x in first)
    assert index.commit() == 30
    assert sorted(p.name for p in folder.iterdir() if p.name != index_module.LOCK)[:1] == ["manifest.json"]

    # Run 2: the stored rows must be read from disk, never re-signed.
    signed: list[int] = []
    real = index_module.compute_signatures
    monkeypatch.setattr(
        index_module, "compute_signatures", lambda t, *a, **k: signed.append(len(t)) or real(t, *a, **k)
    )
    loads: list[str] = []
    real_load = np.load
    monkeypatch.setattr(np, "load", lambda path, *a, **k: loads.append(Path(path).name) or real_load(path, *a, **k))
    reopened = DedupIndex.open(folder, CONFIG)
    assert len(reopened) == 30 and not reopened.rebuilt
    assert "seg-00000.sig.npy" in loads and signed == []
    new_texts = [texts[3].upper() + "!", texts[5].replace("coins each", "coins apiece"), "a new task about rivers"]
    second = label_duplicates(["n0", "n1", keys[7]], [*new_texts[:2], texts[7]], None, CONFIG, index=reopened)
    assert [(x.is_duplicate, x.duplicate_of, x.kind) for x in second] == [
        (True, keys[3], "exact"),  # exact duplicate of a row accepted in run 1
        (True, keys[5], "near"),  # near duplicate of a row accepted in run 1
        (False, None, None),  # a key already accepted is not its own duplicate (reruns are idempotent)
    ]
    assert reopened.commit() == 0  # nothing new was accepted
    third = label_duplicates(["n2"], [new_texts[2]], None, CONFIG, index=reopened)
    assert not third[0].is_duplicate and reopened.commit() == 1
    assert len(DedupIndex.open(folder, CONFIG)) == 31


def test_changed_config_opens_a_different_index_folder(tmp_path: Path) -> None:
    keys, texts = _tasks("task", 5)
    for config in (CONFIG, MinHashConfig(shingle_size=2)):
        index = DedupIndex.open(tmp_path / config.name, config)
        label_duplicates(keys, texts, None, config, index=index)
        index.commit()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w2_p128_b32r4_s1", "w3_p128_b32r4_s1"]


def _garble_manifest(folder: Path) -> None:
    (folder / "manifest.json").write_text("{not json")


def _truncate_signatures(folder: Path) -> None:
    path = folder / "seg-00000.sig.npy"
    path.write_bytes(path.read_bytes()[:200])


def _flip_a_signature_byte(folder: Path) -> None:
    path = folder / "seg-00000.sig.npy"
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF
    path.write_bytes(bytes(data))


def _other_config_in_manifest(folder: Path) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["config"] = "w5_p128_b32r4_s1"
    (folder / "manifest.json").write_text(json.dumps(manifest))


def _delete_keys(folder: Path) -> None:
    (folder / "seg-00000.keys.json").unlink()


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (_garble_manifest, "JSONDecodeError"),  # manifest is not JSON
        (_truncate_signatures, "ValueError"),  # signature file cut short
        (_flip_a_signature_byte, "checksum"),  # silent bit flip: only the checksum sees it
        (_other_config_in_manifest, "manifest config is 'w5_p128_b32r4_s1'"),  # index of another config
        (_delete_keys, "FileNotFoundError"),  # a segment file is missing
    ],
)
def test_damaged_index_is_rebuilt_and_flagged(tmp_path: Path, damage, reason: str) -> None:
    keys, texts = _tasks("task", 10)
    index = DedupIndex.open(tmp_path, CONFIG)
    label_duplicates(keys, texts, None, CONFIG, index=index)
    index.commit()
    damage(tmp_path)
    reopened = DedupIndex.open(tmp_path, CONFIG)
    assert reopened.rebuilt and reason in (reopened.rebuild_reason or "")
    assert len(reopened) == 0  # never trusted
    assert not DedupIndex.open(tmp_path, CONFIG).rebuilt  # the damaged files were discarded


def test_damaged_index_is_rebuilt_from_accepted_rows_when_given(tmp_path: Path) -> None:
    keys, texts = _tasks("task", 10)
    index = DedupIndex.open(tmp_path, CONFIG)
    label_duplicates(keys, texts, None, CONFIG, index=index)
    index.commit()
    _garble_manifest(tmp_path)
    reopened = DedupIndex.open(tmp_path, CONFIG, rebuild_from=lambda: (keys, texts))
    assert reopened.rebuilt and len(reopened) == 10
    labels = label_duplicates(["new"], [texts[4]], None, CONFIG, index=reopened)
    assert labels[0].duplicate_of == keys[4]
    assert not DedupIndex.open(tmp_path, CONFIG).rebuilt


def _distinct_tasks(prefix: str, count: int) -> tuple[list[str], list[str]]:
    # Texts far apart from each other (12 random words of 40): no two are near-duplicates.
    vocabulary = [
        f"{a}{b}"
        for a in ("ka", "lo", "mi", "nu", "pe")
        for b in ("ran", "sol", "tek", "vim", "dor", "jup", "wex", "zil")
    ]
    rng = np.random.default_rng(zlib.crc32(prefix.encode()))
    texts = [f"{prefix} {i} " + " ".join(rng.choice(vocabulary, 12, replace=False)) for i in range(count)]
    return [f"{prefix}{i}" for i in range(count)], texts


def test_overlapping_runs_commit_in_turn_and_lose_no_rows(tmp_path: Path) -> None:
    keys, texts = _distinct_tasks("base task", 10)
    base = DedupIndex.open(tmp_path, CONFIG)
    label_duplicates(keys, texts, None, CONFIG, index=base)
    base.commit()
    # Two runs open the same index before either commits; both accept the same new task "shared".
    first, second = DedupIndex.open(tmp_path, CONFIG), DedupIndex.open(tmp_path, CONFIG)
    first_keys, first_texts = _distinct_tasks("first run row", 5)
    second_keys, second_texts = _distinct_tasks("second run entry", 5)
    shared = "a brand new task about lighthouses and the ships they guide home"
    label_duplicates([*first_keys, "shared"], [*first_texts, shared], None, CONFIG, index=first)
    label_duplicates([*second_keys, "shared"], [*second_texts, shared], None, CONFIG, index=second)

    assert second.commit() == 6
    assert first.commit() == 5  # "shared" was committed by the other run meanwhile: not indexed twice

    reopened = DedupIndex.open(tmp_path, CONFIG)
    assert not reopened.rebuilt and len(reopened) == 21
    assert reopened.keys == [*keys, *second_keys, "shared", *first_keys]  # commit order; no key twice
    assert [s["id"] for s in json.loads((tmp_path / "manifest.json").read_text())["segments"]] == [0, 1, 2]
    # The run that committed last took the other's rows in: its ordinals match the files'.
    assert first.keys == reopened.keys and np.array_equal(first.signatures, reopened.signatures)
    near = label_duplicates(["late"], [second_texts[2] + " indeed"], None, CONFIG, index=first)
    assert near[0].duplicate_of == second_keys[2]


def _commit_after_barrier(folder: str, prefix: str, barrier, store: StateStore) -> None:
    # One overlapping run, in its own process: open, wait for all the others to have opened, label, commit.
    index = DedupIndex.open(Path(folder), CONFIG, store=store)
    barrier.wait(timeout=60)
    keys, texts = _distinct_tasks(prefix, 20)
    assert not any(label.is_duplicate for label in label_duplicates(keys, texts, None, CONFIG, index=index))
    assert index.commit() == 20


@pytest.mark.slow
def test_runs_in_separate_processes_committing_at_once_keep_every_row(tmp_path: Path, state_store) -> None:
    # The index's lock is flock on `.lock`, or with a database the advisory lock (no lock file then).
    context = multiprocessing.get_context("spawn")
    prefixes = ["alpha row", "beta item", "gamma entry", "delta case"]
    barrier = context.Barrier(len(prefixes))
    workers = [
        context.Process(target=_commit_after_barrier, args=(str(tmp_path), prefix, barrier, state_store))
        for prefix in prefixes
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    assert [worker.exitcode for worker in workers] == [0] * len(prefixes)

    index = DedupIndex.open(tmp_path, CONFIG, store=state_store)
    assert not index.rebuilt and len(index) == 80
    assert sorted(index.keys) == sorted(key for prefix in prefixes for key in _distinct_tasks(prefix, 20)[0])
    assert (tmp_path / ".lock").exists() != state_store.in_database


def test_datasketch_storage_path_gives_the_same_labels(tmp_path: Path) -> None:
    # storage_config switches candidate search to datasketch's MinHashLSH (Redis in production; dict here).
    keys, texts = _tasks("task", 20)
    index = DedupIndex.open(tmp_path, CONFIG)
    label_duplicates(keys, texts, None, CONFIG, index=index)
    index.commit()
    new = [texts[2] + " indeed", texts[9].upper(), "nothing like the others at all here"]
    in_memory = label_duplicates(["a", "b", "c"], new, None, CONFIG, index=DedupIndex.open(tmp_path, CONFIG))
    shared = DedupIndex.open(tmp_path, CONFIG, storage_config={"type": "dict"})
    assert label_duplicates(["a", "b", "c"], new, None, CONFIG, index=shared) == in_memory
    assert len(shared.lsh().keys) == 20


# -- JSONL ---------------------------------------------------------------------------------------------------


def _write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def test_dedup_jsonl_labels_every_row_in_order(tmp_path: Path) -> None:
    rows = [
        {"id": 0, "text": BASE},  # kept
        {"id": 1, "text": "Weng earns $12 an hour for babysitting. Yesterday she did 50 minutes."},  # kept
        {"id": 2, "text": BASE.upper()},  # exact duplicate of line 0
        {"id": 3, "text": BASE.replace("April", "June")},  # near duplicate of line 0
        {"id": 4, "text": ""},  # empty: kept, never a duplicate
    ]
    out = tmp_path / "out.jsonl"
    summary = dedup_jsonl(_write_jsonl(tmp_path / "in.jsonl", rows), out, config=CONFIG)
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in written] == [0, 1, 2, 3, 4]
    assert [(r["is_duplicate"], r["duplicate_of"], r["cluster_id"]) for r in written] == [
        (False, None, "0"),
        (False, None, "1"),
        (True, 0, "0"),
        (True, 0, "0"),
        (False, None, "4"),
    ]
    assert (summary.rows, summary.duplicates, summary.exact_duplicates, summary.near_duplicates) == (5, 2, 1, 1)


@pytest.mark.parametrize(
    ("rows", "field", "expected"),
    [
        ([{"meta": {"body": BASE}}, {"meta": {"body": BASE}}], "meta.body", [False, True]),  # dotted path
        (
            [
                {"prompt": [{"role": "system", "content": "Solve."}, {"role": "user", "content": BASE}]},
                {"prompt": [{"role": "system", "content": "Solve!"}, {"role": "user", "content": BASE}]},
            ],
            "prompt",
            [False, True],
        ),  # task records: message contents joined
        ([{"prompt": BASE}, {"prompt": BASE + "."}], "prompt", [False, True]),  # a string prompt is used as is
    ],
)
def test_dedup_jsonl_text_field(tmp_path: Path, rows: list, field: str, expected: list) -> None:
    out = tmp_path / "out.jsonl"
    dedup_jsonl(_write_jsonl(tmp_path / "in.jsonl", rows), out, text_field=field, config=CONFIG)
    assert [json.loads(line)["is_duplicate"] for line in out.read_text().splitlines()] == expected


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"text": "ok"}', "{not json"], "in.jsonl:2: invalid JSON"),  # broken line
        (
            ['{"text": "ok"}', '{"body": "x"}'],
            "in.jsonl:2: no field 'text' (fields: body) - pass --text-field",
        ),  # missing
        (['{"text": 3}'], "in.jsonl:1: field 'text': expected a string, got int"),  # not text
        (['{"text": "ok"}', "", '{"text": "b"}'], "in.jsonl:2: blank line"),  # blank line
        (["[1, 2]"], "in.jsonl:1: expected a JSON object, got list"),  # not an object
    ],
)
def test_dedup_jsonl_bad_line_names_file_line_and_fix(tmp_path: Path, lines: list[str], message: str) -> None:
    source = _write_jsonl(tmp_path / "in.jsonl", lines)
    with pytest.raises(DedupInputError) as error:
        dedup_jsonl(source, tmp_path / "out.jsonl", config=CONFIG)
    assert message in str(error.value) and " - " in str(error.value)
    assert not (tmp_path / "out.jsonl").exists()


def test_dedup_jsonl_rejects_non_utf8_with_the_line(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_bytes(b'{"text": "ok"}\n{"text": "caf\xe9"}\n')
    with pytest.raises(DedupInputError, match=r"in.jsonl:2: not valid UTF-8 \(byte 0xe9 at column 14\)"):
        dedup_jsonl(source, tmp_path / "out.jsonl", config=CONFIG)


# -- recall on real labelled pairs ---------------------------------------------------------------------------


@pytest.mark.skipif(not (GSM8K / "test_socratic.jsonl").exists(), reason=f"shared GSM8K data not found at {GSM8K}")
def test_recall_on_first_200_gsm8k_socratic_pairs() -> None:
    sides = []
    for name in ("test.jsonl", "test_socratic.jsonl"):
        lines = (GSM8K / name).read_text(encoding="utf-8").splitlines()[:200]
        sides.append([f"{r['question']}\n{r['answer']}" for r in map(json.loads, lines)])
    pairs = near_duplicate_pairs(sides[0], sides[1], CONFIG)
    found = {i for i, j, _ in pairs if i == j}
    false = [(i, j) for i, j, _ in pairs if i != j]
    assert len(found) / 200 >= 0.99
    assert false == []


def test_a_redis_index_is_shared_by_workers_and_labels_as_in_memory(tmp_path: Path) -> None:
    # Scale-out: the LSH band tables live in a real redis-server on loopback; a second worker opening the same
    # index finds them filled and labels exactly as the in-memory search does.
    keys, texts = _tasks("task", 40)
    folder = tmp_path / "index"
    index = DedupIndex.open(folder, CONFIG)
    label_duplicates(keys, texts, None, CONFIG, index=index)
    index.commit()
    new = [texts[2] + " indeed", texts[9].upper(), "nothing like the others at all here", texts[30]]
    new_keys = ["a", "b", "c", "d"]
    in_memory = label_duplicates(new_keys, new, None, CONFIG, index=DedupIndex.open(folder, CONFIG))
    assert sum(label.is_duplicate for label in in_memory) == 3
    with redis_server(tmp_path) as port:
        storage = {"type": "redis", "redis": {"host": "127.0.0.1", "port": port}}
        first = DedupIndex.open(folder, CONFIG, storage_config=storage)
        assert label_duplicates(new_keys, new, None, CONFIG, index=first) == in_memory
        client = redis.Redis(host="127.0.0.1", port=port)
        assert client.dbsize() > 0  # the band tables are in Redis, not in this process
        second = DedupIndex.open(folder, CONFIG, storage_config=storage)
        assert len(second.lsh().keys) == 40  # the rows the first worker stored
        assert label_duplicates(new_keys, new, None, CONFIG, index=second) == in_memory
