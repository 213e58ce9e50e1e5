"""The reStructuredText markup of evorl's docstrings as Markdown, for the docs site.

evorl's docstrings use RST: ``.. math::`` blocks, ``:math:`x``` and ``:func:`~a.b``` roles,
``::`` literal blocks. :func:`to_markdown` turns them into what mkdocs-material renders
(arithmatex ``$$ ... $$`` / ``$ ... $``, code spans). Used by the griffe extension (the API
reference pages) and by the hook that copies an algorithm's equations from its docstring.
"""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_ROLE = re.compile(r":(?:func|class|meth|attr|mod|data|obj|exc):`~?([^`]+)`")
_INLINE_MATH = re.compile(r":math:`([^`]+)`")


def math_blocks(doc: str) -> list[str]:
    """The body of each ``.. math::`` block of the (dedented) docstring ``doc``."""
    lines = textwrap.dedent(_dedent_docstring(doc)).splitlines()
    blocks, i = [], 0
    while i < len(lines):
        if lines[i].strip() == ".. math::":
            indent = len(lines[i]) - len(lines[i].lstrip())
            body = []
            i += 1
            while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent):
                body.append(lines[i])
                i += 1
            blocks.append(textwrap.dedent("\n".join(body)).strip())
        else:
            i += 1
    return blocks


def display_math(body: str) -> str:
    """An RST math block as one arithmatex display block (lines joined by ``\\\\`` gathered)."""
    if "\\\\" in body or "\n" in body.strip():
        lines = [line.strip() for line in body.strip().splitlines()]
        joined = []
        for line in lines:  # an RST continuation line (no trailing \\) continues the equation
            if joined and not joined[-1].endswith("\\\\"):
                joined[-1] += " " + line
            else:
                joined.append(line)
        body = "\n".join(joined) if len(joined) == 1 else "\\begin{gathered}\n" + "\n".join(joined) + "\n\\end{gathered}"
    return f"$$\n{body}\n$$"


def to_markdown(doc: str) -> str:
    """RST markup of a docstring to Markdown (see the module docstring)."""
    lines = _dedent_docstring(doc).splitlines()
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        if line.strip() == ".. math::":
            indent = len(line) - len(line.lstrip())
            body = []
            i += 1
            while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent):
                body.append(lines[i])
                i += 1
            out += ["", *display_math(textwrap.dedent("\n".join(body))).splitlines(), ""]
            continue
        if line.rstrip().endswith("::") and not line.strip().startswith(".."):
            # an RST literal block: the indented lines after it are a code block in Markdown too
            head = line.rstrip()[:-2].rstrip()
            out.append(head + ":" if head.strip() else "")
            i += 1
            continue
        out.append(_INLINE_MATH.sub(lambda m: f"${m.group(1)}$", _ROLE.sub(lambda m: f"`{m.group(1).rsplit('.', 1)[-1]}`", line)))
        i += 1
    return "\n".join(out)


def _dedent_docstring(doc: str) -> str:
    first, _, rest = doc.strip("\n").partition("\n")
    return first.strip() + ("\n" + textwrap.dedent(rest) if rest else "")


def docstring(dotted: str) -> str:
    """The docstring of ``package.module.Name`` or ``package.module.Class.method``, read from
    the source without importing it."""
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:split])
        for path in (base.with_suffix(".py"), base / "__init__.py"):
            if path.is_file():
                node: ast.AST = ast.parse(path.read_text())
                for name in parts[split:]:
                    node = next(n for n in node.body  # type: ignore[attr-defined]
                                if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name)
                doc = ast.get_docstring(node, clean=False)
                if doc is None:
                    raise ValueError(f"{dotted} has no docstring")
                return doc
    raise ValueError(f"no module found for {dotted}")
