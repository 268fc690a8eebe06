"""Where things live and which profile runs: read once from the environment, then passed around as data."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

Profile = Literal["quickstart", "production"]
PROFILES: tuple[str, ...] = get_args(Profile)


@dataclass(frozen=True)
class Settings:
    """The project's switches.

    Attributes:
        profile: `quickstart` (CPU, offline, tiny local model) or `production` (real endpoints and models).
        home: the storage root; assets land at `<home>/<asset>.parquet`.
        seeds_dir: the curated seed sets (`seeds/<family>/...`).
        dagster_home: the persistent Dagster instance that records runs (beside the storage root by default).
    """

    profile: Profile
    home: Path
    seeds_dir: Path
    dagster_home: Path

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: str | Path | None) -> Settings:
        """Settings from `SEEDWHEEL_PROFILE`, `SEEDWHEEL_HOME`, `SEEDWHEEL_SEEDS`, `DAGSTER_HOME`.

        Keyword overrides (e.g. from CLI flags) win over the environment; `None` means "not given".
        """
        environ = os.environ if environ is None else environ
        given = {k: v for k, v in overrides.items() if v is not None}
        profile = str(given.get("profile") or environ.get("SEEDWHEEL_PROFILE") or "quickstart")
        if profile not in PROFILES:
            raise ValueError(f"unknown profile '{profile}': use one of {', '.join(PROFILES)} (SEEDWHEEL_PROFILE)")
        home = Path(given.get("home") or environ.get("SEEDWHEEL_HOME") or ".seedwheel").resolve()
        seeds_dir = Path(given.get("seeds_dir") or environ.get("SEEDWHEEL_SEEDS") or "seeds").resolve()
        dagster_home = Path(
            given.get("dagster_home") or environ.get("DAGSTER_HOME") or home.with_name(f"{home.name}-dagster")
        ).resolve()
        return cls(profile=profile, home=home, seeds_dir=seeds_dir, dagster_home=dagster_home)  # type: ignore[arg-type]

    def environ(self) -> dict[str, str]:
        """The environment variables that make a child process (the UI, a step worker) see these settings."""
        return {
            "SEEDWHEEL_PROFILE": self.profile,
            "SEEDWHEEL_HOME": str(self.home),
            "SEEDWHEEL_SEEDS": str(self.seeds_dir),
            "DAGSTER_HOME": str(self.dagster_home),
        }
