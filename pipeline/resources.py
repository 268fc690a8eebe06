"""Resources: configured once (from `Settings` or the UI's launchpad), read from `self`, never from the environment."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from validators.registry import VerifyContext
from validators.seeds import SeedSet, load_seeds


class SeedRepository(dg.ConfigurableResource):
    """The curated seed sets under version control: `<path>/<family>/*.jsonl|yaml`."""

    path: str

    @property
    def folder(self) -> Path:
        return Path(self.path)

    def verify_context(self) -> VerifyContext:
        """Verifier fixture paths (SQLite files) in seeds resolve against the seeds folder."""
        return VerifyContext(seeds_dir=self.folder)

    def load(self) -> SeedSet:
        """Load and check every seed file; origins are shown relative to the seeds folder's parent."""
        if not self.folder.is_dir():
            raise FileNotFoundError(f"seeds folder {self.folder} does not exist: set SEEDWHEEL_SEEDS or `path`")
        return load_seeds([self.folder], root=self.folder.parent, context=self.verify_context())
