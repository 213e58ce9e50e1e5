"""File recorders: JSON lines (one object per logging point) and CSV."""

from __future__ import annotations

import csv
import time
from pathlib import Path
from typing import Any

from evorl.app.run_folder import dumps_json, read_jsonl, writing


class JsonlRecorder:
    """Appends ``{"step", "wall_time", **metrics}`` per logging point to ``path``, as strict
    JSON (a non-finite value, e.g. a NaN return when no episode ended, is ``null``).

    ``wall_time`` counts seconds since the recorder was created, continuing from the last
    record of an existing file (a resumed run). With ``mark_resume`` (the metrics file), the
    first record after a resume says so (``"resumed": true``): the time the resumed process
    spent before it (its start and compilation) is in its ``wall_time``, and a plot does not
    join it to the record before. Other files (PBT's lineage, NSGA-II's fronts) stay record for
    record those of the uninterrupted run.
    """

    def __init__(self, path: Path | str, mark_resume: bool = False):
        self.path = Path(path)
        previous = read_jsonl(self.path) if self.path.exists() else []
        self.time_offset = float(previous[-1].get("wall_time") or 0.0) if previous else 0.0
        self._resumed = mark_resume and bool(previous)
        self.start = time.perf_counter()
        self._file = None

    def init(self, config: Any) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a")

    def write(self, metrics: dict[str, float], step: int) -> None:
        wall_time = self.time_offset + time.perf_counter() - self.start
        record = {"step": step, "wall_time": round(wall_time, 4), **({"resumed": True} if self._resumed else {}),
                  **metrics}
        self._resumed = False
        with writing(self.path):
            self._file.write(dumps_json(record) + "\n")
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            file, self._file = self._file, None
            with writing(self.path):
                file.close()


class CsvRecorder:
    """A CSV table: ``step`` then the metric names of the first write, in order.

    Metrics that appear only later are ignored (the header is fixed); missing ones are blank.
    """

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self._file = None
        self._writer = None

    def init(self, config: Any) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, metrics: dict[str, float], step: int) -> None:
        with writing(self.path):
            self._write(metrics, step)

    def _write(self, metrics: dict[str, float], step: int) -> None:
        if self._writer is None:
            fields = None
            if self.path.exists() and self.path.stat().st_size:
                with self.path.open(newline="") as f:
                    fields = next(csv.reader(f), None)
            self._file = self.path.open("a", newline="")
            if not fields:
                fields = ["step", *metrics]
                csv.writer(self._file).writerow(fields)
            self._writer = csv.DictWriter(self._file, fieldnames=fields, extrasaction="ignore")
        self._writer.writerow({"step": step, **metrics})
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            file, self._file, self._writer = self._file, None, None
            with writing(self.path):
                file.close()
