"""verl's RL dataset and reward function for seedwheel's tasks: train with verl on the same verifiers.

What verl does (read from volcengine/verl: `examples/data_preprocess/gsm8k.py`, `verl/utils/dataset/rl_dataset.py`,
`verl/trainer/ppo/reward.py::get_custom_reward_fn`, `verl/utils/import_utils.py::load_module`,
`verl/workers/reward_manager/naive.py`, `verl/trainer/ppo/ray_trainer.py`):

- A dataset is Parquet, one row per prompt: `data_source` (text; it picks the reward function), `prompt` (chat
  messages, the chat template is applied to them), `ability`, `reward_model: {style, ground_truth}` and
  `extra_info` (a struct; `extra_info.index` becomes the row's index).
- `custom_reward_function.path` is a FILE path: verl loads it with `importlib.util.spec_from_file_location` under a
  made-up module name (`custom_module_<hash>`, not put in `sys.modules`), then takes `getattr(module, name)`. This
  file works loaded that way: it imports seedwheel's installed packages absolutely and nothing relative.
- The reward manager calls `compute_score(data_source=, solution_str=, ground_truth=, extra_info=)` with the decoded
  response text, merged with `custom_reward_function.reward_kwargs`. A dict result must hold `score` (the reward);
  each of its keys becomes a list in `reward_extra_info`, so every call returns the same keys. Validation logs the
  numeric ones per data source, and `acc`, where present, is its core metric (`val-core/<data_source>/acc/...`).
- An exception raised by `compute_score` is not caught: it ends the run.

`ground_truth` is the task's verifier spec as canonical JSON text (`{"name", "params", "version"}`), for the reason
`training.export` gives: params differ in shape per family, and one struct column would merge every family's
keys. `compute_score` decodes it and calls `validators.registry.verify`, so a rollout in verl gets the verdict
`seedwheel verify` gives.

**Errors end the run, on purpose.** A completion the model got wrong is a failed verdict (score 0 and its reason),
never an exception. But a ground truth that is not a seedwheel spec, a verifier this installation does not have
(seedwheel older than the one that exported the data) or a fixture that cannot be found (a SQL task's database,
relative to `seeds_dir`) is the same for every rollout of the row, and scoring it 0 would train on a silent wrong
reward for the whole run; GRPO would learn nothing from the row and PPO's critic would learn a wrong value.
`export_rows` checks every spec against the registry when it writes the file, so these surface before training, and
at the latest on the first batch that holds the row, as a `VerlRewardError` naming the task and the fix.

A row whose `data_source` is not `seedwheel/...` is refused rather than handed to verl's `default_compute_score`:
verl's functions return other keys (a float, or `{score, acc, pred}`), and a batch whose results differ in keys
leaves `reward_extra_info`'s lists of unequal lengths, which verl's validation asserts against.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from core import SeedwheelError
from core.tables import atomic_write
from training.export import MESSAGE_TYPE
from training.export import export_rows as trl_rows
from validators.registry import VerifyContext, spec_problems, verify

DATA_SOURCE_PREFIX = "seedwheel/"
REWARD_STYLE = "rule"  # verl's name for a reward computed by a function, not a reward model
SUFFIX = ".parquet"
EXTRA_INFO_TYPE = pa.struct(
    [
        ("task_id", pa.string()),
        ("split", pa.string()),
        ("index", pa.int64()),
        ("family", pa.string()),
        ("seed_id", pa.string()),
        ("reference", pa.string()),
    ]
)
# Fixed types, so an empty split or an all-null field still has the schema verl's dataset reads.
VERL_SCHEMA = pa.schema(
    [
        ("data_source", pa.string()),
        ("prompt", pa.list_(MESSAGE_TYPE)),
        ("ability", pa.string()),
        ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
        ("extra_info", EXTRA_INFO_TYPE),
    ]
)


class VerlExportError(SeedwheelError, ValueError):
    """A task that cannot become a verl row (a spec the registry refuses, a wrong file name); names the row."""


class VerlRewardError(SeedwheelError, ValueError):
    """`compute_score` was given a row it cannot score (a ground truth that is not a seedwheel verifier spec, a
    verifier this installation lacks, a missing fixture); names the task and the fix. It ends verl's run."""


