"""The import rule between the package's layers: each layer imports only the layers below it.

    foundation  <  rl  <  engine  <  algorithms  <  app
    (envs, networks, hardware, config, utils, deferred_imports, log_noise)

Every import is read from the source (``ast``), function-level imports included. The old
module paths kept as re-exports (:data:`SHIMS`) hold nothing but imports and are exempt as
importers; no module of the package imports them.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "evorl"

LAYERS = ("foundation", "rl", "engine", "algorithms", "app")

#: Module prefix -> layer; the longest prefix that matches decides.
LAYER_OF_PREFIX = {
    "evorl.envs": "foundation",
    "evorl.networks": "foundation",
    "evorl.hardware": "foundation",
    "evorl.config": "foundation",
    "evorl.utils": "foundation",
    "evorl.deferred_imports": "foundation",
    "evorl.log_noise": "foundation",
    "evorl.rl": "rl",
    "evorl.engine": "engine",
    "evorl.algorithms": "algorithms",
    "evorl.workflows": "algorithms",  # the workflows by name: a facade over the algorithms
    "evorl.app": "app",
    "evorl": "app",  # the package's own __init__ (``evorl.load_policy``) and ``__version__``
}

#: Old module paths kept for users (the seed's import paths, installed entry points): imports only.
SHIMS = {
    "evorl.rollout",
    "evorl.utils.rl_toolkits",
    "evorl.distributed",
    "evorl.workflows.rl_workflow",
    "evorl.cli",
    "evorl.scripts",
    "evorl.scripts.evaluate",
    "evorl.scripts.plot",
}


def layer(module: str) -> str:
    parts = module.split(".")
    for i in range(len(parts), 0, -1):
        prefix = ".".join(parts[:i])
        if prefix in LAYER_OF_PREFIX:
            return LAYER_OF_PREFIX[prefix]
    raise KeyError(f"{module} is in no layer: add its prefix to LAYER_OF_PREFIX")


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(tree: ast.AST, module: str, is_package: bool) -> list[tuple[int, str]]:
    """``(line, module)`` of every evorl import in ``tree``, at any depth; ``from evorl import
    x`` counts as ``evorl.x``, a relative import is resolved against ``module``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".") if is_package else module.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            if base == "evorl":
                found += [(node.lineno, f"evorl.{a.name}") for a in node.names]
            else:
                found.append((node.lineno, base))
    return [(line, name) for line, name in found if name == "evorl" or name.startswith("evorl.")]


def only_imports(tree: ast.Module) -> bool:
    body = tree.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    return all(isinstance(node, (ast.Import, ast.ImportFrom)) for node in body)


def violations(sources: dict[Path, str], root: Path) -> list[str]:
    """One line per import that runs against the rule, naming file:line and both layers."""
    problems = []
    for path, source in sorted(sources.items()):
        module = module_name(path, root)
        tree = ast.parse(source, filename=str(path))
        where = path.relative_to(root.parent)
        if module in SHIMS:
            if not only_imports(tree):
                problems.append(f"{where}: {module} is kept as a re-export of a moved module, so it may hold "
                                f"only imports")
            continue
        own = layer(module)
        for line, target in imported_modules(tree, module, path.name == "__init__.py"):
            if target in SHIMS and target != "evorl":
                problems.append(f"{where}:{line}: {module} imports {target}, an old path kept for users; "
                                f"import the module it re-exports")
                continue
            theirs = layer(target)
            if LAYERS.index(theirs) > LAYERS.index(own):
                problems.append(f"{where}:{line}: {module} ({own}) imports {target} ({theirs}): "
                                f"the {own} layer may import only {', '.join(LAYERS[:LAYERS.index(own) + 1])}")
    return problems


def package_sources(root: Path = PACKAGE) -> dict[Path, str]:
    return {p: p.read_text() for p in root.rglob("*.py") if "configs" not in p.relative_to(root).parts}


def test_every_import_runs_down_the_layers():
    problems = violations(package_sources(), PACKAGE)
    assert not problems, "imports against the layer rule:\n" + "\n".join(problems)


def test_every_module_is_in_a_layer_and_the_layer_folders_exist():
    for path in package_sources():
        layer(module_name(path, PACKAGE))
    for folder in ("rl", "engine", "algorithms", "app"):
        assert (PACKAGE / folder / "__init__.py").is_file()


@pytest.mark.parametrize("importer, source, expected", [
    ("rl/fake.py", "def f():\n    from evorl.app.cli import train\n", "fake.py:2: evorl.rl.fake (rl) imports evorl.app.cli (app)"),
    ("engine/fake.py", "import evorl.algorithms.ppo\n", "evorl.engine.fake (engine) imports evorl.algorithms.ppo (algorithms)"),
    ("envs/fake.py", "from evorl import rl\n", "evorl.envs.fake (foundation) imports evorl.rl (rl)"),
    ("engine/fake.py", "from evorl.workflows import WORKFLOWS\n", "imports evorl.workflows (algorithms)"),
    ("rl/fake.py", "from ..engine import execution\n", "imports evorl.engine (engine)"),
    ("algorithms/fake.py", "from evorl.rollout import rollout\n", "imports evorl.rollout, an old path kept for users"),
    ("rollout.py", "from evorl.rl.rollout import rollout\nX = 1\n", "may hold only imports"),
])
def test_the_checker_fails_on_an_import_against_the_rule(tmp_path, importer, source, expected):
    root = tmp_path / "evorl"
    path = root / importer
    problems = violations({path: source}, root)
    assert len(problems) == 1 and expected in problems[0], problems


def test_the_checker_accepts_imports_down_and_within_a_layer(tmp_path):
    root = tmp_path / "evorl"
    sources = {
        root / "app" / "fake.py": "from evorl.algorithms import ppo\nfrom evorl.engine import host_loop\nimport evorl.rl\n",
        root / "rl" / "fake.py": "from evorl.rl.agent import Agent\nfrom evorl.networks import MLP\nfrom evorl import hardware\n",
        root / "rollout.py": '"""Moved."""\n\nfrom evorl.rl.rollout import rollout  # noqa: F401\n',
    }
    assert violations(sources, root) == []


def check_reading_path(heading: str, min_files: int, max_lines: int) -> None:
    """docs/engine.md's section ``heading``: every file its table names exists, its stated line
    count is the file's, the section states their total, and the total stays under ``max_lines``."""
    text = (PACKAGE.parent / "docs" / "engine.md").read_text()
    assert f"## {heading}\n" in text, heading
    section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| \d+ \| `([\w/.]+)` \| (\d+) \|", section, re.M)
    assert len(rows) >= min_files, section
    for path, stated in rows:
        actual = len((PACKAGE.parent / path).read_text().splitlines())
        assert int(stated) == actual, f"{path}: the path says {stated} lines, the file has {actual}"
    total = sum(int(n) for _, n in rows)
    assert total < max_lines and f"({total:,} lines" in section, (total, section[:200])


def test_the_sac_reading_path_names_real_files_under_1200_lines():
    """docs/engine.md's "Read SAC end to end" stays under 1,200 lines."""
    check_reading_path("Read SAC end to end", 5, 1200)


def test_the_ppo_reading_path_names_real_files_under_800_lines():
    """docs/engine.md's "Read PPO end to end" stays under 800 lines."""
    check_reading_path("Read PPO end to end", 4, 800)
