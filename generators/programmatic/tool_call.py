"""`tool_call_resample`: tool-call requests with re-sampled argument values, rendered into the request.

Design. Every leaf of the gold call's arguments (`expected.arguments`, nested objects and lists included; with
a one-call `possible_answer`, the arguments that have a single plain acceptable value, so alternatives such as
"Kyoto" or "Kyoto, Japan" stay as the seed states them) is a candidate slot when its value appears verbatim in
the user's request (word-bounded; enum values also as words, `living_room` -> "living room", any case). A
slot gets a new value of the same kind, valid under the tool's parameter schema:

- enum: another allowed value;
- dates (`YYYY-MM-DD`, written in the request as ISO or as `3 September 2024`), times (`HH:MM`): another date
  or time, written the same way; requests that state a weekday or "today" are left alone (a relative date
  would no longer follow);
- emails, IATA airport codes, currency codes, cities/locations and person names: from small pools;
- numbers: same magnitude and grid, within the schema's bounds, written with the request's decimals;
- ids with digits (`B20417`, `MUG-350-TEAL`, postal codes): the digits re-drawn, letters kept.

Free text (titles, subjects, bodies, search queries) is left as is. The new value must not already occur in
the request (ambiguous), the new arguments must validate against the tool's schema, and the reference is the
gold call as JSON (first acceptable values). Rejects: `unsupported_seed` (the gold is not one call, or no
argument value is stated verbatim in a kind we can sample), `schema_invalid` (a sampled value broke the
schema: a bug in a sampler, kept visible).
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import re
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import jsonschema

from generators.base import GenerationResult, Generator, derive_task, last_user_index
from validators.verifiers.tool_call import gold_calls, tool_parameters

ATTEMPTS_PER_VARIANT = 5
CITIES = (
    "Reykjavik", "Kyoto", "Edinburgh", "Lisbon", "Vienna", "Oslo", "Porto", "Seville", "Krakow", "Bergen",
    "Valencia", "Ghent", "Tallinn", "Bologna", "Lyon", "Dublin", "Helsinki", "Zurich", "Antwerp", "Nantes",
)  # fmt: skip
AIRPORTS = ("LIS", "BOS", "SIN", "SYD", "LHR", "CDG", "FRA", "AMS", "MAD", "JFK", "SFO", "NRT", "DXB", "YYZ", "ZRH")
CURRENCIES = ("EUR", "USD", "GBP", "CHF", "JPY", "CAD", "AUD", "SEK", "NOK", "DKK", "PLN", "CZK")
FIRST = ("Claire", "Priya", "Tom", "Jana", "Marek", "Ravi", "Lena", "Omar", "Sofia", "Daniel", "Mei", "Jonas")
LAST = ("Moreau", "Shah", "Becker", "Novak", "Ahmed", "Rossi", "Keller", "Okafor", "Lindqvist", "Haddad")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")  # fmt: skip
_DAY_WORDS = re.compile(
    r"\b(today|tomorrow|yesterday|monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b", re.I
)


def _words(pattern: str) -> str:
    return rf"(?<![\w@.-]){pattern}(?![\w@-])"


def _lookup(substitutions: Mapping[str, str]) -> Callable[[re.Match[str]], str]:
    """A `re.sub` replacement: each matched surface's new text."""
    return lambda match: substitutions[match.group()]


def surfaces(value: Any, schema: Mapping[str, Any], request: str) -> list[str]:
    """How `value` may be written in the request, most specific first; only forms that occur are returned.

    Example:
        >>> surfaces("2024-09-03", {"pattern": r"^\\d{4}-\\d{2}-\\d{2}$"}, "leaving 3 September 2024")
        ['3 September 2024']
    """
    if isinstance(value, bool) or value is None:
        return []
    forms: list[str] = []
    if isinstance(value, int | float):
        forms = [f"{value:,}", str(value)] if isinstance(value, int) else [f"{value:.2f}", repr(value)]
    elif isinstance(value, str):
        forms = [value]
        if "enum" in schema:
            forms += [value.replace("_", " "), value.replace("_", " ").capitalize(), value.capitalize()]
        if _is_date(value):
            day = dt.date.fromisoformat(value)
            forms.append(f"{day.day} {MONTHS[day.month - 1]} {day.year}")
    found = []
    for form in dict.fromkeys(forms):
        if re.search(_words(re.escape(form)), request):
            found.append(form)
    return found


def _is_date(value: str) -> bool:
    try:
        dt.date.fromisoformat(value)
    except ValueError:
        return False
    return bool(re.fullmatch(r"\d{4}-\d{2}-\d{2}", value))


