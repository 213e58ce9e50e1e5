"""The execution layer: runs any pure training step over a population and a device mesh.

An algorithm provides ``step(state) -> (state, metrics)`` for one agent on one device's
share of the data (see :mod:`evorl.rl.on_policy`); :class:`Executor` owns how it runs:

* **population**: with ``num_agents > 1`` every leaf of the state leads with ``[N]`` and
  the step is ``vmap``-ed over it;
* **placement** over a device mesh (``jax.shard_map``), in one of two layouts:
  ``"envs"`` splits each agent's environments across the devices (the state's
  ``env_fields``, along their environments' axis: e.g. an off-policy replay buffer's columns;
  parameters replicated; the step reduces gradients and metrics over the
  device axis :data:`DEVICE_AXIS`), ``"population"`` puts whole agents on different
  devices (``N / D`` agents each, no communication between devices);
* **chunks**: ``run(state, n)`` runs ``n`` iterations in compiled calls of a
  ``lax.fori_loop``, one XLA program compiled once for any length, with the state's buffers
  donated. Each call is sized from the measured time per iteration to last about
  :data:`CALL_SECONDS`, and ``run`` checks ``stop()`` between calls: a stop request (SIGTERM)
  is answered within seconds whatever ``training.eval_interval`` is. The running totals of
  the metrics travel from call to call, so the state and the metrics of ``n`` iterations are
  bit-identical however they are cut;
* **ahead-of-time compilation** with its duration (``compile_seconds``);
* **metrics**: accumulated over the chunk as each declares (:mod:`evorl.rl.metrics`) and
  moved to the host once per chunk;
* **diverged agents** (with ``freeze``, for a population): an agent whose iteration ends
  non-finite keeps its last finite state and stops updating; ``alive [N]`` says which
  agents still train, carried from chunk to chunk on the host;
* **a population step** (with ``population_step``, e.g. PBT's exploit/explore): a function
  of the whole population run every ``interval`` iterations at the end of a compiled call
  (calls are cut there), whose records the host collects (:meth:`Executor.take_records`);
* **a warm-up** (with ``warmup``, :class:`Warmup`): the leading iterations that cannot learn
  yet (an off-policy run before its buffer holds ``learning_starts`` transitions) run a second
  program, the step without its learning; calls are cut where it ends.

:class:`Runner` is the protocol the host loop (:class:`~evorl.engine.host_loop.ChunkedWorkflow`)
drives; :class:`Executor` and the actor-learner
(:class:`~evorl.engine.actor_learner.ActorLearnerExecutor`) implement it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from evorl.engine.processes import host_copy
from evorl.rl import metrics as M

DEVICE_AXIS = "devices"
#: The name of the population's ``vmap`` axis: a step may branch once for all agents on it
#: (:func:`evorl.rl.collectives.population_cond`).
POPULATION_AXIS = "agents"
#: How a mesh holds the training state: environments split, or agents split.
LAYOUTS = ("envs", "population")
#: How long one compiled call of a chunk should run (seconds): the longest a stop request
#: waits for the training state (then comes the partial chunk's evaluation and checkpoint).
CALL_SECONDS = 5.0
#: A compiled call runs at most this many times the previous call's iterations: the speed
#: measured on cheap iterations (an off-policy run before its learning starts) would otherwise
#: size a call of costly ones many times :data:`CALL_SECONDS` long.
CALL_GROWTH = 4


def jit_rarely_run(fn, **jit_kwargs):
    """``jax.jit`` with XLA's backend optimisations off, for programs that run once (state
    initialisation), where compile time dominates: this roughly halves their compile time on
    the CPU. Not for evaluation: unoptimised physics runs ~30x slower (a brax hopper
    evaluation, 8 episodes of ~1000 steps on mjx, took 91 s instead of 2.7 s)."""
    return jax.jit(fn, compiler_options={"xla_backend_optimization_level": 0}, **jit_kwargs)


def to_host(tree: Any) -> Any:
    """NumPy copies of ``tree``'s arrays (arrays split across processes gathered first)."""
    return jax.tree.map(host_copy, tree)


