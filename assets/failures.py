"""Production traffic and failures in: an inbox of logs, one dynamic partition per file, redacted before storage.

`failure_inbox` (a sensor) adds a partition per new or changed file and requests its run with a run key of
name + size + mtime, so overlapping ticks, a restarted daemon or a re-sent tick never process a file twice;
`failure_logs` parses and redacts one file (nothing unredacted is ever stored), then takes the raw file out of
the inbox (deleted, or moved to the quarantine), keeping a text-free row per interaction in `production_traffic`;
`failure_rates` reports each model's failure rate with its interval, per night and family; `failure_tasks` turns
every stored failure into a candidate task when a verifier can be derived from it, or into a `review_queue` item.
"""

import json
from pathlib import Path
from typing import Any

import dagster as dg
import pandas as pd

from assets import groups
from assets.metadata import count_table, markdown_table, preview
from assets.plots import interval_chart
from core.tables import frame_from_records, records_from_frame
from failures import LogTables, derive_failure_tasks, log_tables, process_failure_log
from failures.redaction import RedactionReport
from failures.traffic import RATE_COLUMNS, RateReport, rate_report, rate_table, rate_text
from resources import FailureInbox, SeedRepository
from review.queue import completed_failures, drop_completed
from validators.tasks import TASK_FIELDS

failure_files = dg.DynamicPartitionsDefinition(name="failure_files")
# What one log file's run materializes (the outputs of `failure_logs`): the sensor's runs, `failures ingest`.
LOG_ASSETS = ("failure_logs", "production_traffic", "failure_rejects")
REVIEW_COLUMNS = (
    "failure_id", "origin", "family", "reason_code", "reason", "messages", "tools", "output", "error",
    "user_correction", "expected", "seed_stub",
)  # fmt: skip


class FailureLogSource(dg.Config):
    """Where `failure_logs` reads its partition's log."""

    # A log outside the inbox, read in place and left as it is (`seedwheel failures ingest`); empty: the inbox's
    # `<partition key>`, taken out of the inbox once its redacted records are stored.
    path: str = ""


@dg.multi_asset(
    group_name=groups.FAILURES,
    partitions_def=failure_files,
    outs={
        "failure_logs": dg.AssetOut(description="One redacted record per failed interaction in the log file."),
        "production_traffic": dg.AssetOut(
            description="One row per interaction in the log file (model, family, outcome), without its text."
        ),
        "failure_rejects": dg.AssetOut(description="Lines of the log file that could not be read, with the fix."),
    },
)
def failure_logs(
    context: dg.AssetExecutionContext, config: FailureLogSource, inbox: FailureInbox, seeds: SeedRepository
):
    """Parse one log, redact every record before anything is stored, then take the raw log out of the inbox."""
    name = context.partition_key
    if config.path and Path(config.path).name != name:
        raise ValueError(
            f"failure_logs' config path {config.path} is not the partition's file {name}: materialize the partition "
            f"{Path(config.path).name} instead, or leave the path empty to read {name} from the inbox"
        )
    # Stamped before reading: a file that changes after this is never taken out of the inbox unread.
    stamp = None if config.path else inbox.stamp(name)
    with open(config.path, "rb") if config.path else inbox.open(name) as lines:
        batch = process_failure_log(lines, name, context=seeds.verify_context())
    tables = log_tables(batch, name)
    metadata = _log_metadata(name, tables, batch.redaction)
    yield dg.Output(tables.traffic, output_name="production_traffic", metadata=metadata["production_traffic"])
    yield dg.Output(tables.failures, output_name="failure_logs", metadata=metadata["failure_logs"])
    yield dg.Output(tables.rejects, output_name="failure_rejects", metadata=metadata["failure_rejects"])
    # Dagster stores each output as it is yielded, so both tables are written when the body resumes here: only now
    # may the raw log go. A run that dies before this leaves it in the inbox, and its rerun starts over.
    if stamp is not None:
        where = inbox.retire(name, stamp, context.run.run_id)
        context.log.info(
            f"raw log {name} {where or 'left in the inbox: it changed since it was read, and gets its own run'}"
        )


def _log_metadata(name: str, tables: LogTables, redaction: RedactionReport) -> dict[str, dict[str, Any]]:
    """Each of `failure_logs`' outputs' metadata, by output name: counts and what they hold, never a value."""
    traffic, records, rejects = tables.traffic, tables.failures, tables.rejects
    return {
        "production_traffic": {
            "file": name,
            "interactions": len(traffic),
            "outcomes": count_table(traffic["outcome"], "outcome") if len(traffic) else "none",
            "models": count_table(traffic["model"], "model") if len(traffic) else "none",
        },
        "failure_logs": {
            "file": name,
            "records": len(records),
            "interactions": len(traffic),
            "rejected_lines": len(rejects),
            # Counts by kind, never the values.
            "redacted": dg.MetadataValue.json(dict(redaction.counts)),
            "formats": count_table(records["format"], "format") if len(records) else "none",
        },
        "failure_rejects": {
            "rejected_lines": len(rejects),
            "reasons": count_table(rejects["reason_code"], "reason_code"),
        },
    }


