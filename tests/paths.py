"""Where the tests find the repository's seeds, the shared public data sets and the bundled model, and settings
that keep every write under a test's own folder."""

from pathlib import Path

from pipeline.settings import Settings

REPO = Path(__file__).resolve().parents[1]
SEEDS = REPO / "seeds"
# CI clones the project next to a copy of shared/, as on a developer machine.
SHARED_DATA = REPO.parent / "shared" / "data"
GSM8K = SHARED_DATA / "gsm8k"
# The bundled real model is converted once per machine into this folder (keyed by the GGUF file's hash), so a
# test run pays the ~30 s conversion at most once. Tests only read it.
REAL_MODELS_DIR = Path.home() / ".cache" / "seedwheel-tests" / "models"


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
