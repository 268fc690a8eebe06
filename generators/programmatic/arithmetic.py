"""`arithmetic_resample`: GSM8K-style word problems with re-sampled numbers and a recomputed answer.

Design. A GSM8K reference shows its work as equations (`48/2 = 24`, `5 snakes/jaguar * 6 jaguars = 30 snakes`)
and ends with `#### N`. The generator

1. finds the numbers of the question (`$18.00`, `80%`, `120-page`, `22,500`) and turns each into a symbol;
2. parses every equation of the reference (`<expression> = <number>`, chains `a = b = c` included; unit words
   such as `liters` or `/snake` are dropped; `generators.programmatic.gsm8k`) and resolves each operand to a
   question symbol, an earlier equation's result, or a constant (`twice` -> 2, `a year` -> 52, number words
   such as `three`);
3. re-samples some of the free symbols (same magnitude and grid: multiples of 10 stay multiples of 10,
   percentages stay multiples of 5 below 100, decimals keep their places) and replays the equations with the
   small exact evaluator of `gsm8k` over `+ - * / ( )` (`ast`, `Fraction`; never `eval`);
4. rewrites the question, every equation of the reference (operands and results), the other numbers of the
   reasoning whose meaning is unambiguous, and the `#### N` line; optionally renames the protagonist (a
   first name at the start of the question, from a pool of the same gender, consistently everywhere).

Caution beats yield: a number is frozen (kept as is) when its role is ambiguous - it repeats in the question,
it equals a constant the wording implies (`2 friends ... twice a week`), it is 0 or 1, it looks like a year,
or no equation uses it (it may be tied to others, like a total). A seed whose equations cannot be replayed
exactly (algebra with letters, a constant that no wording explains, a result that does not match its
expression) yields no variants but a `replay_failed` / `unsupported_seed` reject, never a guessed answer.
An operand whose value could stand for two sources (`160 + 240` after two steps that both gave 240) is kept
only in replays where both sources get the same new value, and re-sampled numbers stay pairwise distinct.

Rejects: `unsupported_seed` (no numbers, no equations, nothing free to vary), `replay_failed` (the equations do
not reproduce the seed's own results, or the reasoning holds a number that cannot be rewritten
unambiguously), `negative_answer` (a negative final or intermediate value), `fractional_answer` (a value that
was whole became fractional, or a decimal that cannot be written exactly), `absurd_answer` (above 1e7 or a
jump of more than a factor 10 from the seed's answer).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, ClassVar

from generators.base import GenerationResult, Generator, derive_task, last_user_index
from generators.programmatic.gsm8k import (
    FINAL_ANSWER,
    NUMBER,
    Equation,
    Num,
    ReplayError,
    evaluate,
    parse_equations,
    parse_number,
    question_numbers,
)

MAX_ANSWER = 10**7
MAX_MAGNITUDE_JUMP = 10
MAX_DECIMALS = 4
ATTEMPTS_PER_VARIANT = 30

FEMALE_NAMES = (
    "Natalia", "Betty", "Julie", "Tina", "Bella", "Mary", "Joy", "Alexis", "Grace", "Olivia", "Maya", "Sofia",
    "Hannah", "Chloe", "Emma", "Nora", "Leah", "Priya", "Rosa", "Ines", "Aisha", "Lucy", "Clara", "Elena",
)  # fmt: skip
MALE_NAMES = (
    "James", "Mark", "Albert", "Ken", "Tobias", "Randy", "Jasper", "Tim", "Ralph", "Jack", "Brennan", "Noah",
    "Omar", "Lucas", "Mateo", "Daniel", "Samuel", "Hugo", "Felix", "Ravi", "Diego", "Leon", "Victor", "Oscar",
)  # fmt: skip

# Wording that implies a constant: a question number equal to one of these may be that constant in disguise.
_WORD_CONSTANTS: dict[str, tuple[int, ...]] = {
    "twice": (2,), "half": (2,), "double": (2,), "doubled": (2,), "doubles": (2,), "pair": (2,), "pairs": (2,),
    "both": (2,), "triple": (3,), "tripled": (3,), "thrice": (3,), "third": (3,), "quarter": (4,),
    "dozen": (12,), "dozens": (12,), "week": (7, 52), "weeks": (7, 52), "year": (12, 52, 365),
    "years": (12, 52, 365), "hour": (60, 24), "hours": (60, 24), "minute": (60,), "minutes": (60,),
    "day": (24, 7), "days": (24, 7), "month": (12,), "months": (12,), "percent": (100,), "liter": (1000,),
    "liters": (1000,), "ml": (1000,), "cents": (100,),
    "kilogram": (1000,), "kilograms": (1000,), "kg": (1000,), "gram": (1000,), "grams": (1000,),
    "kilometer": (1000,), "kilometers": (1000,), "km": (1000,), "meter": (100, 1000), "meters": (100, 1000),
    "metre": (100, 1000), "metres": (100, 1000), "centimeter": (100, 10), "centimeters": (100, 10),
    "cm": (100, 10), "millimeter": (1000, 10), "millimeters": (1000, 10), "mm": (1000, 10),
    "one": (1,), "two": (2,), "three": (3,), "four": (4,), "five": (5,), "six": (6,), "seven": (7,),
    "eight": (8,), "nine": (9,), "ten": (10,), "eleven": (11,), "twelve": (12,), "fifteen": (15,),
    "twenty": (20,), "thirty": (30,), "fifty": (50,), "hundred": (100,),
}  # fmt: skip
# Constants any GSM8K reasoning may introduce ("Bill and Dale eat 2 x 4 ..."), so a question number equal to one
# of them is ambiguous and stays frozen.
_ALWAYS_ALLOWED = frozenset({Fraction(1), Fraction(2), Fraction(1, 2)})

_YEAR = range(1900, 2101)


@dataclass
class Problem:
    """A seed parsed for replay: question numbers, which are free, the equations with resolved operands."""

    question: str
    reference: str
    numbers: list[Num]
    free: list[int]
    equations: list[Equation]
    answer_equation: int
    answer: Fraction


def analyse(question: str, reference: str, answer: Fraction) -> Problem:
    """Parse a seed and check that its equations replay its own results exactly.

    Args:
        question: the user message.
        reference: the GSM8K-style solution ending with `#### N`.
        answer: the seed's gold answer.

    Returns:
        A `Problem` ready for `replay`.

    Raises:
        ReplayError: with a `code: detail` message (`unsupported_seed` or `replay_failed`).

    Example:
        >>> p = analyse("Natalia sold clips to 48 friends, then half as many.", "48/2 = 24\\n48+24 = 72\\n#### 72", 72)
        >>> p.free, len(p.equations)
        ([0], 2)
    """
    numbers = question_numbers(question)
    if not numbers:
        raise ReplayError("unsupported_seed: no numbers in the question")
    equations, _ = parse_equations(reference)
    if not equations:
        raise ReplayError("unsupported_seed: no replayable equations in the reference")
    words = {w.lower() for w in re.findall(r"[A-Za-z]+", question)}
    implied = {Fraction(v) for w in words for v in _WORD_CONSTANTS.get(w, ())}
    if "%" in question:
        implied.add(Fraction(100))
    counts: dict[Fraction, int] = {}
    for n in numbers:
        counts[n.value] = counts.get(n.value, 0) + 1
    by_value: dict[Fraction, int] = {}
    for i, n in enumerate(numbers):
        by_value.setdefault(n.value, i)

    results: list[Fraction] = []
    used: set[int] = set()
    for j, eq in enumerate(equations):
        taken: set[tuple[str, int | Fraction]] = set()
        for num in eq.operands:
            value = num.value
            candidates: list[tuple[str, int | Fraction]] = [
                ("r", k) for k in reversed(range(j)) if results[k] == value
            ]
            if value in by_value:
                candidates.append(("q", by_value[value]))
            fresh = [c for c in candidates if c not in taken]
            if fresh:
                source = fresh[0]
            elif candidates:
                source = candidates[0]
            elif value in implied or value in _ALWAYS_ALLOWED:
                source = ("c", value)
            else:
                raise ReplayError(f"replay_failed: the constant {num.text} in '{eq.expression}' is not explained")
            eq.alternatives.append(fresh if len(fresh) > 1 else [])
            taken.add(source)
            if source[0] == "q":
                used.add(int(source[1]))
            eq.sources.append(source)
        got = evaluate(eq.expression, {f"v{i}": n.value for i, n in enumerate(eq.operands)})
        if got != eq.result.value:
            raise ReplayError(
                f"replay_failed: {eq.expression} gives {float(got):g}, the reference says {eq.result.text}"
            )
        results.append(got)
    answer_equation = next((j for j in reversed(range(len(results))) if results[j] == answer), None)
    if answer_equation is None:
        raise ReplayError("replay_failed: no equation of the reference produces the final answer")

    free = []
    for i, n in enumerate(numbers):
        if i not in used or counts[n.value] > 1 or n.value in (0, 1) or n.value in implied | _ALWAYS_ALLOWED:
            continue
        if question[n.end : n.end + 1] == "/" or question[max(0, n.start - 1) : n.start] in ("/", ":"):
            continue  # part of a fraction or ratio: "hits 2/5, misses 3/5" ties its parts to unstated numbers
        if n.value.denominator == 1 and int(n.value) in _YEAR and "$" not in question[max(0, n.start - 1) : n.start]:
            continue
        free.append(i)
    # A number no equation uses may be a total of others ("175 balls: the first 100 ... the next 75"): freeze those.
    unused = [numbers[i].value for i in range(len(numbers)) if i not in used]
    free = [i for i in free if not _feeds(numbers[i].value, [numbers[k].value for k in free if k != i], unused)]
    if not free:
        raise ReplayError("unsupported_seed: no number can change without changing the problem's structure")
    return Problem(question, reference, numbers, free, equations, answer_equation, Fraction(answer))


def _feeds(value: Fraction, others: list[Fraction], unused: list[Fraction]) -> bool:
    for total in unused:
        for other in others:
            if total in (value + other, value * other) or total + other == value or total + value == other:
                return True
    return False


@dataclass(frozen=True)
class Replayed:
    """New values of the free numbers and of every equation result."""

    numbers: list[Fraction]
    results: list[Fraction]
    answer: Fraction


def replay(problem: Problem, new_numbers: list[Fraction]) -> Replayed:
    """Recompute every equation with new question numbers and check the result is sane.

    Args:
        problem: from `analyse`.
        new_numbers: one value per question number (frozen ones unchanged).

    Returns:
        The new values.

    Raises:
        ReplayError: `negative_answer`, `fractional_answer` or `absurd_answer` with a detail.
    """
    results: list[Fraction] = []
    for j, eq in enumerate(problem.equations):
        values = {}
        for i, (kind, ref) in enumerate(eq.sources):
            if kind == "q":
                values[f"v{i}"] = new_numbers[int(ref)]
            elif kind == "r":
                values[f"v{i}"] = results[int(ref)]
            else:
                values[f"v{i}"] = Fraction(ref)
        for i, alternatives in enumerate(eq.alternatives):
            # "160+240" where two earlier steps gave 240: only a replay that keeps them equal is unambiguous.
            if any(_value_of(a, new_numbers, results) != values[f"v{i}"] for a in alternatives):
                raise ReplayError(f"replay_failed: operand {eq.operands[i].text} of step {j + 1} is ambiguous")
        got = evaluate(eq.expression, values)
        if got < 0:
            raise ReplayError(f"negative_answer: step {j + 1} ({eq.expression}) gives {float(got):g}")
        if got.denominator != 1 and eq.result.value.denominator == 1:
            raise ReplayError(f"fractional_answer: step {j + 1} gives {float(got):g} where the seed's is whole")
        results.append(got)
    answer = results[problem.answer_equation]
    if answer > MAX_ANSWER:
        raise ReplayError(f"absurd_answer: {float(answer):g} > {MAX_ANSWER:g}")
    if problem.answer > 0 and (
        answer == 0 or not 1 / MAX_MAGNITUDE_JUMP <= answer / problem.answer <= MAX_MAGNITUDE_JUMP
    ):
        raise ReplayError(f"absurd_answer: {float(answer):g} is far from the seed's {float(problem.answer):g}")
    return Replayed(new_numbers, results, answer)


def _value_of(source: tuple[str, int | Fraction], numbers: list[Fraction], results: list[Fraction]) -> Fraction:
    kind, ref = source
    return numbers[int(ref)] if kind == "q" else results[int(ref)] if kind == "r" else Fraction(ref)


def render(value: Fraction, template: str) -> str:
    """Write `value` the way `template` writes its number: commas, decimal places, a leading dot.

    Raises:
        ReplayError: `fractional_answer` when the value has no exact decimal form of at most 4 places.

    Example:
        >>> render(Fraction(27000), "22,500"), render(Fraction(9), "18.00"), render(Fraction(1, 4), ".4")
        ('27,000', '9.00', '.25')
    """
    places = len(template.split(".")[1]) if "." in template else 0
    needed = next((d for d in range(MAX_DECIMALS + 1) if (value * 10**d).denominator == 1), None)
    if needed is None:
        raise ReplayError(f"fractional_answer: {float(value):g} has no exact decimal form")
    places = max(places, needed) if places else needed
    text = f"{float(value):,.{places}f}" if "," in template else f"{float(value):.{places}f}"
    if template.startswith(".") and text.startswith("0."):
        text = text[1:]
    return text


def sample_number(rng: Any, num: Num, question: str) -> Fraction:
    """A new value for one question number: same grid and magnitude; percentages stay multiples of 5 below 100.

    Example:
        >>> import random
        >>> v = sample_number(random.Random(0), Num(Fraction(80), 0, 2, "80", percent=True), "80%")
        >>> v % 5 == 0 and 5 <= v <= 95 and v != 80
        True
    """
    value = num.value
    cap = _cap(question[num.end :])
    if num.percent:
        choices = [Fraction(p) for p in range(5, 100, 5) if p != value]
        return rng.choice(choices)
    if value.denominator != 1:
        step = Fraction(1, 2) if (value * 2).denominator == 1 else Fraction(1, 10 ** len(num.text.split(".")[1]))
    else:
        v = int(value)
        step = next((Fraction(s) for s in (1000, 100, 10, 5) if v >= 2 * s and v % s == 0), Fraction(1))
    low = max(step, value / 2, Fraction(2) if value >= 2 else step)
    low = math.ceil(low / step) * step  # start on the grid, or every sample would be off it (5.5, 6.5, ...)
    high = max(value * 3 / 2, value + 3 * step)
    grid = [low + k * step for k in range(int((high - low) / step) + 1)]
    grid = [g for g in grid if g != value and g > 0 and (g * 10**MAX_DECIMALS).denominator == 1 and g <= cap]
    if value.denominator != 1:
        grid = [g for g in grid if g.denominator != 1]  # "2.5 times" stays a decimal, never "4.0 times"
    return rng.choice(grid) if grid else value


# Calendar facts a number cannot exceed, by the words after it ("5 days a week" never becomes 8 days a week).
_CAPS = (
    (re.compile(r"\s*-?\s*days?\s+(?:a|per|each|every)\s+week", re.IGNORECASE), 7),
    (re.compile(r"\s*-?\s*hours?\s+(?:a|per|each|every)\s+day", re.IGNORECASE), 24),
    (re.compile(r"\s*-?\s*months?\s+(?:a|per|each|every)\s+year", re.IGNORECASE), 12),
    (re.compile(r"\s*-?\s*(?:weekdays|workdays)", re.IGNORECASE), 7),
)


def _cap(after: str) -> Fraction:
    for pattern, cap in _CAPS:
        if pattern.match(after):
            return Fraction(cap)
    return Fraction(MAX_ANSWER)


class ArithmeticResample(Generator):
    """Re-samples the numbers of GSM8K-style seeds and recomputes the answer by replaying the reference.

    Example:
        >>> gen = ArithmeticResample()
        >>> gen.name, sorted(gen.families)
        ('arithmetic_resample', ['arithmetic'])
    """

    name: ClassVar[str] = "arithmetic_resample"
    # 2: metric units imply their factors (`1.25 kilograms` in grams: 1000), so unit conversions replay.
    version: ClassVar[int] = 2
    families: ClassVar[frozenset[str]] = frozenset({"arithmetic"})
    verifiers: ClassVar[frozenset[str]] = frozenset({"numeric_answer"})

    def __init__(self, *, rename: bool = True, attempts_per_variant: int = ATTEMPTS_PER_VARIANT):
        self.rename = rename
        self.attempts_per_variant = attempts_per_variant

    def generate(self, parent: Mapping[str, Any], *, n: int, random_seed: int) -> GenerationResult:
        """Up to `n` variants of an arithmetic seed; see the module docstring for the method and reject codes.

        Args:
            parent: a task whose verifier is `numeric_answer` and whose reference ends with `#### N`.
            n: variants wanted.
            random_seed: with the parent's task_id, fixes the output.

        Returns:
            Variants (distinct task_ids, none equal to the parent) and reject rows.

        Example:
            >>> ArithmeticResample().generate(seed, n=3, random_seed=0).tasks  # doctest: +SKIP
        """
        out = GenerationResult()
        question = _user_message(parent)
        reference = parent.get("reference") or ""
        try:
            answer = Fraction(str(parent["verifier"]["params"]["answer"]).replace(",", ""))
            problem = analyse(question, reference, answer)
        except (ReplayError, ValueError, KeyError, ZeroDivisionError) as exc:
            code, _, detail = str(exc).partition(": ")
            if not isinstance(exc, ReplayError):
                code, detail = "unsupported_seed", f"cannot read the seed ({exc})"
            out.rejects.append(self.reject(parent, code, detail, {}))
            return out
        rng = self.rng(parent, random_seed)
        seen = {parent["task_id"]}
        for attempt in range(n * self.attempts_per_variant):
            if len(out.tasks) >= n:
                break
            size = max(1, len(problem.free) - attempt // 3)
            chosen = sorted(rng.sample(problem.free, min(size, len(problem.free))))
            new_numbers = [num.value for num in problem.numbers]
            for i in chosen:
                new_numbers[i] = sample_number(rng, problem.numbers[i], question)
            substitutions = {
                problem.numbers[i].text: render(new_numbers[i], problem.numbers[i].text)
                for i in chosen
                if new_numbers[i] != problem.numbers[i].value
            }
            rename = self._pick_name(rng, question, reference) if self.rename else None
            params: dict[str, Any] = {"substitutions": substitutions, "attempt": attempt}
            if rename:
                params["rename"] = {rename[0]: rename[1]}
            if not substitutions:
                continue
            if len(set(new_numbers)) < len({num.value for num in problem.numbers}):
                continue  # two numbers made equal: the text (and a later replay of this variant) turns ambiguous
            try:
                replayed = replay(problem, new_numbers)
                new_question, new_reference = rewrite(problem, replayed)
            except ReplayError as exc:
                code, _, detail = str(exc).partition(": ")
                out.rejects.append(self.reject(parent, code, detail, params))
                continue
            if rename:
                new_question = re.sub(rf"\b{re.escape(rename[0])}\b", rename[1], new_question)
                new_reference = re.sub(rf"\b{re.escape(rename[0])}\b", rename[1], new_reference)
            prompt = [dict(m) for m in parent["prompt"]]
            user = last_user_index(prompt)
            assert user is not None  # programmatic_variants rejects a parent without one first
            prompt[user] = {**prompt[user], "content": new_question}
            verifier_params = {**parent["verifier"]["params"], "answer": _as_json_number(replayed.answer)}
            task = derive_task(
                parent,
                prompt=prompt,
                verifier_params=verifier_params,
                reference=new_reference,
                generator=self.spec({k: v for k, v in params.items() if k != "attempt"}),
            )
            if task["task_id"] in seen:
                continue
            seen.add(task["task_id"])
            out.tasks.append(task)
        return out

    @staticmethod
    def _pick_name(rng: Any, question: str, reference: str) -> tuple[str, str] | None:
        first = re.match(r"[A-Z][a-z]+", question)
        if first is None or re.search(r"\bletters?\b", question):
            return None  # a puzzle about the letters of a name would change its answer
        name = first.group()
        pool = FEMALE_NAMES if name in FEMALE_NAMES else MALE_NAMES if name in MALE_NAMES else None
        if pool is None:
            return None
        text = question + "\n" + reference
        options = [p for p in pool if p != name and not re.search(rf"\b{p}\b", text)]
        return (name, rng.choice(options)) if options else None


def rewrite(problem: Problem, replayed: Replayed) -> tuple[str, str]:
    """The question and the reference with the new numbers, equation results and final answer.

    Raises:
        ReplayError: `replay_failed` when a number in the reasoning maps to two different new values.
    """
    question = _splice(
        problem.question,
        [(n.start, n.end, render(v, n.text)) for n, v in zip(problem.numbers, replayed.numbers, strict=True)
         if v != n.value],
    )  # fmt: skip
    edits: dict[int, tuple[int, str]] = {}
    for j, eq in enumerate(problem.equations):
        for num, (kind, ref) in zip(eq.operands, eq.sources, strict=True):
            new = replayed.numbers[int(ref)] if kind == "q" else replayed.results[int(ref)] if kind == "r" else None
            if new is not None:
                edits[num.start] = (num.end, render(new, num.text))
        edits[eq.result.start] = (eq.result.end, render(replayed.results[j], eq.result.text))
    # Other numbers in the reasoning: rewrite by value when every source of that value moved the same way.
    mapping: dict[Fraction, set[Fraction]] = {}
    for n, v in zip(problem.numbers, replayed.numbers, strict=True):
        mapping.setdefault(n.value, set()).add(v)
    for eq, v in zip(problem.equations, replayed.results, strict=True):
        mapping.setdefault(eq.result.value, set()).add(v)
    final = FINAL_ANSWER.search(problem.reference)
    body_end = final.start() if final else len(problem.reference)
    for m in NUMBER.finditer(problem.reference, 0, body_end):
        if m.start() in edits:
            continue
        value = parse_number(m.group())
        targets = mapping.get(value)
        # "He eats 32 from the large pizzas because 2 x 16 = 32": a number restating a result on its own line.
        line_start = problem.reference.rfind("\n", 0, m.start()) + 1
        line_end = problem.reference.find("\n", m.end()) % (len(problem.reference) + 1)
        same_line = {
            replayed.results[j]
            for j, eq in enumerate(problem.equations)
            if line_start <= eq.result.start < line_end and eq.result.value == value
        }
        if len(same_line) == 1:
            targets = same_line
        if not targets or targets == {value}:
            continue
        if len(targets) > 1:
            raise ReplayError(f"replay_failed: '{m.group()}' in the reasoning could mean several new values")
        edits[m.start()] = (m.end(), render(next(iter(targets)), m.group()))
    reference = _splice(problem.reference, [(s, e, t) for s, (e, t) in edits.items()])
    final_text = render(replayed.answer, "0")
    reference = FINAL_ANSWER.sub(lambda _m: f"#### {final_text}", reference)
    return question, reference


def _splice(text: str, edits: list[tuple[int, int, str]]) -> str:
    for start, end, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[end:]
    return text


def _as_json_number(value: Fraction) -> int | float:
    return int(value) if value.denominator == 1 else float(value)


def _user_message(task: Mapping[str, Any]) -> str:
    return task["prompt"][last_user_index(task["prompt"])]["content"]
