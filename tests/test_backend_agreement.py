"""benchmarks/backend_agreement.py compares only the checks a backend ran, against the CPU's."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from backend_agreement import compare  # noqa: E402

TOTALS = {"reward": 40, "episode_ends": 0, "cells": 1902280490, "cells_by_step": 286338034773}
REFERENCE = {
    "games": {"Freeway-MinAtar": TOTALS, "Breakout-MinAtar": {**TOTALS, "cells": 5}},
    "games_population_shape": {"Freeway-MinAtar": TOTALS},
    "games_population_shape_evorl": {"Freeway-MinAtar": TOTALS},
    "training": {"default": {"w": [1.0, -2.0]}},
}


def test_a_partial_run_is_compared_on_what_it_ran_and_a_lost_cell_is_a_difference():
    ours = {"games_population_shape": {"Freeway-MinAtar": {**TOTALS, "cells": 1779087288}},
            "games_population_shape_evorl": {"Freeway-MinAtar": TOTALS}}
    c = compare(ours, REFERENCE)
    assert set(c["games"]) == {"Freeway-MinAtar [8, 128], gymnax's observations",
                               "Freeway-MinAtar [8, 128], evorl's observations"}
    assert not c["games"]["Freeway-MinAtar [8, 128], gymnax's observations"]["equal"]
    assert c["games"]["Freeway-MinAtar [8, 128], evorl's observations"]["equal"]
    assert c["training_relative_difference"] == {}


def test_training_difference_is_relative_to_the_leaf_s_largest_magnitude():
    ours = {"games": {"Breakout-MinAtar": {**TOTALS, "cells": 5}}, "training": {"default": {"w": [1.5, -2.0]}}}
    c = compare(ours, REFERENCE)
    assert c["games"]["Breakout-MinAtar"]["equal"]
    assert c["training_relative_difference"]["default"]["w"] == 0.25
