"""The PBT lineage file's records (``evorl.app.pbt_lineage``): values as short as their float32,
and the population a step left, best first (what ``load_policy`` lists for a PBT run)."""

import json

import numpy as np

from evorl.app.pbt_lineage import agent_label, population_after_step
from evorl.engine.lineage import lineage_record


def test_lineage_values_are_the_shortest_that_read_back_as_their_float32():
    """A float32 1e-6 is written 1e-06, not the 9.999999974752427e-07 it widens to."""
    before, after = np.float32([[1e-6, 0.2], [3e-3, 0.1]]), np.float32([[1e-6, 0.2], [1.2345679e-6, 0.24]])
    record = lineage_record({"iteration": 4, "source": np.array([0, 0]), "fitness": np.float32([23.333334, np.nan]),
                             "before": before, "after": after}, ["training.learning_rate", "agent.clip_epsilon"])
    text = json.dumps(record)
    assert "9.99999" not in text and "0.0030000" not in text and "23.333334," in text, text
    assert record["hyperparameters"] == {"training.learning_rate": [1e-6, 3e-3], "agent.clip_epsilon": [0.2, 0.1]}
    assert record["new_hyperparameters"]["training.learning_rate"] == [1e-6, 1.2345679e-6]
    for j, key in enumerate(record["hyperparameters"]):  # each reads back as the same float32
        np.testing.assert_array_equal(np.float32(record["hyperparameters"][key]), before[:, j])
        np.testing.assert_array_equal(np.float32(record["new_hyperparameters"][key]), after[:, j])


def test_population_after_a_step_is_listed_best_first_with_evolved_hyperparameters(tmp_path):
    """Agent 2 copied agent 1 (so it holds parameters of fitness 90); agent 3 had no episode."""
    def step(iteration, fitness, source, learning_rates):
        return json.dumps({"step": iteration * 64, "iteration": iteration, "fitness": fitness, "source": source,
                           "hyperparameters": {"training.learning_rate": [1e-6] * 4},
                           "new_hyperparameters": {"training.learning_rate": learning_rates}})
    (tmp_path / "pbt_lineage.jsonl").write_text("\n".join([
        step(2, [1.0, 2.0, 3.0, 4.0], [0, 1, 2, 3], [1e-6, 2e-6, 3e-6, 4e-6]),
        step(4, [50.0, 90.0, 10.0, None], [0, 1, 1, 3], [1e-6, 2e-6, 0.0024000001, 4e-6])]) + "\n")
    iteration, agents = population_after_step(tmp_path)
    assert iteration == 4 and [a["agent"] for a in agents] == [1, 2, 0, 3]
    assert [agent_label(a) for a in agents] == [
        "agent 1 (fitness 90, learning_rate=2e-06)", "agent 2 (fitness 90 as a copy of agent 1, learning_rate=0.0024)",
        "agent 0 (fitness 50, learning_rate=1e-06)", "agent 3 (fitness nan, learning_rate=4e-06)"]
    assert population_after_step(tmp_path, iteration=3)[0] == 2  # a checkpoint before the second step
    assert population_after_step(tmp_path, iteration=1) is None
