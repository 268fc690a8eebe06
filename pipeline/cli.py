"""The `seedwheel` command line: run the flywheel, check seed files, judge and ingest files, open the UI, serve."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from core import SeedwheelError
from core.signals import stoppable
from pipeline.settings import PROFILES, Settings

if TYPE_CHECKING:
    from curation.seed_import import ImportReport
    from pipeline.runs import RunSummary

UI_HOST = "127.0.0.1"
# The steps whose wall time a run report names, slowest first: where a run spent its minutes.
SLOWEST_STEPS = 8


@contextlib.contextmanager
def seedwheel_errors(*, usage: bool = False) -> Iterator[None]:
    """A `SeedwheelError` as click's error: its message and hint, no traceback (a context manager or decorator).

    Exit 1 (`click.ClickException`); with `usage=True`, exit 2 and the command's usage line (`click.UsageError`),
    for commands whose errors are about the arguments given (a bad file, a selection that matches nothing).
    """
    try:
        yield
    except SeedwheelError as exc:
        raise (click.UsageError if usage else click.ClickException)(str(exc)) from exc


class _Commands(click.Group):
    """The `seedwheel` group: every subcommand's `SeedwheelError` ends as a one-line error, exit 1."""

    def invoke(self, ctx: click.Context) -> object:
        with seedwheel_errors():
            return super().invoke(ctx)


# One --home for every command: a folder or an object-store URL, as SEEDWHEEL_HOME takes (a click.Path would turn
# s3://bucket/prefix into the local folder s3:/bucket/prefix).
home_option = click.option(
    "--home",
    default=None,
    metavar="DIR|URL",
    help="Storage root: a folder or s3://bucket/prefix. Default: $SEEDWHEEL_HOME, else .seedwheel.",
)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """seedwheel: the data flywheel for RL from verifiable rewards, as a Dagster project."""


@main.command()
@click.option("--profile", type=click.Choice(PROFILES), help="Default: $SEEDWHEEL_PROFILE, else quickstart.")
@click.option(
    "--select",
    default=None,
    help="Asset selection, comma-separated as `dagster asset materialize` reads it, e.g. 'seed_tasks+', "
    "'group:seeds' or 'seed_tasks,task_variants'.",
)
@click.option(
    "--job",
    default=None,
    help="Materialize a job's assets instead of a selection: flywheel_job (every asset), regeneration_job (seeds "
    "to splits, as the nightly schedule runs it) or training_job (training and the gate on the stored splits).",
)
@home_option
@click.option(
    "--executor",
    type=click.Choice(["in_process", "multiprocess", "celery"]),
    default="in_process",
    show_default=True,
    help="multiprocess: a process per step, two at a time (as `dagster dev` runs them); celery: each step on a "
    "`seedwheel worker` ($SEEDWHEEL_CELERY_BROKER).",
)
@seedwheel_errors(usage=True)
def run(profile: str | None, select: str | None, job: str | None, home: str | None, executor: str) -> None:
    """Materialize the asset graph (recorded in the Dagster instance, visible in the UI)."""
    from pipeline.runs import materialize  # Dagster loads slowly; keep `seedwheel --help` fast

    settings = Settings.from_env(profile=profile, home=home)
    click.echo(f"seedwheel run: profile={settings.profile} storage={settings.home}")
    _echo_run(settings, materialize(settings, select, executor=executor, job=job))


@main.command()
@click.argument("run_id", required=False)
@home_option
@seedwheel_errors()
def report(run_id: str | None, home: str | None) -> None:
    """Print what a recorded run did, as `seedwheel run` printed it: its tables, checks and promotion.

    RUN_ID defaults to the last `seedwheel run` (or `make quickstart`) of the asset graph. Exits 1 when that run
    failed, so a script can check last night's run.
    """
    from pipeline.runs import run_summary  # Dagster loads slowly; keep `seedwheel --help` fast

    settings = Settings.from_env(home=home)
    _echo_run(settings, run_summary(settings, run_id))


def _echo_run(settings: Settings, summary: RunSummary) -> None:
    """The report of a finished run (its assets, checks, failures and promotion); exits 1 when it failed."""
    from training.promotion import decision_line

    click.echo(f"\nrun {summary.run_id}: {'succeeded' if summary.success else 'FAILED'}")
    click.echo(f"{'asset':<28} {'rows':>8}  path")
    for asset in summary.assets:
        rows = "-" if asset.rows is None else str(asset.rows)
        click.echo(f"{asset.key:<28} {rows:>8}  {asset.path}")
    if any(asset.key.endswith("_rejects") for asset in summary.assets):
        click.echo(
            "(a *_rejects table holds one row per refused attempt, with its reason: variant_rejects can outnumber "
            "task_variants, since generators try more variants than they keep)"
        )
    for name, passed, severity in summary.checks:
        click.echo(f"check {name}: {'passed' if passed else f'failed ({severity})'}")
    if summary.step_seconds:
        slowest = sorted(summary.step_seconds.items(), key=lambda item: -item[1])[:SLOWEST_STEPS]
        click.echo(f"slowest steps: {', '.join(f'{step} {seconds:.0f} s' for step, seconds in slowest)}")
    for failure in summary.failures:
        click.echo(f"step failed: {failure}", err=True)
    for asset in summary.assets:
        if asset.key == "promotion":
            decision = asset.metadata
            line = decision_line(bool(decision["promoted"]), str(decision["candidate"]), str(decision["baseline"]))
            click.echo(f"\npromotion: {line}")
            click.echo(str(decision["reasons"]))
            click.echo(str(decision["failure_eval"]))
    click.echo(f"\nRuns are recorded in {settings.dagster_home}. Open the UI: make ui (or seedwheel ui), then")
    click.echo(f"http://{UI_HOST}:3000. Read outputs with pandas: core.tables.read_table(path).")
    if not summary.success:
        sys.exit(1)