def dataset_rows(
    tasks: pd.DataFrame | Iterable[Mapping[str, Any]],
    split: str,
    *,
    context: VerifyContext | None = None,
) -> list[dict[str, Any]]:
    """Task records as verl RL dataset rows, each spec checked against the verifier registry.

    Args:
        tasks: task records (or a DataFrame of them, nested columns decoded).
        split: the split's name, kept in `extra_info.split` (`train`, `eval`, ...).
        context: where fixture paths (a SQL task's database) resolve for the check; defaults as in `verify`.

    Returns:
        One dict per task, in input order, with the columns of `VERL_SCHEMA`.

    Raises:
        ExportError: a task lacks a field or its prompt is not chat messages (`training.export`).
        VerlExportError: a task's verifier spec is unknown to the registry or its params are wrong.

    Example:
        >>> row = dataset_rows([{"task_id": "t1", "family": "arithmetic", "reference": "#### 4",
        ...     "prompt": [{"role": "user", "content": "2+2?"}], "lineage": {"seed_id": "t1"},
        ...     "verifier": {"name": "numeric_answer", "version": 1, "params": {"answer": 4}}}], "train")[0]
        >>> row["data_source"], row["reward_model"]["ground_truth"]
        ('seedwheel/arithmetic', '{"name":"numeric_answer","params":{"answer":4},"version":1}')
    """
    context = context or VerifyContext()
    rows = []
    for index, row in enumerate(trl_rows(tasks)):  # the same checks and canonical spec text as the TRL export
        problems = spec_problems(json.loads(row["verifier"]), context)
        if problems:
            raise VerlExportError(
                f"task {row['task_id']} (row {index}): its verifier spec is refused: {'; '.join(problems)}",
                hint="export validated task records (the split tables), with the seeds folder their fixtures live in",
            )
        rows.append(
            {
                "data_source": f"{DATA_SOURCE_PREFIX}{row['family']}",
                "prompt": row["prompt"],
                "ability": row["family"],
                "reward_model": {"style": REWARD_STYLE, "ground_truth": row["verifier"]},
                "extra_info": {
                    "task_id": row["task_id"],
                    "split": split,
                    "index": index,
                    "family": row["family"],
                    "seed_id": row["seed_id"],
                    "reference": row["reference"],
                },
            }
        )
    return rows


