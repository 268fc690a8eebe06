"""The persistent Dagster instance the CLI and the UI share, and its run-queue and pool limits."""

from __future__ import annotations

import dagster as dg

from pipeline.settings import Settings

EXCLUSIVE_TAG = "seedwheel/exclusive"
# Offline machines must not try to send telemetry; runs stay in a local SQLite-backed instance. The run queue
# (the daemon, which `dagster dev` starts) holds a second run of an exclusive kind (two nightly regenerations)
# until the first ends, and the `gpu` pool runs one training step at a time.
INSTANCE_YAML = f"""\
telemetry:
  enabled: false
nux:
  enabled: false
concurrency:
  pools:
    default_limit: 1
  runs:
    tag_concurrency_limits:
      - key: {EXCLUSIVE_TAG}
        value:
          applyLimitPerUniqueValue: true
        limit: 1
"""


def open_instance(settings: Settings) -> dg.DagsterInstance:
    """The persistent instance at `settings.dagster_home`, created on first use."""
    settings.dagster_home.mkdir(parents=True, exist_ok=True)
    config = settings.dagster_home / "dagster.yaml"
    if not config.exists():
        config.write_text(INSTANCE_YAML, encoding="utf-8")
    return dg.DagsterInstance.from_config(str(settings.dagster_home))
