"""Where the tests find the repository's seeds, the shared public data sets and the bundled model, and settings
that keep every write under a test's own folder."""

import json
import os
import shutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from pipeline.settings import Settings, default_models_dir
from validators.seeds import AUDIT_DIR

REPO = Path(__file__).resolve().parents[1]
SEEDS = REPO / "seeds"
# CI clones the project next to a copy of shared/, as on a developer machine.
SHARED_DATA = REPO.parent / "shared" / "data"
GSM8K = SHARED_DATA / "gsm8k"
# The bundled real model is converted once per machine into the user's models folder (keyed by the GGUF file's
# hash), as `make quickstart` does, so a test run pays the ~30 s conversion at most once. Tests only read it.
REAL_MODELS_DIR = default_models_dir(os.environ)


def quickstart_settings(root: Path) -> Settings:
    """Quickstart settings on the bundled seeds and model, with storage and Dagster instance under `root`."""
    return Settings.from_env(
        {},
        profile="quickstart",
        home=root / "home",
        seeds_dir=SEEDS,
        dagster_home=root / "dagster",
        models_dir=REAL_MODELS_DIR,
    )


def tiny_settings(root: Path, env: Mapping[str, str], families: Sequence[str]) -> Settings:
    """Quickstart settings with the tiny model (`env`: the `tiny_models_env` fixture) over a copy of the seed sets
    of `families` and their audit items, storage and Dagster instance under `root`."""
    return Settings.from_env(
        env,
        profile="quickstart",
        home=root / "home",
        seeds_dir=copy_seeds(root / "seeds", families, audit=families),
        dagster_home=root / "dagster",
    )


def copy_seeds(dest: Path, families: Iterable[str], *, audit: Iterable[str] = ()) -> Path:
    """A seeds folder at `dest` with the bundled seed sets of `families` and the audit sets cut to the families in
    `audit` (the judge's calibration then judges a few items, not the whole set). Returns `dest`."""
    for family in families:
        shutil.copytree(SEEDS / family, dest / family)
    audit = set(audit)
    if audit:
        (dest / AUDIT_DIR).mkdir(parents=True)
        for path in (SEEDS / AUDIT_DIR).glob("*.jsonl"):
            rows = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
            kept = [line for line in rows if _family(json.loads(line)) in audit]
            (dest / AUDIT_DIR / path.name).write_text("".join(f"{line}\n" for line in kept), encoding="utf-8")
    return dest


def _family(row: dict) -> str:
    """An audit row's family: the judge audit nests it in the task, the reward audit keeps it at the top."""
    return row["task"]["family"] if "task" in row else row["family"]
