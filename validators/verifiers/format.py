"""Small format verifiers, and `weighted`, which combines any registered verifiers into one reward.

- `format_tags`: each listed tag appears as exactly one well-formed `<tag>...</tag>` pair (optionally in the
  listed order, non-empty unless `allow_empty`). Exactly one, because a second `<answer>` lets a model hedge.
- `json_valid`: the completion contains parseable JSON (rules in `validators.extract`).
- `weighted`: `score = sum(weight_i * score_i) / sum(weight_i)`. Without `pass_threshold` it passes only when
  every component passes (a format bonus must never turn a wrong answer into a pass); with it, it passes when
  the score reaches the threshold.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from validators.extract import extract_json
from validators.registry import REGISTRY, Completion, UnknownVerifierError, Verdict, Verifier, VerifyContext, register


@register
class FormatTags(Verifier):
    """Every tag in `tags` appears as exactly one `<tag>...</tag>` pair; with `order`, in the listed order.

    Example:
        >>> text = "<think>9 * 2 = 18</think><answer>18</answer>"
        >>> FormatTags().check({"tags": ["think", "answer"], "order": True}, Completion(text), VerifyContext()).passed
        True
    """

    name = "format_tags"
    version = 1
    params_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "required": ["tags"],
        "additionalProperties": False,
        "properties": {
            "tags": {
                "description": "Tag names that must each appear once as <tag>...</tag>.",
                "type": "array",
                "minItems": 1,
                "uniqueItems": True,
                "items": {"type": "string", "pattern": "^[A-Za-z][A-Za-z0-9_-]*$"},
            },
            "order": {
                "description": "Require the pairs in the listed order, each closed before the next opens.",
                "type": "boolean",
                "default": False,
            },
            "allow_empty": {
                "description": "Accept a pair with only whitespace inside (e.g. an empty <think></think>).",
                "type": "boolean",
                "default": False,
            },
        },
    }

    def check(self, params: Mapping[str, Any], completion: Completion, context: VerifyContext) -> Verdict:
        text = completion.text
        spans: list[tuple[str, int, int]] = []
        for tag in params["tags"]:
            opens = [m.start() for m in re.finditer(rf"<{re.escape(tag)}>", text)]
            closes = [m.start() for m in re.finditer(rf"</{re.escape(tag)}>", text)]
            if not opens and not closes:
                return Verdict.fail("tag_missing", f"<{tag}>")
            if len(opens) != len(closes):
                return Verdict.fail("tag_unbalanced", f"<{tag}> opened {len(opens)} times, closed {len(closes)}")
            if len(opens) > 1:
                return Verdict.fail("tag_repeated", f"<{tag}> appears {len(opens)} times, expected once")
            start, end = opens[0], closes[0]
            if end < start:
                return Verdict.fail("tag_unbalanced", f"</{tag}> comes before <{tag}>")
            if not params.get("allow_empty", False) and not text[start + len(tag) + 2 : end].strip():
                return Verdict.fail("tag_empty", f"<{tag}>")
            spans.append((tag, start, end + len(tag) + 3))
        if params.get("order", False):
            for (first, _, first_end), (second, second_start, _) in itertools.pairwise(spans):
                if second_start < first_end:
                    return Verdict.fail("tag_order", f"<{second}> must come after </{first}>")
        return Verdict.ok()

    def wrong_answer(self, params: Mapping[str, Any]) -> str | None:
        return "An answer without any of the required tags."


@register
class JsonValid(Verifier):
    """The completion contains parseable JSON: a fenced block, a bare document or an object in prose.

    Example:
        >>> JsonValid().check({}, Completion('Result: {"ok": true}'), VerifyContext()).passed
        True
    """

    name = "json_valid"
    version = 1
    params_schema: ClassVar[dict[str, Any]] = {"type": "object", "additionalProperties": False, "properties": {}}

    def check(self, params: Mapping[str, Any], completion: Completion, context: VerifyContext) -> Verdict:
        found = extract_json(completion.text)
        if found.error is None:
            return Verdict.ok()
        code, _, detail = found.error.partition(": ")
        return Verdict.fail(code, detail)

    def wrong_answer(self, params: Mapping[str, Any]) -> str | None:
        return "No JSON here."


_COMPONENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["name", "weight"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "pattern": "^[a-z][a-z0-9_]*$"},
        "version": {"type": "integer", "minimum": 1},
        "params": {"type": "object", "default": {}},
        "weight": {"type": "number", "exclusiveMinimum": 0},
    },
}


def _nested(problem: str, index: int) -> str:
    """Re-point a component's `(/verifier/params/...)` problem at `/verifier/params/components/<i>/params/...`."""
    head, sep, tail = problem.rpartition("(/verifier/params")
    if not sep:
        return f"{problem} (/verifier/params/components/{index}/params)"
    return f"{head}(/verifier/params/components/{index}/params{tail}"


