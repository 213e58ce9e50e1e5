"""The asynchronous actor-learner (IMPALA's architecture), for host and JAX environments.

What runs where:

* **Actors**: ``runner.num_actors`` threads. Actor ``k`` owns ``num_envs / K`` environments
  (global indices ``k B_k, ..., (k + 1) B_k - 1``): a host vector env (gymnasium, Atari,
  envpool) stepped in Python with one jitted policy call per step, or a JAX env whose whole
  rollout is one jitted call. It rolls out ``rollout_length`` steps with the newest parameters
  it holds (a recurrent policy's state carried from one rollout to the next, reset where an
  episode starts) and puts ``(trajectory, episode sums, parameter version)`` on a bounded queue
  (``runner.queue_size`` rollouts; a full queue blocks the actor).
* **Learner**: the main thread. Each update takes ``K`` rollouts from the queue (whichever
  actors sent them), concatenates them along the environment axis into one batch ``[T, B]``
  and runs exactly the fused workflow's update on it
  (:func:`~evorl.rl.on_policy.make_learner_update`: the agent's ``loss``, GAE or
  V-trace, :func:`~evorl.rl.collectives.agent_gradient_update`; for SAC, TD3, DDPG and DQN
  :func:`~evorl.rl.off_policy.make_learner_update`: into the replay buffer, then its
  gradient steps), then publishes what the actors act with (:class:`ActorPolicy`, declared
  by the workflow: the agent's parameters, or an off-policy agent's behaviour policy state). The behaviour log-probabilities come with the trajectory, so IMPALA's V-trace
  and PPO's ratio correct for the actors' lag.
* **Policy lag** of a rollout: the learner updates made between the parameters it was acted
  with and the update that learns from it (0: fully on-policy).
* **Lockstep** (``runner.lockstep``): each actor waits for parameters newer than the last
  ones it used, so every update learns from rollouts of the parameters just before it (lag
  0): the synchronous baseline of the same code.

Keys: the learner's update ``n`` uses ``split(key_{n-1}, 3) = (key_n, _, update_key_n)`` and
actor ``k``'s rollout ``n`` uses ``split(actor_key_{n-1}, 3) = (actor_key_n, rollout_key_n,
_)``, with actor 0's chain starting at the state's key and actor ``k``'s at ``fold_in(key,
k)``. With one actor in lockstep on a JAX env this is exactly the fused
:func:`~evorl.rl.on_policy.make_iteration` or
:func:`~evorl.rl.off_policy.make_iteration` (tested).

Faults: an exception in an actor ends the run within the learner's next poll (50 ms) with
that actor's traceback (:class:`ActorFailed`); a host env step that has not returned after
``runner.env_step_timeout_seconds`` ends it with :class:`EnvStepTimeout`. A host env that
raises or hangs as long while the learner's state is being evaluated ends it with
:class:`EvaluationFailed`. Each carries the learner's newest state, which the workflow
checkpoints before raising.
"""

from __future__ import annotations

import contextlib
import functools
import queue
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from evorl.config.runner import (  # noqa: F401  (the async checks are importable from here too)
    RunnerConfig, check_async_config, learner_device_count,
)
from evorl.engine.actor_processes import ProcessActorRollout
from evorl.engine.actors import (
    Actor, ActorFailed, ChunkLog, EnvStepTimeout, EvaluationFailed, HostEnvActorRollout, JaxEnvActorRollout,
    POLL_SECONDS, ParameterStore, Rollout, stop_actors, trajectory_like,
)
from evorl.engine.evaluator import HostEnvFault
from evorl.engine.execution import (
    DEVICE_AXIS, POPULATION_AXIS, PopulationStep, jit_rarely_run, map_agents_sequentially, strong_types, to_host,
)
from evorl.rl import metrics as M
from evorl.rl.rollout import EpisodeStats, rollout_with_policy_state
from evorl.rl.state_roles import fields_with_role

