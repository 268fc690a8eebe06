"""Where things live and which profile runs: read once from the environment, then passed around as data."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeGuard, get_args
from urllib.parse import urlsplit

from upath import UPath

from core.database import DATABASE_URL_ENV, database_url, redact_url
from core.folders import is_remote

# Where runs send their steps when set (Celery over Redis); the URL may hold a password, so Dagster's run config
# names the variable, never its value.
CELERY_BROKER_ENV = "SEEDWHEEL_CELERY_BROKER"
# Experiment tracking: the switch, and MLflow's own variable for a tracking server (read here once, like the rest).
TRACKING_ENV = "SEEDWHEEL_TRACKING"
MLFLOW_TRACKING_URI_ENV = "MLFLOW_TRACKING_URI"
_SWITCH = {"on": True, "1": True, "true": True, "yes": True, "off": False, "0": False, "false": False, "no": False}
Profile = Literal["quickstart", "production"]
PROFILES: tuple[str, ...] = get_args(Profile)
# Served by `vllm serve` on a GPU machine when no endpoint URL is configured in production.
DEFAULT_PRODUCTION_MODEL = "Qwen/Qwen2.5-7B-Instruct"
# The policy GRPO trains in production (a small instruct model; any hub id or model directory works).
DEFAULT_PRODUCTION_POLICY = "Qwen/Qwen2.5-0.5B-Instruct"


def default_models_dir(environ: Mapping[str, str]) -> Path:
    """`$XDG_CACHE_HOME/seedwheel/models` (`~/.cache/seedwheel/models` without it): models built on this machine
    are a cache, like pip's wheels, not project data.

    Example:
        >>> default_models_dir({"XDG_CACHE_HOME": "/var/cache/me"})
        PosixPath('/var/cache/me/seedwheel/models')
    """
    cache = environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "seedwheel" / "models"


@dataclass(frozen=True)
class Settings:
    """The project's switches.

    Attributes:
        profile: `quickstart` (CPU, offline, the bundled small model) or `production` (real endpoints and models).
        home: the storage root; assets land at `<home>/<asset>.parquet`. A local folder, or an object-store URL
            (`s3://bucket/prefix`, `storage_root`).
        seeds_dir: the curated seed sets (`seeds/<family>/...`).
        dagster_home: the persistent Dagster instance that records runs (beside the storage root by default).
        verifier_plugins: user verifiers to register, as `package.module:ClassName` dotted paths.
        llm_base_url: an OpenAI-compatible endpoint for generation and judging; empty starts a local server.
        llm_model: the endpoint's model (or the local server's model dir or id); empty in the quickstart means
            the bundled real model (SmolLM2-135M-Instruct, offline).
        base_model: the policy to train (a model dir or hub id); empty in the quickstart means the bundled model.
        models_dir: where model folders built on this machine live (the bundled SmolLM2-135M-Instruct, converted
            once from its GGUF file); the user's cache by default (`default_models_dir`), so every checkout and
            storage root on a machine shares one conversion.
        nightly_cron: when the nightly regeneration runs (cron syntax), in `timezone` (an IANA name).
        failure_inbox: where production failure logs arrive (a folder or an fsspec URL); `<home>-inbox` by default.
        failure_quarantine: where a raw failure log goes once its redacted records are stored (a folder or an fsspec
            URL outside every folder the project keeps); empty, the default, deletes it.
        retrain_growth: train (and gate) again when the training split has grown by this fraction since the last
            GRPO checkpoint, e.g. 0.2 (the `corpus_growth` sensor); None trains on demand only.
        database_url: the production database (`SEEDWHEEL_DATABASE_URL`, see `core.database`): the Dagster
            instance's storage and the state a cluster's workers share; empty keeps them in local files.
        celery_broker: a `redis://host:port/db` URL (`SEEDWHEEL_CELERY_BROKER`): runs send their steps to Celery
            workers (`seedwheel worker`) through it; empty runs steps on the machine that runs the run.
        tracking: SFT, GRPO and DPO report to MLflow and TensorBoard, and the evaluation and the gate log to the
            candidate's MLflow run (`SEEDWHEEL_TRACKING`, on by default; `resources.tracking`).
        mlflow_tracking_uri: an MLflow tracking server or store (`MLFLOW_TRACKING_URI`); empty: a SQLite store under
            a local root, nothing on an object-store root.
    """

    profile: Profile
    home: Path | UPath
    seeds_dir: Path
    dagster_home: Path
    verifier_plugins: tuple[str, ...] = ()
    llm_base_url: str = ""
    llm_model: str = ""
    base_model: str = ""
    models_dir: Path = Path("models")
    nightly_cron: str = "0 2 * * *"
    timezone: str = "UTC"
    failure_inbox: str = ""
    failure_quarantine: str = ""
    retrain_growth: float | None = None
    database_url: str = ""
    celery_broker: str = ""
    tracking: bool = True
    mlflow_tracking_uri: str = ""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: str | Path | None) -> Settings:
        """Settings from the environment (`SEEDWHEEL_*`, `DAGSTER_HOME`; see the README's Configuration).

        Keyword overrides (e.g. from CLI flags) win over the environment; `None` means "not given".
        """
        environ = os.environ if environ is None else environ
        given = {k: v for k, v in overrides.items() if v is not None}
        profile = str(given.get("profile") or environ.get("SEEDWHEEL_PROFILE") or "quickstart")
        if not _is_profile(profile):
            raise ValueError(f"unknown profile '{profile}': use one of {', '.join(PROFILES)} (SEEDWHEEL_PROFILE)")
        home = storage_root(str(given.get("home") or environ.get("SEEDWHEEL_HOME") or ".seedwheel"))
        seeds_dir = Path(given.get("seeds_dir") or environ.get("SEEDWHEEL_SEEDS") or "seeds").resolve()
        # Beside a local storage root by default; the instance's dagster.yaml is a local file even when the storage
        # root is an object store (its runs are then in the database).
        beside = home.with_name(f"{home.name}-dagster") if isinstance(home, Path) else ".seedwheel-dagster"
        dagster_home = Path(given.get("dagster_home") or environ.get("DAGSTER_HOME") or beside).resolve()
        plugins = tuple(p.strip() for p in environ.get("SEEDWHEEL_VERIFIERS", "").split(",") if p.strip())
        llm_base_url = environ.get("SEEDWHEEL_LLM_BASE_URL", "")
        llm_model = environ.get("SEEDWHEEL_LLM_MODEL", "" if profile == "quickstart" else DEFAULT_PRODUCTION_MODEL)
        base_model = environ.get("SEEDWHEEL_BASE_MODEL", "" if profile == "quickstart" else DEFAULT_PRODUCTION_POLICY)
        models_dir = Path(
            given.get("models_dir") or environ.get("SEEDWHEEL_MODELS_DIR") or default_models_dir(environ)
        ).resolve()
        nightly_cron = environ.get("SEEDWHEEL_NIGHTLY_CRON", "0 2 * * *")
        timezone = environ.get("SEEDWHEEL_TIMEZONE", "UTC")
        _check_schedule(nightly_cron, timezone)
        failure_inbox = environ.get("SEEDWHEEL_FAILURE_INBOX") or str(home.with_name(f"{home.name}-inbox"))
        failure_quarantine = _quarantine(
            environ.get("SEEDWHEEL_FAILURE_QUARANTINE", ""),
            {
                "SEEDWHEEL_HOME": str(home),
                "DAGSTER_HOME": str(dagster_home),
                "SEEDWHEEL_FAILURE_INBOX": failure_inbox,
                "SEEDWHEEL_MODELS_DIR": str(models_dir),
                "SEEDWHEEL_SEEDS": str(seeds_dir),
            },
        )
        retrain_growth = _growth(environ.get("SEEDWHEEL_RETRAIN_GROWTH", ""))
        celery_broker = _broker(environ.get(CELERY_BROKER_ENV, ""))
        tracking = _switch(environ.get(TRACKING_ENV, ""), TRACKING_ENV)
        return cls(
            profile,
            home,
            seeds_dir,
            dagster_home,
            plugins,
            llm_base_url,
            llm_model,
            base_model,
            models_dir,
            nightly_cron,
            timezone,
            failure_inbox,
            failure_quarantine,
            retrain_growth,
            database_url(environ),
            celery_broker,
            tracking,
            environ.get(MLFLOW_TRACKING_URI_ENV, "").strip(),
        )

    def environ(self) -> dict[str, str]:
        """The environment variables that make a child process (the UI, a step worker) see these settings."""
        return {
            "SEEDWHEEL_PROFILE": self.profile,
            "SEEDWHEEL_HOME": str(self.home),
            "SEEDWHEEL_SEEDS": str(self.seeds_dir),
            "DAGSTER_HOME": str(self.dagster_home),
            "SEEDWHEEL_VERIFIERS": ",".join(self.verifier_plugins),
            "SEEDWHEEL_LLM_BASE_URL": self.llm_base_url,
            "SEEDWHEEL_LLM_MODEL": self.llm_model,
            "SEEDWHEEL_BASE_MODEL": self.base_model,
            "SEEDWHEEL_MODELS_DIR": str(self.models_dir),
            "SEEDWHEEL_NIGHTLY_CRON": self.nightly_cron,
            "SEEDWHEEL_TIMEZONE": self.timezone,
            "SEEDWHEEL_FAILURE_INBOX": self.failure_inbox,
            "SEEDWHEEL_FAILURE_QUARANTINE": self.failure_quarantine,
            "SEEDWHEEL_RETRAIN_GROWTH": "" if self.retrain_growth is None else str(self.retrain_growth),
            DATABASE_URL_ENV: self.database_url,
            CELERY_BROKER_ENV: self.celery_broker,
            TRACKING_ENV: "on" if self.tracking else "off",
            MLFLOW_TRACKING_URI_ENV: self.mlflow_tracking_uri,
        }

    def register_verifier_plugins(self) -> None:
        """Register the user verifiers named in `verifier_plugins` (idempotent)."""
        from validators.registry import load_verifier

        for dotted_path in self.verifier_plugins:
            load_verifier(dotted_path)


def storage_root(location: str) -> Path | UPath:
    """The storage root `location` names: a local folder as an absolute path, an object-store URL as a `UPath`
    (tables are single objects there, side state folders committed by manifest: `core.folders`).

    Example:
        >>> str(storage_root("s3://bucket/seedwheel") / "seed_tasks.parquet")
        's3://bucket/seedwheel/seed_tasks.parquet'
    """
    if is_remote(location):
        return UPath(location)
    return Path(location.removeprefix("file://")).resolve()


def _is_profile(name: str) -> TypeGuard[Profile]:
    return name in PROFILES


def _check_schedule(cron: str, timezone: str) -> None:
    """Fail at load time, naming the variable, rather than when the daemon first ticks."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    if len(cron.split()) != 5:
        raise ValueError(f"SEEDWHEEL_NIGHTLY_CRON={cron!r} is not a 5-field cron expression, e.g. '0 2 * * *'")
    try:
        ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"SEEDWHEEL_TIMEZONE={timezone!r} is not an IANA time zone, e.g. 'Europe/Berlin'") from None


