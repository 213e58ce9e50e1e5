"""How a :class:`~evorl.engine.host_loop.ChunkedWorkflow` assembles what its host loop runs
(:class:`RunnerAssembly`, a part of that class in its own file): the training and evaluation
envs, the runner (the fused :class:`~evorl.engine.execution.Executor` or the actor-learner)
over the algorithm's iteration or generation, PBT's population step, the evaluator, and the
initial state of every agent of the population."""

from __future__ import annotations

import dataclasses
import functools

import jax

from evorl.config import num_agents, sweep_variants
from evorl.config.runs import check_host_env_runner, check_train_episode_length
from evorl.engine.actor_learner import ActorLearnerExecutor
from evorl.engine.chunk_report import chunk_health
from evorl.engine.evaluator import each_agent, make_evaluator
from evorl.engine.execution import DEVICE_AXIS, Executor, Warmup
from evorl.engine.health import freeze_diverged
from evorl.engine.pbt import PBT, HyperparameterStore, evolving_hyperparameters
from evorl.engine.population import apply_variant, population_inputs
from evorl.rl.state_roles import env_axes


class RunnerAssembly:
    """The builders of :class:`~evorl.engine.host_loop.ChunkedWorkflow` (see its docstring for
    what a subclass's ``__init__`` sets with them)."""

    #: The population's hyperparameter variants and agents, and the runner: one agent, fused,
    #: unless the workflow says otherwise (:meth:`runner_and_envs`).
    variants, num_agents, asynchronous = ({},), 1, False
    #: PBT's population step (:class:`~evorl.engine.pbt.PBT`), run by the executor; None without PBT.
    pbt: PBT | None = None

    def runner_and_envs(self, config, env):
        """``(eval_env, train_env)``: the evaluation env (whole episodes) and the training env
        (:func:`training_env`); sets ``asynchronous`` (a host env needs the actor-learner, said
        in one line otherwise), ``variants`` and ``num_agents`` (variants x ``training.num_seeds``)."""
        eval_env, env = env.for_evaluation(), training_env(env, config.training)
        self.asynchronous = config.runner.asynchronous(env.on_host)
        check_host_env_runner(self.asynchronous, env.on_host, config.env.env_type, config.runner.mode)
        self.variants = sweep_variants(list(config.sweep))
        self.num_agents = num_agents(config)
        return eval_env, env

    @property
    def population(self) -> bool:
        return self.placement.population

    def host_step_timeout(self, config) -> float | None:
        """How long an evaluation's host env step may take (``runner.env_step_timeout_seconds``
        with the actor-learner; None: a JAX env, compiled)."""
        return config.runner.env_step_timeout_seconds if self.asynchronous else None

    def build_runner(self, config, env, eval_env, agent, make_iteration, make_learner_update, state_cls, *,
                     learner_mesh=None, actor_devices=None, acting=None, deterministic: bool = True,
                     warmup_iterations=None) -> None:
        """Sets what ``learn`` runs, once ``placement`` and ``optimizer`` are: ``pbt`` (with
        ``pbt.enabled``), ``executor`` (with
        ``asynchronous`` the actor-learner over ``make_learner_update(agent, optimizer, training,
        axis)``, else the fused :class:`~evorl.engine.execution.Executor` over
        ``make_iteration(env, agent, optimizer, training, axis)``, and over its ``warmup=True``
        variant for the ``warmup_iterations(state)`` iterations that cannot learn yet; a
        population's diverged agent is frozen), and ``evaluator``. The roles of the fields of
        ``state_cls`` (:mod:`evorl.rl.state_roles`) say which PBT copies and keeps, which the
        freeze keeps and which ``distributed.layout=envs`` splits."""
        tc = config.training
        self.pbt = self.make_pbt(config, eval_env, agent)
        # an actor-learner's learner on a mesh runs inside shard_map too: no population branch there
        population_axis = None if learner_mesh is not None else self.placement.population_axis_name
        freeze = functools.partial(freeze_diverged, axis_name=population_axis) if self.population else None
        if self.asynchronous:
            update = make_learner_update(agent, self.optimizer, tc, None if learner_mesh is None else DEVICE_AXIS)
            self.executor = ActorLearnerExecutor(update, env, agent, tc, config.runner, learner_mesh, actor_devices,
                                                 final_metrics=chunk_health, acting=acting, num_agents=self.num_agents,
                                                 freeze=freeze, population_step=self.pbt)
        else:
            steps = {"step": make_iteration(env, agent, self.optimizer, tc, self.placement.step_axis_name)}
            if warmup_iterations is not None:
                steps["warmup"] = make_iteration(env, agent, self.optimizer, tc, self.placement.step_axis_name,
                                                 warmup=True)
            if self.pbt is not None:
                steps = {name: self.pbt.summing_fitness_episodes(step) for name, step in steps.items()}
            warmup = Warmup(steps["warmup"], warmup_iterations) if warmup_iterations is not None else None
            self.executor = Executor(steps["step"], self.placement, env_axes(state_cls), final_metrics=chunk_health,
                                     freeze=freeze, population_step=self.pbt, warmup=warmup)
        self.build_evaluator(eval_env, agent, tc.eval_episodes, deterministic, self.host_step_timeout(config))
        #: A population's agents alive at the last report, and each frozen agent's bad metrics.
        self._reported_alive, self._frozen_metrics = None, {}

    def build_generation_runner(self, step, env, agent, eval_episodes: int) -> None:
        """Sets what ``learn`` runs for a workflow whose iteration is one compiled generation
        (``step``, on a JAX ``env``), once ``placement`` and ``pbt`` are: ``executor``, the fused
        :class:`~evorl.engine.execution.Executor` over ``step`` (with PBT's population step when
        ``pbt`` is set), and the evaluator of ``eval_episodes`` greedy episodes."""
        self.executor = Executor(step, self.placement, final_metrics=chunk_health, population_step=self.pbt)
        self.build_evaluator(env, agent, eval_episodes)

    def build_evaluator(self, eval_env, agent, eval_episodes: int, deterministic: bool = True,
                        step_timeout: float | None = None) -> None:
        """Sets ``evaluator`` (``eval_episodes`` episodes of ``eval_env``), ``_evaluation_compiled``
        and ``_evaluate`` (:meth:`evaluation_function`)."""
        self.evaluator = make_evaluator(eval_env, agent, eval_episodes, deterministic, step_timeout)
        # a host evaluator steps its envs in Python (with a jitted policy); a JAX one is compiled whole
        self._evaluation_compiled = not eval_env.on_host
        self._evaluate = self.evaluation_function()

    def make_pbt(self, config, eval_env, agent, store: HyperparameterStore | None = None) -> PBT | None:
        """With ``pbt.enabled``, PBT's step on this population (``store``: where the state holds
        the hyperparameters, default :class:`~evorl.engine.pbt.AgentHyperparameters`); None otherwise."""
        if not config.pbt.enabled:
            return None
        fitness = make_evaluator(eval_env, agent, config.pbt.eval_episodes, step_timeout=self.host_step_timeout(config))
        return PBT(config.pbt, evolving_hyperparameters(config, type(self)), self.num_agents, fitness.evaluate,
                   evaluates_on_host=eval_env.on_host, **({} if store is None else {"store": store}))

    def evaluation_function(self):
        """``_evaluate(agent_state, key) -> (returns, lengths) [(N,) E]`` over the population: the
        evaluator compiled for it (a JAX env), or a host env's evaluator run for one agent after
        another."""
        evaluate = self.evaluator.evaluate
        if self._evaluation_compiled:
            return self.executor.map_agents(evaluate)
        return each_agent(evaluate, self.num_agents) if self.population else evaluate

    def variant_data(self, config) -> list[tuple]:
        """``(hyperparameters, learning rate)`` of each variant of the population (``self.variants``).

        The hyperparameters are built once, by the agent's factory from the config
        (``agent.hparams_defaults``, under the config's names); a variant replaces the values
        of the keys it sweeps, which the config check (:meth:`hparams_of`, every variant) passed."""
        defaults = None if self.hparams_cls is None else self.agent.hparams_defaults
        names = set() if defaults is None else {f.name for f in dataclasses.fields(defaults)}
        out = []
        for variant in self.variants:
            _, training = apply_variant(config.agent, config.training, variant)
            swept = {key.split(".", 1)[1]: value for key, value in variant.items()}
            hparams = None if defaults is None else \
                dataclasses.replace(defaults, **{k: v for k, v in swept.items() if k in names})
            out.append((hparams, training.learning_rate))
        return out

    def init_agents(self, init_one, key: jax.Array):
        """The initial state of every agent, ``init_one(key, *data)`` run by the executor
        (``data``: the agent's variant's entry of ``_variant_data``, :meth:`variant_data`'s
        ``(hparams, learning_rate)`` for an RL workflow); with PBT it also holds the sums of the episodes PBT's fitness ranks by.
        For a population, agent ``v * num_seeds + s`` trains variant ``v`` with the ``s``-th
        key split from ``key``, shared by all variants (:func:`population_inputs`); one agent
        is initialised with ``key`` itself."""
        if self.pbt is not None:
            init_one = _then(init_one, self.pbt.with_pbt_fields)
        if not self.population:
            return self.executor.init(init_one, key, *self._variant_data[0])
        return self.executor.init(init_one, *population_inputs(key, self._variant_data, self.config.training.num_seeds))


def training_env(env, tc):
    """``env`` for training: episodes cut at ``training.train_episode_length`` when it is set
    (at most the evaluation episodes' length)."""
    if tc.train_episode_length is None:
        return env
    check_train_episode_length(tc.train_episode_length, env.episode_length)
    return env.with_episode_length(tc.train_episode_length)


def _then(fn, after):
    """``after(fn(*args))``."""
    return lambda *args: after(fn(*args))
