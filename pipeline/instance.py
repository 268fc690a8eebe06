"""The persistent Dagster instance the CLI and the UI share, and its run-queue and pool limits."""

from __future__ import annotations

import os
import socket

import dagster as dg

from pipeline.settings import Settings
from validators.tables import atomic_write, file_lock

EXCLUSIVE_TAG = "seedwheel/exclusive"
# Which process runs a CLI run (host:pid): a run whose process is gone was killed and is reaped.
PROCESS_TAG = "seedwheel/process"
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
    # Under a lock: the first open creates the SQLite storages, and two runs creating them at once would both
    # stamp their schema versions, leaving an instance no later run can open ("more than one head").
    with file_lock(settings.dagster_home / ".instance.lock"):
        config = settings.dagster_home / "dagster.yaml"
        if not config.exists():
            with atomic_write(config, "w") as handle:
                handle.write(INSTANCE_YAML)
        return dg.DagsterInstance.from_config(str(settings.dagster_home))


def process_tag() -> str:
    """This process, as `PROCESS_TAG` records it."""
    return f"{socket.gethostname()}:{os.getpid()}"


def reap_dead_runs(instance: dg.DagsterInstance) -> list[str]:
    """Mark CLI runs whose process is gone (kill -9, OOM, a closed laptop) as failed and free their pool slots.

    A run executed in process by `seedwheel run` has no daemon watching it: killed, it would stay "started"
    forever and keep its `gpu` pool slot, and the next training would wait for that slot without end. Only runs
    of this host are judged (another machine's processes cannot be seen from here).

    Returns:
        The ids of the runs reaped.
    """
    host = socket.gethostname()
    running = dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED])
    reaped = []
    for run in instance.get_runs(filters=running):
        owner = run.tags.get(PROCESS_TAG, "")
        run_host, _, pid = owner.rpartition(":")
        if run_host != host or not pid.isdigit() or _alive(int(pid)):
            continue
        instance.report_run_failed(run, f"its process ({owner}) is gone: the run was killed before it finished")
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        reaped.append(run.run_id)
    return reaped


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
