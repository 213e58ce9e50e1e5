"""mkdocs hook: a page's ``<!-- docstring-math: evorl.module.name -->`` becomes the equations
of that object's docstring (its ``.. math::`` blocks, as display math).

The algorithm pages take their formulas from the code's docstrings this way, so the page and
the code cannot disagree. A marker whose object has no ``.. math::`` block fails the build.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rst_markup import display_math, docstring, math_blocks  # noqa: E402

MARKER = re.compile(r"<!-- docstring-math: ([\w.]+) -->")


def expand(markdown: str) -> str:
    def replace(match: re.Match) -> str:
        blocks = math_blocks(docstring(match.group(1)))
        if not blocks:
            raise ValueError(f"{match.group(1)}'s docstring has no '.. math::' block")
        return "\n\n".join(display_math(b) for b in blocks)

    return MARKER.sub(replace, markdown)


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    return expand(markdown)
