"""The split ledger: which side each lineage root was given, when, and by which run. Append-only across nights.

A root keeps its side once assigned, whatever later nights bring (more roots in its stratum, a new salt in the
config): `assign` plans the night's split with the ledger's sides as `previous` (`curation.splits`), so only
roots seen for the first time get a side, and it appends those. The eval set therefore only grows, and a
checkpoint trained on one night's train side is never evaluated on its own training lineages later.

Moving roots is `resplit`: an explicit operation for a person (`seedwheel splits resplit`), which recomputes every
side with a new salt, keeps on the train side every root a checkpoint has trained on (`pinned`), appends a row
per moved root and starts a new *epoch*. The promotion gate refuses to compare checkpoints of different epochs:
their eval sets differ.

Where it lives is the `core.state.StateStore` the caller passes (the pipeline's `StorageRoot.split_ledger()`);
only the storage of rows and plan records differs, the planning is the same. Without a database, files under the
folder (the pipeline passes `<storage root>/splits/`):

```
ledger.parquet       one row per assignment: root, side, seq, epoch, how (hash | promoted | demoted | resplit |
                     follows <root>: a production failure that near-copies that root's task)
plans/000003.json    one record per plan (seq 3): plan_id, epoch, salt, kind (assign | resplit), run_id, created_at,
                     new_roots, moved roots, note
.lock                held while a plan is made and written (two runs never assign the same new root twice)
```

A plan's record is written first and the ledger last: the ledger is the commit point, so a run killed between the
two leaves a record the ledger does not reach (`seq` above the ledger's), which is ignored and overwritten.

With the production database (`SEEDWHEEL_DATABASE_URL`), the same rows and records are the tables `split_ledger`
and `split_plans` (the record as the same JSON), a plan is written in one transaction (its commit is the commit
point: no half-written plan is ever visible), and the lock is the advisory lock `split_ledger`, so workers on
several machines assign safely without a shared file system.

Side at any earlier plan (`state(seq)`) is the last row per root up to that plan, so lineage questions about an
old checkpoint ("which split was in force then") stay answerable after a re-split.

Example:
    >>> ledger = SplitLedger(Path("/tmp/store/splits"))  # doctest: +SKIP
    >>> record = ledger.assign(tasks, SplitConfig(), run_id="nightly-1")  # doctest: +SKIP
    >>> record.state.sides["5c4f6470173c47e1"]  # doctest: +SKIP
    'eval'
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from core import SeedwheelError
from core.state import StateStore
from core.tables import atomic_write, read_table, write_table
from curation.splits import EVAL, TRAIN, SplitConfig, SplitPlan, plan_splits
from validators.tasks import canonical_json

logger = logging.getLogger(__name__)

LEDGER = "ledger.parquet"
PLANS = "plans"
LOCK = ".lock"
LOCK_NAME = "split_ledger"  # the run-level lock's name in the database (core.state)
LEDGER_COLUMNS = ("root", "side", "seq", "epoch", "how")
# The ledger's tables in the database: a plan's rows name their plan, so no row outlives its record.
SCHEMA = """
CREATE TABLE IF NOT EXISTS split_plans (
    seq INTEGER PRIMARY KEY,
    record TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS split_ledger (
    seq INTEGER NOT NULL REFERENCES split_plans (seq),
    root TEXT NOT NULL,
    side TEXT NOT NULL,
    epoch INTEGER NOT NULL,
    how TEXT NOT NULL,
    PRIMARY KEY (seq, root)
);
"""


class SplitLedgerError(SeedwheelError, ValueError):
    """The ledger cannot be read or would be broken by an operation; the message names the file and the fix."""


@dataclass(frozen=True)
class SplitState:
    """The split in force after plan `seq` (0: nothing assigned yet).

    Attributes:
        seq: the plan number.
        epoch: how many re-splits came before it (0 until the first).
        plan_id: a content hash of the sides in force and the epoch (equal states, equal ids).
        salt: the salt the epoch's roots were hashed with (None before the first plan).
        sides: root -> side, for every root assigned up to this plan.
    """

    seq: int
    epoch: int
    plan_id: str
    salt: str | None
    sides: dict[str, str]


@dataclass(frozen=True)
class LedgerEntry:
    """What `assign` or `resplit` did: the plan of the tasks given, the state after it, and what changed.

    Attributes:
        plan: the split of the tasks given (sides, summary per stratum).
        state: the split in force afterwards.
        new_roots: roots that got a side for the first time.
        moved: root -> (side before, side after), for a re-split.
        notes: things a person should know (a config salt the ledger does not use, roots kept by the pin rule).
    """

    plan: SplitPlan
    state: SplitState
    new_roots: list[str] = field(default_factory=list)
    moved: dict[str, tuple[str, str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def as_metadata(self) -> dict[str, int | str]:
        """Flat numbers for a report: the plan in force (`split_plan`, `split_epoch`, `split_plan_id`), the roots it
        gave a side for the first time (`new_roots`), those that took a near-copied root's side (`followed_roots`),
        and every root in the ledger (`ledger_roots`)."""
        return {
            "split_plan": self.state.seq,
            "split_epoch": self.state.epoch,
            "split_plan_id": self.state.plan_id,
            "new_roots": len(self.new_roots),
            "followed_roots": len(self.plan.followed),
            "ledger_roots": len(self.state.sides),
        }

    def log_lines(self) -> list[tuple[int, str]]:
        """What the run's log says of this plan, as (logging level, line): each note (a warning), then each root
        that took a near-copied root's side."""
        return [
            *((logging.WARNING, f"split: {note}") for note in self.notes),
            *(
                (logging.INFO, f"split: failure root {root} near-copies a task of {leader}: it takes its side")
                for root, leader in self.plan.followed.items()
            ),
        ]


class SplitLedger:
    """The persisted split assignments (see the module docstring).

    Args:
        folder: the ledger's folder when there is no database (the pipeline passes `<storage root>/splits/`).
        store: where shared records live and how runs take turns (`core.state.StateStore`); with a database, its
            tables hold the ledger instead of `folder`. None: files, as `StateStore()`.

    Raises:
        core.database.DatabaseUnavailable: the store's database cannot be reached.
    """

    def __init__(self, folder: Path, store: StateStore | None = None) -> None:
        self.folder = Path(folder)
        self.store = store or StateStore()
        self._storage: _LedgerFiles | _LedgerTables = (
            _LedgerTables(self.store) if self.store.in_database else _LedgerFiles(self.folder)
        )

    def rows(self) -> pd.DataFrame:
        """Every assignment ever made, in order (an empty frame before the first)."""
        return self._storage.rows()

    def plans(self) -> list[dict[str, Any]]:
        """The plan records the ledger reaches, oldest first."""
        last = self._last_seq(self.rows())
        return [record for record in self._storage.plans() if record["seq"] <= last]

    def state(self, seq: int | None = None) -> SplitState:
        """The split in force after plan `seq` (default: the latest)."""
        return self._state(self.rows(), self.plans(), seq)

    def assign(
        self,
        tasks: pd.DataFrame | Iterable[Mapping[str, Any]],
        config: SplitConfig,
        run_id: str,
        follows: Mapping[str, str] | None = None,
    ) -> LedgerEntry:
        """Give every root not in the ledger a side and append it; roots already there keep theirs.

        New roots are hashed with the ledger's salt (the current epoch's), so one epoch is one salt; a different
        `config.salt` is noted, not used (a re-split applies it).

        Args:
            tasks: the night's task records (their roots are planned).
            config: the split settings (fractions and strata apply to new roots).
            run_id: the run that makes the plan, kept in its record.
            follows: new root -> the root whose side it takes (see `plan_splits`); recorded as how it was placed.

        Returns:
            The plan of `tasks`, the state after it, and the new roots.

        Raises:
            SplitLedgerError: the ledger is unreadable.
        """
        with self.store.lock(LOCK_NAME, self.folder / LOCK):
            rows = self.rows()
            current = self._state(rows, self.plans(), None)
            notes = []
            if current.salt is not None and current.salt != config.salt:
                notes.append(
                    f"split_salt {config.salt!r} is not the salt in force ({current.salt!r}, epoch {current.epoch}): "
                    "new roots use the salt in force; `seedwheel splits resplit --salt ... --yes` applies a new one"
                )
                config = dataclasses.replace(config, salt=current.salt)
            plan = plan_splits(tasks, config, previous=current.sides, follows=follows)
            new = {root: side for root, side in plan.sides.items() if root not in current.sides}
            if not new:
                return LedgerEntry(plan, current, notes=notes)
            how = {
                root: f"follows {plan.followed[root]}" if root in plan.followed else plan.guaranteed.get(root, "hash")
                for root in new
            }
            state = self._append(rows, current, new, how, config.salt, current.epoch, run_id, "assign", {}, "")
            return LedgerEntry(plan, state, sorted(new), notes=notes)

    def resplit(
        self,
        tasks: pd.DataFrame | Iterable[Mapping[str, Any]],
        config: SplitConfig,
        *,
        pinned: Iterable[str],
        run_id: str,
        note: str,
        commit: bool = True,
        follows: Mapping[str, str] | None = None,
    ) -> LedgerEntry:
        """Recompute every side of `tasks` with `config` (its salt), as a new epoch; `pinned` roots stay train.

        Args:
            tasks: the task records whose roots are re-split (roots in the ledger but not here keep their side).
            config: the split settings, with the new salt.
            pinned: roots some checkpoint trained on: they stay on the train side, so no existing checkpoint is
                ever evaluated on its training lineages.
            run_id: who or what re-split (kept in the plan record).
            note: why, for the record.
            commit: False computes what would move and writes nothing (the state returned is the current one).
            follows: root -> the root whose side it takes (see `plan_splits`).

        Returns:
            The plan, the new state, the roots assigned for the first time, and every moved root.
        """
        pinned = set(pinned)
        with self.store.lock(LOCK_NAME, self.folder / LOCK):
            rows = self.rows()
            current = self._state(rows, self.plans(), None)
            plan = plan_splits(tasks, config, previous={root: TRAIN for root in pinned}, follows=follows)
            changed = {root: side for root, side in plan.sides.items() if current.sides.get(root) != side}
            moved = {root: (current.sides[root], side) for root, side in changed.items() if root in current.sides}
            new = sorted(root for root in changed if root not in current.sides)
            notes = [f"{len(pinned & set(plan.sides))} roots trained on by a checkpoint stay on the train side"]
            if not changed:
                return LedgerEntry(plan, current, notes=[*notes, "no root moves: the split in force is kept"])
            if not commit:
                return LedgerEntry(plan, current, new, moved, notes)
            how = {root: "resplit" for root in changed}
            state = self._append(
                rows, current, changed, how, config.salt, current.epoch + 1, run_id, "resplit", moved, note
            )
            logger.warning("split epoch %d: %d roots moved, %d new (%s)", state.epoch, len(moved), len(new), note)
            return LedgerEntry(plan, state, new, moved, notes)

    def _append(
        self,
        rows: pd.DataFrame,
        current: SplitState,
        sides: Mapping[str, str],
        how: Mapping[str, str],
        salt: str,
        epoch: int,
        run_id: str,
        kind: str,
        moved: Mapping[str, tuple[str, str]],
        note: str,
    ) -> SplitState:
        seq = current.seq + 1
        state = _make_state(seq, epoch, salt, {**current.sides, **sides})
        record = {
            "seq": seq,
            "plan_id": state.plan_id,
            "epoch": epoch,
            "salt": salt,
            "kind": kind,
            "run_id": run_id,
            "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "new_roots": sorted(r for r in sides if r not in current.sides),
            "moved": {root: list(change) for root, change in sorted(moved.items())},
            "note": note,
            "train_roots": sum(side == TRAIN for side in state.sides.values()),
            "eval_roots": sum(side == EVAL for side in state.sides.values()),
        }
        added = pd.DataFrame(
            [{"root": r, "side": s, "seq": seq, "epoch": epoch, "how": how[r]} for r, s in sorted(sides.items())],
            columns=LEDGER_COLUMNS,
        )
        self._storage.commit(record, rows, added)
        return state

    @staticmethod
    def _last_seq(rows: pd.DataFrame) -> int:
        return int(rows["seq"].max()) if len(rows) else 0

    def _state(self, rows: pd.DataFrame, plans: list[dict[str, Any]], seq: int | None) -> SplitState:
        last = self._last_seq(rows)
        seq = last if seq is None else seq
        if not 0 <= seq <= last:
            raise SplitLedgerError(
                f"split plan {seq} does not exist in {self._storage.where}: plans run from 1 to {last}"
            )
        if seq == 0:
            return _make_state(0, 0, None, {})
        upto = rows[rows["seq"] <= seq]
        sides = dict(zip(upto["root"], upto["side"], strict=True))  # later rows win: the last side of each root
        record = next((r for r in plans if r["seq"] == seq), None)
        if record is None:
            raise SplitLedgerError(
                f"split plan {seq} is in {self._storage.where} but its record {self._storage.record_where(seq)} is "
                "missing; restore the plan records from a backup"
            )
        return _make_state(seq, int(record["epoch"]), record["salt"], sides)


class _LedgerFiles:
    """The ledger as files under a folder: `ledger.parquet` (the commit point) and `plans/<seq>.json`."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.path = folder / LEDGER
        self.where = str(self.path)

    def record_where(self, seq: int) -> str:
        return str(self.folder / PLANS / f"{seq:06d}.json")

    def rows(self) -> pd.DataFrame:
        if not self.path.exists():
            return pd.DataFrame(columns=LEDGER_COLUMNS)
        try:
            rows = read_table(self.path)
        except Exception as exc:  # pyarrow raises several types for a damaged file
            raise SplitLedgerError(
                f"split ledger {self.path} cannot be read ({exc}); restore it from a backup: rebuilding it would "
                "re-split every lineage, and the checkpoints' evaluations would no longer compare"
            ) from exc
        missing = set(LEDGER_COLUMNS) - set(rows.columns)
        if missing:
            raise SplitLedgerError(
                f"split ledger {self.path} lacks columns {sorted(missing)}; restore it from a backup"
            )
        return rows

    def plans(self) -> list[dict[str, Any]]:
        """Every plan record on disk, an orphan of a killed run included (the ledger decides which count)."""
        return [json.loads(path.read_text(encoding="utf-8")) for path in sorted((self.folder / PLANS).glob("*.json"))]

    def commit(self, record: Mapping[str, Any], rows: pd.DataFrame, added: pd.DataFrame) -> None:
        """The plan's record, then the ledger with its rows appended: the ledger's rename commits the plan."""
        with atomic_write(Path(self.record_where(record["seq"])), "w") as handle:
            handle.write(json.dumps(record, indent=2, sort_keys=True) + "\n")
        write_table(pd.concat([rows, added], ignore_index=True) if len(rows) else added, self.path)  # commit point


class _LedgerTables:
    """The ledger as the tables `split_ledger` and `split_plans` (`SCHEMA`) in the store's database."""

    what = "the split ledger"

    def __init__(self, store: StateStore) -> None:
        self.store = store
        self.where = f"{store.where} (tables split_ledger, split_plans)"
        store.create_tables(SCHEMA, self.what)

    def record_where(self, seq: int) -> str:
        return f"(split_plans seq {seq})"

    def rows(self) -> pd.DataFrame:
        with self.store.transaction(self.what) as cursor:
            # COLLATE "C": byte order within a plan, as the file's rows (sorted by Python) have it.
            cursor.execute(f'SELECT {", ".join(LEDGER_COLUMNS)} FROM split_ledger ORDER BY seq, root COLLATE "C"')
            return pd.DataFrame(cursor.fetchall(), columns=LEDGER_COLUMNS)

    def plans(self) -> list[dict[str, Any]]:
        with self.store.transaction(self.what) as cursor:
            cursor.execute("SELECT record FROM split_plans ORDER BY seq")
            return [json.loads(record) for (record,) in cursor.fetchall()]

    def commit(self, record: Mapping[str, Any], rows: pd.DataFrame, added: pd.DataFrame) -> None:
        """The plan's record and rows in one transaction: its commit makes the whole plan visible at once."""
        from psycopg2.extras import execute_values

        with self.store.transaction(self.what) as cursor:
            cursor.execute(
                "INSERT INTO split_plans (seq, record) VALUES (%s, %s)",
                (record["seq"], json.dumps(record, sort_keys=True)),
            )
            execute_values(
                cursor,
                f"INSERT INTO split_ledger ({', '.join(LEDGER_COLUMNS)}) VALUES %s",
                list(added[list(LEDGER_COLUMNS)].astype(object).itertuples(index=False, name=None)),
            )


def _make_state(seq: int, epoch: int, salt: str | None, sides: dict[str, str]) -> SplitState:
    digest = hashlib.sha256(canonical_json({"epoch": epoch, "sides": sides}).encode()).hexdigest()[:12]
    return SplitState(seq=seq, epoch=epoch, plan_id=digest, salt=salt, sides=sides)
