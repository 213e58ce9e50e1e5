"""Third-party log lines silenced on evorl-train's console (Hydra logs at INFO): matplotlib's
font cache, the joblib launcher's Joblib.Parallel(...) line; their warnings still show."""

import logging

from evorl.log_noise import JOBLIB_LAUNCHER_LOGGER, quiet_third_party_logs


class Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def test_font_cache_and_joblib_lines_are_dropped_and_warnings_kept():
    handler = Collect()
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)  # as Hydra's job logging sets it
    try:
        quiet_third_party_logs()
        quiet_third_party_logs()  # idempotent: one filter
        logging.getLogger("matplotlib.font_manager").info("generated new fontManager")
        logging.getLogger("matplotlib.font_manager").warning("findfont: Font family 'x' not found.")
        launcher = logging.getLogger(JOBLIB_LAUNCHER_LOGGER)
        launcher.info("Joblib.Parallel(n_jobs=-1,backend=loky,prefer=processes) is launching 2 jobs")
        launcher.info("Launching jobs, sweep output dir : multirun/x")
        assert len(launcher.filters) == 1
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    assert handler.lines == ["findfont: Font family 'x' not found.", "Launching jobs, sweep output dir : multirun/x"]


def test_mjx_lines_are_dropped_and_other_root_lines_kept():
    handler = Collect()
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        quiet_third_party_logs()
        quiet_third_party_logs()
        logging.info("Using JAX default device: %s.", "cpu:0")  # mujoco.mjx's, on every model it loads
        logging.info("a user's own line")
        logging.warning("Using JAX default device: a warning stays")
        assert sum(type(f).__name__ == "_DropMjxDeviceLine" for f in root.filters) == 1
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    assert handler.lines == ["a user's own line", "Using JAX default device: a warning stays"]


def test_mjx_import_prints_no_warp_lines_in_a_fresh_process():
    """Without warp (MJX's optional GPU backend), ``import mujoco.mjx`` prints two lines to
    stdout; evorl's brax env types import it without them."""
    import subprocess
    import sys

    import pytest

    pytest.importorskip("mujoco", reason="MuJoCo is an extra (pip install -e '.[mujoco]')")
    code = ("from evorl.config.env import import_env_package\nimport_env_package('brax')\n"
            "import mujoco.mjx\nprint('imported')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "imported\n", out.stdout
