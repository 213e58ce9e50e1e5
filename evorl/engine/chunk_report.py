"""What the host loop of a :class:`~evorl.engine.host_loop.ChunkedWorkflow` makes of a chunk's
metrics (:class:`ChunkReport`, a part of that class in its own file): the logged ``train/*``
metrics (:func:`train_metrics`), the health check of every agent (a population's diverged
agents frozen or replaced by PBT, each reported once; :mod:`evorl.engine.health`), and the
metrics aggregated over the population. :func:`chunk_health` is the measure each chunk's
compiled program adds."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import jax.numpy as jnp
import numpy as np

from evorl.engine.execution import to_host
from evorl.engine.health import (
    TrainingDiverged, all_frozen_problems, check_environment, check_finite, frozen_message, nonfinite_metrics,
    replaced_message, tree_all_finite,
)
from evorl.engine.population import aggregate_metrics, variant_label
from evorl.engine.processes import is_main_process
from evorl.rl import metrics as M

if TYPE_CHECKING:
    from evorl.engine.host_loop import State, TrainingState

#: Logged metrics that are NaN when there is nothing to measure (no episode ended in the
#: chunk); every other training metric must be finite.
EPISODE_METRICS = ("train/episode_return", "train/episode_length")
#: Env steps whose reward or observation was not finite for a finite action (see EpisodeStats).
ENV_FAULTS = "train/env_faults"
#: The metric :func:`chunk_health` adds to every chunk's (1: the returned state is not finite).
NONFINITE_PARAMS = "train/nonfinite_params"


class ChunkReport:
    """The health checks and metrics of :class:`~evorl.engine.host_loop.ChunkedWorkflow`."""

    _params_finite = None
    #: The agents PBT replaced in the last chunk after they diverged (see ``write_lineage``).
    _replacements: dict = {}

    def params_finite(self, state: State) -> np.ndarray:
        """Whether each agent's parameters and observation statistics are finite: bool ``[N]``
        (``[1]`` for one agent), computed on the device."""
        if self._params_finite is None:
            self._params_finite = self.executor.map_agents(lambda s: tree_all_finite((s.params, s.obs_stats)))
        return np.reshape(to_host(self._params_finite(state.agent_state)), (self.num_agents,))

    def agent_labels(self) -> list[str]:
        """How errors name each agent: ``agent 3 (clip_epsilon=0.2, seed 1)``."""
        if not self.population:
            return ["the agent"]
        seeds = self.config.training.num_seeds
        labels = []
        for i in range(self.num_agents):
            variant, seed = self.variants[i // seeds], i % seeds
            labels.append(f"agent {i} ({', '.join(filter(None, [variant_label(variant), f'seed {seed}']))})")
        return labels

    def check_health(self, per_agent_metrics: dict, iteration: int) -> None:
        """Raises :class:`~evorl.engine.health.TrainingDiverged` if any agent's parameters
        (:func:`chunk_health`) or training metrics (``train_metrics``, per agent) are not finite.
        A population whose executor freezes diverged agents instead reports each newly frozen
        agent once (one line on stderr) and raises only when every agent is frozen."""
        check_environment(iteration, per_agent_metrics.get(ENV_FAULTS), self.agent_labels())
        bad_metrics = nonfinite_metrics(per_agent_metrics, self.num_agents, exempt=EPISODE_METRICS)
        params_finite = np.reshape(per_agent_metrics[NONFINITE_PARAMS], (self.num_agents,)) == 0
        alive = self.alive_agents()
        if alive is not None:
            self._report_frozen(alive, bad_metrics, iteration)
            self._report_replaced(alive, iteration)
            excused = ~alive | self.replaced_agents()  # frozen, or diverged and replaced by PBT
            bad_metrics = [[] if e else bad for bad, e in zip(bad_metrics, excused)]
            params_finite = params_finite | excused
        check_finite(iteration, params_finite, bad_metrics, self.agent_labels())

    def replaced_agents(self) -> np.ndarray:
        """Which agents PBT replaced in the last chunk after they diverged: bool ``[N]``."""
        replaced = np.zeros(self.num_agents, bool)
        replaced[list(self._replacements)] = True
        return replaced

    def _report_replaced(self, alive: np.ndarray, iteration: int) -> None:
        """One line naming the agents PBT replaced in the last chunk after they diverged."""
        replacements = self._replacements
        if replacements and is_main_process():
            labels = self.agent_labels()
            entries = [(labels[i], *replacements[i]) for i in sorted(replacements)]
            print(f"evorl: {replaced_message(iteration, entries, int(alive.sum()), self.num_agents)}",
                  file=sys.stderr, flush=True)

    def alive_agents(self) -> np.ndarray | None:
        """Which agents of a population still train (bool ``[N]``); None when no agent is ever
        frozen (one agent, or an executor without ``freeze``)."""
        if not self.population or self.executor.freeze is None:
            return None
        return np.reshape(self.executor.alive, (self.num_agents,))

    def _report_frozen(self, alive: np.ndarray, bad_metrics: list[list[str]], iteration: int) -> None:
        """Reports the agents frozen since the last call (one line); raises when none is left."""
        was_alive = self._reported_alive if self._reported_alive is not None else np.ones(self.num_agents, bool)
        self._reported_alive = alive
        newly = np.flatnonzero(was_alive & ~alive)
        self._frozen_metrics = {**self._frozen_metrics, **{int(i): bad_metrics[i] for i in newly}}
        labels = self.agent_labels()
        if not alive.any():
            raise TrainingDiverged(iteration, all_frozen_problems(labels, self._frozen_metrics))
        if newly.size and is_main_process():
            message = frozen_message(iteration, [labels[i] for i in newly], [bad_metrics[i] for i in newly],
                                     int(alive.sum()), self.num_agents)
            then = " PBT replaces frozen agents at its next step." if self.config.pbt.enabled else ""
            print(f"evorl: {message}{then}", file=sys.stderr, flush=True)

    def _aggregate(self, metrics: dict) -> dict[str, float]:
        metrics = {k: v for k, v in metrics.items() if k != ENV_FAULTS}  # checked (check_health), not logged
        if not self.population:
            return {k: float(v) for k, v in metrics.items()}
        self.last_metrics_per_agent = {**self.last_metrics_per_agent, **metrics}
        # under PBT the hyperparameters evolve: no per-variant means labelled by their initial values
        pbt = self.config.pbt.enabled
        variants, seeds = ([{}], self.num_agents) if pbt else (self.variants, self.config.training.num_seeds)
        alive = self.alive_agents()
        include = alive if alive is None or not any(key.startswith("train/") for key in metrics) else \
            alive & ~self.replaced_agents()  # a replaced agent's chunk ran diverged, its copy was not trained
        out = aggregate_metrics(metrics, variants, seeds, may_be_nan=EPISODE_METRICS, include=include)
        if any(key.startswith("train/") for key in metrics):
            bad = nonfinite_metrics(metrics, self.num_agents, exempt=EPISODE_METRICS)
            params_bad = np.reshape(metrics.get(NONFINITE_PARAMS, np.zeros(self.num_agents)), (self.num_agents,)) > 0
            if alive is not None:  # a frozen agent counts, whatever its (left out) metrics say
                params_bad = params_bad | ~alive
            out["train/nonfinite_agents"] = float(sum(bool(entries) or p for entries, p in zip(bad, params_bad)))
        return out


def chunk_health(state: TrainingState) -> dict:
    """Whether the state a chunk returns (the one checkpointed) has non-finite parameters or
    observation statistics: computed inside the chunk's program, so it costs no extra compile."""
    finite = tree_all_finite((state.agent_state.params, state.agent_state.obs_stats))
    return {"nonfinite_params": M.Metric(1.0 - finite.astype(jnp.float32), "max")}


def train_metrics(per_iteration: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The logged ``train/*`` metrics of a chunk (per agent for a population): the loss
    metrics per iteration, and the mean return and length of the episodes that ended in it
    (NaN if none did) with their count ``train/episodes``."""
    metrics = dict(per_iteration)
    count = metrics.pop("episode_count")
    return_sum = metrics.pop("episode_return_sum")
    length_sum = metrics.pop("episode_length_sum")
    out = {f"train/{k}": v for k, v in metrics.items()}
    with np.errstate(invalid="ignore", divide="ignore"):
        out["train/episode_return"] = np.where(count > 0, return_sum / count, np.nan)
        out["train/episode_length"] = np.where(count > 0, length_sum / count, np.nan)
    out["train/episodes"] = count
    return out
