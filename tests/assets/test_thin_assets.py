"""Assets read as wiring: every function Dagster decorates in assets/ (an asset, a check, a sensor, a factory's
inner asset) is at most `MAX_LINES` long, signature and docstring included. Rules live in the packages below."""

import ast

from tests.paths import REPO

MAX_LINES = 40


def decorated_functions(source: str) -> dict[str, int]:
    """Each decorated function of a module by name, with its length in lines (def line to last line)."""
    return {
        node.name: node.end_lineno - node.lineno + 1
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.decorator_list and node.end_lineno
    }


def test_every_asset_function_is_wiring():
    measured = {
        f"{path.name}:{name}": lines
        for path in sorted((REPO / "assets").glob("*.py"))
        for name, lines in decorated_functions(path.read_text(encoding="utf-8")).items()
    }
    assert len(measured) > 30  # the assets, their checks and sensors were found
    long = {name: lines for name, lines in measured.items() if lines > MAX_LINES}
    assert long == {}, f"over {MAX_LINES} lines: move the rules into their package and let the asset call them"


def test_the_measure_counts_a_long_asset():
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    source = f"import dagster as dg\n\n@dg.asset\ndef long_asset():\n{body}\n\ndef helper():\n{body}\n"
    assert decorated_functions(source) == {"long_asset": MAX_LINES + 1}  # the undecorated helper is not an asset
