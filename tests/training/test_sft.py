"""SFT warm-up on the tiny model: example building (episodes played turn by turn), real training on the
assistant's tokens alone, the final folder, resume, and errors."""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import pytest

from tests.paths import SEEDS
from training.checkpoints import OPTIMIZER_STATE_FILES
from training.episodes import chat_messages, reference_turns
from training.evaluation import SampledVerdicts
from training.gate_eval import eval_table, failure_report
from training.promotion import decide, promotion_record
from training.sft import (
    SFTConfigError,
    SFTDataError,
    SFTResult,
    SFTSettings,
    imitated_tasks,
    run_sft,
    sft_examples,
    warm_up_digest,
    warm_up_tasks,
)
from training.tiny_model import load_policy
from training.tracking import (
    CHECKPOINT_TAG,
    DECISION_TAG,
    STAGE_TAG,
    TrackingConfig,
    local_store_uri,
    log_evaluation,
    log_gate,
    recorded_run,
    tag_checkpoint,
)
from validators.registry import VerifyContext
from validators.seeds import load_seeds
from validators.verifiers.episode import episode_calls

SYSTEM = "Answer with #### <number>."
# Tiny steps: 4 short examples (~40 tokens) a step, ~0.05-0.1 s each on two shared cores.
TINY = SFTSettings(max_steps=4, batch_size=4, learning_rate=5e-3, max_length=128)
TINY_SFT = {"seed": 0, "overrides": {"disable_tqdm": True}}


def _task(a: int, b: int, *, reference: bool = True) -> dict[str, Any]:
    return {
        "task_id": f"add-{a}-{b}",
        "family": "arithmetic",
        "prompt": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"What is {a} + {b}?"}],
        "verifier": {"name": "numeric_answer", "params": {"answer": a + b}},
        "reference": f"#### {a + b}" if reference else None,
    }


TASKS = [_task(a, b) for a in range(3) for b in range(3)] + [
    _task(7, 7, reference=False),
    _task(8, 8, reference=False),
]


@pytest.fixture(scope="module")
def tracking(tmp_path_factory: pytest.TempPathFactory) -> TrackingConfig:
    """A real local MLflow store (SQLite) and a TensorBoard folder, as the pipeline keeps them under its root."""
    root = tmp_path_factory.mktemp("tracking")
    return TrackingConfig(mlflow_uri=local_store_uri(root / "mlflow"), tensorboard_dir=str(root / "tensorboard"))


@pytest.fixture(scope="module")
def first_run(
    tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory, tracking: TrackingConfig
) -> tuple[SFTResult, list[dict]]:
    """One real 4-step SFT run (checkpoints at 2 and 4), tracked, shared by the tests that read its outputs."""
    seen: list[dict] = []
    out = tmp_path_factory.mktemp("sft") / "run"
    result = run_sft(
        tiny_model_dir, TASKS, out, settings=TINY, save_steps=2, on_metrics=seen.append, tracking=tracking, **TINY_SFT
    )
    return result, seen


def test_settings_are_the_config_that_names_the_pipelines_run_folders() -> None:
    # sft_checkpoint names its run folder and manifest by a digest of `asdict(settings)`: a key renamed, added or
    # removed here renames every existing run folder, and a resumed run would start over.
    assert asdict(SFTSettings()) == {
        "max_steps": 200,
        "learning_rate": 2e-5,
        "batch_size": 8,
        "max_length": 2048,
        "use_lora": False,
    }


