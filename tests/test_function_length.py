"""No function in ``evorl/`` is longer than 60 lines, from its ``def`` line to its last line
(docstring and nested functions included): a longer one is split into named steps."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "evorl"
MAX_LINES = 60


def long_functions(source: str, limit: int = MAX_LINES) -> list[tuple[int, str, int]]:
    """``(line, name, length)`` of each function (methods and nested ones too) in ``source``
    longer than ``limit`` lines."""
    return [(node.lineno, node.name, node.end_lineno - node.lineno + 1)
            for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > limit]


def test_the_measure_counts_def_to_last_line_and_nested_functions():
    body = "".join(f"    x{i} = {i}\n" for i in range(59))
    assert long_functions(f"def fits():\n{body}") == []  # 60 lines
    over = f"def over():\n{body}    return 0\n"  # 61 lines
    assert long_functions(over) == [(1, "over", 61)]
    method = f"def method(self):\n{textwrap.indent(over, '    ')}"  # 62 lines, holding a 61-line function
    assert long_functions(f"class A:\n{textwrap.indent(method, '    ')}") == [(2, "method", 62), (3, "over", 61)]


def test_no_function_over_60_lines():
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 50, PACKAGE
    found = [f"{path.relative_to(PACKAGE.parent)}:{line} {name} ({length} lines)"
             for path in files for line, name, length in long_functions(path.read_text(encoding="utf-8"))]
    assert not found, f"functions over {MAX_LINES} lines (split them into named steps):\n" + "\n".join(found)
