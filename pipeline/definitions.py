"""The Dagster code location: assembles assets, checks, jobs and resources. Computes nothing."""

from __future__ import annotations

import dagster as dg

from assets import seeds
from pipeline.resources import SeedRepository
from pipeline.settings import Settings
from pipeline.storage import TableStorage

flywheel_job = dg.define_asset_job(
    "flywheel_job", selection=dg.AssetSelection.all(), description="The whole flywheel: every asset, in order."
)


def build_definitions(settings: Settings) -> dg.Definitions:
    """Definitions wired to `settings` (storage root, seeds folder, profile, user verifiers)."""
    settings.register_verifier_plugins()  # also in each step process, which re-imports this code location
    return dg.Definitions(
        assets=dg.load_assets_from_modules([seeds]),
        asset_checks=dg.load_asset_checks_from_modules([seeds]),
        jobs=[flywheel_job],
        resources={
            "io_manager": TableStorage(root=str(settings.home)),
            "seeds": SeedRepository(path=str(settings.seeds_dir)),
        },
    )


@dg.definitions
def defs() -> dg.Definitions:
    """Loaded by `dagster dev -w workspace.yaml`: settings come from the environment at load time."""
    return build_definitions(Settings.from_env())