def test_a_warm_up_trains_on_its_families_and_its_folder_is_named_by_what_it_trains() -> None:
    tasks = [_task(1, 2), {**_task(3, 4), "family": "sql"}, _task(5, 6, reference=False)]
    assert warm_up_tasks(tasks, ["arithmetic"]) == [tasks[0], tasks[2]]
    assert warm_up_tasks(tasks, None) == tasks and warm_up_tasks(tasks, ["tool_call"]) == []
    assert imitated_tasks(tasks) == tasks[:2]  # the manifest records what sft_examples imitates
    # Pinned: a change here renames every existing run folder, and a killed run would start over, not resume.
    assert warm_up_digest("base", tasks, TINY) == "6b14be9bccca23f3"
    assert warm_up_digest("base", tasks[::-1], TINY) == warm_up_digest("base", tasks, TINY)  # the order is not
    assert warm_up_digest("base", tasks, replace(TINY, max_steps=5)) != warm_up_digest("base", tasks, TINY)


def test_sft_examples_append_the_reference_and_count_skips() -> None:
    examples, skipped = sft_examples(
        [
            _task(1, 2),
            _task(3, 4, reference=False),  # None: nothing to imitate
            {**_task(5, 6), "reference": "   "},  # blank is no reference either
            {"task_id": "s", "prompt": "2+2?", "reference": "#### 4"},  # a string prompt is one user message
        ]
    )
    assert skipped == 2
    # The prompt is the task's messages, the completion the reference: completion_only_loss keeps the prompt out.
    assert examples[0] == {
        "prompt": _task(1, 2)["prompt"],
        "completion": [{"role": "assistant", "content": "#### 3"}],
    }
    assert examples[1] == {
        "prompt": [{"role": "user", "content": "2+2?"}],
        "completion": [{"role": "assistant", "content": "#### 4"}],
    }


def test_sft_examples_reject_a_malformed_prompt() -> None:
    with pytest.raises(SFTDataError, match="task bad: prompt must be"):
        sft_examples([{"task_id": "bad", "prompt": [{"role": "user"}], "reference": "x"}])


def test_sft_trains_logs_loss_and_writes_a_loadable_final(
    first_run: tuple[SFTResult, list[dict]], tiny_model_dir: Path
) -> None:
    import torch

    result, seen = first_run
    assert (result.steps, result.train_rows, result.skipped_rows, result.too_long_rows) == (4, 9, 2, 0)
    assert result.resumed_from is None
    # The sink saw every step's loss as it happened, and the same records are in the result.
    losses = [m["loss"] for m in seen if m.get("loss") is not None]
    assert len(losses) == 4 and all(loss > 0 for loss in losses)
    assert seen == result.metrics
    summary = result.summary()
    json.dumps(summary)  # JSON-ready for asset metadata
    assert summary["final_loss"] == losses[-1] and summary["tokens_per_second"] > 0
    # final/ is a complete model directory: it loads as a policy, and training moved its weights.
    assert result.checkpoint_dir == result.checkpoint_dir.parent / "final"
    # The run being done, one checkpoint stays, its weights and trainer state without the optimizer's.
    [kept] = result.checkpoint_dir.parent.glob("checkpoint-*")
    assert kept.name == "checkpoint-4" and (kept / "model.safetensors").is_file()
    assert not [name for name in OPTIMIZER_STATE_FILES if (kept / name).exists()]
    trained, tokenizer = load_policy(result.checkpoint_dir)
    base, _ = load_policy(tiny_model_dir)
    assert tokenizer.chat_template
    changed = [
        name
        for (name, p), (_, q) in zip(trained.named_parameters(), base.named_parameters(), strict=True)
        if not torch.equal(p, q)
    ]
    assert changed, "SFT left every parameter unchanged"


@pytest.fixture(scope="module")
def episode_tasks(seed_context: VerifyContext) -> list[dict[str, Any]]:
    seeds = load_seeds([SEEDS / "episode"], root=SEEDS.parent, context=seed_context)
    assert seeds.problems == []
    return seeds.tasks


def test_an_episode_is_imitated_as_played_one_call_per_turn(episode_tasks, seed_context) -> None:
    examples, skipped = sft_examples([*episode_tasks, _task(1, 2)], seed_context)
    assert skipped == 0
    played = reference_turns(episode_tasks, seed_context)
    for task, example, turns in zip(episode_tasks, examples, played, strict=False):
        assert example == {"prompt": task["prompt"], "completion": chat_messages(turns)}
        assert [m["role"] for m in example["completion"]].count("tool") >= 1
    assert examples[-1]["completion"] == [{"role": "assistant", "content": "#### 3"}]


