r"""What the evolution-guided algorithms share (:mod:`~evorl.algorithms.cemrl`,
:mod:`~evorl.algorithms.erl`): a population of actors as the rows of a flat parameter matrix
``[N, D]`` (``ravel_pytree`` of TD3's actor), their episodes vmapped in one program into one
shared replay buffer, and TD3 gradient steps of one shared critic and ``K`` actors.

**TD3 steps of a shared critic and ``K`` actors** (:func:`make_rl_phase`). Each of
``num_updates`` steps samples one batch per actor; the critic descends the mean over the
``K`` actors of TD3's critic loss (:meth:`~evorl.algorithms.td3.TD3Agent.critic_loss` with
actor ``k``'s batch and target actor, the shared target critic), then every ``policy_delay``
steps each actor ascends its :math:`Q_1` (:meth:`~evorl.algorithms.td3.TD3Agent.actor_loss`,
vmapped, each actor with its own Adam state) and the targets move by Polyak (``tau``):
:math:`\bar\theta \leftarrow \tau\theta + (1 - \tau)\bar\theta`. With ``K = 1`` that is TD3.

**Episodes** (:func:`make_play`): actor ``i`` plays a fixed rollout of ``episode_length`` steps
in each of the env's ``E`` environments (an episode that ends early is followed by the next,
whose steps are stored too), acting with exploration noise of std ``noise[i]``; its fitness is
the mean return of its episodes that ended (:func:`mean_returns`).

**The host side** (:class:`PopulationRLWorkflow`): one agent whose state holds the population,
the shared critic and the buffer; one generation is one iteration of the execution layer, so
chunks of ``training.eval_interval`` generations compile into one program, and
:class:`~evorl.engine.host_loop.ChunkedWorkflow` runs it unchanged: health checks, greedy
evaluation of the state's ``agent_state`` (TD3's), recorders, checkpoints (the population, the
buffer, the critic and the Adam states are in the state, so a resumed run continues exactly),
``population.png`` and ``evorl.load_policy``. A subclass names its config section
(``section``, a :class:`PopulationRLConfig`) and its algorithm, whose state and generation
are its own (:func:`population_algorithm`). The logged ``step`` counts each generation's env steps,
``actors_per_generation x episodes_per_actor x env.episode_length``.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax
from jax.flatten_util import ravel_pytree

from evorl.algorithms.es import ESConfig, make_search
from evorl.algorithms.td3 import TD3Agent, TD3HParams, make_mlp_td3_agent
from evorl.config import config_mapping, parse_section, section_data
from evorl.config.population import (  # noqa: F401  (the sections are importable from here too)
    EVOSAX_OPTIMISERS, OPTIMISERS, PopulationRLConfig, PopulationRLTrainingConfig, check_buffer_holds_generation,
    check_population_placement, check_population_run,
)
from evorl.config.training import check_training_keys
from evorl.engine.execution import Placement
from evorl.engine.host_loop import ChunkedWorkflow
from evorl.engine.memory_estimate import Term, transition_words
from evorl.engine.rl_base import ExperimentConfig
from evorl.envs import VectorEnv
from evorl.rl import metrics as M, optimisers, replay
from evorl.rl.agent import hparams_as_arrays
from evorl.rl.algorithm import Algorithm, Family
from evorl.rl.continuous_control import ContinuousNetworkOptions, ExploringActor
from evorl.rl.evolution import ranked
from evorl.rl.off_policy import UpdateGroup, gradient_step, group_step, polyak
from evorl.rl.on_policy import episode_metrics
from evorl.rl.optimisers import AskTell
from evorl.rl.rollout import EpisodeStats, rollout_with_policy_state


#: Folded into a generation's key for the population optimiser's ``tell``, and into the initial
#: state's key for its ``init`` (keys of their own, leaving the generation's other keys as they were).
TELL_TAG, SEARCH_TAG = 0x7E11, 0x5EA2
#: Folded into ERL's key of the genetic algorithm's ``tell`` for the optimiser's ``ask``.
ASK_TAG = 0xA5C


def initial_population(agent: TD3Agent, key: jax.Array, num: int) -> jax.Array:
    """``[num, D]``: actors initialised as TD3's actor is, flattened."""
    # one actor at a time (lax.map, not vmap): a batched orthogonal initialisation is a batched QR,
    # which can hang jaxlib's CPU thread pool (evorl.engine.execution.map_agents_sequentially)
    return lax.map(lambda k: ravel_pytree(agent.init(k).params["actor"])[0], jax.random.split(key, num))