@main.group()
def seeds() -> None:
    """Curated seed sets."""


@seeds.command("validate")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@seedwheel_errors(usage=True)
def seeds_validate(paths: tuple[Path, ...]) -> None:
    """Check seed files (default: the seeds folder); one line per problem, exit 1 if any."""
    from validators.registry import VerifyContext
    from validators.seeds import load_seeds

    settings = Settings.from_env()
    settings.register_verifier_plugins()
    try:
        seed_set = load_seeds(
            paths or [settings.seeds_dir], root=Path.cwd(), context=VerifyContext(seeds_dir=settings.seeds_dir)
        )
    except FileNotFoundError as exc:
        raise click.UsageError(str(exc)) from exc
    for problem in seed_set.problems:
        click.echo(str(problem))
    click.echo(
        f"{len(seed_set.files)} files, {len(seed_set.tasks)} valid seeds, {len(seed_set.problems)} problems",
        err=True,
    )
    if seed_set.problems:
        sys.exit(1)


def _pairs(values: tuple[str, ...], option: str) -> dict[str, str]:
    """`KEY=VALUE` options as a dict; a value without `=` is a usage error naming the option."""
    pairs = {}
    for value in values:
        key, sep, rest = value.partition("=")
        if not sep or not key:
            raise click.UsageError(f"{option} {value!r}: write it as KEY=VALUE")
        pairs[key] = rest
    return pairs


def _json_value(text: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text  # a bare word is a string


@seeds.command("import")
@click.argument("source", type=click.Path(path_type=Path))
@click.option("--family", required=True, help="The family the seeds join (their folder under seeds/).")
@click.option(
    "--from",
    "source_format",
    type=click.Choice(["columns", "nemo-gym"]),
    default="columns",
    show_default=True,
    help="columns: a table whose columns --prompt/--answer name; nemo-gym: NeMo Gym rows (docs/interop.md).",
)
@click.option("--prompt", "prompt", default=None, help="The user message, over the row's columns: '{question}'.")
@click.option(
    "--verifier",
    default=None,
    help="The registered verifier that checks each seed, e.g. numeric_answer (--from nemo-gym: of expected_answer "
    "rows, default math_answer).",
)
@click.option("--answer", default=None, help="The gold answer's column: the verifier's params come from it.")
@click.option("--reference", default=None, help="The known-good answer's column (default: the --answer column).")
@click.option("--system", default=None, help="A system message before each prompt.")
@click.option("--param", "params", multiple=True, metavar="KEY=JSON", help="A verifier param, the same for every row.")
@click.option(
    "--param-from", "param_from", multiple=True, metavar="KEY=COLUMN", help="A verifier param from a column."
)
@click.option("--tag", "tags", multiple=True, help="A tag on every seed (repeatable).")
@click.option("--source", "source_name", default=None, help="The name in each seed's source:NAME:ROW tag.")
@click.option("--split", default=None, help="The split of a saved DatasetDict folder.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Convert the first N rows only.")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The seed file to write (default: seeds/FAMILY/SOURCE_STEM.jsonl).",
)
@click.option(
    "--rejects",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write the rows not converted, with their reasons, to this JSONL file.",
)
@click.option(
    "--rollouts",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="--from nemo-gym: NeMo Gym rollouts of the rows; a passing answer is the reference of a row without one.",
)
def seeds_import(
    source: Path,
    family: str,
    source_format: str,
    prompt: str | None,
    verifier: str | None,
    answer: str | None,
    reference: str | None,
    system: str | None,
    params: tuple[str, ...],
    param_from: tuple[str, ...],
    tags: tuple[str, ...],
    source_name: str | None,
    split: str | None,
    limit: int | None,
    output: Path | None,
    rejects: Path | None,
    rollouts: Path | None,
) -> None:
    """Convert a CSV, JSONL, Parquet file, saved `datasets` folder or NeMo Gym rows into a seed file; exit 1 if a row
    is left out."""
    from curation.seed_import import ImportSpec, import_seeds
    from validators.registry import VerifyContext

    settings = Settings.from_env()
    settings.register_verifier_plugins()
    output = output or settings.seeds_dir / family / f"{source.stem}.jsonl"
    context = VerifyContext(seeds_dir=settings.seeds_dir)
    if source_format == "nemo-gym":
        columns_only = {
            "--prompt": prompt,
            "--answer": answer,
            "--reference": reference,
            "--system": system,
            "--param": params,
            "--param-from": param_from,
            "--split": split,
        }
        given = [name for name, value in columns_only.items() if value]
        if given:
            raise click.UsageError(f"{', '.join(given)}: not for --from nemo-gym (each row holds its prompt and gold)")
        from curation.seed_import import write_seeds
        from interop.nemo_gym import DEFAULT_ANSWER_VERIFIER, read_seed_records

        with seedwheel_errors(usage=True):
            found = read_seed_records(
                source,
                family=family,
                answer_verifier=verifier or DEFAULT_ANSWER_VERIFIER,
                rollouts=rollouts,
                tags=tags,
                source_name=source_name,
                limit=limit,
                context=context,
            )
            report = write_seeds(found.records, found.problems, output, context=context)
        _echo_import(report, rejects)
        return
    if rollouts is not None:
        raise click.UsageError("--rollouts: only for --from nemo-gym")
    missing = [name for name, value in (("--prompt", prompt), ("--verifier", verifier)) if value is None]
    if missing:
        raise click.UsageError(f"Missing option {', '.join(repr(name) for name in missing)}.")
    assert prompt is not None and verifier is not None
    spec = ImportSpec(
        family=family,
        prompt=prompt,
        verifier=verifier,
        answer=answer,
        reference=reference,
        system=system,
        params={key: _json_value(value) for key, value in _pairs(params, "--param").items()},
        param_columns=_pairs(param_from, "--param-from"),
        tags=tags,
        source=source_name,
    )
    with seedwheel_errors(usage=True):
        report = import_seeds(source, spec, output, split=split, limit=limit, context=context)
    _echo_import(report, rejects)


