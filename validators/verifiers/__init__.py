"""The shipped verifiers; importing this package registers them."""

from validators.verifiers import format, json_schema, numeric, python_tests, sql, text, tool_call  # noqa: F401
