"""Programmatic generators (no LLM): one per seed family, each recomputing its variants' gold answers.

| family | generator | what changes |
| --- | --- | --- |
| `arithmetic` | `arithmetic_resample` | the question's numbers (answer recomputed from the reference's equations) |
| `json_extraction` | `json_extraction_resample` | identifiers, e-mails, person names in the document |
| `sql` | `sql_literal_swap` | literals the question states, swapped for other values of the same column |
| `python_function` | `python_function_respec` | the entry point's name, plus tests computed by the reference |
| `tool_call` | `tool_call_resample` | argument values the request states |
| `episode` | `episode_resample` | shop: customer, orders, amounts; files: file and folder names (goal recomputed) |

A family of its own (a team's `unit_conversion`) needs no new code where a generator varies any task of its
verifier (`Generator.verifiers`): a `numeric_answer` seed whose reference shows its work (`1.25 * 1000 = 1250`,
then `#### 1250`) is re-sampled as the arithmetic family is. Any other parent whose family has no generator gets
one reject row with code `no_generator` rather than silence, so a new seed family shows up in the rejects table
instead of quietly producing nothing; LLM rewrites (`generators.rewrite`) still vary it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from core.cache_store import CacheStore, file_digest
from generators.base import GenerationResult, Generator, last_user_index, reject_row
from generators.programmatic.arithmetic import ArithmeticResample
from generators.programmatic.episode import EpisodeResample
from generators.programmatic.json_extraction import JsonExtractionResample
from generators.programmatic.python_function import PythonFunctionRespec
from generators.programmatic.sql import SqlLiteralSwap
from generators.programmatic.tool_call import ToolCallResample
from validators.registry import REGISTRY, VerifyContext
from validators.tasks import TASK_FIELDS, canonical_json


def programmatic_generators(context: VerifyContext | None = None) -> dict[str, Generator]:
    """One generator per family; `context` says where the SQL, Python and episode generators find their fixtures."""
    return {
        "arithmetic": ArithmeticResample(),
        "json_extraction": JsonExtractionResample(),
        "sql": SqlLiteralSwap(context),
        "python_function": PythonFunctionRespec(context),
        "tool_call": ToolCallResample(),
        "episode": EpisodeResample(context),
    }


PROGRAMMATIC_GENERATORS: dict[str, Generator] = programmatic_generators()


VARIANTS_KEY_FORMAT = 1  # bump when what a generator's output depends on changes without a version bump


def variants_key(
    parent: Mapping[str, Any], generator: Generator | None, *, per_seed: int, random_seed: int
) -> str | None:
    """The generation cache's key of one parent's output: a hash of everything `generate_variants` makes it from.

    SHA-256 (hex) of the canonical JSON of

        {"format": VARIANTS_KEY_FORMAT, "parent": <the parent's TASK_FIELDS, all of them>,
         "generator": [name, version] (null: its family has none), "per_seed": ..., "random_seed": ...,
         "verifiers": <registered [name, version] of the parent's verifier (`Verifier.versions`)>,
         "fixtures": <SHA-256 of each file the generator reads (`Generator.fixtures`)>}

    The verifiers are in it because generators judge their variants with the parent's verifier code
    (`python_function_respec` runs it, `sql_literal_swap` compares with its rules). Not in it: a generator
    instance's own settings (`PythonFunctionRespec(new_tests=...)`): share a cache folder only between runs that
    build their generators alike, or bump the generator's version.

    Returns:
        64 hex characters, or None when the parent cannot be keyed (an unknown verifier, a missing fixture).

    Example:
        >>> seed = {"task_id": "a" * 16, "family": "arithmetic",
        ...         "verifier": {"name": "numeric_answer", "version": 2, "params": {"answer": 4}}}
        >>> len(variants_key(seed, PROGRAMMATIC_GENERATORS["arithmetic"], per_seed=3, random_seed=0))
        64
    """
    parent = {k: parent[k] for k in TASK_FIELDS if k in parent}
    try:
        spec = parent["verifier"]
        fixtures = [file_digest(path) for path in generator.fixtures(parent)] if generator is not None else []
        if None in fixtures:
            return None
        payload = {
            "format": VARIANTS_KEY_FORMAT,
            "parent": parent,
            "generator": [generator.name, generator.version] if generator is not None else None,
            "per_seed": per_seed,
            "random_seed": random_seed,
            "verifiers": REGISTRY.get(spec["name"], spec.get("version")).versions(spec.get("params", {})),
            "fixtures": fixtures,
        }
        return hashlib.sha256(canonical_json(payload).encode("utf-8")).hexdigest()
    except (KeyError, TypeError, ValueError, AttributeError):  # an unknown verifier, malformed params, non-JSON
        return None


def generate_variants(
    parents: Iterable[Mapping[str, Any]],
    *,
    per_seed: int,
    random_seed: int,
    generators: Mapping[str, Generator] | None = None,
    cache: CacheStore | None = None,
) -> GenerationResult:
    """Run each parent's family generator; collect the variants and the rejects of all parents.

    Each parent's output depends only on that parent, the generator and `random_seed` (see `Generator.rng`),
    so adding or removing a seed never changes another seed's variants.

    Args:
        parents: task records (seeds, or earlier variants).
        per_seed: variants wanted per parent.
        random_seed: the run's seed.
        generators: family -> generator; `PROGRAMMATIC_GENERATORS` when None.
        cache: outputs of earlier runs by `variants_key`: a parent whose key is stored is not generated again
            (its stored variants and rejects are returned), and new outputs are stored and committed, except those
            with a reject the generator calls transient (`Generator.transient_reject_codes`). `cache.hits` counts
            the parents served from it.

    Returns:
        All variants and reject rows; a parent of a family without a generator adds a `no_generator` reject.

    Example:
        >>> result = generate_variants([], per_seed=3, random_seed=0)
        >>> result.tasks, result.rejects
        ([], [])
    """
    generators = PROGRAMMATIC_GENERATORS if generators is None else generators
    result = GenerationResult()
    try:
        for parent in parents:
            generator = generator_for(parent, generators)
            key = None
            if cache is not None:
                key = variants_key(parent, generator, per_seed=per_seed, random_seed=random_seed)
                stored = cache.get(key) if key is not None else None
                if stored is not None:
                    result.extend(GenerationResult(stored["tasks"], stored["rejects"]))
                    continue
            out = _variants_of(parent, generator, per_seed=per_seed, random_seed=random_seed)
            result.extend(out)
            transient = generator.transient_reject_codes if generator is not None else frozenset()
            if cache is not None and key is not None and not any(r["reason_code"] in transient for r in out.rejects):
                cache.put(key, {"tasks": out.tasks, "rejects": out.rejects})
    finally:  # a generator that raised keeps the outputs made before it
        if cache is not None:
            cache.commit()
    return result


def generator_for(parent: Mapping[str, Any], generators: Mapping[str, Generator]) -> Generator | None:
    """The generator of the parent's family, else the first that varies any task of the parent's verifier.

    Example:
        >>> seed = {"family": "unit_conversion", "verifier": {"name": "numeric_answer", "params": {"answer": 1250}}}
        >>> generator_for(seed, PROGRAMMATIC_GENERATORS).name
        'arithmetic_resample'
    """
    found = generators.get(parent["family"])
    if found is None:
        name = (parent.get("verifier") or {}).get("name")
        found = next((generator for generator in generators.values() if name in generator.verifiers), None)
    return found


def _variants_of(
    parent: Mapping[str, Any], generator: Generator | None, *, per_seed: int, random_seed: int
) -> GenerationResult:
    if generator is None:
        verifier = (parent.get("verifier") or {}).get("name")
        detail = (
            f"no programmatic generator for family '{parent['family']}' or its verifier '{verifier}' "
            "(docs/generation.md#what-a-new-family-gets); LLM rewrites still vary it"
        )
        return GenerationResult(rejects=[reject_row(parent, None, "no_generator", detail, {})])
    if last_user_index(parent["prompt"]) is None:  # every generator rewrites the last user message
        reject = reject_row(parent, generator.name, "unsupported_seed", "no user message", {})
        return GenerationResult(rejects=[reject])
    return generator.generate(parent, n=per_seed, random_seed=random_seed)


__all__ = [
    "PROGRAMMATIC_GENERATORS",
    "ArithmeticResample",
    "EpisodeResample",
    "JsonExtractionResample",
    "PythonFunctionRespec",
    "SqlLiteralSwap",
    "ToolCallResample",
    "generate_variants",
    "generator_for",
    "variants_key",
]