def _echo_import(report: ImportReport, rejects: Path | None) -> None:
    """An import's problems (and --rejects file) and its one-line summary; exit 1 when a row was left out."""
    from core.tables import write_jsonl

    for problem in report.problems:
        click.echo(str(problem))
    if rejects is not None:
        rows = [{"origin": f"{p.path}:{p.line}", **asdict(p.problem)} for p in report.problems]
        write_jsonl(rows, rejects)
    wrote = f"wrote {report.written} seeds to {report.output}" if report.written else "wrote nothing"
    click.echo(f"{report.rows} rows: {wrote}; {report.rejected_rows} rows not converted", err=True)
    if report.rejected_rows:
        sys.exit(1)


@main.command()
@click.argument("tasks", type=click.Path(exists=True, path_type=Path))
@click.argument("completions", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Verdicts file; default stdout.")
@seedwheel_errors(usage=True)
def verify(tasks: Path, completions: Path, output: Path | None) -> None:
    """Score saved completions with their tasks' verifiers: one JSONL verdict per row, then a summary.

    TASKS is a JSONL of task records, a Parquet table from the pipeline, or seed files (a folder or a .yaml).
    COMPLETIONS is a JSONL of {"task_id", "completion"} rows. Every row that cannot be read is listed with its
    line and fix, the others are scored, and the exit code is 1.
    """
    from core.tables import write_jsonl
    from validators.offline_verify import audit, format_summary
    from validators.registry import VerifyContext

    settings = Settings.from_env()
    settings.register_verifier_plugins()
    report = audit(tasks, completions, context=VerifyContext(seeds_dir=settings.seeds_dir))
    if output is None:
        for row in report.rows:
            click.echo(json.dumps(row, ensure_ascii=False))
    else:
        write_jsonl(report.rows, output)
    click.echo(format_summary(report.summary), err=True)
    if report.rejected:
        click.echo(
            f"\n{len(report.rejected)} row(s) of {completions} could not be read, and were not scored:", err=True
        )
        for error in report.rejected:
            click.echo(f"  {error}", err=True)
        sys.exit(1)


@main.command()
@click.argument("tasks", type=click.Path(exists=True, path_type=Path))
@click.argument("episodes", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@seedwheel_errors(usage=True)
def replay(tasks: Path, episodes: Path) -> None:
    """Replay saved episodes of `episode` tasks, each in a fresh environment: verdict, end reason, calls, state diff.

    TASKS as for `verify`. EPISODES is a JSONL of {"task_id", "completion"} rows, as `verify` reads them, whose
    completion is the episode: OpenAI-style chat messages with `tool_calls` (or text with <tool_call> blocks).
    Exit 1 when an episode fails.
    """
    from validators.offline_verify import completion_rows, load_tasks
    from validators.registry import VerifyContext
    from validators.verifiers.episode import replay as replay_episode

    settings = Settings.from_env()
    context = VerifyContext(seeds_dir=settings.seeds_dir)
    loaded = load_tasks(tasks, context=context)
    failed = 0
    for line, task_id, completion in completion_rows(episodes, loaded, tasks):
        task = loaded[task_id]
        if task["verifier"]["name"] != "episode":
            name = task["verifier"]["name"]
            raise click.UsageError(
                f"{episodes}:{line}: task {task_id} is a {name} task; score it with seedwheel verify"
            )
        result = replay_episode(task["verifier"]["params"], completion, context, prompt=task.get("prompt", ()))
        failed += not result.verdict.passed
        click.echo("\n".join([f"{episodes}:{line} task {task_id}", *result.describe(), ""]))
    if failed:
        sys.exit(1)


@main.command()
@click.argument("input_path", metavar="INPUT.jsonl", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--text-field", default="text", show_default=True, help="Field with the text; dotted for nested.")
@click.option("--threshold", type=float, default=None, help="Near-duplicate Jaccard threshold (default: measured).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Default: INPUT.dedup.jsonl.")
@seedwheel_errors(usage=True)
def dedup(input_path: Path, text_field: str, threshold: float | None, output: Path | None) -> None:
    """Label exact and near duplicates in any JSONL file (the pipeline's dedup, on your own corpus).

    Every input row is written, in input order, with `is_duplicate`, `cluster_id` and `duplicate_of` (the
    0-based input line of the kept row, or null).
    """
    from curation.dedup import MinHashConfig, dedup_jsonl

    output = output or input_path.with_suffix(".dedup.jsonl")
    config = MinHashConfig() if threshold is None else MinHashConfig(threshold=threshold)
    summary = dedup_jsonl(input_path, output, text_field=text_field, config=config)
    click.echo(
        f"{summary.rows} rows, {summary.duplicates} duplicates ({summary.exact_duplicates} exact, "
        f"{summary.near_duplicates} near) with {summary.config}, in {summary.seconds:.2f} s -> {output}",
        err=True,
    )


@main.command()
@click.option(
    "--tasks",
    "tasks_path",
    required=True,
    type=click.Path(path_type=Path),
    help="Task records: a JSONL file, a Parquet table from the pipeline, or seed files (a folder or a .yaml).",
)
@click.option("-o", "--out", type=click.Path(dir_okay=False, path_type=Path), help="Judgments: .jsonl or .parquet.")
@click.option("--base-url", default=None, help="Judge endpoint; default $SEEDWHEEL_LLM_BASE_URL, else a local server.")
@click.option("--model", default=None, help="Judge model. Default: $SEEDWHEEL_LLM_MODEL, else the profile's.")
@click.option("--max-tasks", type=click.IntRange(min=1), default=None, help="Judge only the file's first N tasks.")
@click.option("--concurrency", type=click.IntRange(min=1), default=None, help="Requests in flight (profile's).")
@click.option("--worst", type=click.IntRange(min=0), default=5, show_default=True, help="Worst-scored tasks to show.")
@click.option("--profile", type=click.Choice(PROFILES), help="Default: $SEEDWHEEL_PROFILE, else quickstart.")
@home_option
def judge(
    tasks_path: Path,
    out: Path | None,
    base_url: str | None,
    model: str | None,
    max_tasks: int | None,
    concurrency: int | None,
    worst: int,
    profile: str | None,
    home: str | None,
) -> None:
    """Score a task file with the LLM judge, outside Dagster, to iterate on the rubric quickly.

    It judges as the pipeline's judged_tasks does (same endpoint settings, rubric, acceptance rule and params)
    through the same cache, <home>/llm_cache: what is judged here costs the next run nothing, and the reverse.
    Prints verdicts, the accept rate, score counts per criterion, the worst-scored tasks with the judge's
    rationale, and the calls made versus answered from the cache.
    """
    from core.tables import frame_from_records, write_jsonl, write_table
    from judge import DEFAULT_RUBRIC, LABEL_PARAMS, JudgeInputError, format_summary, judge_tasks
    from pipeline.definitions import build_definitions  # Dagster loads slowly; keep `seedwheel --help` fast
    from validators.offline_verify import load_tasks
    from validators.registry import VerifyContext

    if out is not None and out.suffix not in (".jsonl", ".parquet"):
        raise click.BadParameter(f"{out} must end in .jsonl or .parquet (the format to write)", param_hint="--out")
    settings = Settings.from_env(profile=profile, home=home)
    overrides = {"llm_base_url": base_url, "llm_model": model}
    settings = replace(settings, **{k: v for k, v in overrides.items() if v is not None})
    settings.register_verifier_plugins()
    tasks = list(load_tasks(tasks_path, context=VerifyContext(seeds_dir=settings.seeds_dir)).values())
    if not tasks:
        raise click.ClickException(f"{tasks_path}: no tasks to judge; give a file with at least one task record")
    tasks = tasks[:max_tasks]
    resources = build_definitions(settings).resources
    llm, policy = resources["llm"], resources["judge"]
    if concurrency is not None:
        llm = type(llm)(**{**llm.model_dump(), "max_concurrency": concurrency})
    with seedwheel_errors(usage=True):  # the endpoint config checks itself: a malformed URL, no model for a remote URL
        endpoint = llm.endpoint()
    click.echo(f"seedwheel judge: {len(tasks)} tasks from {tasks_path} on {endpoint}", err=True)
    try:
        with endpoint:
            run = judge_tasks(
                tasks, client=endpoint.client(), rule=policy.rule(), params=LABEL_PARAMS, progress=_progress("judged")
            )
    except JudgeInputError as exc:  # the judge names the task, the file is ours to name; endpoint errors pass
        raise click.ClickException(f"{tasks_path}: {exc}") from exc
    family_of = {task["task_id"]: task.get("family", "?") for task in tasks}
    if out is not None:
        rows = [{"task_id": j.task_id, "family": family_of[j.task_id], **j.as_dict()} for j in run.judgments]
        if out.suffix == ".parquet":
            write_table(frame_from_records(rows), out)
        else:
            write_jsonl(rows, out)
        click.echo(f"{len(rows)} judgments -> {out}", err=True)
    click.echo(format_summary(run, DEFAULT_RUBRIC, family_of, worst_n=worst))


def _progress(what: str) -> Callable[[int, int], None]:
    """`progress(done, total)` for long batches: a line on stderr about every tenth."""
    last = [-1]

    def progress(done: int, total: int) -> None:
        step = done * 10 // max(total, 1)
        if step != last[0]:
            last[0] = step
            click.echo(f"{what} {done}/{total}", err=True)

    return progress


@main.command()
@click.option("--profile", type=click.Choice(PROFILES), help="Default: $SEEDWHEEL_PROFILE, else quickstart.")
@home_option
@click.option("--model-size", default=None, help="Price a model of this size instead of the configured one: 0.5B, 8B.")
@click.option("--gpu", default=None, help="A device of training/throughputs.csv (h100, a100, cpu-2core).")
@click.option("--gpus", type=click.IntRange(min=1), default=1, show_default=True, help="Devices training together.")
@click.option("--prompts", type=click.IntRange(min=1), default=None, help="GRPO prompts, when no split is stored.")
@click.option("--prompt-tokens", type=click.IntRange(min=1), default=None, help="Mean prompt length, likewise.")
@click.option("--eval-tasks", type=click.IntRange(min=1), default=None, help="Eval tasks, when no split is stored.")
@click.option("--grpo", "grpo_values", multiple=True, metavar="KEY=VALUE", help="A GRPO setting (JSON value); repeat.")
@seedwheel_errors(usage=True)
def plan(
    profile: str | None,
    home: str | None,
    model_size: str | None,
    gpu: str | None,
    gpus: int,
    prompts: int | None,
    prompt_tokens: int | None,
    eval_tasks: int | None,
    grpo_values: tuple[str, ...],
) -> None:
    """What the next GRPO run will cost (tokens, FLOPs, wall time, memory, signal) and what makes it wasteful.

    Reads the stored splits and difficulty profile when there are any, else plans from the flags and says what it
    assumed. Starts no run: `seedwheel plan --model-size 8B --gpu h100 --gpus 8` answers a what-if.
    """
    from pipeline.plan import plan_from_settings

    grpo = {}
    for item in grpo_values:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r}: give KEY=VALUE, e.g. num_generations=16", param_hint="--grpo")
        try:
            grpo[key] = json.loads(raw)
        except json.JSONDecodeError:
            raise click.BadParameter(
                f"{item!r}: the value is not JSON (numbers as is, text quoted)", param_hint="--grpo"
            ) from None
    settings = Settings.from_env(profile=profile, home=home)
    report = plan_from_settings(
        settings,
        model_size=model_size,
        device=gpu,
        gpus=gpus,
        prompts=prompts,
        prompt_tokens=prompt_tokens,
        eval_tasks=eval_tasks,
        grpo=grpo,
    )
    budget = report.budget
    for row in budget.table():
        click.echo(f"{row['quantity']:<30} {row['value']}")
        click.echo(f"{'':<30} ({row['how']})")
    click.echo("\nassumed:")
    for line in budget.assumed:
        click.echo(f"- {line}")
    click.echo("\nadvice:" if budget.advice else "\nadvice: nothing to flag")
    for line in budget.advice:
        click.echo(f"- {line}")
    if report.calibration is not None:
        ratio = report.calibration.get("wall_time_ratio")
        click.echo(
            "\nlast run: predicted / measured wall time "
            + (f"{ratio:.2f}" if ratio is not None else f"not comparable ({report.calibration.get('problems')})")
        )


@main.command()
@click.argument("ident", metavar="CHECKPOINT_OR_TASK_ID")
@home_option
def lineage(ident: str, home: str | None) -> None:
    """Where a task came from and what trained on it, or what a checkpoint was trained on (from stored assets)."""
    from pipeline.lineage import explain

    settings = Settings.from_env(home=home)
    click.echo(explain(settings.home, ident))


@main.command()
@home_option
@click.option("--keep", type=click.IntRange(min=1), default=2, show_default=True, help="Newest manifests kept.")
@click.option(
    "--min-age-hours",
    type=click.FloatRange(min=0),
    default=24.0,
    show_default=True,
    help="Delete nothing younger: longer than any step takes to read or commit a folder.",
)
def prune(home: str | None, keep: int, min_age_hours: float) -> None:
    """Delete the storage root's garbage: superseded manifests and objects no manifest names (an object store),
    and the step outputs of runs that failed before their merge. Run it from cron or a schedule."""
    from resources import StorageRoot

    root = StorageRoot(root=str(Settings.from_env(home=home).home))
    rows = root.prune(keep=keep, min_age_s=min_age_hours * 3600)
    for row in rows:
        click.echo(f"{row['what']}: {row['manifests']} manifests, {row['objects']} files, {row['bytes']:,} bytes")
    total = sum(row["bytes"] for row in rows)
    click.echo(f"pruned {len(rows)} place(s) under {root.root}, {total:,} bytes" if rows else "nothing to prune")


# `seedwheel export --split NAME` -> the table the splits step stores at `<home>/<table>.parquet`.
EXPORT_SPLITS = {"train": "train_tasks", "eval": "eval_tasks", "failure_eval": "failure_eval"}
# The verl config key that takes each split's file.
VERL_DATA_KEYS = {"train": "data.train_files", "eval": "data.val_files", "failure_eval": "data.val_files"}


@main.command("export")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["trl", "verl", "nemo-gym"]),
    required=True,
    help="trl: GRPOTrainer's dataset (.parquet or .jsonl); verl: its RL dataset (.parquet); nemo-gym: its rows.",
)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True, help="File to write.")
@click.option("--split", type=click.Choice(list(EXPORT_SPLITS)), default="train", show_default=True)
@home_option
def export(fmt: str, output: Path, split: str, home: str | None) -> None:
    """Write a stored split's task records in another trainer's format (TRL, verl, NeMo Gym), replaced whole.

    Reads `<home>/train_tasks.parquet` (or `eval_tasks`, `failure_eval`), what `make quickstart` or
    `seedwheel run --job regeneration_job` stores. The rows are scored by the same verifier registry:
    `validators.rewards.VerifierReward` for TRL, `compute_score` in `interop/verl.py` for verl (the command
    prints the config lines), `seedwheel reward-server` for NeMo Gym (docs/interop.md).
    """
    from upath import UPath

    from resources import load_table
    from validators.registry import VerifyContext

    if fmt == "nemo-gym" and output.suffix != ".jsonl":  # NeMo Gym reads JSON Lines datasets
        raise click.UsageError(f"{output}: NeMo Gym's rows are JSON Lines; name the file *.jsonl")
    settings = Settings.from_env(home=home)
    path = settings.home / f"{EXPORT_SPLITS[split]}.parquet"
    if not path.exists():
        raise click.ClickException(
            f"no {split} split at {path}: run `make quickstart` or `seedwheel run --job regeneration_job` first "
            "(or pass --home to the storage root that holds it)"
        )
    tasks = load_table(UPath(str(path)))
    if fmt == "trl":
        from training.export import export_file

        rows = export_file(tasks, output)
    elif fmt == "verl":
        from interop import verl

        rows = verl.export_rows(tasks, output, split=split, context=VerifyContext(seeds_dir=settings.seeds_dir))
    else:
        from core.tables import records_from_frame
        from interop import nemo_gym  # written beside verl; imported only when asked for

        rows = nemo_gym.export_rows(records_from_frame(tasks), output)
    click.echo(f"wrote {rows} {split} tasks from {path} to {output} ({fmt})")
    if fmt == "verl":
        click.echo(
            f"verl: {VERL_DATA_KEYS[split]}={output.resolve()} custom_reward_function.path={Path(verl.__file__)} "
            "custom_reward_function.name=compute_score "
            f"+custom_reward_function.reward_kwargs.seeds_dir={settings.seeds_dir}"
        )