def _render_like(new: Any, old: Any, surface: str) -> str:
    """Write the new value as the request wrote the old one."""
    if isinstance(new, int | float) and not isinstance(new, bool):
        if "," in surface:
            return f"{new:,}"
        if "." in surface:
            return f"{new:.{len(surface.split('.')[1])}f}"
        return str(new)
    text = str(new)
    if isinstance(old, str) and _is_date(old) and surface != old:
        day = dt.date.fromisoformat(text)
        return f"{day.day} {MONTHS[day.month - 1]} {day.year}"
    if "_" not in surface:
        text = text.replace("_", " ")  # requests are prose: "premium economy", "robot vacuum"
    if surface[:1].isupper() and not str(old)[:1].isupper():
        text = text[:1].upper() + text[1:]
    return text


def sample_value(rng: Any, key: str, value: Any, schema: Mapping[str, Any], shift: int = 7) -> Any:
    """A different value of the same kind as `value`, valid under `schema`, or None when we cannot make one.

    Dates move by `shift` days, one shift per variant, so a return flight stays after its departure.

    Example:
        >>> import random
        >>> sample_value(random.Random(1), "units", "celsius", {"enum": ["celsius", "fahrenheit"]})
        'fahrenheit'
    """
    if isinstance(value, bool):
        return None
    if "enum" in schema:
        options = [v for v in schema["enum"] if v != value and type(v) is type(value)]
        return rng.choice(options) if options else None
    if isinstance(value, int | float):
        return _sample_number(rng, value, schema)
    if not isinstance(value, str):
        return None
    description = str(schema.get("description", "")).lower()
    if _is_date(value):
        return (dt.date.fromisoformat(value) + dt.timedelta(days=shift)).isoformat()
    if re.fullmatch(r"([01]\d|2[0-3]):[0-5]\d", value):
        return f"{rng.randrange(7, 21):02d}:{rng.choice((0, 15, 30, 45)):02d}"
    if re.fullmatch(r"[\w.+-]+@[\w-]+(\.[\w-]+)+", value):
        domain = value.split("@", 1)[1]
        return f"{rng.choice(FIRST).lower()}.{rng.choice(LAST).lower()}@{domain}"
    if re.fullmatch(r"[A-Z]{3}", value):
        pool = AIRPORTS if "iata" in description or "airport" in description else CURRENCIES
        return rng.choice([p for p in pool if p != value])
    if key == "location" or (key != "city" and value in CITIES):
        # A `city` inside an address sits next to its country and postal code: a new city would contradict them.
        return rng.choice([c for c in CITIES if c != value])
    if key in ("recipient", "name", "full_name") and re.fullmatch(r"[A-Z][a-z]+ [A-Z][a-z]+", value):
        return f"{rng.choice(FIRST)} {rng.choice(LAST)}"
    if re.search(r"\d", value) and re.fullmatch(r"[A-Z0-9-]+", value):
        # An id: keep its letters (the shop's prefix) and re-draw the digits; the first digit stays non-zero.
        digits = [str(rng.randrange(10)) if ch.isdigit() else ch for ch in value]
        first = next(i for i, ch in enumerate(value) if ch.isdigit())
        digits[first] = str(rng.randrange(1, 10))
        return "".join(digits)
    return None


def _sample_number(rng: Any, value: int | float, schema: Mapping[str, Any]) -> int | float | None:
    low = schema.get("minimum", schema.get("exclusiveMinimum", 0))
    high = schema.get("maximum", schema.get("exclusiveMaximum", max(abs(value) * 3, 10)))
    options: list[int | float]
    if isinstance(value, int):
        step = next((s for s in (100, 10, 5) if value >= 2 * s and value % s == 0), 1)
        options = [v for v in range(max(int(low), step), int(high) + 1, step) if v != value]
        options = [v for v in options if value / 3 <= v <= value * 3 or value < 3] or options
    else:
        options = [round(v / 2, 1) for v in range(max(1, int(low * 2)), int(high * 2) + 1)]
        options = [v for v in options if v != value and value / 3 <= v <= value * 3 and v != int(v)]
    return rng.choice(options) if options else None


def _leaves(value: Any, schema: Mapping[str, Any], path: tuple[Any, ...] = ()) -> list[tuple[tuple, Any, dict]]:
    """(path, value, schema) for every leaf of the arguments."""
    if isinstance(value, Mapping):
        props = schema.get("properties", {})
        return [leaf for k, v in value.items() for leaf in _leaves(v, props.get(k, {}), (*path, k))]
    if isinstance(value, list):
        items = schema.get("items", {})
        return [leaf for i, v in enumerate(value) for leaf in _leaves(v, items, (*path, i))]
    return [(path, value, dict(schema))]


def _set(value: Any, path: tuple, new: Any) -> None:
    for key in path[:-1]:
        value = value[key]
    value[path[-1]] = new


