"""The execution layer: runs any pure training step over a population and a device mesh.

An algorithm provides ``step(state) -> (state, metrics)`` for one agent on one device's
share of the data (see :mod:`evorl.workflows.on_policy`); :class:`Executor` owns how it runs:

* **population**: with ``num_agents > 1`` every leaf of the state leads with ``[N]`` and
  the step is ``vmap``-ed over it;
* **placement** over a device mesh (``jax.shard_map``), in one of two layouts:
  ``"envs"`` splits each agent's environments across the devices (the state's
  ``env_fields``; parameters replicated; the step reduces gradients and metrics over the
  device axis :data:`DEVICE_AXIS`), ``"population"`` puts whole agents on different
  devices (``N / D`` agents each, no communication between devices);
* **chunks**: ``run(state, n)`` runs ``n`` iterations inside one ``lax.fori_loop``, one
  XLA program compiled once for any ``n``, with the state's buffers donated;
* **ahead-of-time compilation** with its duration (``compile_seconds``);
* **metrics**: accumulated over the chunk as each declares (:mod:`evorl.metrics`) and
  moved to the host once per chunk;
* **diverged agents** (with ``freeze``, for a population): an agent whose iteration ends
  non-finite keeps its last finite state and stops updating; ``alive [N]`` says which
  agents still train, carried from chunk to chunk on the host.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from evorl import metrics as M
from evorl.distributed import host_copy

DEVICE_AXIS = "devices"
#: The chunk's metric that carries ``alive`` back to the host (popped by ``run``).
ALIVE = "alive"
#: How a mesh holds the training state: environments split, or agents split.
LAYOUTS = ("envs", "population")


def jit_rarely_run(fn, **jit_kwargs):
    """``jax.jit`` with XLA's backend optimisations off, for programs that run once (state
    initialisation), where compile time dominates: this roughly halves their compile time on
    the CPU. Not for evaluation: unoptimised physics runs ~30x slower (a brax hopper
    evaluation, 8 episodes of ~1000 steps on mjx, took 91 s instead of 2.7 s)."""
    return jax.jit(fn, compiler_options={"xla_backend_optimization_level": 0}, **jit_kwargs)


def to_host(tree: Any) -> Any:
    """NumPy copies of ``tree``'s arrays (arrays split across processes gathered first)."""
    return jax.tree.map(host_copy, tree)


def _map_agents_sequentially(fn: Callable) -> Callable:
    """``fn`` over the leading agent axis of its arguments with ``lax.map``, not ``vmap``.

    Initialising a population under ``vmap`` batches the orthogonal initialisers' QR
    factorisations. jaxlib 0.10's CPU QR kernel then splits the batch over XLA's intra-op
    thread pool and waits for the parts. When every pool thread is running such a kernel
    (two concurrent QRs on a 2-core machine), nothing is left to run the parts, and the
    program hangs forever at 0% CPU. Seen in about half of the runs that initialised a
    second population of 8 agents in one process. One agent at a time keeps each QR
    unbatched, and gives each agent exactly the initialisation it gets alone."""

    def mapped(*args):
        return jax.lax.map(lambda xs: fn(*xs), args)

    return mapped


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