def map_agents_sequentially(fn: Callable) -> Callable:
    """``fn`` over the leading agent axis of its arguments with ``lax.map``, not ``vmap``.

    Initialising a population under ``vmap`` batches the orthogonal initialisers' QR
    factorisations. jaxlib 0.10's CPU QR kernel then splits the batch over XLA's intra-op
    thread pool and waits for the parts. When every pool thread is running such a kernel
    (as many concurrent QRs as the pool has threads: two where it was seen, on a 2-core CPU),
    nothing is left to run the parts, and the program hangs forever at 0% CPU. Seen in about
    half of the runs that initialised a second population of 8 agents in one process. One
    agent at a time keeps each QR unbatched, and gives each agent exactly the initialisation
    it gets alone. (Inside an agent, e.g. its twin critics under ``vmap``, the orthogonal
    initialiser itself factorises one matrix at a time: :mod:`evorl.networks.initializers`.)"""

    def mapped(*args):
        return jax.lax.map(lambda xs: fn(*xs), args)

    return mapped


def strong_types(tree: Any) -> Any:
    """``tree`` with its weakly typed arrays made strong (same dtype, same values). An env's
    state can hold a weakly typed counter (gymnax's ``time``, made from a Python ``0``), which a
    restored checkpoint (NumPy arrays) holds strongly typed: the compiled programs, and the keys
    of the persistent compilation cache, would differ between a fresh run and its resume."""
    return jax.tree.map(lambda x: x.astype(x.dtype) if getattr(x, "weak_type", False) else x, tree)


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where the training state lives: ``num_agents`` (1: no population axis), and a mesh
    over all devices (None: the first local device) holding it in ``layout``."""

    num_agents: int = 1
    mesh: Mesh | None = None
    layout: str = "envs"

    @classmethod
    def create(cls, num_agents: int, multi_devices: bool, layout: str = "envs") -> "Placement":
        mesh = Mesh(np.asarray(jax.devices()), (DEVICE_AXIS,)) if multi_devices else None
        return cls(num_agents, mesh, layout)

    @property
    def population(self) -> bool:
        return self.num_agents > 1

    @property
    def step_axis_name(self) -> str | None:
        """The device axis the step reduces over: set only when environments are split."""
        return DEVICE_AXIS if self.mesh is not None and self.layout == "envs" else None

    @property
    def population_axis_name(self) -> str | None:
        """The population's ``vmap`` axis a step may branch on once for all agents
        (:func:`evorl.rl.collectives.population_cond`): a population on one device. On a mesh
        (inside ``shard_map``) a collective over the ``vmap`` axis fails JAX's checks, so there
        each agent's branch stays a select (None), as a lone agent's needs no axis either."""
        return POPULATION_AXIS if self.population and self.mesh is None else None


class Runner(Protocol):
    """What the host loop drives: the fused :class:`Executor` and the actor-learner."""

    #: Seconds the ahead-of-time compilation took (None before :meth:`compile`).
    compile_seconds: float | None

    def init(self, init_fn: Callable, *args) -> Any:
        """The initial training state, computed where it lives."""

    def compile(self, state: Any) -> float:
        """Compiles the training program ahead of time; returns the seconds it took."""

    def running(self, state: Any) -> contextlib.AbstractContextManager:
        """The context training runs in (the actor-learner's actor threads)."""

    def run(self, state: Any, num_iterations: int, stop: Callable[[], bool] = lambda: False,
            progress: Callable[[int], None] | None = None) -> tuple[Any, dict[str, np.ndarray]]:
        """Up to ``num_iterations`` iterations (fewer once ``stop()`` is true); the state and
        the metrics per iteration (per agent for a population) on the host."""

    def map_agents(self, fn: Callable) -> Callable:
        """``fn`` of one agent compiled for the population and placement."""

    def host_metrics(self) -> dict[str, float]:
        """Figures measured on the host during the last :meth:`run`."""

    def take_records(self) -> list[dict]:
        """The population steps' records since the last call, oldest first."""


def relink_forwarded(step: Callable, state: Any, new_state: Any) -> Any:
    """``new_state``, the first output of ``step(state)`` (``step`` jitted), with every leaf
    the step passes through unchanged replaced by ``state``'s own traced value, so that what
    follows can tell by identity (``new is old``) that there is nothing to restore
    (:func:`evorl.engine.health.freeze_diverged`). Which leaves are passed through is read from
    the step's jaxpr, the trace its call made (``jit``'s cache: the step is not traced again):
    output leaf ``i`` of the state is input leaf ``i``."""
    jaxpr = step.trace(state).jaxpr.jaxpr
    old_leaves, treedef = jax.tree.flatten(state)
    new_leaves = treedef.flatten_up_to(new_state)
    leaves = [old if jaxpr.outvars[i] is jaxpr.invars[i] else new
              for i, (old, new) in enumerate(zip(old_leaves, new_leaves))]
    return treedef.unflatten(leaves)


@dataclasses.dataclass(frozen=True)
class Warmup:
    """The iterations before the learning starts, as a program of their own: ``step`` is the
    iteration as it is then (same state and metrics as the full step's, without the learning
    branch it would skip), run for the first ``iterations(state)`` iterations after ``state``
    (read on the host when a run starts; never more than the full step would spend skipping:
    the iterations after them run the full step, which decides for itself)."""

    step: Callable
    iterations: Callable[[Any], int]


class PopulationStep(Protocol):
    """A step on the whole population, every ``interval`` iterations (PBT's exploit/explore:
    :class:`evorl.engine.pbt.PBT`)."""

    interval: int

    def step_population(self, state: Any, alive: jax.Array, axis_name: str | None = None
                        ) -> tuple[Any, jax.Array, dict]:
        """The population ``state`` (leaves ``[n, ...]``, this device's agents; ``axis_name``
        the device axis they are split over, or None) and its ``alive [n]`` after the step,
        and the step's record (arrays ``[n, ...]``)."""


class Executor:
    """Runs ``step`` (one agent, one iteration) for a population on a placement, in chunks."""

    def __init__(self, step: Callable, placement: Placement, env_fields: tuple[str, ...] | Mapping[str, Any] = (),
                 final_metrics: Callable[[Any], dict] | None = None, freeze: Callable | None = None,
                 population_step: PopulationStep | None = None, warmup: Warmup | None = None):
        """``env_fields``: the state's fields that ``layout="envs"`` splits across the devices,
        by name (the leading axis of every leaf is the environments') or as ``{name: axes}``,
        ``axes`` a prefix tree of the field giving each part's environments' axis (None:
        the part is the same on every device), e.g. ``ReplayBuffer(data=1, position=None,
        size=None)``. ``final_metrics(state)``: metrics of the state a chunk returns (e.g. its health),
        computed once at the end of each compiled call inside the same program.
        ``freeze(old, new, metrics, alive) -> (state, alive)``: applied after every iteration
        of one agent (e.g. :func:`evorl.engine.health.freeze_diverged`); None: no agent is
        ever frozen. ``population_step``: run when the iteration count reaches a multiple of
        its ``interval`` (a population only). ``warmup``: the leading iterations that run
        ``warmup.step`` instead of ``step`` (None: all run ``step``)."""
        if population_step is not None and not placement.population:
            raise ValueError("a population step needs a population (num_agents > 1)")
        self.population_step = population_step
        self.records: list[dict] = []
        #: The population's iteration (kept by ``run`` when there is a population step).
        self._iteration = 0
        self.step = step
        #: The step under ``jax.jit``: its trace is made once and shared by every use below.
        self._jit_step = jax.jit(step)
        self.warmup = warmup
        self.final_metrics = final_metrics
        self.freeze = freeze
        #: Which agents still train (``[N]``; ``[]`` for one agent), updated by every chunk.
        self.alive = np.ones(placement.num_agents if placement.population else (), bool)
        self.placement = placement
        self.env_fields = dict(env_fields) if isinstance(env_fields, Mapping) else dict.fromkeys(env_fields, 0)
        self.compile_seconds: float | None = None
        #: Per program ("step", "warmup"): the seconds its last compiled call took per
        #: iteration and that call's length (absent before its first call).
        self._timings: dict[str, tuple[float, int]] = {}
        self._totals_shapes = None
        #: The compiled calls of each program: the full step's, and the warm-up's if any.
        self._chunks = {"step": self._build_chunk(self._jit_step)}
        if warmup is not None:
            self._chunks["warmup"] = self._build_chunk(jax.jit(warmup.step))
        self._init_jit = None

    # --- placement --------------------------------------------------------------------
    def _field_spec(self, name: str) -> Any:
        """The partition spec of field ``name`` (a prefix tree of the field for a field whose
        parts split differently)."""
        pl = self.placement
        if pl.layout == "population":
            return P(DEVICE_AXIS)
        if name not in self.env_fields:
            return P()

        def spec(axis):  # the environments' axis, after the population axis if any
            return P() if axis is None else P(*([None] * (axis + pl.population)), DEVICE_AXIS)

        return jax.tree.map(spec, self.env_fields[name], is_leaf=lambda axis: axis is None)

    def specs(self, state: Any) -> Any:
        """Partition specs, one per field of the state dataclass ``state`` (a prefix tree)."""
        return type(state)(**{f.name: self._field_spec(f.name) for f in dataclasses.fields(state)})

    def shardings(self, state: Any) -> Any:
        """Per-leaf shardings of ``state`` (concrete or abstract)."""
        if self.placement.mesh is None:
            device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
            return jax.tree.map(lambda _: device, state)
        mesh = self.placement.mesh

        def field_shardings(spec, value):  # ``spec`` a prefix tree of ``value``
            return jax.tree.map(lambda s, part: jax.tree.map(lambda _: NamedSharding(mesh, s), part), spec, value,
                                is_leaf=lambda x: isinstance(x, P))

        return type(state)(**{f.name: field_shardings(self._field_spec(f.name), getattr(state, f.name))
                              for f in dataclasses.fields(state)})

    def place(self, state: Any) -> Any:
        """``state`` on the devices the compiled programs expect, with the types they expect
        (:func:`strong_types`); a no-op when it already is."""
        return jax.device_put(strong_types(state), self.shardings(state))

    def init(self, init_fn: Callable, *args) -> Any:
        """``init_fn(*args)`` (mapped over the leading agent axis of ``args`` for a
        population, one agent after another) computed where the state lives: each device
        computes only its part."""
        if self._init_jit is None:
            fn = map_agents_sequentially(init_fn) if self.placement.population else init_fn
            shardings = self.shardings(jax.eval_shape(fn, *args))
            self._init_jit = jit_rarely_run(fn, out_shardings=shardings)
        return strong_types(self._init_jit(*args))

    # --- chunks of iterations ---------------------------------------------------------
    def _iterations(self, step: Callable, state: Any, num_iterations: jax.Array, alive: jax.Array, totals: dict):
        """One agent's ``num_iterations`` (traced) iterations of ``step`` (jitted); ``totals``
        (the metrics' running totals, see :func:`evorl.rl.metrics.accumulate`) carried on from the
        previous call; with ``freeze``, a step that leaves the agent non-finite is undone and
        the agent frozen. Returns the state, the totals and ``alive``.

        The step is traced once: under ``jax.jit`` the trace that ``eval_shape`` makes for the
        totals' shapes (:meth:`zero_totals`) is the one the loop body reuses (XLA inlines the
        call, so the program is the same).
        """

        def body(_, carry):
            state, totals, alive = carry
            new_state, metrics = step(state)
            if self.freeze is not None:
                new_state, alive = self.freeze(state, relink_forwarded(step, state, new_state), metrics, alive)
            return new_state, M.accumulate(totals, metrics), alive

        return lax.fori_loop(0, num_iterations, body, (state, totals, alive))

    def _program(self, step: Callable, state: Any, num_iterations: jax.Array, alive: jax.Array, totals: dict):
        """One compiled call (on one device's share): every agent's iterations of ``step``, then the
        population step if one is due, then the final metrics. Returns the state, the totals,
        ``alive``, the final metrics and the population step's record (zeros when none ran)."""
        pl = self.placement
        iterations = functools.partial(self._iterations, step)
        if pl.population:
            iterations = jax.vmap(iterations, in_axes=(0, None, 0, 0), axis_name=POPULATION_AXIS)
        state, totals, alive = iterations(state, num_iterations, alive, totals)
        record = {}
        if self.population_step is not None:
            axis_name = DEVICE_AXIS if pl.mesh is not None and pl.layout == "population" else None
            step = functools.partial(self.population_step.step_population, axis_name=axis_name)
            shapes = jax.eval_shape(step, state, alive)[2]
            no_step = lambda s, a: (s, a, jax.tree.map(lambda r: jnp.zeros(r.shape, r.dtype), shapes))  # noqa: E731
            due = state.iteration[0] % self.population_step.interval == 0
            state, alive, record = lax.cond(due, step, no_step, state, alive)
        final = {}
        if self.final_metrics is not None:
            final = M.declared((jax.vmap(self.final_metrics) if pl.population else self.final_metrics)(state))
        return state, totals, alive, final, record

    def zero_totals(self, state: Any) -> dict:
        """The metrics' running totals before the first iteration (``[N]`` per agent), as
        NumPy arrays."""
        if self._totals_shapes is None:  # traced once: the step's metrics keep their shapes
            pl = self.placement

            def metrics(state):
                return (jax.vmap(self._jit_step, axis_name=POPULATION_AXIS) if pl.population else self._jit_step)(state)[1]

            if pl.mesh is not None:  # the step's collectives need the device axis
                per_agent = P(DEVICE_AXIS) if pl.layout == "population" else P()
                metrics = jax.shard_map(metrics, mesh=pl.mesh, in_specs=(self.specs(state),), out_specs=per_agent,
                                        check_vma=False)
            self._totals_shapes = jax.eval_shape(metrics, state)
        return to_host(M.zeros_like_totals(self._totals_shapes))

    @property
    def _chunk(self):
        """The full step's compiled call."""
        return self._chunks["step"]

    def _build_chunk(self, step: Callable):
        """The compiled call of ``step`` (jitted): :meth:`_program` on the placement."""
        pl = self.placement
        program = functools.partial(self._program, step)
        if pl.mesh is None:
            return jax.jit(program, donate_argnums=0)
        split_agents = pl.layout == "population"

        def sharded(state, num_iterations, alive, totals):
            specs = self.specs(state)
            # Agents split: every output is per device, so there is no replication to check.
            per_agent = P(DEVICE_AXIS) if split_agents else P()
            return jax.shard_map(program, mesh=pl.mesh, in_specs=(specs, P(), per_agent, per_agent),
                                 out_specs=(specs, per_agent, per_agent, per_agent, per_agent),
                                 check_vma=not split_agents)(state, num_iterations, alive, totals)

        return jax.jit(sharded, donate_argnums=0)

    def run(self, state: Any, num_iterations: int, stop: Callable[[], bool] = lambda: False,
            progress: Callable[[int], None] | None = None) -> tuple[Any, dict[str, np.ndarray]]:
        """Runs ``num_iterations`` iterations (fewer once ``stop()`` is true: it is checked
        between compiled calls, see :data:`CALL_SECONDS`). Returns the new state and the
        metrics of the iterations run, on the host (per iteration, see
        :func:`evorl.rl.metrics.per_iteration`; ``[N]`` per agent for a population).
        ``progress(k)`` is called once the first ``k`` iterations are done. With a
        :class:`Warmup`, its iterations come first, in calls of their own.

        The input state's buffers are donated to the calls (no copy of the env states and
        parameters): keep using the returned state, not the one passed in.
        """
        state = self.place(state)
        if self.population_step is not None:
            self._iteration = int(np.max(to_host(state.iteration)))
        warmup_left = 0 if self.warmup is None else self.warmup.iterations(state)
        totals, final, done = self.zero_totals(state), {}, 0
        while done < num_iterations and not stop():
            program, left = ("warmup", min(num_iterations - done, warmup_left)) if warmup_left > 0 else \
                ("step", num_iterations - done)
            n = self._call_length(program, left)
            start = time.perf_counter()
            state, totals, final = self._call(program, state, n, totals)  # waits for the call (self.alive is read)
            self._timings[program] = ((time.perf_counter() - start) / n, n)
            warmup_left = max(warmup_left - n, 0)
            done += n
            if progress is not None:
                progress(done)
        metrics = {**M.per_iteration(totals, max(done, 1)), **M.per_iteration(to_host(final), 1)}
        return state, metrics

    def _call_length(self, program: str, left: int) -> int:
        """Iterations in the next compiled call of ``program``: about :data:`CALL_SECONDS` at
        its last measured speed (one for its very first call), at most ``left`` and
        :data:`CALL_GROWTH` times its last call's, and never past the next population step."""
        n = 1
        if program in self._timings:
            seconds, last_length = self._timings[program]
            n = int(min(left, max(1, CALL_SECONDS // max(seconds, 1e-9)), CALL_GROWTH * last_length))
        if self.population_step is not None:
            interval = self.population_step.interval
            n = min(n, interval - self._iteration % interval)
        return n

    def _call(self, program: str, state: Any, n: int, totals: dict) -> tuple[Any, dict, dict]:
        """One compiled call of ``n`` iterations of ``program`` ("step" or "warmup"): the state,
        the running totals and the final metrics; ``self.alive`` is updated and a population
        step's record kept (on the host)."""
        state, totals, alive, final, record = self._chunks[program](state, np.int32(n), self.alive, totals)
        # the totals go back as NumPy arrays, like ``alive``: every call sees arguments of one kind
        self.alive = np.asarray(host_copy(alive)) > 0
        if self.population_step is not None:
            self._iteration += n
            if self._iteration % self.population_step.interval == 0:
                self.records.append({"iteration": self._iteration, **to_host(record)})
        return state, to_host(totals), final

    def take_records(self) -> list[dict]:
        """The records of the population steps since the last call, oldest first (NumPy
        arrays; PBT's: ``source [N]``, ``fitness [N]``, ``before [N, H]``, ``after [N, H]``)."""
        records, self.records = self.records, []
        return records

    def running(self, state: Any):
        """Nothing runs outside the chunk programs (the actor-learner starts its actors here)."""
        return contextlib.nullcontext(self)

    def host_metrics(self) -> dict[str, float]:
        """Figures measured on the host during the last chunk: none here."""
        return {}

    def compile(self, state: Any) -> float:
        """Compiles the chunk ahead of time, and the warm-up's when ``state`` has warm-up
        iterations ahead; returns (and keeps) the seconds it took."""
        start = time.perf_counter()
        state = self.place(state)
        args = (state, np.int32(1), self.alive, self.zero_totals(state))
        warming_up = self.warmup is not None and self.warmup.iterations(state) > 0
        for program in ("step", "warmup") if warming_up else ("step",):
            self._chunks[program] = self._chunks[program].lower(*args).compile()
        self.compile_seconds = time.perf_counter() - start
        return self.compile_seconds

    # --- other per-agent programs -----------------------------------------------------
    def map_agents(self, fn: Callable) -> Callable:
        """``fn`` (of one agent's arrays) compiled for the population and placement: vmapped
        over the agent axis of every argument, and with ``layout="population"`` each device
        runs its own agents. Outputs lead with ``[N]`` for a population."""
        pl = self.placement
        if pl.population:
            fn = jax.vmap(fn)
        if pl.mesh is not None and pl.layout == "population":
            fn = jax.shard_map(fn, mesh=pl.mesh, in_specs=P(DEVICE_AXIS), out_specs=P(DEVICE_AXIS), check_vma=False)
        return jax.jit(fn)