def empty_transitions(env: VectorEnv, action_dim: int) -> replay.Transition:
    """One transition of zeros, the replay buffer's example."""
    obs = jnp.zeros(env.obs_space.shape, jnp.float32)
    return replay.Transition(obs=obs, action=jnp.zeros((action_dim,), jnp.float32), reward=jnp.zeros((), jnp.float32),
                             discount=jnp.zeros((), jnp.float32), next_obs=obs)


def population_update_groups(agent: TD3Agent) -> tuple[UpdateGroup, UpdateGroup]:
    """TD3's update groups (:class:`~evorl.rl.off_policy.UpdateGroup`) for ``K`` actors
    and one shared critic: ``params = {"critic": critic, "actor": actors}`` and ``target_params``
    alike, actor leaves ``[K, ...]``, batches and keys ``[K, ...]`` (one per actor). The critic
    descends the mean over ``k`` of TD3's critic loss with actor ``k``'s batch and target actor;
    every ``policy_delay`` steps the actors descend the sum of their losses (each actor's
    gradient is its own loss's; Adam works coordinate-wise, so each actor steps as alone)."""

    def critic_loss(agent_state, target_params, batches, keys):
        critic, target_critic = agent_state.params["critic"], target_params["critic"]

        def one(target_actor, batch, key):  # actor k's batch and target actor, the shared target critic
            return agent.critic_loss(agent_state.replace(params={"actor": target_actor, "critic": critic}),
                                     {"actor": target_actor, "critic": target_critic}, batch, key)

        losses, metrics = jax.vmap(one)(target_params["actor"], batches, keys)  # [K]
        return jnp.mean(losses), jax.tree.map(jnp.mean, metrics)

    def actor_loss(agent_state, target_params, batches, keys):
        critic = agent_state.params["critic"]

        def one(actor, batch):
            return agent.actor_loss(agent_state.replace(params={"actor": actor, "critic": critic}), None, batch, None)[0]

        losses = jax.vmap(one)(agent_state.params["actor"], batches)  # [K]
        return jnp.sum(losses), {"actor_loss": jnp.mean(losses)}

    return UpdateGroup("critic", critic_loss), UpdateGroup("actor", actor_loss, agent.policy_delay)


def make_rl_phase(agent: TD3Agent, optimizer, cfg: Any):
    """``rl_phase(agent_state, target_critic, critic_opt_state, actors, target_actors,
    actor_opt_states, buffer, key) -> (critic, target_critic, critic_opt_state, actors,
    target_actors, actor_opt_states, metrics)``: ``cfg.num_updates`` TD3 steps (module
    docstring) of the shared critic and the actors ``actors`` (leaves ``[K, ...]``, their
    targets alike; ``actor_opt_states`` one Adam state over them), batches of ``cfg.batch_size``.
    Each step is the off-policy learner's (:func:`~evorl.rl.off_policy.gradient_step`
    over :func:`population_update_groups`); the targets move by Polyak
    (``agent_state.hparams.tau``) on the steps the actors move."""
    groups = population_update_groups(agent)
    steps = [group_step(group, optimizer, named_grad_norm=True) for group in groups]

    def rl_phase(agent_state, target_critic, critic_opt_state, actors, target_actors, actor_opt_states, buffer, key):
        num = jax.tree.leaves(actors)[0].shape[0]

        def step(carry, inputs):
            opt_state, params, target_params = carry
            index, step_key = inputs
            batch_key, loss_key = jax.random.split(step_key)
            batches = jax.vmap(replay.sample, in_axes=(None, 0, None))(
                buffer, jax.random.split(batch_key, num), cfg.batch_size)  # [K, batch_size, ...]
            opt_state, learner, metrics, applied = gradient_step(
                steps, opt_state, agent_state.replace(params=params), target_params, batches,
                (jax.random.split(loss_key, num), None), index)
            moved = polyak(agent_state.hparams.tau, learner.params, target_params)  # tau: [] float32, the section's
            target_params = jax.tree.map(lambda new, old: jnp.where(applied[1] > 0, new, old), moved, target_params)
            return (opt_state, learner.params, target_params), (metrics, applied)

        carry = ({"critic": critic_opt_state, "actor": actor_opt_states},
                 {"critic": agent_state.params["critic"], "actor": actors},
                 {"critic": target_critic, "actor": target_actors})
        inputs = (jnp.arange(cfg.num_updates), jax.random.split(key, cfg.num_updates))
        (opt_state, params, target_params), (metrics, applied) = lax.scan(step, carry, inputs)  # [U]
        # a group of every step: the plain mean (as the phase has always logged it); the actors: their steps'
        metrics = {k: v for group, group_metrics, weights in zip(groups, metrics, applied)
                   for k, v in (M.over_steps(group_metrics, weights) if group.period > 1 else
                                jax.tree.map(jnp.mean, group_metrics)).items()}
        return (params["critic"], target_params["critic"], opt_state["critic"], params["actor"],
                target_params["actor"], opt_state["actor"], metrics)

    return rl_phase


