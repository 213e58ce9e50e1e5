"""Every module of evorl that a test imports is imported by a test of the default set too: a
test marked ``slow`` (left out of ``python -m pytest``) must not be the only one that reaches
its module.

A test reaches the modules its file imports at the top and in its fixtures, and those it
imports itself; a test of the default set is one not marked ``slow`` as a whole (a test some
of whose parameters are slow still runs the others). ``python tests/test_default_set_reach.py``
prints the modules reached only by slow tests and those no test imports by name (they run
under the modules that import them).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "evorl"


def package_modules() -> set[str]:
    """``evorl.app.cli``, ``evorl.engine`` (a package's ``__init__``), ... (configs are data)."""
    names = set()
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        names.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def imported(node: ast.AST, modules: set[str]) -> set[str]:
    """The evorl modules the imports below ``node`` name (``from evorl.x import y`` names
    ``evorl.x``, and ``evorl.x.y`` where that is a module)."""
    found = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Import):
            found |= {a.name for a in n.names}
        elif isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
            found |= {n.module} | {f"{n.module}.{a.name}" for a in n.names}
    return found & modules


def is_slow(function: ast.FunctionDef) -> bool:
    return any(ast.unparse(d).startswith(("pytest.mark.slow", "mark.slow")) for d in function.decorator_list)


def reach(tests: Path = ROOT / "tests") -> tuple[set[str], set[str]]:
    """The modules imported by default-set tests, and those imported by slow tests."""
    modules = package_modules()
    default, slow = set(), set()
    for path in sorted(tests.glob("test_*.py")):
        tree = ast.parse(path.read_text())
        file_slow = any(isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in n.targets)
                        and "slow" in ast.unparse(n.value) for n in tree.body)
        functions = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        tests_here = [f for f in functions if f.name.startswith("test")]
        shared = imported(ast.Module([n for n in tree.body if n not in tests_here], []), modules)
        for test in tests_here:
            (slow if file_slow or is_slow(test) else default).update(shared | imported(test, modules))
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name.startswith("Test")):
            (slow if file_slow else default).update(shared | imported(cls, modules))
    return default, slow


def test_no_module_is_reached_only_by_slow_tests():
    default, slow = reach()
    assert not sorted(slow - default), "imported only by slow tests (give each a default-set test)"


def test_the_check_sees_a_module_reached_only_by_a_slow_test(tmp_path):
    (tmp_path / "test_a.py").write_text("import pytest\nfrom evorl.app import plotting\n\n\ndef test_a():\n    pass\n")
    (tmp_path / "test_b.py").write_text("import pytest\n\n\n@pytest.mark.slow\ndef test_b():\n"
                                        "    from evorl.app.scripts import plot\n")
    default, slow = reach(tmp_path)
    assert "evorl.app.plotting" in default and slow - default == {"evorl.app.scripts", "evorl.app.scripts.plot"}


if __name__ == "__main__":
    default, slow = reach()
    print("reached only by slow tests:", *sorted(slow - default) or ["(none)"], sep="\n  ")
    print("imported by name by no test:", *sorted(package_modules() - default - slow), sep="\n  ")
    sys.exit(bool(slow - default))
