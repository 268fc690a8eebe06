"""The Examples in the failures package's docstrings run and show what they say."""

import doctest
import importlib

import pytest


@pytest.mark.parametrize("module", ["redaction", "log", "derive", "batch"])
def test_docstring_examples(module):
    result = doctest.testmod(importlib.import_module(f"failures.{module}"), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