@main.group()
def splits() -> None:
    """The split ledger: which side each lineage root is on, and re-splitting."""


@splits.command("show")
@home_option
def splits_show(home: str | None) -> None:
    """The split in force and every plan that made it."""
    from resources import StorageRoot

    ledger = StorageRoot(root=str(Settings.from_env(home=home).home)).split_ledger()
    state = ledger.state()
    sides = list(state.sides.values())
    click.echo(
        f"split plan {state.seq} (epoch {state.epoch}, id {state.plan_id}, salt {state.salt!r}): "
        f"{sides.count('train')} train roots, {sides.count('eval')} eval roots"
    )
    for plan in ledger.plans():
        moved = f", {len(plan['moved'])} moved" if plan["moved"] else ""
        note = f" ({plan['note']})" if plan["note"] else ""
        click.echo(
            f"  plan {plan['seq']} {plan['kind']} {plan['created_at']} run {plan['run_id']}: "
            f"{len(plan['new_roots'])} new roots{moved}{note}"
        )


@splits.command("resplit")
@click.option("--salt", required=True, help="The new salt every root is hashed with (must differ from the current).")
@click.option("--note", required=True, help="Why, for the record (e.g. 'stratify by difficulty from now on').")
@click.option("--yes", is_flag=True, help="Re-split for real; without it, only show what would move.")
@home_option
def splits_resplit(salt: str, note: str, yes: bool, home: str | None) -> None:
    """Re-split every lineage root of the stored splits with a new salt, as a new split epoch.

    Roots some checkpoint trained on stay on the train side. The promotion gate then refuses to compare a
    checkpoint of the new epoch with one of an older epoch. The next regeneration writes the new tables.
    """
    import getpass

    import pandas as pd

    from core.tables import read_table, records_from_frame
    from curation.curate import near_copy_roots
    from curation.manifests import trained_tasks
    from resources import CHECKPOINTS_FOLDER, CurationPolicy, StorageRoot

    settings = Settings.from_env(home=home)
    tables = [settings.home / f"{name}.parquet" for name in ("train_tasks", "eval_tasks")]
    missing = [str(path) for path in tables if not path.exists()]
    if missing:
        raise click.ClickException(f"no split to re-split: {', '.join(missing)} missing; run the regeneration first")
    ledger = StorageRoot(root=str(settings.home)).split_ledger()
    if salt == ledger.state().salt:
        raise click.UsageError(f"--salt {salt!r} is the salt in force; pass a new one to re-split")
    tasks = pd.concat([read_table(path) for path in tables], ignore_index=True)
    policy = CurationPolicy()
    config = replace(policy.split_config(), salt=salt)
    pinned = set(trained_tasks(settings.home / CHECKPOINTS_FOLDER)["root"])
    known = dict.fromkeys(pinned, "train")
    follows = near_copy_roots(records_from_frame(tasks), policy.minhash_config(), known=known).follows
    who = f"cli:{getpass.getuser()}"
    entry = ledger.resplit(tasks, config, pinned=pinned, run_id=who, note=note, commit=yes, follows=follows)
    changes = [f"{root}: {was} -> {now}" for root, (was, now) in sorted(entry.moved.items())]
    for line in [*entry.notes, f"{len(entry.moved)} roots move, {len(entry.new_roots)} get a first side"]:
        click.echo(line)
    for line in changes[:50]:
        click.echo(f"  {line}")
    if not yes:
        click.echo("nothing written: rerun with --yes to re-split")
        return
    click.echo(f"split epoch {entry.state.epoch} in force (plan {entry.state.seq}); the next regeneration applies it")


