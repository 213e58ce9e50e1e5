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
