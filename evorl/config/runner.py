"""The ``runner:`` config section: how training is executed (fused or actor-learner), and the
rules of an asynchronous run that read the other sections (:func:`check_async_config`)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from typing import Any

from evorl.config.errors import ConfigError, require
from evorl.config.parsing import FloatOrInf
from evorl.config.sweeps import num_agents

#: ``runner.mode``: ``auto`` is ``async`` for host environments and ``fused`` for JAX ones.
RUNNER_MODES = ("auto", "fused", "async")


@dataclass(frozen=True)
class RunnerConfig:
    """The ``runner:`` config section: how training is executed."""

    #: ``auto`` (the default): ``async`` for host environments (gymnasium, envpool), ``fused``
    #: otherwise; ``fused``: rollout and update in one compiled program per chunk (JAX envs
    #: only); ``async``: actor threads and a learner (:mod:`evorl.engine.actor_learner`).
    mode: str = "auto"
    #: Actor threads; each owns ``training.num_envs / num_actors`` environments.
    num_actors: int = 2
    #: Each actor in a child process of its own (host envs, ``runner.mode=async``): envs whose
    #: step holds Python's GIL (gymnasium's Atari and MuJoCo, pure-Python envs) then step in
    #: parallel with each other and the learner. Each child imports JAX and compiles the
    #: policy when training starts (a few seconds) and acts on the CPU
    #: (:mod:`evorl.engine.actor_processes`).
    actor_processes: bool = False
    #: Rollouts that may wait for the learner; actors block while the queue is full.
    queue_size: int = 4
    #: Actors wait for the parameters of every update (no lag): the synchronous baseline.
    lockstep: bool = False
    #: With ``distributed.multi_devices``: devices of the learner's mesh (the first ones);
    #: actors run on the others (null: half of the devices, at least one).
    learner_devices: int | None = None
    #: A host environment step (an actor's, or the evaluation's) that takes longer than this
    #: ends the run (a stuck env).
    env_step_timeout_seconds: float = 60.0
    #: Seconds the learner sleeps before each update: a slower learner, for checking that an
    #: algorithm holds up under policy lag (the queue fills, and the mean lag grows towards
    #: ``queue_size / num_actors + 1`` updates; ``benchmarks/async_lag.py``). 0: no delay.
    learner_delay_seconds: float = 0.0
    #: The memory the run may use, in GB over all its devices: a config whose estimate
    #: (:mod:`evorl.engine.memory_estimate`) is larger is refused before anything is compiled. null:
    #: what the machine has (MemAvailable on CPU, the devices' bytes_limit on GPU); .inf: no check.
    max_memory_gb: FloatOrInf | None = None

    def validate(self, where: str) -> None:
        require(self.mode in RUNNER_MODES, f"{where}.mode must be one of {', '.join(RUNNER_MODES)}, got {self.mode!r}.")
        require(self.num_actors >= 1, f"{where}.num_actors must be >= 1, got {self.num_actors}.")
        require(self.queue_size >= 1, f"{where}.queue_size must be >= 1, got {self.queue_size}.")
        require(self.learner_devices is None or self.learner_devices >= 1,
                f"{where}.learner_devices must be >= 1 or null, got {self.learner_devices}.")
        require(self.env_step_timeout_seconds > 0,
                f"{where}.env_step_timeout_seconds must be > 0, got {self.env_step_timeout_seconds}.")
        require(0 <= self.learner_delay_seconds <= 60,
                f"{where}.learner_delay_seconds must be in [0, 60], got {self.learner_delay_seconds}.")
        require(self.max_memory_gb is None or self.max_memory_gb > 0,
                f"{where}.max_memory_gb must be > 0, .inf (no check) or null (the machine's memory), "
                f"got {self.max_memory_gb}.")

    def check_against(self, env_on_host: bool) -> None:
        """Checks against the env: actor processes step host envs through the actor-learner."""
        require(not self.actor_processes or os.name == "posix",
                f"runner.actor_processes=true hands each actor's pipes to its process by file descriptor, which "
                f"needs Linux or macOS (this is {os.name!r}): set runner.actor_processes=false (actor threads).")
        require(not self.actor_processes or (env_on_host and self.asynchronous(env_on_host)),
                f"runner.actor_processes=true puts each actor's host envs in a process of its own: it needs a host "
                f"env (env.env_type gymnasium or envpool) and runner.mode async or auto (got mode={self.mode!r}"
                f"{'' if env_on_host else ' and a JAX env'}). A JAX env's rollout is one compiled call: set "
                f"runner.actor_processes=false.")

    def asynchronous(self, env_on_host: bool) -> bool:
        return self.mode == "async" or (self.mode == "auto" and env_on_host)


def check_async_config(config: Any, agent: Any, num_devices: int) -> None:
    """Cross-key checks of an asynchronous run, before anything is compiled (the workflow
    adds its own: the on-policy minibatches, ...)."""
    tc, rc = config.training, config.runner
    require(not config.distributed.multi_process,
            "runner.mode=async runs in one process (actors are threads): remove distributed.coordinator_address / auto.")
    require(tc.actor_lag == 0,
            f"training.actor_lag={tc.actor_lag} simulates actors in the fused runner; with runner.mode=async "
            f"the lag is real (measured, logged as actors/policy_lag_*): set training.actor_lag=0.")
    require(tc.num_envs % rc.num_actors == 0,
            f"training.num_envs={tc.num_envs} must be divisible by runner.num_actors={rc.num_actors} "
            f"(each actor owns num_envs / num_actors environments).")
    learner_devices = learner_device_count(num_devices, rc.learner_devices)
    require(rc.learner_devices is None or rc.learner_devices <= num_devices,
            f"runner.learner_devices={rc.learner_devices} but only {num_devices} device(s) are used "
            f"(several need distributed.multi_devices=true, or XLA_FLAGS=--xla_force_host_platform_device_count=N "
            f"on a CPU).")
    agents = num_agents(config)
    require(agents == 1 or learner_devices == 1,
            f"runner.mode=async with {agents} agents (training.num_seeds x hyperparameter variants) runs the "
            f"learner on one device: set runner.learner_devices=1 (the other devices run the actors).")
    per_actor = tc.num_envs // rc.num_actors
    require(per_actor % learner_devices == 0,
            f"each actor's {per_actor} environments (training.num_envs / runner.num_actors) must split evenly over "
            f"the learner's {learner_devices} devices.")


def learner_device_count(num_devices: int, learner_devices: int | None) -> int:
    """The devices of the learner's mesh: ``runner.learner_devices``, or half of ``num_devices`` (at least one)."""
    if num_devices == 1:
        return 1
    return learner_devices if learner_devices is not None else max(1, num_devices // 2)


def _gb(num_bytes: float) -> str:
    return f"{num_bytes / 1e9:.3g} GB"


def memory_message(terms: list, limit: float, source: str) -> str | None:
    """The one-line refusal when the terms add up to more than ``limit`` bytes; None when they fit."""
    total = sum(t.bytes for t in terms)
    if total <= limit:
        return None
    main = sorted(terms, key=lambda t: -t.bytes)[:2]
    parts = "; ".join(f"{t.name}: {t.formula} = {_gb(t.bytes)}" for t in main if t.bytes > 0)
    return (f"the run needs about {_gb(total)} of memory ({parts}), more than the {_gb(limit)} available "
            f"({source}); make the {main[0].name} smaller ({main[0].keys}), or set runner.max_memory_gb=<GB> to allow "
            f"more (runner.max_memory_gb=.inf: no check).")


def check_memory_fits(terms: list, limit: float, source: str) -> None:
    """The run's memory estimate (``terms``: :class:`evorl.engine.memory_estimate.Term`, each with
    its ``bytes``) within the ``limit`` bytes it may use (``source``: where that number comes from)."""
    message = memory_message(terms, limit, source)
    if message is not None:
        raise ConfigError(message)