#: Python's GIL switch interval while actors run (its default is 5 ms).
GIL_SWITCH_SECONDS = 0.0002


@dataclass(frozen=True)
class ActorPolicy:
    """What the actors act with, declared by the workflow: ``policy`` is the rollouts' agent
    (``policy_step``, ``to_env_action``, ``initial_policy_state``, ``recurrent``) and
    ``acting_state(learner_state)`` what the learner publishes to it after each update."""

    policy: Any
    acting_state: Callable[[Any], Any]

    @classmethod
    def of_agent(cls, agent: Any) -> "ActorPolicy":
        """The agent's own policy (``compute_actions``) with the learner's ``agent_state``."""
        return cls(agent, lambda state: state.agent_state)


def learner_placement(multi_devices: bool, learner_devices: int | None) -> tuple[Mesh | None, list]:
    """The learner's mesh (None: one device) and the actors' devices: with several devices,
    the first ``learner_devices`` hold the learner and the others the actors (all of them
    when the learner has every device)."""
    devices = jax.devices() if multi_devices else jax.local_devices()[:1]
    n = learner_device_count(len(devices), learner_devices)
    mesh = Mesh(np.asarray(devices[:n]), (DEVICE_AXIS,)) if n > 1 else None
    return mesh, devices[n:] or devices[:n]


def _shardings(learner_mesh: Mesh | None) -> tuple:
    """The learner state's sharding (replicated) and the trajectories' (split along ``B``
    over the mesh); both the first local device without a mesh."""
    if learner_mesh is None:
        device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
        return device, device
    return NamedSharding(learner_mesh, P()), NamedSharding(learner_mesh, P(None, DEVICE_AXIS))