@main.group()
def failures() -> None:
    """Production failure logs."""


@failures.command("ingest")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@home_option
def failures_ingest(files: tuple[Path, ...], home: str | None) -> None:
    """Materialize traffic or failure logs (JSONL) now, as the inbox sensor would: only redacted records are stored.

    A log is read where it is and left there (no copy is made); a log already in the inbox is taken out of it once
    its records are stored, as the sensor's runs do.
    """
    from assets.failures import LOG_ASSETS
    from pipeline.runs import materialize

    settings = Settings.from_env(home=home)
    inbox = Path(settings.failure_inbox).resolve()
    failed = False
    for source in files:
        if source.suffix != ".jsonl":
            raise click.UsageError(f"{source}: a traffic or failure log is a .jsonl file (one interaction per line)")
        read_from = {} if source.resolve().parent == inbox else {"failure_logs": {"path": str(source.resolve())}}
        summary = materialize(
            settings,
            " or ".join(f"key:{key}" for key in LOG_ASSETS),
            partition=source.name,
            ops=read_from,
        )
        numbers = {a.key: a.metadata for a in summary.assets}
        logs = numbers.get("failure_logs", {})
        click.echo(
            f"{source.name}: {logs.get('interactions', 0)} interactions, {logs.get('records', 0)} failures, "
            f"{logs.get('rejected_lines', 0)} rejected lines, "
            f"redacted {json.dumps(logs.get('redacted', {}), sort_keys=True)}"
        )
        rejects = next((a.path for a in summary.assets if a.key == "failure_rejects"), None)
        if rejects is not None and logs.get("rejected_lines"):
            _echo_rejects(source, rejects)
            if not logs.get("interactions"):
                failed = True
                click.echo(f"no line of {source} could be read: nothing was ingested from it", err=True)
        for failure in summary.failures:
            failed = True
            click.echo(f"step failed: {failure}", err=True)
    click.echo(
        "Failure rates, tasks and the review queue follow on the next regeneration, or: "
        "seedwheel run --select group:failures"
    )
    if failed:
        sys.exit(1)


