"""`python_function_respec`: function specs with a renamed entry point and extra tests from the reference.

Design. Each variant

1. renames the entry point consistently in the prompt, the tests and the reference (word-bounded), to a
   neutral name from a pool (`solve`, `transform`, ...) that the seed does not use anywhere; a model must then
   read the spec rather than recall a well-known function by its name;
2. adds edge-case tests: new inputs are sampled from the shapes of the existing assert inputs (`f(<literal
   args>) == ...`): strings are cut, reversed, re-cased, joined or emptied; numbers nudged or swapped for
   another test's; lists shuffled, cut or reversed. The REFERENCE is the oracle (it passes every seed test, so
   it is verified): it runs on the new inputs in the sandbox (`sandbox.process`), and an input becomes a
   test `assert name(args) == <result>` only when the call returns a value whose `repr` reads back as the same
   literal (inputs that raise, or return objects, are dropped);
3. keeps the variant only if the reference passes the new tests in the verifier's own sandboxed run.

Rejects: `unsupported_seed` (no reference code, or no test calls the entry point with literal arguments),
`oracle_failed` (the sandboxed reference run failed), `no_new_tests` (no sampled input gave a usable result),
`reference_failed` (the reference fails the new tests: should not happen, kept visible).
"""

from __future__ import annotations

import ast
import json
import re
import secrets
from collections.abc import Mapping
from typing import Any, ClassVar

from generators.base import GenerationResult, Generator, derive_task
from sandbox.process import SandboxLimits, run_python
from validators.extract import extract_code
from validators.registry import VerifyContext, verify

NAME_POOL = ("solve", "transform", "compute", "convert", "process", "evaluate", "apply_rule", "handle",
             "calculate", "normalize_value", "answer", "run_task")  # fmt: skip
NEW_TESTS = 3
CANDIDATES = 12
MAX_LITERAL_CHARS = 400
ORACLE_LIMITS = SandboxLimits(wall_s=10.0, cpu_s=10.0)

_ORACLE = """
import ast as _ast, json as _json
{code}

_results = []
for _args in _ast.literal_eval({args!r}):
    try:
        _value = {entry}(*_args)
        _text = repr(_value)
        _results.append(["ok", _text] if _ast.literal_eval(_text) == _value else ["opaque", ""])
    except Exception as _exc:
        _results.append(["error", type(_exc).__name__])
print({marker!r} + _json.dumps(_results))
"""


