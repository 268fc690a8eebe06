"""Checkpoint manifests read back: the split epoch each model was trained under."""

from curation.manifests import CheckpointManifest, split_epochs, write_manifest


def manifest(name: str, checkpoint: str, epoch: int) -> CheckpointManifest:
    return CheckpointManifest(
        name=name,
        stage="grpo",
        checkpoint=checkpoint,
        start_model="base",
        base_model="base",
        task_ids=[],
        split_seq=1,
        split_epoch=epoch,
        split_plan_id="plan",
        run_id="run",
    )


def test_split_epochs_come_from_the_manifests_and_a_model_without_one_has_none(tmp_path):
    write_manifest(tmp_path, manifest("grpo-old", "/models/old", epoch=0), [])
    write_manifest(tmp_path, manifest("grpo-new", "/models/new/", epoch=1), [])
    models = {"baseline": "base", "candidate": "/models/new", "previous": "/models/old"}
    # The base model has no manifest; a checkpoint is found whether or not its path ends in a slash.
    assert split_epochs(tmp_path, models) == {"baseline": None, "candidate": 1, "previous": 0}