def _echo_rejects(source: Path, table: Path, shown: int = 5) -> None:
    """The first rejected lines of a failure log (line, redacted reason and fix), and where all of them are."""
    from core.tables import read_table

    rows = read_table(table)
    for row in rows.head(shown).itertuples():
        click.echo(f"  {source}:{row.line}: {row.reason}", err=True)
    more = f" ({len(rows) - shown} more)" if len(rows) > shown else ""
    click.echo(f"  every rejected line, with its reason{more}: {table}", err=True)


@main.command()
@click.option("--nights", type=click.IntRange(min=1), default=1, show_default=True, help="Nights to run.")
@home_option
@click.option("--profile", type=click.Choice(PROFILES), help="Default: $SEEDWHEEL_PROFILE, else quickstart.")
@click.option("--requests", type=click.IntRange(min=1), default=24, show_default=True, help="Requests per night.")
@click.option(
    "--pool-per-seed",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="Traffic-pool requests made from each seed (the pool is built on the first night and kept).",
)
@seedwheel_errors(usage=True)
def simulate(nights: int, home: str | None, profile: str | None, requests: int, pool_per_seed: int) -> None:
    """Close the loop offline: a stand-in app serves a night of traffic with the promoted model and drops its
    traffic log into the inbox, then the nightly path runs (sensor, failure tasks, regeneration, training, gate).

    Each night's record (traffic, failure rate with its 95% interval, failures in, tasks derived, training, the
    gate's decision) is printed and kept in <home>/simulation/nights.jsonl; a rerun continues after the last night.
    """
    from pipeline.simulate import SimulationConfig
    from pipeline.simulate import simulate as run_nights

    settings = Settings.from_env(profile=profile, home=home)
    config = SimulationConfig(nights=nights, requests=requests, pool_per_seed=pool_per_seed)
    click.echo(f"seedwheel simulate: profile={settings.profile} storage={settings.home} nights={nights}")
    records = run_nights(settings, config, echo=click.echo, progress=_progress)
    click.echo(f"\n{'night':>5} {'model':<28} {'served':>6} {'failed':>6}  {'failure rate':<20} decision")
    for record in records:
        rate = f"{record['failure_rate']:.2f} [{record['failure_rate_low']:.2f}, {record['failure_rate_high']:.2f}]"
        click.echo(
            f"{record['night']:>5} {record['model']:<28} {record['served']:>6} {record['failed']:>6}  {rate:<20} "
            f"{record['decision']}"
        )