def _tagged(verdict: Verdict, component: str) -> Verdict:
    """The component's failure with its name appended, keeping its reason code first for counting."""
    detail = verdict.reason.partition(":")[2].strip()
    return Verdict.fail(verdict.code, f"{detail} [{component}]" if detail else f"[{component}]", score=verdict.score)


def _components(params: Mapping[str, Any]) -> list[tuple[Mapping[str, Any], Verifier]]:
    """Each component's params with its registered verifier."""
    return [
        (component.get("params", {}), REGISTRY.get(component["name"], component.get("version")))
        for component in params["components"]
    ]


@register
class Weighted(Verifier):
    """A weighted mean of registered verifiers, e.g. correctness 0.9 + format 0.1.

    Passes when every component passes, or, with `pass_threshold`, when the score reaches it. A failing
    verdict's reason is the first failing component's reason tagged with its name, so reason counts still
    group by the underlying code (`answer_mismatch: expected 18, got 16 [numeric_answer]`).

    Example:
        >>> params = {"components": [
        ...     {"name": "numeric_answer", "params": {"answer": 18}, "weight": 0.9},
        ...     {"name": "format_tags", "params": {"tags": ["answer"]}, "weight": 0.1}]}
        >>> Weighted().check(params, Completion("#### 18"), VerifyContext())
        Verdict(score=0.9, passed=False, reason='tag_missing: <answer> [format_tags]')
    """

    name = "weighted"
    version = 1
    params_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "required": ["components"],
        "additionalProperties": False,
        "properties": {
            "components": {"type": "array", "minItems": 1, "items": _COMPONENT_SCHEMA},
            "pass_threshold": {
                "description": "Pass when the weighted score reaches this; when absent, all components must pass.",
                "type": "number",
                "minimum": 0,
                "maximum": 1,
            },
        },
    }

    def params_problems(self, params: Mapping[str, Any], context: VerifyContext) -> list[str]:
        problems = super().params_problems(params, context)
        if problems:
            return problems
        for i, component in enumerate(params["components"]):
            try:
                verifier = REGISTRY.get(component["name"], component.get("version"))
            except UnknownVerifierError as exc:
                problems.append(f"{exc} (/verifier/params/components/{i}/name)")
                continue
            problems.extend(_nested(p, i) for p in verifier.params_problems(component.get("params", {}), context))
        return problems

    def versions(self, params: Mapping[str, Any]) -> list[tuple[str, int]]:
        return [(self.name, self.version), *(v for c, verifier in _components(params) for v in verifier.versions(c))]

    def fixtures(self, params: Mapping[str, Any], context: VerifyContext) -> list[Path]:
        return [path for c, verifier in _components(params) for path in verifier.fixtures(c, context)]

    def check(self, params: Mapping[str, Any], completion: Completion, context: VerifyContext) -> Verdict:
        total_weight = 0.0
        weighted_sum = 0.0
        first_failure: Verdict | None = None
        for component in params["components"]:
            verifier = REGISTRY.get(component["name"], component.get("version"))
            verdict = verifier.check(component.get("params", {}), completion, context)
            weight = float(component["weight"])
            total_weight += weight
            weighted_sum += weight * verdict.score
            if not verdict.passed and first_failure is None:
                first_failure = _tagged(verdict, component["name"])
        score = weighted_sum / total_weight
        threshold = params.get("pass_threshold")
        passed = first_failure is None if threshold is None else score >= threshold
        if passed:
            return Verdict.ok(score)
        if threshold is not None:
            because = f"; {first_failure.reason}" if first_failure is not None else ""
            return Verdict.fail("below_threshold", f"score {score:.3g} < {threshold}{because}", score=score)
        assert first_failure is not None  # no threshold: failing means some component failed
        return Verdict(score=score, passed=False, reason=first_failure.reason)

    def wrong_answer(self, params: Mapping[str, Any]) -> str | None:
        """The first component's wrong answer that also fails the combination (checked here), or None."""
        context = VerifyContext()
        for component in sorted(params["components"], key=lambda c: -float(c["weight"])):
            verifier = REGISTRY.get(component["name"], component.get("version"))
            candidate = verifier.wrong_answer(component.get("params", {}))
            if candidate is not None and not self.check(params, Completion(candidate), context).passed:
                return candidate
        return None
