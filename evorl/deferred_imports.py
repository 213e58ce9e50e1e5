"""Importing a library whose own imports are heavier than what we use of it.

``import gymnax`` imports every gymnax environment, and two of them import plotting
libraries at module level for their ``render`` methods: ``misc/pong.py`` imports seaborn
(which imports scipy.stats and pandas) and ``bsuite/catch.py`` imports matplotlib.pyplot.
That was about 1 s of the default job's cold start, measured on a 2-core CPU with
``benchmarks/cold_start.py``, spent on modules a training run never touches (evorl draws
classic-control frames with gymnasium and MinAtar's with gymnax's own visualiser, which runs
them on first use).

:func:`deferring` imports such a library with the named modules deferred: each is found as
usual (a missing one still fails at once) and placed in ``sys.modules``, and it is executed in
full, in place, on the first access to one of its attributes. Nothing else changes: the same
module object, the same code, run later. (The standard library's
:class:`importlib.util.LazyLoader` does the same but also runs the module when the import
system reads its ``__spec__``, which it does on every further ``import`` of it: gymnax
imports matplotlib.pyplot in four modules.)
"""

from __future__ import annotations

import contextlib
import importlib.abc
import sys
import threading
import types

_LOCK = threading.RLock()


class _DeferredModule(types.ModuleType):
    """A module created but not yet executed: the first access to an attribute other than
    ``__spec__`` (which the import system reads when the module is imported again) executes it
    in place and turns it into a plain module."""

    def __getattribute__(self, attr):
        if attr == "__spec__":
            return object.__getattribute__(self, "__dict__")["__spec__"]
        with _LOCK:
            if type(self) is _DeferredModule:  # not executed yet (another thread may have done it)
                spec = object.__getattribute__(self, "__dict__")["__spec__"]
                loader = spec.loader_state
                spec.loader = loader
                self.__loader__ = loader
                object.__setattr__(self, "__class__", types.ModuleType)
                try:
                    loader.exec_module(self)
                except BaseException:
                    # as a failed import does: the half-run module leaves sys.modules
                    if sys.modules.get(spec.name) is self:
                        del sys.modules[spec.name]
                    raise
        return getattr(self, attr)


class _DeferringLoader(importlib.abc.Loader):
    """Creates the module with the real loader; executes it on first use (:class:`_DeferredModule`)."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        module.__spec__.loader_state = self.loader
        module.__class__ = _DeferredModule


class _DeferringFinder(importlib.abc.MetaPathFinder):
    """Finds ``names`` with the other finders and hands them out with a deferring loader."""

    def __init__(self, names: frozenset[str]):
        self.names = names

    def find_spec(self, name, path=None, target=None):
        if name not in self.names:
            return None
        others = [finder for finder in sys.meta_path if finder is not self]
        for finder in others:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None  # not installed: the import fails as it would have
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec  # a namespace package or an old-style loader: imported now
        spec.loader = _DeferringLoader(spec.loader)
        return spec


@contextlib.contextmanager
def deferring(*names: str):
    """Within the block, importing any of ``names`` (full module names, not yet imported)
    creates it lazily: executed on first attribute access (module docstring)."""
    finder = _DeferringFinder(frozenset(names))
    with _LOCK:
        sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        with _LOCK:
            sys.meta_path.remove(finder)


#: What gymnax imports only for its environments' ``render`` methods.
GYMNAX_RENDER_MODULES = ("seaborn", "matplotlib.pyplot")


def import_gymnax():
    """``import gymnax``, its render-only plotting imports deferred (module docstring)."""
    if "gymnax" in sys.modules:
        return sys.modules["gymnax"]
    with deferring(*GYMNAX_RENDER_MODULES):
        import gymnax
    return gymnax
