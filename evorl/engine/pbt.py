r"""Population-based training (Jaderberg et al., 2017): the exploit/explore step, a pure
function over the population (the ``pbt:`` section is :class:`~evorl.config.pbt.PBTConfig`).

Every ``pbt.interval`` iterations the agents are ranked by a fitness; each of the
``k = floor(N * exploit_fraction)`` worst agents copies a uniformly drawn agent of the ``k``
best (**exploit**: parameters, optimiser state, observation statistics and hyperparameters;
its environments and PRNG key stay its own) and then changes each evolving hyperparameter
``h`` of the copy (**explore**):

.. math::
    h' = \mathrm{clip}\big(u < p \;?\; h_{\mathrm{new}} \sim U[lo, hi] \;:\; f \cdot h,
    \; lo, hi\big), \qquad f \sim U\{\text{perturb\_factors}\}

with ``p = resample_probability``; a learning rate is resampled log-uniformly,
:math:`\log h_{\mathrm{new}} \sim U[\log lo, \log hi]`. The other agents are unchanged.

With ``pbt.strategy: cso`` the step is a competitive swarm instead (Cheng & Jin, 2015; EvoRL's
PBT-CSO, :func:`~evorl.rl.evolution.cso_step` has the equations): the agents are drawn into
random pairs; each pair's loser copies its winner (the same fields as above) and moves its
hyperparameters towards the winner's with a velocity it keeps between steps
(``pbt_velocity`` in the training state, checkpointed with it), in the coordinates
``log h`` for a learning rate and ``h`` otherwise; winners are unchanged.

:func:`~evorl.rl.evolution.exploit_explore` (truncation) and
:func:`~evorl.rl.evolution.cso_step` (the swarm) are the steps on ``fitness [N]`` and the
hyperparameters ``[N, H]``, given their random numbers (:func:`~evorl.rl.evolution.draw`,
:func:`~evorl.rl.evolution.cso_draw`), so each can be checked against a plain NumPy version;
:class:`PBT` applies one to the training state inside the compiled program (the execution
layer runs :meth:`PBT.step_population` at the end of its compiled calls, see
:class:`~evorl.engine.execution.PopulationStep`). Which hyperparameters may evolve is
declared, not guessed: the keys that may take a list (``RLWorkflow.evolvable_keys``), i.e.
the fields of the algorithm's hyperparameter dataclass, ``training.learning_rate``, ``gamma``
and ``gae_lambda``; for ES, the ``es:`` keys its strategy reads from its state (OpenES's
``es.learning_rate`` and ``es.sigma``, :class:`~evorl.rl.optimisers.StateHyperparameter`). A
key that shapes the program, or that the strategy does not hold, is refused with a message
naming it. Where a state holds them is the workflow's :class:`HyperparameterStore`.

For ES (:class:`~evorl.algorithms.es_workflow.ESWorkflow`, ``training.num_seeds`` x lists of
``es.learning_rate``/``es.sigma`` independent searches), an agent is a whole search: exploit
copies the search distribution (mean ``m [D]`` and std), the optimiser state of the mean
(Adam's moments and step count) and the agent (the mean as policy parameters, observation
statistics), so the copy continues the source's search exactly; explore then perturbs its
learning rate and sigma by the rule above, in log space when resampled.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from evorl.config import ConfigError, require, sweep_variants, unknown_key_error
from evorl.config.pbt import LOG_SCALE_KEYS, PBTConfig
from evorl.engine.evaluator import each_agent
from evorl.engine.population import with_variant
from evorl.rl.evolution import Evolving, cso_draw, cso_step, draw, exploit_explore, explore, replace_diverged
from evorl.rl.rollout import EpisodeStats
from evorl.rl.state_roles import fields_with_role


def evolving_hyperparameters(config: Any, workflow_cls: type) -> tuple[Evolving, ...]:
    """The ``pbt.hyperparameters`` of a parsed experiment config, checked against the
    workflow: each key may take a list (is data in the program: ``workflow_cls.evolvable_keys``),
    each bound is a valid value of it (``workflow_cls.check_variant``), and every agent's
    initial value lies within the bounds."""
    evolvable = workflow_cls.evolvable_keys(config)
    sections = ["agent", "training", *([workflow_cls.section] if workflow_cls.section else [])]
    config_keys = [f"{section}.{f.name}" for section in sections for f in dataclasses.fields(getattr(config, section))]
    variants = sweep_variants(list(config.sweep))
    out = []
    for key, (low, high) in config.pbt.hyperparameters.items():
        name = f"pbt.hyperparameters.{key}"
        if key not in config_keys:
            error = unknown_key_error(key, config_keys, "")
            raise ConfigError(f"{name}: {error} Keys that can evolve: {', '.join(evolvable) or 'none'}.")
        require(key in evolvable,
                f"{name}: '{key}' cannot evolve: {workflow_cls.why_not_evolvable(config, key)} "
                f"Keys that can evolve: {', '.join(evolvable) or 'none'}.")
        section, short = key.split(".", 1)
        for bound in (low, high):
            try:
                workflow_cls.check_variant(with_variant(config, {key: float(bound)}))
            except ConfigError as e:
                raise ConfigError(f"{name} = {[low, high]}: the bound {bound} is not a valid value: {e}") from None
        starts = set()
        for variant in variants:
            value = getattr(getattr(with_variant(config, variant), section), short)
            require(value is not None, f"{name}: {key} is null; give it a value to evolve it.")
            require(low <= value <= high, f"{name} = {[low, high]}: the initial value {key}={value} lies outside "
                                          f"the bounds; widen them or change the initial value.")
            starts.add(value)
        require(config.pbt.strategy != "cso" or len(starts) > 1,
                f"{name}: every agent starts with {key}={value}, and pbt.strategy=cso moves an agent's value only "
                f"towards the other agents' values (from a zero velocity), so it would never change. Give {key} a "
                f"list of initial values, or use pbt.strategy=truncation.")
        field = None if key == "training.learning_rate" else short
        out.append(Evolving(key, field, float(low), float(high), key in LOG_SCALE_KEYS))
    return tuple(out)


def check_pbt_config(config: Any, workflow_cls: type, num_agents: int, asynchronous: bool,
                     split_envs: bool) -> None:
    """Cross-section checks of an enabled ``pbt:`` section, before anything is compiled."""
    require(not split_envs, "pbt.enabled on several devices needs distributed.layout=population (whole agents on "
                            "each device), not distributed.layout=envs.")
    if config.pbt.strategy == "cso":
        require(num_agents >= 2, f"pbt.strategy=cso pairs the agents, and {num_agents} agent (training.num_seeds x "
                                 f"hyperparameter variants) has no partner; train at least 2.")
    else:
        num_replaced = int(num_agents * config.pbt.exploit_fraction)
        require(num_replaced >= 1,
                f"pbt: {num_agents} agents (training.num_seeds x hyperparameter variants) x pbt.exploit_fraction="
                f"{config.pbt.exploit_fraction} replaces no agent; train more agents or raise exploit_fraction.")
    evolving_hyperparameters(config, workflow_cls)


# --- the step, on the training state ----------------------------------------------------
#: Folded into agent 0's key for the step's random numbers, and into each agent's for its evaluation.
DRAW_TAG, EVAL_TAG = 0x9B7, 0xE7A1


class HyperparameterStore(Protocol):
    """Where a population's state holds the evolving hyperparameters, by ``Evolving.field``."""

    def read(self, state: Any, field: str | None) -> jax.Array:
        """Every agent's value ``[N]``."""

    def write(self, state: Any, values: dict[str | None, jax.Array]) -> Any:
        """``state`` with the values ``{field: [N]}`` set."""