def when_learning(rl_phase, buffer_size: jax.Array, learning_starts: int, *args):
    """``rl_phase(*args)`` once the buffer holds ``learning_starts`` transitions (at least 1),
    else its inputs unchanged and zero metrics (``lax.cond``); ``metrics["learning"]`` says which."""
    shapes = jax.eval_shape(rl_phase, *args)[-1]

    def skip(agent_state, target_critic, critic_opt_state, actors, target_actors, actor_opt_states, buffer, key):
        zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
        return (agent_state.params["critic"], target_critic, critic_opt_state, actors, target_actors,
                actor_opt_states, zeros)

    learning = buffer_size >= max(learning_starts, 1)
    *out, metrics = lax.cond(learning, rl_phase, skip, *args)
    return (*out, {**metrics, "learning": learning.astype(jnp.float32)})


def make_play(env: VectorEnv, agent: TD3Agent):
    """``play(agent_state, population [N, D], unravel, noise [N], random_actions, key) ->
    (transitions, stats)``: every actor's episodes vmapped (module docstring), actor ``i``
    exploring with noise std ``noise[i]`` (uniform actions instead while ``random_actions``);
    ``transitions`` flat ``[N x T x E, ...]`` in actor-major order, ``stats`` ``[N]``."""
    length = env.episode_length

    def play(agent_state, population, unravel, noise, random_actions, key):
        behaviour = ExploringActor(agent, random_actions)

        def one(x, noise_std, k):  # actor x's episodes: [T, E] transitions and its ended episodes' sums
            reset_key, rollout_key = jax.random.split(k)
            member = agent_state.replace(params={**agent_state.params, "actor": unravel(x)},
                                         hparams=agent_state.hparams.replace(exploration_noise=noise_std))
            _, _, trajectory, stats = rollout_with_policy_state(env, behaviour, member, env.reset(reset_key), None,
                                                                 rollout_key, length)  # [T, E, ...]
            discounts = agent_state.hparams.gamma * (1.0 - trajectory.terminated.astype(jnp.float32))  # [T, E]
            transitions = replay.n_step_transitions(
                trajectory.obs, trajectory.actions, trajectory.rewards, discounts,
                trajectory.terminated | trajectory.truncated, trajectory.next_obs, 1)  # [T, E]
            return transitions, stats

        num = population.shape[0]
        transitions, stats = jax.vmap(one)(population, noise, jax.random.split(key, num))  # [N, T, E], [N]
        return jax.tree.map(lambda x: x.reshape((-1,) + x.shape[3:]), transitions), stats

    return play


def mean_returns(stats: EpisodeStats) -> jax.Array:
    """``[N]``: each actor's mean return over its episodes that ended (0 where none did)."""
    return stats.return_sum / jnp.maximum(stats.count, 1.0)


def population_metrics(stats: EpisodeStats, fitness: jax.Array, buffer: replay.ReplayBuffer) -> dict:
    """A generation's log: the training return over the ended episodes whose return is finite,
    the population's fitness over its finite members (best, mean, std, worst of ``fitness
    [N]``), and ``nonfinite_actors``, how many had a non-finite fitness (a diverged actor: it
    ranks below every finite one, :func:`~evorl.rl.evolution.ranked`, so the search drops it)."""
    played = jnp.isfinite(stats.return_sum)  # [N] (ERL: [N + 1], the learner too)
    metrics = episode_metrics(EpisodeStats(*(jnp.sum(jnp.where(played, x, 0.0)) for x in (
        stats.return_sum, stats.length_sum, stats.count))), None)
    finite = jnp.isfinite(fitness)  # [N]
    kept = lambda x: jnp.where(finite, x, 0.0)  # noqa: E731
    count = jnp.maximum(jnp.sum(finite), 1)
    mean = jnp.sum(kept(fitness)) / count
    metrics.update(
        best_actor_return=M.Metric(jnp.max(jnp.where(finite, fitness, -jnp.inf)), "max"),
        fitness_mean=mean,
        fitness_std=jnp.sqrt(jnp.sum(kept(jnp.square(fitness - mean))) / count),
        fitness_min=M.Metric(jnp.min(jnp.where(finite, fitness, jnp.inf)), "min"),
        nonfinite_actors=M.Metric(jnp.sum(~finite).astype(jnp.float32), "max"),
        buffer_size=M.Metric(buffer.size.astype(jnp.float32), "max"),
    )
    return metrics