def _single_values(params: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The gold call's name and the argument values that have one acceptable value (the ones to re-sample).

    `expected` gives every argument; a one-call `possible_answer` gives each argument with a single plain
    acceptable value (an argument with alternatives, "Kyoto" or "Kyoto, Japan", is left as the seed states it).
    None when the gold is not one call.
    """
    if "expected" in params:
        return params["expected"]["name"], params["expected"]["arguments"]
    if len(params["possible_answer"]) != 1:
        return None
    ((name, arguments),) = params["possible_answer"][0].items()
    single = {
        key: values[0]
        for key, values in arguments.items()
        if len(values) == 1 and values[0] != "" and not isinstance(values[0], dict | list)
    }
    return name, single


def _with_values(params: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """The params with the gold's re-sampled argument values in the seed's own form."""
    if "expected" in params:
        return {**params, "expected": {**params["expected"], "arguments": dict(values)}}
    ((name, arguments),) = params["possible_answer"][0].items()
    call = {key: [values[key]] if key in values else alternatives for key, alternatives in arguments.items()}
    return {**params, "possible_answer": [{name: call}]}


class ToolCallResample(Generator):
    """Re-samples the argument values a tool-call request states, consistently in request, gold and reference.

    Example:
        >>> ToolCallResample().name
        'tool_call_resample'
    """

    name: ClassVar[str] = "tool_call_resample"
    version: ClassVar[int] = 1
    families: ClassVar[frozenset[str]] = frozenset({"tool_call"})

    def generate(self, parent: Mapping[str, Any], *, n: int, random_seed: int) -> GenerationResult:
        """Up to `n` variants of a `tool_call` seed; see the module docstring for the method and reject codes.

        Args:
            parent: a task with `tools` and `expected` params.
            n: variants wanted.
            random_seed: with the parent's task_id, fixes the output.

        Returns:
            Variants (distinct task_ids, none equal to the parent) and reject rows.
        """
        out = GenerationResult()
        params = parent["verifier"]["params"]
        gold = _single_values(params)
        if gold is None:
            detail = "the gold is not one call (possible_answer with several calls, or none)"
            out.rejects.append(self.reject(parent, "unsupported_seed", detail, {}))
            return out
        name, values = gold
        user = last_user_index(parent["prompt"])
        assert user is not None  # programmatic_variants rejects a parent without one first
        request = parent["prompt"][user]["content"]
        schema = tool_parameters(params).get(name, {"type": "object"})
        slots = []
        for path, value, leaf_schema in _leaves(values, schema):
            if _is_date(str(value)) and _DAY_WORDS.search(request):
                continue  # "Today is Monday, 13 May": a new date would contradict the stated weekday
            forms = surfaces(value, leaf_schema, request)
            if isinstance(value, str) and f"({value})" in request:
                continue  # "Lisbon (LIS)": the code is tied to a city name we do not rewrite
            if isinstance(value, str) and "@" in value:
                local = value.split("@")[0].split(".")[0]
                if re.search(rf"\b{re.escape(local.capitalize())}\b", request):
                    continue  # "email jana.novak@... the body 'Hi Jana'": the address is tied to the text
            if forms and sample_value(self.rng(parent, 0), str(path[-1]), value, leaf_schema) is not None:
                slots.append((path, value, leaf_schema, forms[0]))
        if not slots:
            detail = "no argument value is stated verbatim in the request in a kind we can sample"
            out.rejects.append(self.reject(parent, "unsupported_seed", detail, {}))
            return out
        rng = self.rng(parent, random_seed)
        seen = {parent["task_id"]}
        for _ in range(n * ATTEMPTS_PER_VARIANT):
            if len(out.tasks) >= n:
                break
            arguments = copy.deepcopy(values)
            new_request = request
            substitutions: dict[str, str] = {}
            shift = rng.choice([d for d in range(-40, 41) if d])
            for path, value, leaf_schema, surface in slots:
                new = sample_value(rng, str(path[-1]), value, leaf_schema, shift)
                if new is None:
                    continue
                text = _render_like(new, value, surface)
                if re.search(_words(re.escape(text)), request, re.I) or text in substitutions.values():
                    continue  # already in the request: the model could not tell which mention is the argument
                _set(arguments, path, new)
                substitutions[surface] = text
            if not substitutions:
                continue
            # One pass over all surfaces, so a new value is never rewritten again by a later substitution.
            pattern = "|".join(_words(re.escape(s)) for s in sorted(substitutions, key=len, reverse=True))
            new_request = re.sub(pattern, _lookup(substitutions), request)
            spec = {"substitutions": substitutions}
            new_params = _with_values(params, arguments)
            [call] = gold_calls(new_params)
            errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(call["arguments"]), key=str)
            if errors:
                out.rejects.append(self.reject(parent, "schema_invalid", errors[0].message[:160], spec))
                continue
            prompt = [dict(m) for m in parent["prompt"]]
            prompt[user] = {**prompt[user], "content": new_request}
            task = derive_task(
                parent,
                prompt=prompt,
                verifier_params=new_params,
                reference=json.dumps(call, ensure_ascii=False),
                generator=self.spec(spec),
            )
            if task["task_id"] not in seen:
                seen.add(task["task_id"])
                out.tasks.append(task)
        return out
