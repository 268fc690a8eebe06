"""Where the tests find the repository's seeds and the shared public data sets."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SEEDS = REPO / "seeds"
# CI clones the project next to a copy of shared/, as on a developer machine.
SHARED_DATA = REPO.parent / "shared" / "data"
GSM8K = SHARED_DATA / "gsm8k"
# The bundled real model is converted once per machine into this folder (keyed by the GGUF file's hash), so a
# test run pays the ~30 s conversion at most once. Tests only read it.
REAL_MODELS_DIR = Path.home() / ".cache" / "seedwheel-tests" / "models"