@main.command()
@click.option("--concurrency", type=click.IntRange(min=1), default=1, show_default=True, help="Steps at a time.")
@click.option("--name", default="", help="The worker's node name, e.g. gpu1@%h (default: Celery's, celery@host).")
def worker(concurrency: int, name: str) -> None:
    """Run steps that runs queue on $SEEDWHEEL_CELERY_BROKER (Celery), with this machine's settings, until stopped.

    Start as many as the machines and cores allow; each needs the same storage root, Dagster instance and
    database as the runs (a shared SEEDWHEEL_HOME and SEEDWHEEL_DATABASE_URL on a cluster).
    """
    from pipeline.workers import run_worker

    run_worker(Settings.from_env(), concurrency=concurrency, name=name)


@main.command()
@click.option("--port", default=3000, show_default=True)
@home_option
def ui(port: int, home: str | None) -> None:
    """Open the Dagster UI on this project (`dagster dev`, which also runs schedules and sensors)."""
    from pipeline.instance import open_instance

    settings = Settings.from_env(home=home)
    open_instance(settings).dispose()
    target = ["-w", "workspace.yaml"] if Path("workspace.yaml").exists() else ["-m", "pipeline.definitions"]
    # The venv's own dagster, also when the venv is not activated (e.g. `.venv/bin/seedwheel ui`).
    dagster = Path(sys.executable).with_name("dagster")
    command = [str(dagster) if dagster.exists() else "dagster", "dev", *target, "-h", UI_HOST, "-p", str(port)]
    # Started in the background, SIGINT arrives ignored, and `dagster dev` would make SIGTERM ignored too: `kill`
    # would not stop it. With both at their defaults it shuts its webserver and daemon down on either.
    stoppable()
    os.execvpe(command[0], command, {**os.environ, **settings.environ()})


@main.command()
@click.option("--model", default=None, help="Model directory or hub id. Default: the bundled SmolLM2-135M-Instruct.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind (0.0.0.0: every interface).")
@click.option("--port", type=click.IntRange(1, 65535), default=8000, show_default=True)
@click.option("--max-batch", type=click.IntRange(min=1), default=16, show_default=True, help="Most rows per batch.")
@click.option("--device", default="cpu", show_default=True, help="cpu, cuda, cuda:1, ...")
@click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True, help="torch CPU threads.")
def serve(model: str | None, host: str, port: int, max_batch: int, device: str, threads: int) -> None:
    """Serve a model as an OpenAI-compatible endpoint (chat completions, n, JSON-schema outputs) until Ctrl-C.

    One torch thread by default: on cores shared with other work, two measured 5-7x slower than one.
    Without --model it serves the bundled real model, converted once under the models folder ($SEEDWHEEL_MODELS_DIR,
    else <home>/models), as the pipeline does. Point any OpenAI client at the printed base URL and model name.
    """
    import logging

    from langmodels.models import bundled_model
    from langmodels.server import ServerConfig
    from langmodels.server import serve as serve_model

    if model is None:
        models_dir = Settings.from_env().models_dir  # where the pipeline's local endpoint converts it too
        click.echo(f"seedwheel serve: preparing the bundled model under {models_dir}", err=True)
        model = str(bundled_model(models_dir))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    click.echo(f"seedwheel serve: loading {model} on {device}", err=True)

    def announce(base_url: str, name: str) -> None:
        click.echo(f"seedwheel serve: OpenAI-compatible endpoint at {base_url}")
        click.echo(f"seedwheel serve: model name {name} (Ctrl-C stops the server)")

    config = ServerConfig(model=model, host=host, port=port, device=device, threads=threads, max_batch=max_batch)
    serve_model(config, on_loaded=announce)