def export_rows(
    tasks: pd.DataFrame | Iterable[Mapping[str, Any]],
    output: Path,
    *,
    split: str = "train",
    context: VerifyContext | None = None,
) -> int:
    """Write a split as verl's RL dataset: one Parquet file, replaced whole (a killed write leaves the old one).

    Args:
        tasks: the split's task records (or a DataFrame of them, nested columns decoded).
        output: the `.parquet` file to write; its folder is created when missing.
        split: the split's name, kept in `extra_info.split`.
        context: where fixture paths resolve for the spec check; defaults as in `verify`.

    Returns:
        The number of rows written.

    Raises:
        VerlExportError: `output` does not end in `.parquet`, or a task's spec is refused (see `dataset_rows`).

    Example:
        >>> export_rows(train_tasks, Path("verl/train.parquet"), split="train")  # doctest: +SKIP
        412
    """
    output = Path(output)
    if output.suffix != SUFFIX:
        raise VerlExportError(f"{output}: verl reads Parquet datasets", hint=f"name the file *{SUFFIX}")
    rows = dataset_rows(tasks, split, context=context)
    with atomic_write(output) as handle:
        pq.write_table(pa.Table.from_pylist(rows, schema=VERL_SCHEMA), handle)
    return len(rows)


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str,
    extra_info: Mapping[str, Any] | None = None,
    seeds_dir: str | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """verl's custom reward function: a response judged by its task's own verifier.

    Point verl at it with `custom_reward_function.path=<this file> custom_reward_function.name=compute_score`.

    Args:
        data_source: the row's `data_source`, `seedwheel/<family>`.
        solution_str: the decoded response.
        ground_truth: the row's `reward_model.ground_truth`: the verifier spec as JSON text.
        extra_info: the row's `extra_info` (its `task_id` names the row in errors).
        seeds_dir: where relative fixture paths resolve (a SQL task's database), as
            `custom_reward_function.reward_kwargs.seeds_dir=...` passes it; default `$SEEDWHEEL_SEEDS`, else
            `./seeds` in the worker's working directory.
        **kwargs: anything else verl or `reward_kwargs` passes (ignored).

    Returns:
        `{"score": float in [0, 1], "acc": 1.0 or 0.0, "passed": bool, "reason": str}`, the same keys for every
        row: the reward, the pass rate verl's validation reports as its core metric, and the verdict's reason
        (`ok`, or `<code>: <detail>`).

    Raises:
        VerlRewardError: the row is not a seedwheel row, or its ground truth is not a seedwheel spec, names a
            verifier this installation lacks or needs a fixture that is not found (the message names the task and
            the fix).

    Example:
        >>> spec = '{"name":"numeric_answer","params":{"answer":4},"version":1}'
        >>> compute_score("seedwheel/arithmetic", "2 + 2 = 4. #### 4", spec)
        {'score': 1.0, 'acc': 1.0, 'passed': True, 'reason': 'ok'}
    """
    if not data_source.startswith(DATA_SOURCE_PREFIX):
        raise VerlRewardError(
            f"data_source {data_source!r} is not a seedwheel row ({DATA_SOURCE_PREFIX}<family>)",
            hint="score only the rows of `seedwheel export --format verl` with this function; to mix in verl's own "
            "datasets, dispatch on data_source in a function of yours that returns these same keys for every row",
        )
    where = f"{data_source} task {(extra_info or {}).get('task_id', '?')}"
    spec = _spec(ground_truth, where)
    context = VerifyContext(seeds_dir=Path(seeds_dir).resolve()) if seeds_dir else VerifyContext()
    try:
        verdict = verify({"verifier": spec}, solution_str, context=context)
    except SeedwheelError as exc:
        raise VerlRewardError(
            f"{where}: {exc}",
            hint="install the seedwheel that exported the data in verl's environment, and pass the seeds folder "
            "with custom_reward_function.reward_kwargs.seeds_dir=... (or $SEEDWHEEL_SEEDS) for SQL tasks",
        ) from exc
    return {
        "score": float(verdict.score),
        "acc": 1.0 if verdict.passed else 0.0,
        "passed": verdict.passed,
        "reason": verdict.reason,
    }


def _spec(ground_truth: object, where: str) -> dict[str, Any]:
    """The verifier spec a row's `ground_truth` holds (JSON text; a dict, as some loaders give it, also works)."""
    hint = "export the data with `seedwheel export --format verl`, whose ground truth is the task's verifier spec"
    spec = ground_truth
    if isinstance(ground_truth, str | bytes):
        try:
            spec = json.loads(ground_truth)
        except json.JSONDecodeError as exc:
            shown = f"{ground_truth!r:.80}"
            raise VerlRewardError(f"{where}: ground_truth is not JSON ({exc}): {shown}", hint=hint) from None
    if not (
        isinstance(spec, Mapping) and isinstance(spec.get("name"), str) and isinstance(spec.get("params"), Mapping)
    ):
        raise VerlRewardError(
            f"{where}: ground_truth is not a verifier spec {{name, params, version}}: {ground_truth!r:.80}", hint=hint
        )
    return {str(key): value for key, value in spec.items()}
