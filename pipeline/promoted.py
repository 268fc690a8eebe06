"""The current policy, found as the pipeline finds it: the promotion record's current model, else the base model.

The record is where the profile's `PromotionGate` keeps it, through the storage root's `StateStore`: the file
`<home>/promotion/promoted.json`, or the production database's table when `SEEDWHEEL_DATABASE_URL` is set. The
simulated app serves this model (`pipeline.simulate`) and `seedwheel review sample` samples it.
"""

from __future__ import annotations

from pipeline.profiles import profile_resources
from pipeline.settings import Settings
from resources import PromotionGate, StorageRoot, TrainingPolicy


def current_policy(settings: Settings) -> str:
    """The promoted model as the promotion record names it (a path, a hub id or a URL), else the profile's base
    model (the bundled one, converted first, when none is configured)."""
    resources = profile_resources(settings).resources()
    training: TrainingPolicy = resources["training"]
    gate: PromotionGate = resources["gate"]
    return gate.registry(StorageRoot(root=str(settings.home)).state()).baseline(training.model())