def test_sft_learns_only_what_the_assistant_wrote(tiny_model_dir: Path, episode_tasks, seed_context, tmp_path) -> None:
    """The first step's loss is the model's mean loss on the assistant's tokens: never the prompt or a tool result."""
    import torch

    from training.episodes import assistant_tokens

    task = next(t for t in episode_tasks if len(episode_calls(t["reference"])) > 1)  # two tool results at least
    [example], _ = sft_examples([task], seed_context)
    model, tokenizer = load_policy(tiny_model_dir)
    ids, mask = assistant_tokens(tokenizer, example["prompt"], example["completion"])
    assert 0 < sum(mask) < len(ids) - len(tokenizer.apply_chat_template(task["prompt"])["input_ids"])
    with torch.no_grad():
        logps = model(torch.tensor([ids])).logits[0, :-1].log_softmax(-1)
    token_logps = logps.gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
    expected = -float(token_logps[torch.tensor(mask[1:], dtype=torch.bool)].mean())

    settings = SFTSettings(max_steps=1, batch_size=1, learning_rate=1e-3, max_length=4096)
    result = run_sft(tiny_model_dir, [task], tmp_path / "sft", settings=settings, context=seed_context, **TINY_SFT)
    [first] = [m["loss"] for m in result.metrics if "loss" in m]
    assert first == pytest.approx(expected, rel=1e-6)  # the same sum, in another order at most


def test_a_batch_trains_as_if_each_example_were_alone(tiny_model_dir: Path, tmp_path: Path) -> None:
    """The batch is padding-free (examples end to end in one row): its first loss is the mean over both examples'
    answer tokens of each example's own loss, so no example attends to the other."""
    import torch

    from training.episodes import assistant_tokens

    tasks = [_task(1, 2), {**_task(3, 4), "prompt": [{"role": "user", "content": "Add three and four, please. " * 3}]}]
    examples, _ = sft_examples(tasks)
    model, tokenizer = load_policy(tiny_model_dir)
    nll, answer_tokens = 0.0, 0
    for example in examples:
        ids, mask = assistant_tokens(tokenizer, example["prompt"], example["completion"])
        with torch.no_grad():
            logps = model(torch.tensor([ids])).logits[0, :-1].log_softmax(-1)
        token_logps = logps.gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
        nll -= float(token_logps[torch.tensor(mask[1:], dtype=torch.bool)].sum())
        answer_tokens += sum(mask[1:])
    assert len({len(assistant_tokens(tokenizer, e["prompt"], e["completion"])[0]) for e in examples}) == 2

    settings = SFTSettings(max_steps=1, batch_size=2, learning_rate=1e-3, max_length=4096)
    result = run_sft(tiny_model_dir, tasks, tmp_path / "sft", settings=settings, **TINY_SFT)
    [first] = [m["loss"] for m in result.metrics if "loss" in m]
    assert first == pytest.approx(nll / answer_tokens, rel=1e-5)


def test_a_prompt_that_fills_max_length_is_left_out_and_counted(tiny_model_dir: Path, tmp_path: Path) -> None:
    long = {**_task(5, 5), "prompt": [{"role": "system", "content": SYSTEM * 40}, {"role": "user", "content": "5+5?"}]}
    result = run_sft(tiny_model_dir, [*TASKS, long], tmp_path / "sft", settings=replace(TINY, max_steps=1), **TINY_SFT)
    assert (result.train_rows, result.skipped_rows, result.too_long_rows) == (9, 2, 1)
    assert result.summary()["too_long_rows"] == 1
    with pytest.raises(SFTDataError, match=r"every one of the 1 examples .* raise max_length"):
        run_sft(tiny_model_dir, [long], tmp_path / "only-long", settings=TINY, **TINY_SFT)