def literal_calls(tests: str, entry_point: str) -> list[tuple[Any, ...]]:
    """The argument tuples of every `entry_point(<literals>)` call in the tests.

    Example:
        >>> literal_calls('assert f("a", 2) == "aa"\\nassert f(x) == 1', "f")
        [('a', 2)]
    """
    calls = []
    for node in ast.walk(ast.parse(tests)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == entry_point:
            if node.keywords:
                continue
            try:
                calls.append(tuple(ast.literal_eval(arg) for arg in node.args))
            except ValueError:
                continue
    return calls


def mutate(rng: Any, value: Any, pool: list[Any]) -> Any:
    """A new value shaped like `value`: same type, drawn from simple edits or from sibling values in `pool`.

    Example:
        >>> import random
        >>> isinstance(mutate(random.Random(0), "abc", ["xyz"]), str)
        True
    """
    siblings = [p for p in pool if type(p) is type(value) and p != value]
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return rng.choice([value + rng.choice((-2, -1, 1, 2, 3)), value * 2, *siblings[:3], 0 if value else 1])
    if isinstance(value, float):
        return round(value * rng.choice((0.5, 1.5, 2.0, -1.0)), 3)
    if isinstance(value, str):
        edits = [value[::-1], value.upper(), value.lower(), value.swapcase(), value[: len(value) // 2],
                 value[len(value) // 2 :], value + value, ""]  # fmt: skip
        if siblings:
            other = rng.choice(siblings)
            edits += [other, value + " " + other, other[::-1]]
        return rng.choice(edits)
    if isinstance(value, list):
        items = list(value)
        rng.shuffle(items)
        list_edits = [items, value[::-1], value[: len(value) // 2], value + value[:1], []]
        if siblings:
            list_edits.append(rng.choice(siblings)[::-1])
        return rng.choice(list_edits)
    if isinstance(value, tuple):
        return tuple(mutate(rng, list(value), [list(p) for p in siblings]))
    return value


def _rename(text: str, old: str, new: str) -> str:
    return re.sub(rf"\b{re.escape(old)}\b", new, text)


class PythonFunctionRespec(Generator):
    """Renames the entry point of a function spec and adds tests computed by the (verified) reference.

    Args:
        context: passed to the verifier when the reference is checked against the new tests.

    Example:
        >>> PythonFunctionRespec().name
        'python_function_respec'
    """

    name: ClassVar[str] = "python_function_respec"
    version: ClassVar[int] = 1
    families: ClassVar[frozenset[str]] = frozenset({"python_function"})
    # Both come from sandbox runs, which a loaded machine can cut short at their time limit.
    transient_reject_codes: ClassVar[frozenset[str]] = frozenset({"oracle_failed", "reference_failed"})

    def __init__(self, context: VerifyContext | None = None, *, new_tests: int = NEW_TESTS):
        # Resolved at generate time, not here: a module-level instance must not read the environment on import.
        self.context = context
        self.new_tests = new_tests

    def generate(self, parent: Mapping[str, Any], *, n: int, random_seed: int) -> GenerationResult:
        """Up to `n` variants of a `python_tests` seed; see the module docstring for the method and reject codes.

        Args:
            parent: a task with `tests` and `entry_point` params and a reference in a python fence.
            n: variants wanted.
            random_seed: with the parent's task_id, fixes the output.

        Returns:
            Variants (distinct task_ids, none equal to the parent) and reject rows.
        """
        out = GenerationResult()
        params = parent["verifier"]["params"]
        entry, tests = params["entry_point"], params["tests"]
        reference = parent.get("reference") or ""
        code = extract_code(reference, {"python", "py"})
        try:
            calls = literal_calls(tests, entry)
        except SyntaxError:
            calls = []
        if not code.strip() or not calls:
            detail = "no reference code" if not code.strip() else f"no test calls {entry}() with literal arguments"
            out.rejects.append(self.reject(parent, "unsupported_seed", detail, {}))
            return out
        rng = self.rng(parent, random_seed)
        everything = "\n".join([*(m["content"] for m in parent["prompt"]), tests, reference])
        names = [name for name in NAME_POOL if not re.search(rf"\b{name}\b", everything)]
        rng.shuffle(names)
        # Candidate inputs for all variants at once: one sandbox run of the oracle instead of one per variant.
        wanted = CANDIDATES * max(n, 1)
        candidates: list[tuple[Any, ...]] = []
        for _ in range(wanted * 4):
            if len(candidates) >= wanted:
                break
            base = rng.choice(calls)
            position = rng.randrange(len(base)) if base else 0
            pool = [c[position] for c in calls if len(c) > position]
            new = tuple(mutate(rng, a, pool) if i == position else a for i, a in enumerate(base))
            if new not in calls and new not in candidates and len(repr(new)) <= MAX_LITERAL_CHARS:
                candidates.append(new)
        results = self._oracle(code, entry, candidates)
        if results is None:
            out.rejects.append(self.reject(parent, "oracle_failed", "the reference did not run in the sandbox", {}))
            return out
        usable = [(args, text) for args, (status, text) in zip(candidates, results, strict=True) if status == "ok"]
        seen = {parent["task_id"]}
        for index in range(min(n, len(names))):
            new_name = names[index]
            chosen = usable[index * self.new_tests : (index + 1) * self.new_tests]
            spec = {"entry_point": new_name, "added_tests": len(chosen)}
            if not chosen:
                out.rejects.append(self.reject(parent, "no_new_tests", "no sampled input gave a usable result", spec))
                continue
            added = "".join(f"assert {new_name}({', '.join(map(repr, args))}) == {text}\n" for args, text in chosen)
            new_tests = _rename(tests, entry, new_name).rstrip("\n") + "\n" + added
            prompt = [{**m, "content": _rename(m["content"], entry, new_name)} for m in parent["prompt"]]
            new_reference = _rename(reference, entry, new_name)
            verifier_params = {**params, "entry_point": new_name, "tests": new_tests}
            task = derive_task(
                parent, prompt=prompt, verifier_params=verifier_params, reference=new_reference,
                generator=self.spec(spec),
            )  # fmt: skip
            verdict = verify(task, new_reference, context=self.context or VerifyContext())
            if not verdict.passed:
                out.rejects.append(self.reject(parent, "reference_failed", verdict.reason, spec))
                continue
            if task["task_id"] not in seen:
                seen.add(task["task_id"])
                out.tasks.append(task)
        return out

    @staticmethod
    def _oracle(code: str, entry: str, candidates: list[tuple[Any, ...]]) -> list[list[str]] | None:
        """Run the reference on every candidate input in one sandbox; None when the run itself failed."""
        marker = f"@@oracle-{secrets.token_hex(8)}@@"
        program = _ORACLE.format(code=code, args=repr([list(c) for c in candidates]), entry=entry, marker=marker)
        result = run_python(program, limits=ORACLE_LIMITS)
        line = next((ln for ln in reversed(result.stdout.splitlines()) if ln.startswith(marker)), None)
        if not result.ok or line is None:
            return None
        results = json.loads(line[len(marker) :])
        return results if len(results) == len(candidates) else None