class Executor:
    """Runs ``step`` (one agent, one iteration) for a population on a placement, in chunks."""

    def __init__(self, step: Callable, placement: Placement, env_fields: tuple[str, ...] = (),
                 final_metrics: Callable[[Any], dict] | None = None, freeze: Callable | None = None):
        """``final_metrics(state)``: metrics of the state a chunk returns (e.g. its health),
        computed once at the end of the chunk inside the same program.
        ``freeze(old, new, metrics, alive) -> (state, alive)``: applied after every iteration
        of one agent (e.g. :func:`evorl.workflows.health.freeze_diverged`); None: no agent is
        ever frozen."""
        self.step = step
        self.final_metrics = final_metrics
        self.freeze = freeze
        #: Which agents still train (``[N]``; ``[]`` for one agent), updated by every chunk.
        self.alive = np.ones(placement.num_agents if placement.population else (), bool)
        self.placement = placement
        self.env_fields = env_fields
        self.compile_seconds: float | None = None
        self._chunk = self._build_chunk()
        self._init_jit = None

    # --- placement --------------------------------------------------------------------
    def _field_spec(self, name: str) -> P:
        pl = self.placement
        if pl.layout == "population":
            return P(DEVICE_AXIS)
        if name in self.env_fields:
            return P(None, DEVICE_AXIS) if pl.population else P(DEVICE_AXIS)
        return P()

    def specs(self, state: Any) -> Any:
        """Partition specs, one per field of the state dataclass ``state`` (a prefix tree)."""
        return type(state)(**{f.name: self._field_spec(f.name) for f in dataclasses.fields(state)})

    def shardings(self, state: Any) -> Any:
        """Per-leaf shardings of ``state`` (concrete or abstract)."""
        if self.placement.mesh is None:
            device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
            return jax.tree.map(lambda _: device, state)
        mesh = self.placement.mesh
        return type(state)(**{
            f.name: jax.tree.map(lambda _, s=self._field_spec(f.name): NamedSharding(mesh, s), getattr(state, f.name))
            for f in dataclasses.fields(state)
        })

    def place(self, state: Any) -> Any:
        """``state`` on the devices the compiled programs expect (a no-op when it already is)."""
        return jax.device_put(state, self.shardings(state))

    def init(self, init_fn: Callable, *args) -> Any:
        """``init_fn(*args)`` (mapped over the leading agent axis of ``args`` for a
        population, one agent after another) computed where the state lives: each device
        computes only its part."""
        if self._init_jit is None:
            fn = _map_agents_sequentially(init_fn) if self.placement.population else init_fn
            shardings = self.shardings(jax.eval_shape(fn, *args))
            self._init_jit = jit_rarely_run(fn, out_shardings=shardings)
        return self._init_jit(*args)

    # --- chunks of iterations ---------------------------------------------------------
    def _iterations(self, state: Any, num_iterations: jax.Array, alive: jax.Array):
        """``num_iterations`` (traced) steps; metrics accumulated as each declares; with
        ``freeze``, a step that leaves the agent non-finite is undone and the agent frozen.

        The step is traced once: under ``jax.jit`` the trace that ``eval_shape`` makes for the
        metrics' shapes is the one the loop body reuses (XLA inlines the call, so the program
        is the same).
        """
        step = jax.jit(self.step)
        totals = M.zeros_like_totals(jax.eval_shape(step, state)[1])

        def body(_, carry):
            state, totals, alive = carry
            new_state, metrics = step(state)
            if self.freeze is not None:
                new_state, alive = self.freeze(state, new_state, metrics, alive)
            return new_state, M.accumulate(totals, metrics), alive

        state, totals, alive = lax.fori_loop(0, num_iterations, body, (state, totals, alive))
        if self.final_metrics is not None:
            totals = {**totals, **M.declared(self.final_metrics(state))}
        return state, {**totals, ALIVE: M.Metric(alive.astype(jnp.float32), "min")}

    def _build_chunk(self):
        pl = self.placement
        iterations = jax.vmap(self._iterations, in_axes=(0, None, 0)) if pl.population else self._iterations
        if pl.mesh is None:
            return jax.jit(iterations, donate_argnums=0)
        split_agents = pl.layout == "population"

        def sharded(state, num_iterations, alive):
            specs = self.specs(state)
            # Agents split: every output is per device, so there is no replication to check.
            per_agent = P(DEVICE_AXIS) if split_agents else P()
            return jax.shard_map(iterations, mesh=pl.mesh, in_specs=(specs, P(), per_agent),
                                 out_specs=(specs, per_agent),
                                 check_vma=not split_agents)(state, num_iterations, alive)

        return jax.jit(sharded, donate_argnums=0)

    def run(self, state: Any, num_iterations: int) -> tuple[Any, dict[str, np.ndarray]]:
        """Runs ``num_iterations`` iterations in one compiled call. Returns the new state and
        the chunk's metrics on the host (per iteration, see :func:`evorl.metrics.per_iteration`;
        ``[N]`` per agent for a population).

        The input state's buffers are donated to the call (no copy of the env states and
        parameters): keep using the returned state, not the one passed in.
        """
        state, totals = self._chunk(self.place(state), np.int32(num_iterations), self.alive)
        return state, M.per_iteration(self._take_alive(to_host(totals)), num_iterations)

    def _take_alive(self, totals: dict) -> dict:
        """``totals`` without :data:`ALIVE`, which becomes ``self.alive``."""
        totals = dict(totals)
        self.alive = np.asarray(totals.pop(ALIVE).value) > 0
        return totals

    def running(self, state: Any):
        """Nothing runs outside the chunk programs (the actor-learner starts its actors here)."""
        return contextlib.nullcontext(self)

    def host_metrics(self) -> dict[str, float]:
        """Figures measured on the host during the last chunk: none here."""
        return {}

    def compile(self, state: Any) -> float:
        """Compiles the chunk ahead of time; returns (and keeps) the seconds it took."""
        start = time.perf_counter()
        self._chunk = self._chunk.lower(self.place(state), np.int32(1), self.alive).compile()
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