def test_sft_resumes_from_the_last_checkpoint(
    first_run: tuple[SFTResult, list[dict]], tmp_path: Path, tracking: TrackingConfig
) -> None:
    from mlflow import MlflowClient

    result, _ = first_run
    out = tmp_path / "run"
    shutil.copytree(result.checkpoint_dir.parent, out)
    model_dir = result.checkpoint_dir  # start from the trained weights: only the checkpoint matters on resume
    resumed = run_sft(
        model_dir, TASKS, out, settings=replace(TINY, max_steps=6), save_steps=2, tracking=tracking, **TINY_SFT
    )
    assert resumed.resumed_from == str(out / "checkpoint-4")
    assert resumed.steps == 6
    # Only the steps after the checkpoint were trained (and logged) in this run.
    assert {m["step"] for m in resumed.metrics if "loss" in m} == {5, 6}
    assert (out / "final" / "config.json").is_file()
    # The run folder's MLflow run resumed with it: one loss curve over the steps before and after the kill.
    assert resumed.tracked is not None and result.tracked is not None
    assert resumed.tracked.run_id == result.tracked.run_id
    steps = {m.step for m in MlflowClient(tracking.mlflow_uri).get_metric_history(resumed.tracked.run_id, "loss")}
    assert {1, 2, 3, 4, 5, 6} <= steps


def test_sft_reports_its_curves_to_mlflow_and_tensorboard(
    first_run: tuple[SFTResult, list[dict]], tracking: TrackingConfig
) -> None:
    from mlflow import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    result, seen = first_run
    tracked = result.tracked
    assert tracked is not None and tracked.run_id is not None and tracked.tensorboard_dir is not None
    assert recorded_run(result.checkpoint_dir.parent) == tracked  # its id is kept in the run folder, for a resume
    losses = {m["step"]: m["loss"] for m in seen if m.get("loss") is not None}
    assert sorted(losses) == [1, 2, 3, 4]
    client = MlflowClient(tracking.mlflow_uri)
    run = client.get_run(tracked.run_id)
    assert (run.info.status, run.info.run_name, run.data.tags[STAGE_TAG]) == ("FINISHED", "run", "sft")
    assert float(run.data.params["learning_rate"]) == TINY.learning_rate  # the trainer's arguments, as TRL logs them
    # The loss curve, step by step as the trainer logged it (steps 1-4; a resume of the run adds to it).
    history = {m.step: m.value for m in client.get_metric_history(tracked.run_id, "loss")}
    assert {step: history[step] for step in losses} == pytest.approx(losses)
    events = EventAccumulator(tracked.tensorboard_dir)
    events.Reload()
    curve = {event.step: event.value for event in events.Scalars("train/loss")}  # a resume's steps follow them
    assert {step: curve[step] for step in losses} == pytest.approx(losses, rel=1e-6)


