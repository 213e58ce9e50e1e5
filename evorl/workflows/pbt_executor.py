"""The execution layer of population-based training: chunks of iterations that end with the
exploit/explore step (:mod:`evorl.workflows.pbt`), inside the same compiled program.

:class:`PBTExecutor` is an :class:`~evorl.workflows.execution.Executor` whose compiled
chunk runs ``n`` iterations of the vmapped step and then, when the iteration count is a
multiple of ``pbt.interval``, the PBT step on the whole population. ``run(state, n)`` also cuts
the ``n`` iterations at the PBT steps (one compiled program for any ``n``), so between two PBT
steps nothing leaves the device but the chunk's metrics and the step's record (who copied
whom, fitness, hyperparameters: the lineage), which :meth:`PBTExecutor.take_records` hands
over. With ``distributed.layout=population`` each device holds ``N / D`` agents: the step
gathers the population's fitness and the copied fields over the devices (``all_gather``),
decides on the whole population (every device the same, from the same key) and each device
keeps its own agents.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

from evorl import metrics as M
from evorl.rollout import EpisodeStats
from evorl.distributed import host_copy
from evorl.workflows.execution import DEVICE_AXIS, Executor, to_host
from evorl.workflows.pbt import PBT


class PBTExecutor(Executor):
    """Runs the population's step in chunks that end with PBT's exploit/explore step."""

    def __init__(self, step, placement, pbt: PBT, env_fields=(), final_metrics=None, freeze=None):
        self.pbt = pbt
        self.records: list[dict] = []
        self._iteration = 0  # the population's iteration (set by ``run``, counted by ``_call``)
        super().__init__(step, placement, env_fields, final_metrics, freeze)

    @property
    def split_agents(self) -> bool:
        return self.placement.mesh is not None and self.placement.layout == "population"

    def init(self, init_fn, *args):
        """The initial state, with empty episode sums for ``fitness: train``."""
        return super().init(lambda *a: init_fn(*a).replace(fitness_episodes=EpisodeStats.zeros()), *args)

    # --- the compiled chunk -------------------------------------------------------------
    def _iterations(self, state, num_iterations, alive, totals):
        """The local agents' ``num_iterations`` steps (``totals`` carried on, see
        :meth:`Executor._iterations`), then the PBT step if one is due (a frozen agent,
        ``alive`` false, ranks worst; one that copies another trains again)."""
        step = jax.vmap(self._jit_step)
        freeze = None if self.freeze is None else jax.vmap(self.freeze)

        def body(_, carry):
            state, totals, alive = carry
            new_state, metrics = step(state)
            if freeze is not None:
                new_state, alive = freeze(state, new_state, metrics, alive)
            episodes = EpisodeStats(metrics["episode_return_sum"].value, metrics["episode_length_sum"].value,
                                    metrics["episode_count"].value)
            new_state = new_state.replace(
                fitness_episodes=jax.tree.map(jnp.add, new_state.fitness_episodes, episodes))
            return new_state, M.accumulate(totals, metrics), alive

        state, totals, alive = lax.fori_loop(0, num_iterations, body, (state, totals, alive))
        due = state.iteration[0] % self.pbt.config.interval == 0
        record_shapes = jax.eval_shape(self.pbt_step, state, alive)[1]
        no_record = lambda s, a: (s, jax.tree.map(lambda r: jnp.zeros(r.shape, r.dtype), record_shapes))  # noqa: E731
        state, record = lax.cond(due, self.pbt_step, no_record, state, alive)
        population_alive = lax.all_gather(alive, DEVICE_AXIS, tiled=True) if self.split_agents else alive
        alive = jnp.where(due, population_alive[record["source"]], alive)
        final = {} if self.final_metrics is None else M.declared(jax.vmap(self.final_metrics)(state))
        return state, totals, alive, final, record

    def pbt_step(self, state, alive=None):
        """The PBT step on the population ``state`` (leaves ``[n, ...]``: this device's agents):
        fitness (NaN, the worst, for a frozen agent: ``alive [n]`` false), then exploit/explore
        on the whole population (gathered over the devices when agents are split). Returns this
        device's agents and their records. Traced inside the chunk; on one device it can also
        be jitted by itself (``benchmarks/`` times it so)."""
        local_agents = state.iteration.shape[0]
        fitness = self.pbt.fitness(state)  # [n] each device evaluates its own agents
        if alive is not None:
            fitness = jnp.where(alive, fitness, jnp.nan)
        # each agent's environments (and its policy's state of their episodes) stay where they are
        kept = {"env_state": state.env_state, "policy_state": state.policy_state,
                "fitness_episodes": state.fitness_episodes}
        population = state.replace(env_state=None, policy_state=None, fitness_episodes=None)
        if self.split_agents:
            gather = lambda x: lax.all_gather(x, DEVICE_AXIS, tiled=True)  # noqa: E731
            population, fitness = jax.tree.map(gather, (population, fitness))
        population, record = self.pbt.step(population, fitness)
        if self.split_agents:
            start = lax.axis_index(DEVICE_AXIS) * local_agents
            own = lambda x: lax.dynamic_slice_in_dim(x, start, local_agents)  # noqa: E731
            population, record = jax.tree.map(own, (population, record))
        episodes = jax.tree.map(jnp.zeros_like, kept["fitness_episodes"])
        return population.replace(env_state=kept["env_state"], policy_state=kept["policy_state"],
                                  fitness_episodes=episodes), record

    def _build_chunk(self):
        if self.placement.mesh is None:
            return jax.jit(self._iterations, donate_argnums=0)

        def sharded(state, num_iterations, alive, totals):
            specs = self.specs(state)
            agents = P(DEVICE_AXIS)
            return jax.shard_map(self._iterations, mesh=self.placement.mesh,
                                 in_specs=(specs, P(), agents, agents),
                                 out_specs=(specs, agents, agents, agents, agents),
                                 check_vma=False)(state, num_iterations, alive, totals)

        return jax.jit(sharded, donate_argnums=0)

    # --- the host side ------------------------------------------------------------------
    def run(self, state, num_iterations: int, stop=lambda: False, progress=None):
        """As :meth:`Executor.run`, with the compiled calls cut at the PBT steps."""
        self._iteration = int(np.max(to_host(state.iteration)))
        return super().run(state, num_iterations, stop, progress)

    def _call_length(self, left: int) -> int:
        """As :meth:`Executor._call_length`, and never past the next PBT step."""
        interval = self.pbt.config.interval
        return min(super()._call_length(left), interval - self._iteration % interval)

    def _call(self, state, n: int, totals: dict):
        """One compiled call; a PBT step's record (the call ended on one) is kept for
        :meth:`take_records`."""
        state, totals, alive, final, record = self._chunk(state, np.int32(n), self.alive, totals)
        self.alive = np.asarray(host_copy(alive)) > 0
        totals = to_host(totals)  # NumPy arrays like ``alive``: every call sees arguments of one kind
        self._iteration += n
        if self._iteration % self.pbt.config.interval == 0:
            self.records.append({"iteration": self._iteration, **to_host(record)})
        return state, totals, final

    def take_records(self) -> list[dict]:
        """The records of the PBT steps since the last call, oldest first (NumPy arrays:
        ``source [N]``, ``fitness [N]``, ``before [N, H]``, ``after [N, H]``)."""
        records, self.records = self.records, []
        return records