@main.command("reward-server")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind (0.0.0.0: every interface).")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True, help="0: any free port.")
@click.option(
    "--tasks",
    type=click.Path(exists=True, path_type=Path),
    default=None,
    help="Task records (as `seedwheel verify` reads them) for requests that name a task_id without a verifier.",
)
@click.option(
    "--answer-verifier", default="math_answer", show_default=True, help="The verifier of expected_answer rows."
)
@seedwheel_errors(usage=True)
def reward_server(host: str, port: int, tasks: Path | None, answer_verifier: str) -> None:
    """Answer NeMo Gym's POST /verify with seedwheel's verifiers until Ctrl-C or SIGTERM (docs/interop.md).

    The reward is the score `seedwheel verify` gives the same completion; a request that cannot be scored gets a
    4xx with one line of reason.
    """
    import logging

    from interop.reward_server import RewardServerConfig, load_task_index
    from interop.reward_server import serve as serve_rewards
    from validators.registry import VerifyContext

    settings = Settings.from_env()
    settings.register_verifier_plugins()
    context = VerifyContext(seeds_dir=settings.seeds_dir)
    config = RewardServerConfig(
        host=host, port=port, tasks=load_task_index(tasks, context), answer_verifier=answer_verifier, context=context
    )
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    def announce(url: str) -> None:
        click.echo(f"seedwheel reward-server: POST {url}/verify (Ctrl-C or SIGTERM stops it)")

    serve_rewards(config, on_ready=announce)


def _review_home(home: str | None) -> tuple[Settings, Path]:
    """Settings and the storage root as a local folder (the review page reads and writes files there); an
    object-store root ends the command with one line that says what to copy where."""
    from review.sampling import local_root

    settings = Settings.from_env(home=home)
    root = local_root(settings.home)
    settings.register_verifier_plugins()
    return settings, root


@main.group(invoke_without_command=True)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind (0.0.0.0: every interface).")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True, help="0: any free port.")
@click.option("--judge-model", default="", help="The judge model named in judge labels. Default: SEEDWHEEL_LLM_MODEL.")
@home_option
@click.pass_context
def review(ctx: click.Context, host: str, port: int, judge_model: str, home: str | None) -> None:
    """Serve the review page until Ctrl-C or SIGTERM (docs/review.md): label real outputs against the verifier,
    label the judge, complete the failures review queue. Labels go under <seeds>/audit/review/, seeds under
    <seeds>/<family>/."""
    if ctx.invoked_subcommand is not None:
        return
    import logging

    from review.server import ReviewConfig
    from review.server import serve as serve_review
    from validators.registry import VerifyContext

    settings, root = _review_home(home)
    config = ReviewConfig(
        home=root,
        seeds_folder=settings.seeds_dir,
        host=host,
        port=port,
        context=VerifyContext(seeds_dir=settings.seeds_dir),
        judge_model=judge_model or settings.llm_model or "bundled",
    )
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    def announce(url: str) -> None:
        click.echo(f"seedwheel review: {url}/ (Ctrl-C or SIGTERM stops it)")

    serve_review(config, on_ready=announce)


@review.command("sample")
@click.option("--n", "count", type=click.IntRange(1, 1000), default=60, show_default=True, help="Outputs to sample.")
@click.option("--model", default=None, help="Model directory or id. Default: the promoted model, else the base model.")
@click.option("--seed", type=int, default=0, show_default=True, help="Picks the tasks and seeds the sampling.")
@click.option("--max-tokens", type=click.IntRange(1, 8192), default=256, show_default=True)
@home_option
def review_sample(count: int, model: str | None, seed: int, max_tokens: int, home: str | None) -> None:
    """Sample real outputs of the current policy on training tasks, verify each, attach the judge's verdict, and
    store them for the review page (<home>/review/outputs.jsonl)."""
    from pipeline.promoted import current_policy
    from resources import StorageRoot
    from review.sampling import judge_verdicts, sample_outputs, training_tasks, write_outputs
    from validators.registry import VerifyContext

    settings, root = _review_home(home)
    tasks = training_tasks(root)
    if model is None:  # as the pipeline finds it: the promotion record's file, or its table in the database
        model = StorageRoot(root=str(root)).model_dir(current_policy(settings))
    click.echo(f"seedwheel review sample: {count} outputs of {model}", err=True)
    records = sample_outputs(
        model,
        tasks,
        log_dir=root / "local_model" / "logs",
        n=count,
        seed=seed,
        max_tokens=max_tokens,
        context=VerifyContext(seeds_dir=settings.seeds_dir),
        judged=judge_verdicts(root),
        progress=_progress("sampled"),
    )
    path = write_outputs(root, records)
    passed = sum(r["verdict"]["passed"] for r in records)
    click.echo(f"{len(records)} outputs ({passed} pass their verifier) -> {path}")
    click.echo(f"review them: seedwheel review --home {root}")
