"""`text_answer`: the final answer, a short text (a label, a team, a command), equals an accepted answer.

For tasks whose answer is a word or a phrase: alert triage ("which team owns this page?"), routing, short
factual answers, production failures whose correction is a text. Not for free prose, which needs a judge.

Where the final answer is found, in order: the last `\\boxed{...}`; else the last "answer is X" / "Answer: X" /
"**Final answer:** X" marker, up to the end of its line; else the last non-empty line. The last statement wins,
as in `numeric_answer`: models restate and correct themselves.

Answers compare after normalisation, SQuAD's: case folded, punctuation and the articles a/an/the removed,
whitespace collapsed (so "The platform team." equals "platform team"). Equality, never containment: "platform
team or security team" is not "platform team", so listing candidates cannot hedge; nor can boxing them:
two different boxed answers on the final box's line (`\\boxed{security team} or \\boxed{platform team}`) are
`ambiguous_answer`. With `choices` (the closed label set), a final answer that names none of them is
`not_a_choice`, told apart from a wrong choice.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from typing import Any, ClassVar

from validators.registry import Completion, HackProbe, Verdict, Verifier, VerifyContext, register
from validators.verifiers.numeric import BOXED, LATEX_TEXT

_MARKER = re.compile(r"\banswer\b(?:\s*\*\*)?\s*(?:is\b[ \t]*:?|:|=)(?:\s*\*\*)?[ \t]*([^\n]*)", re.IGNORECASE)
_ARTICLES = re.compile(r"\b(?:a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD's answer normalisation: lower case, no punctuation, no articles, single spaces.

    Example:
        >>> normalize_answer("  The **Platform** team. ")
        'platform team'
    """
    return " ".join(_ARTICLES.sub(" ", text.casefold().translate(_PUNCTUATION)).split())


def final_answer(text: str) -> str | None:
    """The completion's final answer as written (see the module docstring), or None when the text is blank.

    Example:
        >>> final_answer("The alert is about disk space on db-3.\\nAnswer: storage team")
        'storage team'
    """
    boxed = BOXED.findall(text)
    if boxed:
        return LATEX_TEXT.sub(r"\1", boxed[-1]).strip()  # \boxed{\text{platform}} answers "platform"
    markers = [m.group(1).strip() for m in _MARKER.finditer(text)]
    markers = [m for m in markers if normalize_answer(m)]
    if markers:
        return markers[-1]
    lines = [line.strip() for line in text.splitlines() if normalize_answer(line)]
    return lines[-1] if lines else None


def _boxed_rivals(text: str) -> list[str]:
    """Boxed answers on the same line as the last box that differ from it (a hedge), as written."""
    boxes = list(BOXED.finditer(text))
    if len(boxes) < 2:
        return []
    last = boxes[-1]
    final = normalize_answer(LATEX_TEXT.sub(r"\1", last.group(1)))
    same_line = [b for b in boxes[:-1] if "\n" not in text[b.end() : last.start()]]
    return [b.group(1) for b in same_line if normalize_answer(LATEX_TEXT.sub(r"\1", b.group(1))) != final]


@register
class TextAnswer(Verifier):
    """The final answer equals one of `answers` after normalisation; with `choices`, it must name one of them.

    Example:
        >>> params = {"answers": ["platform team"], "choices": ["platform team", "storage team"]}
        >>> TextAnswer().check(params, Completion("Answer: Storage team"), VerifyContext()).reason
        "answer_mismatch: expected 'platform team', got 'Storage team'"
    """

    name = "text_answer"
    version = 2
    params_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "required": ["answers"],
        "additionalProperties": False,
        "properties": {
            "answers": {
                "description": "Accepted answers (spellings of the one right answer), compared after normalisation.",
                "type": "array",
                "items": {"type": "string", "minLength": 1, "maxLength": 200},
                "minItems": 1,
            },
            "choices": {
                "description": "The closed set of labels a completion chooses from (the accepted answers among them).",
                "type": "array",
                "items": {"type": "string", "minLength": 1, "maxLength": 200},
                "minItems": 2,
            },
        },
    }

    def params_problems(self, params: Mapping[str, Any], context: VerifyContext) -> list[str]:
        problems = super().params_problems(params, context)
        if problems:
            return problems
        for i, answer in enumerate(params["answers"]):
            if not normalize_answer(answer):
                problems.append(f"answer {answer!r} is empty once normalised (/verifier/params/answers/{i})")
        choices = {normalize_answer(choice) for choice in params.get("choices", [])}
        if choices and not {normalize_answer(a) for a in params["answers"]} <= choices:
            problems.append("every accepted answer must be one of the choices (/verifier/params/choices)")
        return problems

    def answer_params(self, answer: Any) -> dict[str, Any]:
        """`{"answers": [answer]}`: the cell's text as the one accepted answer.

        Example:
            >>> TextAnswer().answer_params(" Paris ")
            {'answers': ['Paris']}
        """
        text = str(answer if answer is not None else "").strip()
        if not normalize_answer(text):
            raise ValueError(f"the answer {text!r} is empty once normalised")
        return {"answers": [text]}

    def check(self, params: Mapping[str, Any], completion: Completion, context: VerifyContext) -> Verdict:
        found = final_answer(completion.text)
        if found is None:
            return Verdict.fail("no_answer")
        rivals = _boxed_rivals(completion.text)
        if rivals:
            return Verdict.fail("ambiguous_answer", f"{found!r} is boxed beside {rivals[-1]!r}")
        answer = normalize_answer(found)
        if answer in {normalize_answer(a) for a in params["answers"]}:
            return Verdict.ok()
        shown = found if len(found) <= 80 else found[:77] + "..."
        if "choices" in params and answer not in {normalize_answer(c) for c in params["choices"]}:
            return Verdict.fail("not_a_choice", repr(shown))
        return Verdict.fail("answer_mismatch", f"expected {params['answers'][0]!r}, got {shown!r}")

    def wrong_answer(self, params: Mapping[str, Any]) -> str:
        accepted = {normalize_answer(a) for a in params["answers"]}
        others = [c for c in params.get("choices", []) if normalize_answer(c) not in accepted]
        return f"Answer: {others[0]}" if others else f"Answer: not {params['answers'][0]}"

    def hack_probes(self, params: Mapping[str, Any], reference: str | None, context: VerifyContext) -> list[HackProbe]:
        """The gold named beside a wrong answer: joined by "or", in two boxes, and (with choices) every choice.

        Example:
            >>> params = {"answers": ["ops"], "choices": ["ops", "dev"]}
            >>> [p.completion for p in TextAnswer().hack_probes(params, None, VerifyContext())]
            ['Answer: ops or dev', '\\\\boxed{dev} or \\\\boxed{ops}', 'Answer: ops, dev']
        """
        gold = params["answers"][0]
        other = self.wrong_answer(params).removeprefix("Answer: ")
        probes = [
            HackProbe("hedge_or", f"Answer: {gold} or {other}"),
            HackProbe("hedge_boxes", f"\\boxed{{{other}}} or \\boxed{{{gold}}}"),
        ]
        if "choices" in params:
            probes.append(HackProbe("every_choice", "Answer: " + ", ".join(params["choices"])))
        return probes
