"""Programmatic generators (no LLM): one per seed family, each recomputing its variants' gold answers.

| family | generator | what changes |
| --- | --- | --- |
| `arithmetic` | `arithmetic_resample` | the question's numbers (answer recomputed from the reference's equations) |
| `json_extraction` | `json_extraction_resample` | identifiers, e-mails, person names in the document |
| `sql` | `sql_literal_swap` | literals the question states, swapped for other values of the same column |
| `python_function` | `python_function_respec` | the entry point's name, plus tests computed by the reference |
| `tool_call` | `tool_call_resample` | argument values the request states |

A parent whose family has no generator gets one reject row with code `no_generator` rather than silence, so a
new seed family shows up in the rejects table instead of quietly producing nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from generators.base import GenerationResult, Generator, last_user_index, reject_row
from generators.programmatic.arithmetic import ArithmeticResample
from generators.programmatic.json_extraction import JsonExtractionResample
from generators.programmatic.python_function import PythonFunctionRespec
from generators.programmatic.sql import SqlLiteralSwap
from generators.programmatic.tool_call import ToolCallResample

PROGRAMMATIC_GENERATORS: dict[str, Generator] = {
    "arithmetic": ArithmeticResample(),
    "json_extraction": JsonExtractionResample(),
    "sql": SqlLiteralSwap(),
    "python_function": PythonFunctionRespec(),
    "tool_call": ToolCallResample(),
}


def generate_variants(
    parents: Iterable[Mapping[str, Any]],
    *,
    per_seed: int,
    random_seed: int,
    generators: Mapping[str, Generator] | None = None,
) -> GenerationResult:
    """Run each parent's family generator; collect the variants and the rejects of all parents.

    Each parent's output depends only on that parent, the generator and `random_seed` (see `Generator.rng`),
    so adding or removing a seed never changes another seed's variants.

    Args:
        parents: task records (seeds, or earlier variants).
        per_seed: variants wanted per parent.
        random_seed: the run's seed.
        generators: family -> generator; `PROGRAMMATIC_GENERATORS` when None.

    Returns:
        All variants and reject rows; a parent of a family without a generator adds a `no_generator` reject.

    Example:
        >>> result = generate_variants([], per_seed=3, random_seed=0)
        >>> result.tasks, result.rejects
        ([], [])
    """
    generators = PROGRAMMATIC_GENERATORS if generators is None else generators
    result = GenerationResult()
    for parent in parents:
        generator = generators.get(parent["family"])
        if generator is None:
            detail = f"no programmatic generator for family '{parent['family']}'"
            result.rejects.append(reject_row(parent, None, "no_generator", detail, {}))
            continue
        if last_user_index(parent["prompt"]) is None:  # every generator rewrites the last user message
            result.rejects.append(reject_row(parent, generator.name, "unsupported_seed", "no user message", {}))
            continue
        result.extend(generator.generate(parent, n=per_seed, random_seed=random_seed))
    return result


__all__ = [
    "PROGRAMMATIC_GENERATORS",
    "ArithmeticResample",
    "JsonExtractionResample",
    "PythonFunctionRespec",
    "SqlLiteralSwap",
    "ToolCallResample",
    "generate_variants",
]
