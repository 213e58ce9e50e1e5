"""mkdocs hook: links written from the repository's root resolve on the site.

A page that includes a section of the README (``--8<-- "README.md:benchmarks"``) gets the
README's links as the README writes them, relative to the repository's root
(``docs/benchmarks.md``); relative to the page they would name ``docs/docs/...``. A link into
``docs/`` is rewritten relative to the page before mkdocs checks and converts it. A page's own
links never start with ``docs/`` (that folder is the site's root), so nothing else changes.
"""

from __future__ import annotations

import posixpath
from typing import Any

from markdown import Extension
from markdown.treeprocessors import Treeprocessor

DOCS_PREFIX = "docs/"
_current = {"page": ""}  # the source path of the page being rendered (pages render one at a time)


class _RootLinks(Treeprocessor):
    def run(self, root: Any) -> None:
        here = posixpath.dirname(_current["page"]) or "."
        for element in root.iter():
            for attribute in ("href", "src"):
                url = element.get(attribute)
                if url and url.startswith(DOCS_PREFIX):
                    element.set(attribute, posixpath.relpath(url[len(DOCS_PREFIX):], here))


class _RootLinksExtension(Extension):
    def extendMarkdown(self, md: Any) -> None:
        # after the inline processor (20) has made the links, before mkdocs' "relpath" (0)
        md.treeprocessors.register(_RootLinks(md), "evorl_root_links", 5)


def on_config(config: Any) -> Any:
    config.markdown_extensions.append(_RootLinksExtension())
    return config


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    _current["page"] = page.file.src_uri
    return markdown