@dg.asset(
    group_name=groups.FAILURES,
    ins={
        "production_traffic": dg.AssetIn(
            "production_traffic",
            partition_mapping=dg.AllPartitionMapping(),
            # A log stored before traffic rows were kept has none (and its raw file is gone): counted without it.
            metadata={"allow_missing_partitions": True},
        )
    },
)
def failure_rates(context: dg.AssetExecutionContext, production_traffic) -> dg.MaterializeResult:
    """Each model's failure rate with a 95% Wilson interval, per night (log file) and family, and over all nights."""
    files = _by_file(production_traffic)
    rows = [row for _, frame in sorted(files.items()) for row in records_from_frame(frame)]
    rates = rate_table(rows)
    report = rate_report(rates)
    context.log.info(
        "; ".join(f"{r['model']}: {rate_text(r)} over {r['served']} interactions" for r in report.per_model)
        or "no traffic"
    )
    return dg.MaterializeResult(
        value=pd.DataFrame(rates, columns=RATE_COLUMNS), metadata=_rate_metadata(report, interactions=len(rows))
    )


_SHOWN_COLUMNS = ("model", "served", "failed", "unknown", "failure_rate")


def _rate_metadata(report: RateReport, interactions: int) -> dict[str, Any]:
    """`failure_rates`' metadata: the counts, the rates per model and per night as tables, their plot, and each
    model's rate over every night on its own (so the UI charts it across materializations)."""
    return {
        "interactions": interactions,
        "nights": len(report.nights),
        "models": len(report.series),
        "per_model": dg.MetadataValue.md(
            markdown_table([{**r, "failure_rate": rate_text(r)} for r in report.per_model], _SHOWN_COLUMNS)
        ),
        "per_night": dg.MetadataValue.md(
            markdown_table(
                [{**r, "failure_rate": rate_text(r)} for r in report.per_night], ("night", "log", *_SHOWN_COLUMNS)
            )
        ),
        "failure_rate_plot": interval_chart(
            report.nights,
            report.series,
            title="failure rate per night (95% interval)",
            xlabel="night",
            ylabel="failure rate",
        )
        if report.nights
        else "no traffic yet",
        **{f"{r['model']}/failure_rate": r["failure_rate"] for r in report.per_model if r["failure_rate"] is not None},
    }


def _by_file(tables) -> dict[str, pd.DataFrame]:
    """The IO manager gives one DataFrame per file, a bare DataFrame for a single file, and None for none yet."""
    return tables if isinstance(tables, dict) else {} if tables is None else {"": tables}


@dg.multi_asset(
    group_name=groups.FAILURES,
    ins={"failure_logs": dg.AssetIn("failure_logs", partition_mapping=dg.AllPartitionMapping())},
    outs={
        "failure_tasks": dg.AssetOut(description="Failures with a derived verifier, as candidate tasks."),
        "review_queue": dg.AssetOut(
            description="Failures no verifier could be derived from: a person completes the seed stub under seeds/."
        ),
    },
)
def failure_tasks(failure_logs, seeds: SeedRepository):
    """Every stored failure becomes a task (verifier from its expected outcome) or a review item."""
    files = _by_file(failure_logs)
    records = [record for _, frame in sorted(files.items()) for record in records_from_frame(frame)]
    tasks, review = derive_failure_tasks(records, context=seeds.verify_context())
    task_frame = frame_from_records(tasks, TASK_FIELDS)
    # An item a person completed into a seed (its lineage names the failure) has left the queue.
    review_frame = drop_completed(frame_from_records(review, REVIEW_COLUMNS), completed_failures(seeds.folder))
    yield dg.Output(
        task_frame,
        output_name="failure_tasks",
        metadata={
            "tasks": len(task_frame),
            "files": len(files),
            "families": count_table(task_frame["family"], "family") if len(task_frame) else "none",
            "preview": preview(task_frame, ("task_id", "family")),
        },
    )
    yield dg.Output(
        review_frame,
        output_name="review_queue",
        metadata={
            "items": len(review_frame),
            "reasons": count_table(review_frame["reason_code"], "reason") if len(review_frame) else "none",
            "preview": preview(review_frame, ("failure_id", "family", "reason_code", "origin")),
        },
    )


def build_failure_inbox(running: bool) -> dg.SensorDefinition:
    """The `failure_inbox` sensor; `running` sets whether it starts switched on (production) or off."""

    @dg.sensor(
        name="failure_inbox",
        asset_selection=dg.AssetSelection.assets(*LOG_ASSETS),
        minimum_interval_seconds=60,
        default_status=dg.DefaultSensorStatus.RUNNING if running else dg.DefaultSensorStatus.STOPPED,
        description="A partition and a run per new or changed failure log in the inbox.",
    )
    def failure_inbox(context: dg.SensorEvaluationContext, inbox: FailureInbox) -> dg.SensorResult:
        """New files (or files whose size or mtime changed) since the cursor become partitions and run requests."""
        seen: dict[str, str] = json.loads(context.cursor) if context.cursor else {}
        files = inbox.files()
        # A log leaves the inbox once its records are stored: the cursor forgets it (and stays as small as the inbox).
        listed = {name for name, _ in files}
        seen = {name: stamp for name, stamp in seen.items() if name in listed}
        new_keys, requests = [], []
        for name, stamp in files:
            if seen.get(name) == stamp:
                continue
            seen[name] = stamp
            new_keys.append(name)
            # The run key makes Dagster drop a request it has already launched (overlapping ticks, a restart).
            requests.append(dg.RunRequest(partition_key=name, run_key=f"{name}:{stamp}"))
        known = set(context.instance.get_dynamic_partitions(failure_files.name))
        return dg.SensorResult(
            run_requests=requests,
            dynamic_partitions_requests=[failure_files.build_add_request(sorted(set(new_keys) - known))],
            cursor=json.dumps(seen, sort_keys=True),
        )

    return failure_inbox