class ActorLearnerExecutor:
    """Runs the learner update against actor threads; the asynchronous counterpart of
    :class:`~evorl.engine.execution.Executor` with the same methods the workflow uses."""

    def __init__(self, learner_update: Callable, env: Any, agent: Any, training: Any, runner: RunnerConfig,
                 learner_mesh: Mesh | None, actor_devices: list,
                 final_metrics: Callable[[Any], dict] | None = None, acting: ActorPolicy | None = None,
                 num_agents: int = 1, freeze: Callable | None = None, population_step: PopulationStep | None = None):
        """``learner_update(state, trajectory [T, B], key) -> (state, metrics)``:
        :func:`~evorl.rl.on_policy.make_learner_update` (with the mesh's axis name when
        ``learner_mesh`` is set) or :func:`~evorl.rl.off_policy.make_learner_update`;
        ``env``: the training env with ``training.num_envs`` environments (each actor gets its
        share); ``acting``: what the actors act with (default: ``agent`` with the learner's
        ``agent_state``). Host environments are seeded from the state's key when the actors
        start (env ``i`` with ``seed + i``).

        ``num_agents > 1``: a population (every leaf of the learner's state leads with ``[N]``,
        the learner on one device). Each update is vmapped over the agents; each actor steps its
        share of every agent's environments (``[N, B_k]``) with one policy call for all of them,
        each agent with its own keys and seeds as alone. ``freeze(old, new, metrics, alive)``
        freezes a diverged agent, as :class:`~evorl.engine.execution.Executor`'s does;
        ``population_step`` (PBT) runs on the learner's state after every ``interval``-th
        update, its ``fitness: train`` episodes summed from the actors' rollouts."""
        self.env, self.agent, self.training, self.runner = env, agent, training, runner
        self.acting = acting if acting is not None else ActorPolicy.of_agent(agent)
        self.learner_mesh, self.actor_devices = learner_mesh, actor_devices
        self.num_actors = runner.num_actors
        self.envs_per_actor = training.num_envs // runner.num_actors
        self.final_metrics = final_metrics
        self.num_agents, self.population = num_agents, num_agents > 1
        self.freeze, self.population_step = freeze, population_step
        if population_step is not None and not self.population:
            raise ValueError("a population step needs a population (num_agents > 1)")
        if self.population and learner_mesh is not None:
            raise ValueError("a population's learner runs on one device (learner_mesh=None)")
        #: Which agents still train (``[N]``; ``[]`` for one agent), updated by every update.
        self.alive = np.ones(num_agents if self.population else (), bool)
        self.records: list[dict] = []
        agents = self._agents = functools.partial(jax.vmap, axis_name=POPULATION_AXIS) if self.population \
            else (lambda fn, **_: fn)
        self.compile_seconds: float | None = None
        self._initial_env_state = None
        self._init_jit = None
        self._actors: list[Actor] = []
        self._log = ChunkLog()
        self._host_metrics: dict[str, float] = {}
        self._state_sharding, self._batch_sharding = _shardings(learner_mesh)
        self._compile_step(learner_update, freeze, population_step)
        self._final = jax.jit(agents(final_metrics)) if final_metrics is not None else None
        self._population_step = None if population_step is None else jax.jit(population_step.step_population)
        self._split = jax.jit(agents(lambda k: tuple(jax.random.split(k, 3)[:2])))
        self._population_acting_state = jax.jit(agents(self.acting.acting_state))
        self._rollout_fn = None if env.on_host else self._jit_rollout()

    def _compile_step(self, learner_update: Callable, freeze: Callable | None,
                      population_step: PopulationStep | None) -> None:
        """The jitted learner step (``_step``): the update on the actors' trajectories joined
        along ``B``, each agent's freeze on divergence and PBT's fitness episodes, and the
        metrics summed over the chunk; on the learner's mesh when it has one."""
        agents, learner_mesh = self._agents, self.learner_mesh

        def update(state, trajectories):
            trajectory = jax.tree.map(lambda *xs: jnp.concatenate(xs, axis=1), *trajectories)  # [T, B]
            key, _, update_key = jax.random.split(state.key, 3)
            state, metrics = learner_update(state, trajectory, update_key)
            return state.replace(key=key), metrics

        def step(state, totals, alive, trajectories, episodes):
            new_state, metrics = agents(update)(state, trajectories)
            if freeze is not None:
                new_state, alive = agents(freeze)(state, new_state, metrics, alive)
            if population_step is not None and hasattr(new_state, "fitness_episodes"):  # PBT's fitness: train
                new_state = new_state.replace(fitness_episodes=jax.tree.map(
                    jnp.add, new_state.fitness_episodes, episodes))
            return new_state, agents(M.accumulate)(totals, metrics), alive

        shapes_of = agents(update)
        if learner_mesh is not None:
            batch = P(None, DEVICE_AXIS)
            shapes_of = jax.shard_map(update, mesh=learner_mesh, in_specs=(P(), batch), out_specs=(P(), P()))
            step = jax.shard_map(step, mesh=learner_mesh, in_specs=(P(), P(), P(), batch, P()),
                                 out_specs=(P(), P(), P()))
        self._update_shapes = shapes_of  # for the metrics' structure (jax.eval_shape)
        # No donation: the published agent state is read by actors while the next update runs.
        self._step = jax.jit(step)

    def _jit_rollout(self) -> Callable:
        """A JAX env's jitted rollout of one actor's share of the environments (each agent's)."""
        env_k = self.env.with_num_envs(self.envs_per_actor)
        length = self.training.rollout_length
        policy = self.acting.policy
        return jax.jit(self._agents(lambda acting_state, env_state, policy_state, key, env_ids:
                                    rollout_with_policy_state(env_k, policy, acting_state, env_state,
                                                              policy_state, key, length, env_ids),
                                    in_axes=(0, 0, 0, 0, None)))

    # --- state ----------------------------------------------------------------------------
    def init(self, init_fn: Callable, *args) -> Any:
        """The learner's initial state. For a JAX env ``init_fn`` also resets its
        environments: the actors start from them (actor ``k`` from slice ``k``)."""
        if self._init_jit is None:
            self._init_jit = jit_rarely_run(map_agents_sequentially(init_fn) if self.population else init_fn)
        state = self._init_jit(*args)
        self._initial_env_state = state.env_state
        # what the actors own (the state's ``actor`` fields: the environments, a recurrent policy's
        # state of each one's episode in progress) is not the learner's
        return self.place(state.replace(**dict.fromkeys(fields_with_role(state, "actor"))))

    def place(self, state: Any) -> Any:
        return jax.device_put(strong_types(state), self._state_sharding)

    def map_agents(self, fn: Callable) -> Callable:
        return jax.jit(self._agents(fn))

    def _per_agent(self, tree: Any) -> Any:
        """``tree`` (one agent's) repeated for every agent of a population: leaves ``[N, ...]``."""
        return jax.tree.map(lambda x: jnp.stack([x] * self.num_agents), tree) if self.population else tree

    def _acting_state(self, state: Any) -> Any:
        """What the actors act with (every agent's, for a population: one compiled call)."""
        return self._population_acting_state(state) if self.population else self.acting.acting_state(state)

    # --- actors ---------------------------------------------------------------------------
    def _actor_rollout(self, index: int, state: Any):
        b = self.envs_per_actor
        env_ids = np.arange(index * b, (index + 1) * b)
        device = self.actor_devices[index % len(self.actor_devices)]
        if self._rollout_fn is None:  # each agent's envs seeded from its own key, as alone
            seeds = []
            for key in (state.key if self.population else [state.key]):
                seed_key = jax.random.fold_in(key, 0x5EED)
                seeds.append(int(jax.random.randint(seed_key, (), 0, 2**31 - 1 - self.training.num_envs)) + index * b)
            args = ([self.env.with_num_envs(b) for _ in seeds], self.acting.policy, self.training.rollout_length,
                    env_ids, seeds)
            if self.runner.actor_processes:
                return ProcessActorRollout(*args, name=f"evorl-actor-{index}")
            return HostEnvActorRollout(*args)
        env_state = self._initial_env_state
        if env_state is None or int(np.max(to_host(state.iteration))) > 0:  # resumed: fresh episodes
            reset = self._agents(lambda key: self.env.reset(jax.random.fold_in(key, 0xE5E7)))
            env_state = jax.jit(reset)(state.key)
        env_axis = 1 if self.population else 0  # [(N,) B, ...]
        env_state = jax.tree.map(lambda x: lax.slice_in_dim(x, index * b, (index + 1) * b, axis=env_axis), env_state)
        return JaxEnvActorRollout(self._rollout_fn, env_state, self._per_agent(self.acting.policy.initial_policy_state(b)),
                                  env_ids, device)

    @contextlib.contextmanager
    def running(self, state: Any):
        """Actor threads acting with ``state``'s parameters while the block runs; stopped and
        joined when it ends (also on an error)."""
        self._params = ParameterStore()
        self._queue: queue.Queue = queue.Queue(maxsize=self.runner.queue_size)
        self._stop, self._failed = threading.Event(), threading.Event()
        self._version = int(np.max(to_host(state.iteration)))
        self._params.publish(self._acting_state(state), self._version)
        self._actors = []
        # Actors hold the GIL while they step host envs in Python; hand it over more often
        # than every 5 ms so that the learner (and the other actors) wait less for it.
        switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(GIL_SWITCH_SECONDS)
        try:
            for k in range(self.num_actors):
                key = state.key if k == 0 else self._agents(jax.random.fold_in, in_axes=(0, None))(state.key, k)
                actor = Actor(k, self._actor_rollout(k, state), key, self.actor_devices[k % len(self.actor_devices)],
                              self._params, self._queue, self.runner.lockstep, self._stop, self._failed, self._split)
                self._actors.append(actor)
                actor.start()
            yield self
        finally:
            sys.setswitchinterval(switch_interval)
            alive = self.stop_actors()
            if alive:
                print(f"evorl: {', '.join(alive)} still inside an environment step after being stopped; daemon "
                      f"thread(s), they end with the process.", file=sys.stderr, flush=True)

    def stop_actors(self, timeout: float = 10.0) -> list[str]:
        """Stops and joins the actors (:func:`~evorl.engine.actors.stop_actors`)."""
        return stop_actors(self._actors, self._stop, self.runner.env_step_timeout_seconds, timeout)

    def _take(self, state: Any) -> Rollout:
        """The next rollout; every actor is checked first (a failed or stuck actor ends the
        run even while the others keep the queue full)."""
        start = time.monotonic()
        while True:
            self._check_actors(state)
            try:
                item = self._queue.get(timeout=POLL_SECONDS)
            except queue.Empty:
                continue
            self._log.learner_wait += time.monotonic() - start
            return item

    def _check_actors(self, state: Any) -> None:
        """Raises :class:`ActorFailed` if an actor raised, :class:`EnvStepTimeout` if one is
        stuck in an env step (both carrying the learner's ``state``)."""
        error = None
        if self._failed.is_set():
            failed = next(a for a in self._actors if a.error is not None)
            error = ActorFailed(f"actor {failed.index} ({failed.name}) failed; its traceback:\n{failed.error}")
        now = time.monotonic()
        for actor in self._actors:
            started = actor.act.step_started
            if error is None and started is not None and now - started > self.runner.env_step_timeout_seconds:
                error = EnvStepTimeout(
                    f"actor {actor.index}'s environment step has not returned for {now - started:.0f} s "
                    f"(runner.env_step_timeout_seconds={self.runner.env_step_timeout_seconds:g}): a stuck "
                    f"environment. Raise the timeout if its steps are legitimately that slow.")
        if error is not None:
            error.state = state
            raise error

    # --- chunks of updates ----------------------------------------------------------------
    def run(self, state: Any, num_iterations: int, stop: Callable[[], bool] = lambda: False,
            progress: Callable[[int], None] | None = None):
        """Up to ``num_iterations`` learner updates (fewer once ``stop()`` is true; the
        returned state's ``iteration`` says how many). Returns the state and the chunk's
        metrics on the host, as :meth:`Executor.run` does (loss metrics per update, episode
        sums); the actors' figures are in :meth:`host_metrics`. ``progress(k)`` is called
        after the chunk's ``k``-th update has finished (the progress bar)."""
        self._log = log = ChunkLog()
        chunk_start = time.monotonic()
        actor_counters = [(a.busy_seconds, a.wait_seconds, a.rollouts_done) for a in self._actors]
        totals, done, alive = None, 0, self.alive
        while done < num_iterations and not stop():
            log.queue_sizes.append(self._queue.qsize())
            items = [self._take(state) for _ in range(self.num_actors)]
            if self.runner.learner_delay_seconds:
                time.sleep(self.runner.learner_delay_seconds)
            busy = time.monotonic()
            trajectories = tuple(jax.device_put(item.trajectory, self._batch_sharding) for item in items)
            episodes = jax.tree.map(lambda *xs: np.float32(sum(xs)),  # (env_faults: checked on the host, below)
                                    *(item.episodes.replace(env_faults=None) for item in items))
            if totals is None:
                totals = self._zero_totals(state, trajectories)
            state, totals, alive = self._step(state, totals, alive, trajectories, episodes)
            log.lags += [self._version - item.version for item in items]
            log.episodes += [item.episodes for item in items]
            self._version += 1
            if self._population_step is not None and self._version % self.population_step.interval == 0:
                fitness = self._host_fitness(state) if self.population_step.fitness_on_host else None
                state, alive, record = self._population_step(state, alive, fitness=fitness)
                self.records.append({"iteration": self._version, **to_host(record)})
            self._params.publish(self._acting_state(state), self._version)
            jax.block_until_ready(totals)
            log.learner_busy += time.monotonic() - busy
            done += 1
            if progress is not None:
                progress(done)
        self.alive = np.asarray(to_host(alive)) > 0
        if done == 0:
            self._host_metrics = {}
            return state, {}
        if self._final is not None:
            totals = {**totals, **M.declared(self._final(state))}
        metrics = M.per_iteration(to_host(totals), done)
        for field in ("return_sum", "length_sum", "count"):  # summed over the rollouts, as the fused runner sums
            metrics[f"episode_{field}"] = np.asarray(sum(getattr(e, field) for e in log.episodes), np.float64)
        if log.episodes[0].env_faults is not None:  # a JAX env's rollouts count them (evorl.rl.rollout.EpisodeStats)
            metrics["env_faults"] = np.asarray(sum(e.env_faults for e in log.episodes), np.float64)
        self._host_metrics = log.actor_metrics(self._actors, actor_counters, time.monotonic() - chunk_start, done,
                                               self.runner.queue_size,
                                               self.num_agents * self.training.env_steps_per_iteration)
        return state, metrics

    def _host_fitness(self, state: Any) -> np.ndarray:
        """PBT's ``fitness: eval`` played by a host env's evaluator; a host env that raises or
        hangs raises :class:`EvaluationFailed` carrying ``state``."""
        try:
            return self.population_step.host_fitness(state)
        except HostEnvFault as e:
            error = EvaluationFailed(f"PBT's fitness evaluation: {e}")
            error.state = state
            raise error from e

    def _episodes_like(self) -> EpisodeStats:
        """Zero episode sums of one update's rollouts (``[N]`` for a population)."""
        return EpisodeStats(*[np.zeros(self.num_agents if self.population else (), np.float32)] * 3)

    def _zero_totals(self, state: Any, trajectories: tuple) -> dict:
        metrics = jax.eval_shape(self._update_shapes, state, trajectories)[1]
        return jax.device_put(M.zeros_like_totals(metrics), self._state_sharding)

    def abstract_trajectories(self, state: Any) -> tuple:
        """The shapes and dtypes of one update's rollouts (one per actor), for compiling."""
        t, b = self.training.rollout_length, self.envs_per_actor
        acting_state = self._acting_state(state)
        if self._rollout_fn is not None:
            env_state = jax.eval_shape(self._agents(self.env.with_num_envs(b).reset), state.key)
            one = jax.eval_shape(self._rollout_fn, acting_state, env_state,
                                 self._per_agent(self.acting.policy.initial_policy_state(b)), state.key,
                                 jnp.arange(b))[2]
        else:
            space = self.env.obs_space
            obs = jax.ShapeDtypeStruct((t, b) + tuple(space.shape), space.dtype)
            one = jax.eval_shape(self._agents(lambda acting_state: trajectory_like(self.acting.policy, acting_state,
                                                                                   obs)), acting_state)
        return tuple(one for _ in range(self.num_actors))

    def compile(self, state: Any) -> float:
        """Compiles the learner update ahead of time; returns (and keeps) the seconds it took."""
        start = time.perf_counter()
        trajectories = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=self._batch_sharding),
                                    self.abstract_trajectories(state))
        state = self.place(state)
        totals = self._zero_totals(state, trajectories)
        self._step = self._step.lower(state, totals, self.alive, trajectories, self._episodes_like()).compile()
        self.compile_seconds = time.perf_counter() - start
        return self.compile_seconds

    def take_records(self) -> list[dict]:
        """The records of the population steps since the last call, oldest first (as
        :meth:`Executor.take_records`)."""
        records, self.records = self.records, []
        return records

    def host_metrics(self) -> dict[str, float]:
        """The last chunk's actor-side figures: policy lag (mean, max, histogram), queue fill,
        actor and learner env steps/s, the fraction of time each side waited."""
        return dict(self._host_metrics)