def make_optimiser(cfg: PopulationRLConfig, actor_example: Any) -> AskTell:
    """The section's population optimiser (:mod:`evorl.rl.optimisers`) over the flattened
    actor ``actor_example`` (a pytree of arrays or shapes)."""
    num_dims = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(actor_example))
    if cfg.optimiser == "cem":
        return optimisers.cem(cfg.population_size, cfg.num_elites, cfg.sigma_init, cfg.eps_init, cfg.eps_end,
                              cfg.tau_eps, cfg.elite_var_scale)
    if cfg.optimiser == "ga":
        return optimisers.genetic(cfg.population_size, optimisers.neuron_segments(actor_example), cfg)
    if cfg.optimiser == "vanilla_es":
        return optimisers.vanilla_es(cfg.population_size, cfg.num_elites, cfg.es_sigma)
    es = ESConfig(strategy=EVOSAX_OPTIMISERS[cfg.optimiser], population_size=cfg.population_size,
                  sigma=cfg.es_sigma, learning_rate=cfg.es_learning_rate, optimizer=cfg.es_optimizer)
    es = dataclasses.replace(es, fitness_shaping="centered_rank" if es.spec.shaped_sign is not None else "strategy")
    return dataclasses.replace(make_search(es, num_dims), name=cfg.optimiser)


def population_algorithm(label: str, state_cls: type, init_state: Any, make_generation: Any) -> Algorithm:
    """An evolution-guided algorithm: TD3's agent, its ``tau`` set by the algorithm's section,
    ``training.gamma`` its one training key that is a hyperparameter; and its own state and
    generation, ``init_state(env, agent, optimizer, search, cfg, hparams, key) -> state`` and
    ``make_generation(env, agent, optimizer, search, cfg) -> generation(state) -> (state, metrics)``
    (``optimizer``: the gradient steps' Adam; ``search``: the population optimiser, an
    :class:`~evorl.rl.optimisers.AskTell`)."""
    return Algorithm(label, make_mlp_td3_agent, TD3HParams, Family(state_cls, init_state, make_generation),
                     training_hparams=("gamma",), section_hparams=("tau",), agent_options_cls=ContinuousNetworkOptions,
                     training_defaults={"learning_rate": 1e-3, "gamma": 0.99})


