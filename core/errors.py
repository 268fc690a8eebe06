"""The one base of every error seedwheel raises on purpose: what went wrong, and what to do about it.

Each package's errors subclass `SeedwheelError` and keep the builtin they always had (`ValueError`, `KeyError`,
`ImportError`, ...), so `except ValueError` callers still catch them and `except SeedwheelError` catches them all:
the command line turns one into a message and a hint instead of a traceback.
"""

from __future__ import annotations


class SeedwheelError(Exception):
    """An error with the fix the user should apply.

    `str(error)` is the message followed by the hint (`"<message>; <hint>"`), so logs, Dagster's step failures and
    the command line all show both.

    Args:
        *args: the message (and anything else the builtin base takes), as for any exception.
        **kwargs: keyword arguments of the builtin base, e.g. `ImportError`'s `name=`.
        hint: the fix, e.g. "add the field" or "pip install 'seedwheel[lora]'"; empty when the message says it.

    Example:
        >>> class BadThing(SeedwheelError, ValueError): ...
        >>> error = BadThing("seeds/a.jsonl:3: missing field 'verifier'", hint="add the field")
        >>> str(error), isinstance(error, ValueError), error.hint
        ("seeds/a.jsonl:3: missing field 'verifier'; add the field", True, 'add the field')
    """

    hint: str = ""

    def __init__(self, *args: object, hint: str = "", **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # kwargs: what the builtin base takes (ImportError's name=, path=)
        self.hint = hint

    def __str__(self) -> str:
        message = super().__str__()
        return f"{message}; {self.hint}" if self.hint else message
