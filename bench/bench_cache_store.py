"""What a cache commit costs when the cache is large: one rewritten file against append-only segments.

`.venv/bin/python bench/bench_cache_store.py [--existing 200000] [--new 1000] [--repeats 5]`

A verdict cache (`core.cache_store`) holding `--existing` entries (64-hex keys, as `verdict_key` makes them;
values as `check_task` stores them: no problems for 9 tasks in 10, one problem for the tenth, ~110 bytes a line)
takes `--new` new entries (what `put` commits at a time: `COMMIT_EVERY`), measured in the same run:

1. **old design** (the store before segments, reconstructed): a commit re-encodes every entry into one checksummed
   file and renames it into place, under the folder's lock, one run at a time; when another shard step committed
   since this one read the file (with shards, nearly every time), it first reads and decodes that file too;
2. **new design**: `CacheStore.commit` writes the new entries as one segment, without a lock;
3. the cache as a cold night leaves it (a segment per `COMMIT_EVERY` entries: 200 for 200k), opened, and the next
   run's first commit, which compacts them (a run that opened more than `COMPACT_AFTER` segments: once per run);
   then an open of the compacted cache.

The ratio is row 1 (and 1 with the re-read) over row 2; target >= 20x (ideally ~existing/new). Then the commit
time of a cold night that adds 1M entries in commits of `--new`, on paper from the measured per-entry costs: the
old design's commits are serialized and grow with the cache, the new one's stay the size of a commit. Median of
`--repeats` runs per row. Prints a table, then every figure as one JSON object on the last line; exits 1 if the
target is missed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from core.cache_store import SEGMENTS, CacheStore  # noqa: E402
from core.tables import atomic_write  # noqa: E402

TARGET = 20.0  # new-design commit at least this many times cheaper than the old one, at 200k entries
NIGHT_ENTRIES = 1_000_000  # the cold night projected on paper
PROBLEM = {
    "code": "reference_failed",
    "pointer": "/reference",
    "message": "the reference does not pass its own verifier: answer_mismatch",
    "fix": "correct the reference or the verifier params",
}


def entries(count: int, start: int, rng: random.Random) -> dict[str, Any]:
    """`count` verdicts keyed like `verdict_key` (SHA-256 hex): one in ten with a problem."""
    return {
        hashlib.sha256(str(start + i).encode()).hexdigest(): [PROBLEM] if rng.random() < 0.1 else []
        for i in range(count)
    }


def old_file(entries: dict[str, Any]) -> bytes:
    """The whole cache as the store before segments wrote it at every commit (its `_encode`, kept here as the
    baseline): a header with the count and the body's SHA-256, then one sorted `[key, value]` line per entry."""
    body = b"".join(
        json.dumps([key, entries[key]], separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
        for key in sorted(entries)
    )
    header = {"format": 1, "entries": len(entries), "sha256": hashlib.sha256(body).hexdigest()}
    return json.dumps(header).encode() + b"\n" + body


def old_read(data: bytes) -> dict[str, Any]:
    """The old store's read of that file (its `_decode`): checksum, then every line."""
    head, _, body = data.partition(b"\n")
    if hashlib.sha256(body).hexdigest() != json.loads(head)["sha256"]:
        raise ValueError("checksum mismatch")
    return dict(map(json.loads, body.splitlines()))


def commit(store: CacheStore, new: dict[str, Any]) -> None:
    """`new` put and committed, as `check_tasks` does (`put` commits by itself at `COMMIT_EVERY`)."""
    for key, value in new.items():
        store.put(key, value)
    store.commit()


def median_seconds(run: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--existing", type=int, default=200_000)
    parser.add_argument("--new", type=int, default=1_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rng = random.Random(0)
    existing = entries(args.existing, 0, rng)
    fresh = [entries(args.new, args.existing + r * args.new, rng) for r in range(args.repeats)]

    with tempfile.TemporaryDirectory(prefix="bench-cache-store-") as tmp:
        root = Path(tmp)
        # 1. The old design: the whole map encoded and renamed into place as one file; and the re-read of that file
        # when another shard step committed since this one read it.
        path = root / "old" / "entries.jsonl"
        merged = {**existing, **fresh[0]}

        def old_commit() -> None:
            with atomic_write(path) as handle:
                handle.write(old_file(merged))

        old_s = median_seconds(old_commit, args.repeats)
        old_reread_s = median_seconds(lambda: old_read(path.read_bytes()), args.repeats)
        file_bytes = path.stat().st_size

        # 2. The new design, as nights use it: a cold night's puts commit every COMMIT_EVERY (many segments); the
        # next run opens them all and its first commit compacts them; the commits after that add a segment each.
        folder = root / "new"
        night = CacheStore.open(folder)
        for key, value in existing.items():
            night.put(key, value)
        night.commit()
        parts = len(list((folder / SEGMENTS).glob("*.jsonl")))
        open_many_s = median_seconds(lambda: CacheStore.open(folder), args.repeats)
        compacting = CacheStore.open(folder)
        started = time.perf_counter()
        commit(compacting, entries(args.new, 10 * args.existing, rng))
        compact_s = time.perf_counter() - started
        if len(list((folder / SEGMENTS).glob("*.jsonl"))) != 2:
            raise SystemExit("the compacting commit did not compact: see core.cache_store.COMPACT_AFTER")
        open_one_s = median_seconds(lambda: CacheStore.open(folder), args.repeats)
        store = CacheStore.open(folder)
        batches = iter(fresh)
        new_s = median_seconds(lambda: commit(store, next(batches)), args.repeats)
        segment_bytes = min(p.stat().st_size for p in (folder / SEGMENTS).glob("2*.jsonl"))

    ratio = old_s / new_s
    ratio_reread = (old_s + old_reread_s) / new_s
    met = ratio >= TARGET
    # A cold night: commits of `new` entries while the cache grows from 0 to NIGHT_ENTRIES.
    commits = NIGHT_ENTRIES // args.new
    per_entry_old = (old_s + old_reread_s) / (args.existing + args.new)
    night_old_s = per_entry_old * args.new * commits * (commits + 1) / 2  # serialized under the lock
    night_new_s = new_s * commits  # side by side across shard steps; added up here

    print(f"{args.existing:,} existing entries ({file_bytes / 1e6:.1f} MB as one file), {args.new:,} new per commit")
    print(f"{'what':<70} {'seconds':>9}")
    rows = [
        ("old: commit = re-encode + rewrite the whole file (under the lock)", old_s),
        ("old: + re-read and decode the file another step committed", old_reread_s),
        (f"new: commit = one segment of the new entries ({segment_bytes / 1e3:.0f} KB), no lock", new_s),
        (f"new: a run's first commit after opening {parts} segments: compacts them", compact_s),
        ("open: the cache compacted (one segment, and one commit's)", open_one_s),
        (f"open: the cache in {parts} segments (as a cold night leaves it)", open_many_s),
    ]
    for label, seconds in rows:
        print(f"{label:<70} {seconds:>9.4f}")
    print(
        f"commit {ratio:.0f}x cheaper than the old design ({ratio_reread:.0f}x with its re-read); "
        f"target >= {TARGET:.0f}x: {'met' if met else 'MISSED'}"
    )
    print(
        f"a cold night of {NIGHT_ENTRIES:,} entries in {commits:,} commits: old {night_old_s / 3600:.2f} h of "
        f"serialized commits, new {night_new_s:.0f} s of commits in all (on paper, from the per-entry costs above)"
    )
    figures = {
        "bench": "cache_store",
        "existing": args.existing,
        "new": args.new,
        "repeats": args.repeats,
        "file_bytes": file_bytes,
        "segment_bytes": segment_bytes,
        "old_commit_s": round(old_s, 4),
        "old_reread_s": round(old_reread_s, 4),
        "new_commit_s": round(new_s, 5),
        "compacting_commit_s": round(compact_s, 4),
        "open_one_segment_s": round(open_one_s, 4),
        "open_many_segments_s": round(open_many_s, 4),
        "ratio": round(ratio, 1),
        "ratio_with_reread": round(ratio_reread, 1),
        "target_ratio": TARGET,
        "met": met,
        "night_entries": NIGHT_ENTRIES,
        "night_old_commit_h": round(night_old_s / 3600, 2),
        "night_new_commit_s": round(night_new_s, 1),
    }
    print(json.dumps(figures))
    sys.exit(0 if met else 1)


if __name__ == "__main__":
    main()
