"""Cold-start helpers: ``evorl.deferred_imports`` (gymnax without its render-only plotting
imports, the same modules run in full on first use, no change to what a failed import does)
and ``evorl.app.experiment.imports_frozen``."""

import subprocess
import sys
import textwrap

import pytest

from evorl.deferred_imports import deferring


def run_fresh(code: str) -> str:
    """``code`` in a fresh interpreter (``sys.modules`` is what these tests are about)."""
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], check=True, capture_output=True, text=True)
    return out.stdout.strip()


def test_gymnax_imports_without_running_seaborn_or_pyplot_and_they_run_on_first_use():
    out = run_fresh("""
        import sys
        from evorl.envs.gymnax_env import GymnaxEnv
        env = GymnaxEnv("CartPole-v1", num_envs=2)
        print(type(sys.modules["seaborn"]).__name__, type(sys.modules["matplotlib.pyplot"]).__name__,
              "scipy.stats" in sys.modules, "pandas" in sys.modules)
        import seaborn as sns
        palette = sns.color_palette("cubehelix", 3)  # what gymnax's Pong renderer calls
        print(type(sys.modules["seaborn"]).__name__, len(palette), "scipy.stats" in sys.modules)
        import matplotlib.pyplot as plt
        print(callable(plt.subplots), type(sys.modules["matplotlib.pyplot"]).__name__)
    """)
    assert out.splitlines() == [
        "_DeferredModule _DeferredModule False False",  # created, not run: nothing of scipy.stats or pandas loaded
        "module 3 True",  # run in full on first attribute access
        "True module",
    ]


def test_a_module_that_is_not_installed_still_fails_at_import():
    with deferring("evorl_no_such_module"), pytest.raises(ModuleNotFoundError):
        import evorl_no_such_module  # noqa: F401


def test_modules_already_imported_and_other_modules_are_untouched():
    out = run_fresh("""
        import sys
        import json
        from evorl.deferred_imports import deferring
        with deferring("json", "csv"):
            import json as again
            import textwrap
        print(again is json, type(sys.modules["textwrap"]).__name__)
        from evorl.deferred_imports import _DeferringFinder
        print(any(isinstance(f, _DeferringFinder) for f in sys.meta_path))
    """)
    assert out.splitlines() == ["True module", "False"]


def test_imports_frozen_leaves_the_heap_as_it_found_it():
    import gc

    from evorl.app.experiment import imports_frozen

    assert gc.get_freeze_count() == 0
    with imports_frozen():
        assert gc.get_freeze_count() > 0  # the modules imported so far
    assert gc.get_freeze_count() == 0  # everything back in the collector's generations
    gc.freeze()  # a process that froze its own heap keeps it frozen
    try:
        with imports_frozen():
            during = gc.get_freeze_count()
        assert gc.get_freeze_count() == during > 0
    finally:
        gc.unfreeze()


def test_a_deferred_module_that_fails_when_run_raises_and_leaves_sys_modules(tmp_path, monkeypatch):
    (tmp_path / "evorl_test_fails_when_run.py").write_text("VALUE = 1\nraise RuntimeError('broken module')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with deferring("evorl_test_fails_when_run"):
        import evorl_test_fails_when_run as mod  # created, not run: no error yet
    assert "evorl_test_fails_when_run" in sys.modules
    with pytest.raises(RuntimeError, match="broken module"):
        mod.VALUE
    assert "evorl_test_fails_when_run" not in sys.modules  # as after a failed import
