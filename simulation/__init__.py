"""A stand-in for the deployed app, so the flywheel's loop closes offline (`seedwheel simulate`).

```
traffic pool (programmatic variants of the seeds, never a seed, never in a split)
  --draw--> a night of requests --serve (the promoted model, an OpenAI-compatible endpoint)--> answers
  --verify (each task's own verifier)--> a traffic log (JSONL, failures/__init__.py's format) --> the inbox
```

The app is a client of the pipeline, not a part of it: it writes the same traffic log a team's app would, into
the same inbox, and the normal nightly path does the rest. `simulation.pool` builds and draws the pool;
`simulation.app` serves a night and writes its log lines. The nights themselves (the sensor, the flywheel job,
the per-night record) are run by `pipeline.simulate`.
"""

from simulation.app import APP_NAME, model_label, serve_night, traffic_line
from simulation.pool import POOL_RANDOM_SEED, build_pool, draw, is_held_out

__all__ = [
    "APP_NAME",
    "POOL_RANDOM_SEED",
    "build_pool",
    "draw",
    "is_held_out",
    "model_label",
    "serve_night",
    "traffic_line",
]
