"""The shipped verifiers; importing this package registers them, but for `episode`, which the registry imports
after it (`validators.registry.BUILTIN_MODULES`): its environments import the verifiers here."""

from validators.verifiers import (  # noqa: F401
    format,
    json_schema,
    math_answer,
    numeric,
    python_tests,
    sql,
    text,
    tool_call,
)