class PopulationRLWorkflow(ChunkedWorkflow):
    """An evolution-guided algorithm on the shared host loop (module docstring)."""

    #: The run's config dataclass: an :class:`~evorl.engine.rl_base.ExperimentConfig` with
    #: one more field, the algorithm's section (``erl: ERLConfig = ERLConfig()``).
    experiment_config_cls: ClassVar[type]
    #: That section's name and dataclass (derived from ``experiment_config_cls``).
    section: ClassVar[str]
    section_cls: ClassVar[type]
    population_plot = True

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "experiment_config_cls" in vars(cls):
            (section,) = (f for f in dataclasses.fields(cls.experiment_config_cls)
                          if f.name not in ExperimentConfig.__dataclass_fields__)
            cls.section, cls.section_cls = section.name, type(section.default)

    def __init__(self, config: ExperimentConfig, env, agent, enable_multi_devices=False, services=None):
        section = getattr(config, self.section)
        check_buffer_holds_generation(section, env.episode_length, self.section)
        self.placement = Placement.create(1, False)
        super().__init__(config, env, agent, services)
        tc = config.training
        self.optimizer = optax.adam(tc.learning_rate)
        self.hparams = hparams_as_arrays(agent.hparams_defaults.replace(tau=self.section_config.tau))
        actor = jax.eval_shape(lambda: agent.init(jax.random.PRNGKey(0)).params["actor"])
        #: The population optimiser (``optimiser`` of the section).
        self.search = make_optimiser(self.section_config, actor)
        generation = self.algorithm.family.make_iteration(env, agent, self.optimizer, self.search, self.section_config)
        self.build_generation_runner(generation, env, agent, tc.eval_episodes)

    def config_notes(self) -> list[str]:
        cfg, steps = self.section_config, self.config.training.num_iterations * self.env_steps_per_iteration
        if cfg.learning_starts <= steps:
            return []
        return [f"{self.section}.learning_starts={cfg.learning_starts} exceeds the run's {steps} env steps "
                f"(training.num_iterations x {self.env_steps_per_iteration} per generation): it takes no gradient step."]

    @classmethod
    def keys_set_elsewhere(cls) -> dict[str, str]:
        return {**super().keys_set_elsewhere(), **{key: f"{cls.section}.{key}" for key in cls.section_hparams}}

    @classmethod
    def hparams_of(cls, agent_cfg, training):
        """TD3's hyperparameters of the ``agent:`` keys, with the section's default ``tau`` in
        the place of its own (checked by the section's ``validate``)."""
        return super().hparams_of(SimpleNamespace(**vars(agent_cfg), tau=cls.section_cls.tau), training)

    @property
    def section_config(self):
        return getattr(self.config, self.section)

    @property
    def env_steps_per_iteration(self) -> int:
        cfg = self.section_config
        return cfg.actors_per_generation * cfg.episodes_per_actor * self.env.episode_length

    def init(self, key: jax.Array):
        init_state = self.algorithm.family.init_state
        return self.executor.init(lambda k: init_state(self.env, self.agent, self.optimizer, self.search,
                                                       self.section_config, self.hparams, k), key)

    # --- config ---------------------------------------------------------------------------
    @classmethod
    def parse_config(cls, cfg):
        cfg = config_mapping(cfg)
        section = parse_section(cls.section_cls, cfg.pop(cls.section, {}), cls.section)
        section.validate(cls.section)
        training = section_data(cfg.get("training", {}), "training")
        keys = tuple(PopulationRLTrainingConfig.__dataclass_fields__)
        check_training_keys(training, cls.__name__, keys, section=cls.section,
                            section_holds="the population's, the buffer's and the gradient steps'",
                            section_keys=cls.section_cls.__dataclass_fields__)
        base = vars(super().parse_config(cfg))
        check_population_run(cls.__name__, base["sweep"], base["runner"], base["pbt"], base["distributed"],
                             base["agent"].normalize_obs)
        training = PopulationRLTrainingConfig(**{key: getattr(base["training"], key) for key in keys})
        return cls.experiment_config_cls(**{**base, "training": training, cls.section: section})

    @classmethod
    def envs_per_agent(cls, config: ExperimentConfig) -> int:
        return getattr(config, cls.section).episodes_per_actor  # each actor's episodes, side by side

    @classmethod
    def memory_terms(cls, config: ExperimentConfig, sizes, num_devices: int, asynchronous: bool) -> list[Term]:
        return memory_terms(getattr(config, cls.section), sizes, cls.section)

    @classmethod
    def check_config(cls, config: ExperimentConfig, agent, num_devices: int) -> None:
        check_population_placement(cls.__name__, num_devices, config.env.env_type)


def memory_terms(section: PopulationRLConfig, sizes, where: str) -> list[Term]:
    """The large contributors of an evolution-guided run (:mod:`evorl.engine.memory_estimate`): the
    shared replay buffer (obs, next obs, action, reward, done per transition) and the
    population, ``N x P`` with ``P`` the agent's parameters (an order of magnitude per actor)."""
    per_transition = transition_words(sizes)
    n = section.population_size
    return [
        Term("replay buffer", f"{section.buffer_size:,} transitions x {per_transition:g} floats",
             section.buffer_size * per_transition, f"{where}.buffer_size"),
        Term("population", f"{n:,} actors x {sizes.num_params:,} parameters", n * sizes.num_params,
             f"{where}.population_size, agent hidden layer sizes"),
    ]


__all__ = [
    "ASK_TAG", "OPTIMISERS", "SEARCH_TAG", "TELL_TAG", "PopulationRLConfig", "PopulationRLTrainingConfig", "PopulationRLWorkflow", "empty_transitions",
    "initial_population", "make_optimiser", "make_play", "make_rl_phase", "mean_returns", "polyak",
    "population_algorithm", "population_metrics", "population_update_groups", "ranked", "when_learning",
]