class AgentHyperparameters:
    """An RL state's store: the base learning rate ``state.learning_rate`` (field None) and
    the fields of ``state.agent_state.hparams``."""

    def read(self, state, field):
        return state.learning_rate if field is None else getattr(state.agent_state.hparams, field)

    def write(self, state, values):
        hparams = state.agent_state.hparams.replace(**{f: v for f, v in values.items() if f is not None})
        return state.replace(agent_state=state.agent_state.replace(hparams=hparams),
                             learning_rate=values.get(None, state.learning_rate))


class PBT:
    """The exploit/explore step on a population's training state (leaves ``[N, ...]``: an
    :class:`~evorl.rl.on_policy.OnPolicyState`, an off-policy state, an ES state), for the
    execution layer to run inside the compiled program.

    ``evaluate(agent_state, key) -> (returns [E], lengths [E])`` is the greedy evaluator of
    ``fitness: eval``: a JAX env's, traced into the step, or (``evaluates_on_host``) a host
    env's, which :meth:`host_fitness` runs outside it. ``store``: where the state holds the
    evolving hyperparameters (an ES state: in its search's state). A replaced agent takes the
    state's ``pbt_copy`` fields from its source; its ``pbt_keep`` fields (environments, an
    off-policy replay buffer, the episode sums) stay its own (:mod:`evorl.rl.state_roles`)."""

    def __init__(self, config: PBTConfig, evolving: tuple[Evolving, ...], num_agents: int, evaluate=None,
                 evaluates_on_host: bool = False, store: HyperparameterStore = AgentHyperparameters()):
        self.config = config
        #: ``fitness: eval`` with a host env's evaluator: the fitness is computed by
        #: :meth:`host_fitness` and handed to :meth:`step_population`.
        self.fitness_on_host = config.fitness == "eval" and evaluates_on_host
        self.evolving = evolving
        self.num_agents = num_agents
        self.num_replaced = int(num_agents * config.exploit_fraction)  # strategy: truncation
        self.evaluate = evaluate
        self.store = store

    # --- the execution layer's population step (evorl.engine.execution.PopulationStep) ---
    @property
    def interval(self) -> int:
        """Iterations between two PBT steps."""
        return self.config.interval

    def with_pbt_fields(self, state):
        """One agent's initial state with empty episode sums for ``fitness: train`` and, with
        ``strategy: cso``, a zero velocity ``[H]``."""
        state = state.replace(fitness_episodes=EpisodeStats.zeros())
        if self.config.strategy != "cso":
            return state
        return state.replace(pbt_velocity=jnp.zeros((len(self.evolving),), jnp.float32))

    @staticmethod
    def summing_fitness_episodes(step):
        """One agent's iteration ``step`` that also adds the episodes it ended to the state's
        ``fitness_episodes`` (the sums ``fitness: train`` ranks by)."""

        def iteration(state):
            new_state, metrics = step(state)
            episodes = EpisodeStats(metrics["episode_return_sum"].value, metrics["episode_length_sum"].value,
                                    metrics["episode_count"].value)
            return new_state.replace(
                fitness_episodes=jax.tree.map(jnp.add, new_state.fitness_episodes, episodes)), metrics

        return iteration

    def step_population(self, state, alive: jax.Array, axis_name: str | None = None, fitness: jax.Array | None = None):
        """The PBT step on the population ``state`` (leaves ``[n, ...]``: this device's agents;
        ``axis_name``: the device axis the agents are split over, or None): fitness (NaN, the
        worst, for a frozen agent: ``alive [n]`` false), then exploit/explore on the whole
        population (gathered over the devices); ``fitness [n]`` given (:meth:`host_fitness`)
        replaces :meth:`fitness`. Returns this device's agents, their ``alive``
        (an agent that copies another trains again) and their records. Traced inside the
        compiled call; on one device it can also be jitted by itself (``benchmarks/`` times it
        so)."""
        local_agents = state.iteration.shape[0]
        fitness = jnp.where(alive, self.fitness(state) if fitness is None else fitness, jnp.nan)  # [n] own agents
        # each agent's environments (and its policy's state of their episodes, its buffer) stay where they are
        kept = {name: getattr(state, name) for name in fields_with_role(state, "pbt_keep")}
        population = state.replace(**dict.fromkeys(kept))
        everyone_alive = alive
        if axis_name is not None:
            gather = lambda x: lax.all_gather(x, axis_name, tiled=True)  # noqa: E731
            population, fitness, everyone_alive = jax.tree.map(gather, (population, fitness, alive))
        population, record = self.step(population, fitness, everyone_alive)
        alive = everyone_alive[record["source"]]
        if axis_name is not None:
            start = lax.axis_index(axis_name) * local_agents
            own = lambda x: lax.dynamic_slice_in_dim(x, start, local_agents)  # noqa: E731
            population, record, alive = jax.tree.map(own, (population, record, alive))
        kept["fitness_episodes"] = jax.tree.map(jnp.zeros_like, kept["fitness_episodes"])
        return population.replace(**kept), alive, record

    def values(self, state) -> jax.Array:
        """The evolving hyperparameters of every agent of ``state``: ``[N, H]``."""
        if not self.evolving:
            return jnp.zeros(state.iteration.shape + (0,))
        return jnp.stack([self.store.read(state, e.field) for e in self.evolving], axis=-1)

    def with_values(self, state, values: jax.Array):
        """``state`` with the evolving hyperparameters ``values [N, H]``."""
        return self.store.write(state, {e.field: values[:, i] for i, e in enumerate(self.evolving)})

    def fitness(self, state) -> jax.Array:
        """Each agent's fitness ``[N]``: mean greedy return, or the mean return of the training
        episodes since the last step (NaN, ranked last, if none ended)."""
        if self.config.fitness == "train":
            episodes = state.fitness_episodes
            return jnp.where(episodes.count > 0, episodes.return_sum / jnp.maximum(episodes.count, 1), jnp.nan)
        keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(state.key, EVAL_TAG)
        returns, _ = jax.vmap(self.evaluate)(state.agent_state, keys)  # [N, E]
        return jnp.mean(returns, axis=-1)

    def host_fitness(self, state) -> np.ndarray:
        """``fitness: eval`` on a host env: each agent's mean greedy return ``[N]``, its
        episodes played by the host evaluator one agent after another, with the key
        :meth:`fitness` would use."""
        keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(state.key, EVAL_TAG)
        returns, _ = each_agent(self.evaluate, self.num_agents)(state.agent_state, keys)  # [N, E]
        return np.mean(returns, axis=-1).astype(np.float32)

    def step(self, state, fitness: jax.Array, alive: jax.Array | None = None) -> tuple[Any, dict]:
        """Exploit and explore on the whole population ``state`` with ``fitness [N]``; returns
        the new state and the step's record (``source``, ``fitness``, ``before``, ``after`` and
        ``diverged``, the agents not ``alive [N]`` before the step; default: all alive).

        A diverged agent ranks last (its fitness is NaN), and one that the strategy leaves in
        place (truncation replaces only the ``k`` worst; a swarm pair may hold two diverged
        agents) copies one of the best agents alive instead
        (:func:`~evorl.rl.evolution.replace_diverged`). Every diverged agent then explores from
        its source's hyperparameters by truncation's rule (:func:`~evorl.rl.evolution.explore`;
        a swarm's velocity restarts at 0), not from its own, which diverged. After the step
        every agent trains, unless none was alive."""
        alive = jnp.ones(fitness.shape, bool) if alive is None else alive
        key = jax.random.fold_in(state.key[0], DRAW_TAG)
        before = self.values(state)
        if self.config.strategy == "cso":
            source, after, velocity = self.swarm_step(key, fitness, before, state.pbt_velocity)
            state = state.replace(pbt_velocity=velocity)
            key = jax.random.fold_in(key, DRAW_TAG)  # the draws of the diverged agents' replacement
        else:
            source, after = exploit_explore(fitness, before, self._draws(key), self.num_replaced, self.evolving,
                                            self.config.perturb_factors, self.config.resample_probability)
        draws = self._draws(key)
        donors = self.num_replaced if self.config.strategy != "cso" else self.num_agents // 2
        source, _ = replace_diverged(source, alive, fitness, draws.winner, max(donors, 1))
        # a diverged agent's own hyperparameters are what diverged: it explores from its donor's (velocity 0)
        diverged = ~alive & jnp.any(alive)
        after = jnp.where(diverged[:, None], explore(before, source, draws, self.evolving, self.config.perturb_factors,
                                                     self.config.resample_probability), after)
        if self.config.strategy == "cso":
            state = state.replace(pbt_velocity=jnp.where(diverged[:, None], 0.0, state.pbt_velocity))
        state = copy_agents(state, source)
        state = self.with_values(state, after)
        record = {"source": source.astype(jnp.int32), "fitness": fitness, "before": before, "after": after,
                  "diverged": ~alive}
        return state, record

    def _draws(self, key: jax.Array):
        """The random numbers of a truncation step (:func:`~evorl.rl.evolution.draw`)."""
        return draw(key, self.num_agents, len(self.evolving), len(self.config.perturb_factors))

    def swarm_step(self, key: jax.Array, fitness: jax.Array, values: jax.Array, velocity: jax.Array):
        """``strategy: cso``: :func:`~evorl.rl.evolution.cso_step` on the hyperparameters
        ``values [N, H]`` in the swarm's coordinates (the log of a learning rate); returns
        ``source [N]``, the new values and the new velocity ``[N, H]``."""
        log_scale = np.asarray([e.log_scale for e in self.evolving])  # [H]
        to_swarm = lambda h: jnp.where(log_scale, jnp.log(jnp.where(log_scale, h, 1.0)), h)  # noqa: E731
        low = to_swarm(jnp.asarray([e.low for e in self.evolving], jnp.float32))  # [H]
        high = to_swarm(jnp.asarray([e.high for e in self.evolving], jnp.float32))
        draws = cso_draw(key, self.num_agents, len(self.evolving))
        source, y, velocity = cso_step(fitness, to_swarm(values), velocity, draws, low, high, self.config.cso_phi)
        moved = (source != jnp.arange(self.num_agents))[:, None]  # [N, 1] the losers; exp(log h) may round h
        return source, jnp.where(moved, jnp.where(log_scale, jnp.exp(y), y), values), velocity


def copy_agents(state, source: jax.Array, fields: tuple[str, ...] | None = None):
    """``state`` with each agent ``i``'s ``fields`` (default: the state's ``pbt_copy`` fields)
    taken from agent ``source[i]``."""
    fields = fields_with_role(state, "pbt_copy") if fields is None else fields
    return state.replace(**{name: jax.tree.map(lambda x: x[source], getattr(state, name)) for name in fields})