def _growth(value: str) -> float | None:
    """`SEEDWHEEL_RETRAIN_GROWTH` as a fraction > 0, or None when unset."""
    if not value.strip():
        return None
    try:
        growth = float(value)
    except ValueError:
        growth = float("nan")
    if not growth > 0:  # also NaN
        raise ValueError(
            f"SEEDWHEEL_RETRAIN_GROWTH={value!r} must be a fraction above 0, e.g. 0.2 to train again when the "
            "training split has grown by 20% since the last checkpoint (unset: train on demand)"
        )
    return growth


def _switch(value: str, variable: str) -> bool:
    """An on/off variable: unset or empty is on."""
    if not value.strip():
        return True
    try:
        return _SWITCH[value.strip().lower()]
    except KeyError:
        raise ValueError(f"{variable}={value!r} is not a switch: set it to on or off (1/0, true/false)") from None


def _broker(value: str) -> str:
    """`SEEDWHEEL_CELERY_BROKER` as a Redis URL with a host, or "" when unset."""
    url = value.strip()
    if url and (urlsplit(url).scheme not in ("redis", "rediss") or not urlsplit(url).hostname):
        raise ValueError(
            f"{CELERY_BROKER_ENV}={redact_url(url)!r} is not a Redis URL with a host: set it to "
            "redis://host:6379/0 (the broker the run and `seedwheel worker` share), or unset it to run steps "
            "on this machine"
        )
    return url


def _quarantine(value: str, kept: Mapping[str, str]) -> str:
    """`SEEDWHEEL_FAILURE_QUARANTINE` as an absolute path (or a URL), refused inside a folder the project keeps.

    Args:
        value: the variable's value; empty means raw logs are deleted once redacted.
        kept: the project's folders by the variable that sets each (storage root, Dagster home, inbox, ...).
    """
    if not value.strip():
        return ""
    quarantine = _location(value)
    for variable, folder in kept.items():
        inside = _location(folder)
        if quarantine == inside or quarantine.startswith(inside.rstrip("/") + "/"):
            raise ValueError(
                f"SEEDWHEEL_FAILURE_QUARANTINE={value!r} is inside {variable} ({folder}): a raw failure log must "
                "leave the project's folders once its records are redacted; set it to a folder outside them "
                "(readable only by those who may see raw production logs), or leave it empty to delete each raw "
                "log once its records are stored"
            )
    return quarantine


def _location(path: str) -> str:
    """A folder as one comparable string: a URL as given (no trailing slash), a local path absolute and resolved."""
    return path.rstrip("/") if "://" in path else str(Path(path).resolve())
