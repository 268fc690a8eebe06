"""`json_extraction_resample`: extraction documents with re-sampled identifying fields.

Design. A string leaf of `expected` is a slot when it occurs verbatim in the user message (and not in the
schema shown there), and it is of a kind we can sample without breaking the document's own logic:

- identifiers with digits (`NWD-2024-0417`, `KL-00318`, `QX7M2R`, a card's last four digits, a postal code):
  the digits are re-drawn and the letters and separators kept, so the schema's `pattern` still holds;
- e-mail addresses: a new local part from a name pool, the domain kept;
- person names (`Tomasz Nowak` in a field such as `patient_name` or `passengers/0`): a new first and last name
  from pools, only when neither part occurs on its own elsewhere (a "Dear Tomasz" would no longer match).

Amounts, dates and times are left alone: documents tie them together (a subtotal is a sum, a due date is an
invoice date plus 30 days), so a single re-sampled number would make the document inconsistent. The same
textual substitution is applied to the user message, to every string of `expected`, and to every string of
the reference JSON (free-text fields that mention a name stay consistent); the new reference must validate
against the schema. A sampled value that already occurs in the message is skipped (it would be ambiguous).

Rejects: `unsupported_seed` (no slot), `schema_invalid` (the rewritten reference breaks the schema),
`no_reference` (the reference holds no JSON object to rewrite).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, ClassVar

import jsonschema

from generators.base import GenerationResult, Generator, derive_task, last_user_index
from validators.extract import extract_json

ATTEMPTS_PER_VARIANT = 4
FIRST_NAMES = ("Amelia", "Bruno", "Carmen", "Dmitri", "Esther", "Farid", "Greta", "Hugo", "Ingrid", "Jonah", "Keiko",
               "Luca", "Mirela", "Nikhil", "Odette", "Pavel", "Rosa", "Stefan", "Talia", "Viktor")  # fmt: skip
LAST_NAMES = ("Albrecht", "Brennan", "Castillo", "Duarte", "Eklund", "Fontaine", "Gallagher", "Halvorsen", "Iqbal",
              "Jansen", "Kowalczyk", "Lindgren", "Mbeki", "Navarro", "Okoro", "Petrov", "Quinn", "Rahimi")  # fmt: skip
_ID = re.compile(r"[A-Z0-9][A-Z0-9 /-]*")
_EMAIL = re.compile(r"([\w.+-]+)@([\w-]+(?:\.[\w-]+)+)")
_PERSON = re.compile(r"([A-Z][a-z]+) ([A-Z][a-z]+)")
_PERSON_KEYS = re.compile(r"(patient|employee|guest|driver|customer|tenant|attendee|passenger|recipient|sender|"
                          r"holder|contact)|^/name$|/recipient/name$", re.I)  # fmt: skip


def _leaves(value: Any, path: str = "") -> list[tuple[str, Any]]:
    if isinstance(value, Mapping):
        return [leaf for k, v in value.items() for leaf in _leaves(v, f"{path}/{k}")]
    if isinstance(value, list):
        return [leaf for i, v in enumerate(value) for leaf in _leaves(v, f"{path}/{i}")]
    return [(path, value)]


def _replace_strings(value: Any, substitutions: Mapping[str, str]) -> Any:
    """`value` with every string leaf rewritten by `substitutions` (longest surface first)."""
    if isinstance(value, Mapping):
        return {k: _replace_strings(v, substitutions) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace_strings(v, substitutions) for v in value]
    if isinstance(value, str):
        return _substitute(value, substitutions)
    return value


def _substitute(text: str, substitutions: Mapping[str, str]) -> str:
    if not substitutions:
        return text
    pattern = "|".join(rf"(?<![\w@.-]){re.escape(s)}(?![\w@-])" for s in sorted(substitutions, key=len, reverse=True))
    return re.sub(pattern, lambda m: substitutions[m.group()], text)


def slot_kind(path: str, value: str, message: str) -> str | None:
    """Which sampler fits a value stated in the document: `id`, `email`, `person`, or None.

    Example:
        >>> slot_kind("/invoice_number", "NWD-2024-0417", "Invoice no.: NWD-2024-0417")
        'id'
        >>> slot_kind("/patient_name", "Samuel Adeyemi", "Patient: Samuel Adeyemi. Dear Samuel, ...") is None
        True
    """
    if _EMAIL.fullmatch(value):
        local = re.split(r"[._+-]", value.split("@")[0])
        tied = any(len(p) > 2 and re.search(rf"\b{re.escape(p.capitalize())}\b", message) for p in local)
        return None if tied else "email"
    if _ID.fullmatch(value) and re.search(r"\d", value) and len(value) >= 3:
        return "id"
    person = _PERSON.fullmatch(value)
    if person and _PERSON_KEYS.search(path):
        whole = len(re.findall(re.escape(value), message))
        alone = all(len(re.findall(rf"\b{re.escape(part)}\b", message)) == whole for part in person.groups())
        return "person" if alone else None
    return None


def sample(rng: Any, kind: str, value: str) -> str:
    """A new value of `kind` shaped like `value`.

    Example:
        >>> import random
        >>> new = sample(random.Random(0), "id", "KL-00318")
        >>> new.startswith("KL-") and len(new) == 8
        True
    """
    if kind == "email":
        domain = value.split("@", 1)[1]
        return f"{rng.choice(FIRST_NAMES).lower()}.{rng.choice(LAST_NAMES).lower()}@{domain}"
    if kind == "person":
        return f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"
    chars = [str(rng.randrange(10)) if ch.isdigit() else ch for ch in value]
    if value[0].isdigit() and value[0] != "0":
        chars[0] = str(rng.randrange(1, 10))  # "0417" may lead with 0; "58213" should not start to
    return "".join(chars)


class JsonExtractionResample(Generator):
    """Re-samples identifiers, e-mails and person names of an extraction document, consistently everywhere.

    Example:
        >>> JsonExtractionResample().name
        'json_extraction_resample'
    """

    name: ClassVar[str] = "json_extraction_resample"
    version: ClassVar[int] = 1
    families: ClassVar[frozenset[str]] = frozenset({"json_extraction"})

    def generate(self, parent: Mapping[str, Any], *, n: int, random_seed: int) -> GenerationResult:
        """Up to `n` variants of a `json_schema` seed; see the module docstring for the method and reject codes.

        Args:
            parent: a task with `schema` and `expected` params and a JSON reference.
            n: variants wanted.
            random_seed: with the parent's task_id, fixes the output.

        Returns:
            Variants (distinct task_ids, none equal to the parent) and reject rows.
        """
        out = GenerationResult()
        params = parent["verifier"]["params"]
        schema, expected = params["schema"], params.get("expected") or {}
        user = last_user_index(parent["prompt"])
        assert user is not None  # programmatic_variants rejects a parent without one first
        message = parent["prompt"][user]["content"]
        schema_text = json.dumps(schema, ensure_ascii=False)
        extraction = extract_json(parent.get("reference") or "")
        reference_obj = extraction.value if extraction.ok else None
        if not isinstance(reference_obj, Mapping):
            out.rejects.append(self.reject(parent, "no_reference", "the reference holds no JSON object", {}))
            return out
        slots: dict[str, str] = {}
        for path, value in _leaves(expected):
            if not isinstance(value, str) or value in slots or value in schema_text:
                continue
            if not re.search(rf"(?<![\w@.-]){re.escape(value)}(?![\w@-])", message):
                continue
            kind = slot_kind(path, value, message)
            if kind is not None:
                slots[value] = kind
        if not slots:
            detail = "no identifier, e-mail or person name of `expected` occurs verbatim in the document"
            out.rejects.append(self.reject(parent, "unsupported_seed", detail, {}))
            return out
        rng = self.rng(parent, random_seed)
        seen = {parent["task_id"]}
        for _ in range(n * ATTEMPTS_PER_VARIANT):
            if len(out.tasks) >= n:
                break
            substitutions: dict[str, str] = {}
            for old, kind in slots.items():
                new = sample(rng, kind, old)
                if new == old or new in message or new in substitutions.values():
                    continue
                substitutions[old] = new
            if not substitutions:
                continue
            spec = {"substitutions": substitutions}
            new_reference = _replace_strings(reference_obj, substitutions)
            errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(new_reference), key=str)
            if errors:
                out.rejects.append(self.reject(parent, "schema_invalid", errors[0].message[:160], spec))
                continue
            prompt = [dict(m) for m in parent["prompt"]]
            prompt[user] = {**prompt[user], "content": _substitute(message, substitutions)}
            reference = "```json\n" + json.dumps(new_reference, indent=2, ensure_ascii=False) + "\n```"
            task = derive_task(
                parent,
                prompt=prompt,
                verifier_params={**params, "expected": _replace_strings(expected, substitutions)},
                reference=reference,
                generator=self.spec(spec),
            )
            if task["task_id"] not in seen:
                seen.add(task["task_id"])
                out.tasks.append(task)
        return out