def test_the_evaluation_and_the_gate_log_to_the_run_that_trained_the_candidate(
    first_run: tuple[SFTResult, list[dict]], tracking: TrackingConfig
) -> None:
    from mlflow import MlflowClient

    result, _ = first_run
    candidate = str(result.checkpoint_dir)
    tag_checkpoint(tracking, result.tracked, candidate)  # the asset tags it with where the checkpoint is kept
    # 24 tasks of two families: the candidate solves 20, the baseline 4 (the same 4), one sample each.
    families = {f"t{i:02d}": "arithmetic" if i < 16 else "sql" for i in range(24)}
    sampled = {
        role: SampledVerdicts(
            passed={task: [i < solved] for i, task in enumerate(families)},
            families=families,
            rows=[
                {"task_id": task, "family": family, "sample": 0, "passed": i < solved, "score": float(i < solved)}
                | {"reason": "", "completion": "", "end_reason": None, "turns": None}
                for i, (task, family) in enumerate(families.items())
            ],
        )
        for role, solved in (("baseline", 4), ("candidate", 20))
    }
    table = eval_table(sampled, {"baseline": "base", "candidate": candidate}, set(), samples=1, seed=0)
    decision = decide(table.comparison)
    record = promotion_record(decision, {"baseline": "base", "candidate": candidate}, failure_report(table.rows))
    evaluated = log_evaluation(tracking, candidate, "base", table)
    gated = log_gate(tracking, decision, table.comparison, record)
    assert result.tracked is not None
    assert evaluated is not None and gated is not None
    assert evaluated.run_id == gated.run_id == result.tracked.run_id  # the training's run, found by its checkpoint

    client = MlflowClient(tracking.mlflow_uri)
    run = client.get_run(result.tracked.run_id)
    metrics = run.data.metrics
    assert (metrics["eval/candidate/pass_at_1"], metrics["eval/baseline/pass_at_1"]) == (pytest.approx(20 / 24), 1 / 6)
    assert metrics["eval/family/sql/difference"] == 0.5  # 4 of the 8 sql tasks moved to passing
    assert decision.promote and metrics["gate/promoted"] == 1.0
    overall = table.comparison.overall.difference
    assert [metrics[f"gate/difference{end}"] for end in ("", "_low", "_high")] == [
        overall.value,
        overall.low,
        overall.high,
    ]
    assert metrics["gate/family/arithmetic/difference"] == 0.75
    assert (run.data.tags[DECISION_TAG], run.data.tags[CHECKPOINT_TAG]) == ("promoted", candidate)
    logged = client.download_artifacts(result.tracked.run_id, "gate/decision.json")
    assert json.loads(Path(logged).read_text())["reasons"] == decision.reasons


def test_sft_without_any_reference_says_what_to_do(tiny_model_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(SFTDataError, match=r"none of the 2 tasks has a reference.*add references"):
        run_sft(tiny_model_dir, [_task(1, 1, reference=False), _task(2, 2, reference=False)], tmp_path)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"max_steps": 0}, "max_steps=0 must be >= 1"),
        ({"learning_rate": 0.0}, "learning_rate=0.0 must be > 0"),
        ({"learning_rate": float("nan")}, "learning_rate=nan must be > 0"),
        ({"batch_size": 0, "max_length": 8}, r"batch_size=0 must be >= 1 \| max_length=8 must be >= 16"),
    ],
)
def test_bad_settings_name_the_fix_at_construction(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(SFTConfigError, match=message):
        SFTSettings(**fields)


def test_an_unknown_override_names_the_fix(tiny_model_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(SFTConfigError, match=r"overrides: .*no_such_field.*SFTConfig field names"):
        run_sft(tiny_model_dir, TASKS, tmp_path, overrides={"no_such_field": 1})


def test_lora_without_peft_names_the_package(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "peft", None)  # peft is installed here: hide it, as if it were not
    with pytest.raises(SFTConfigError, match="pip install peft"):
        run_sft(tiny_model_dir, TASKS, tmp_path, settings=SFTSettings(use_lora=True))


def test_lora_trains_adapters_and_saves_a_merged_plain_model(tiny_model_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("peft", reason="LoRA needs peft (the dev and lora extras install it)")
    import torch

    lora = replace(TINY, max_steps=3, use_lora=True)
    result = run_sft(tiny_model_dir, TASKS, tmp_path / "lora", settings=lora, lora_r=4, **TINY_SFT)
    assert not (result.checkpoint_dir / "adapter_config.json").exists()  # merged: loads without peft
    trained, _ = load_policy(result.checkpoint_dir)
    base, _ = load_policy(tiny_model_dir)
    before, after = base.state_dict(), trained.state_dict()
    assert before.keys() == after.keys()
    # The adapters touched the linear layers only; embeddings and norms are the base model's.
    changed = {name for name in before if not torch.equal(before[name], after[name])}
    assert changed and all("proj" in name for name in changed)
