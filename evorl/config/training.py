"""The ``training:`` config sections: every on-policy experiment's (:class:`TrainingConfig`) and
every off-policy one's (:class:`OffPolicyTrainingConfig`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from evorl.config.errors import ConfigError, require, unknown_key_error
from evorl.config.parsing import INT32_MAX, coerce

#: The two keys that set a run's length: one replaces the other.
RUN_LENGTH_KEYS = ("num_iterations", "total_env_steps")


#: The values of ``training.optimizer``.
OPTIMIZERS = ("adam", "rmsprop")


@dataclass(frozen=True)
class LoopConfig:
    """The ``training:`` keys every RL section shares (:class:`TrainingConfig`,
    :class:`OffPolicyTrainingConfig`): the iterations of ``num_envs x rollout_length`` env
    steps, the optimiser's step, evaluation and the agents side by side."""

    #: Training iterations, each of num_envs x rollout_length env steps.
    num_iterations: int = 100
    #: The run's length in env steps (per agent) instead of iterations: num_iterations becomes
    #: ceil(total_env_steps / (num_envs x rollout_length)); set one of the two (null: num_iterations).
    total_env_steps: int | None = None
    #: Env steps per environment per iteration (the T of the [T, B] rollout).
    rollout_length: int = 128
    #: Environments stepped side by side (the B of the [T, B] rollout).
    num_envs: int = 4
    #: The optimiser's step size (a list trains one agent per value).
    learning_rate: float = 2.5e-4
    #: Decay the learning rate linearly to 0 over ``num_iterations``.
    anneal_lr: bool = True
    #: The gradient step after global-norm clipping: ``adam``, or ``rmsprop`` (decay 0.99, epsilon
    #: outside the root, as SB3 and rl-baselines3-zoo run A2C).
    optimizer: str = "adam"
    #: The optimiser's epsilon (Adam's or RMSprop's, added to the root of the second moment).
    adam_eps: float = 1e-5
    #: Clip the gradient's global norm to this (null: no clipping).
    max_grad_norm: float | None = 0.5
    #: Discount factor.
    gamma: float = 0.99
    #: Iterations between evaluations and log lines; each interval is one compiled call.
    eval_interval: int = 10
    #: Episodes per evaluation.
    eval_episodes: int = 16
    #: Independent agents trained side by side in one program (vmapped), each its own seed.
    num_seeds: int = 1
    #: The rollout acts with the parameters of ``actor_lag`` iterations ago (one iteration's
    #: gradient steps of lag each): IMPALA's decoupled actors, and the actor-learner's policy
    #: lag, reproduced on one machine. 0 acts with the current parameters.
    actor_lag: int = 0
    #: Time limit of the training episodes, in agent steps (null: ``env.episode_length``).
    #: Shorter training episodes give more episode starts per step of data; the cut is a
    #: truncation, so returns are bootstrapped from the final observation and the learning
    #: target is unchanged. Evaluation always plays full ``env.episode_length`` episodes.
    train_episode_length: int | None = None

    def validate(self, where: str = "training") -> None:
        for key in ("num_iterations", "rollout_length", "num_envs", "eval_interval", "eval_episodes", "num_seeds"):
            require(getattr(self, key) >= 1, f"{where}.{key} must be >= 1, got {getattr(self, key)}.")
        require(self.env_steps_per_iteration <= INT32_MAX,
                f"{where}.num_envs x {where}.rollout_length = {self.num_envs} x {self.rollout_length} = "
                f"{self.env_steps_per_iteration} steps per iteration; at most {INT32_MAX} (2**31 - 1: the "
                f"rollout's steps are indexed in int32).")
        require(self.actor_lag >= 0, f"{where}.actor_lag must be >= 0, got {self.actor_lag}.")
        require(self.train_episode_length is None or self.train_episode_length >= 1,
                f"{where}.train_episode_length must be >= 1 or null, got {self.train_episode_length}.")
        require(self.learning_rate > 0, f"{where}.learning_rate must be > 0, got {self.learning_rate}.")
        require(self.optimizer in OPTIMIZERS,
                f"{where}.optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}.")
        require(self.adam_eps > 0, f"{where}.adam_eps must be > 0, got {self.adam_eps}.")
        require(self.max_grad_norm is None or self.max_grad_norm > 0,
                f"{where}.max_grad_norm must be > 0 or null, got {self.max_grad_norm}.")
        require(0.0 <= self.gamma <= 1.0, f"{where}.gamma must be in [0, 1], got {self.gamma}.")

    @property
    def env_steps_per_iteration(self) -> int:
        return self.num_envs * self.rollout_length

    @classmethod
    def resolve_run_length(cls, data: Mapping, where: str = "training") -> dict:
        """The section's keys ``data`` with ``num_iterations`` derived from ``total_env_steps``
        when that is set: ``ceil(total_env_steps / (num_envs x rollout_length))``, the env steps
        one iteration takes (per agent, on the logged ``step`` axis). Both set is an error naming
        both; ``num_iterations`` null stands for unset."""
        data = dict(data)
        if data.get("num_iterations", 0) is None:
            del data["num_iterations"]
        if data.get("total_env_steps") is None:
            return data
        total = coerce(data["total_env_steps"], int, f"{where}.total_env_steps")
        require(total >= 1, f"{where}.total_env_steps must be >= 1, got {total}.")
        if "num_iterations" in data:
            raise ConfigError(f"{where}.num_iterations={data['num_iterations']} and {where}.total_env_steps={total} "
                              f"both set the run's length: set one ({where}.num_iterations=null keeps "
                              f"total_env_steps, e.g. where a config file sets num_iterations).")
        defaults = {f.name: f.default for f in dataclasses.fields(cls)}
        per_iteration = 1
        for key in ("num_envs", "rollout_length"):
            per_iteration *= coerce(data.get(key, defaults[key]), int, f"{where}.{key}")
        require(per_iteration >= 1, f"{where}.num_envs x {where}.rollout_length must be >= 1, got {per_iteration}.")
        return {**data, "total_env_steps": total, "num_iterations": -(-total // per_iteration)}


def run_length_under(lower: Mapping, upper: Mapping) -> dict:
    """The ``training:`` keys ``lower`` (an algorithm's defaults) without the run-length key
    that ``upper`` (the keys typed over them) replaces: ``total_env_steps`` given over a default
    ``num_iterations`` sets the run's length, and the reverse."""
    given = [key for key in RUN_LENGTH_KEYS if upper.get(key) is not None]
    if len(given) != 1:
        return dict(lower)
    return {key: value for key, value in lower.items() if key not in RUN_LENGTH_KEYS or key in given}


def no_env_step_budget(workflow: str) -> str:
    """Why ``training.total_env_steps`` does not apply to ``workflow``, whose iteration is a
    generation of whole episodes."""
    return (f"'training.total_env_steps' does not apply to {workflow}: one iteration is a generation of whole "
            f"episodes, which end early when they terminate, so a budget in env steps is no fixed number of "
            f"generations; set training.num_iterations (generations). Its env steps are logged on the step axis.")


def check_training_keys(training: Iterable[str], name: str, keys: Sequence[str], *, section: str | None = None,
                        section_holds: str = "", section_keys: Iterable[str] = (),
                        on_policy_only: Iterable[str] = ()) -> None:
    """Every key of ``training`` (workflow ``name``'s ``training:`` section) is one of ``keys``.

    A workflow whose iteration is a generation names its own ``section``, which holds its
    other keys (``section_holds``: whose they are; ``section_keys``), and has no env-step
    budget. Any other names a key of ``on_policy_only`` as such, and an unknown key with the
    valid keys closest to it."""
    for key in training:
        if section is not None:
            require(key != "total_env_steps", no_env_step_budget(name))
            require(key in keys, f"'training.{key}' does not apply to {name}: its training keys are "
                                 f"{', '.join(keys)} (one iteration is one generation); {section_holds} keys "
                                 f"are in {section}: ({', '.join(section_keys)}).")
        elif key in on_policy_only:
            raise ConfigError(f"'training.{key}' does not apply to {name} (an off-policy workflow: "
                              f"its training keys are {', '.join(keys)}).")
        elif key not in keys:
            raise unknown_key_error(str(key), list(keys), "training")



@dataclass(frozen=True)
class TrainingConfig(LoopConfig):
    """The ``training:`` section: one iteration collects ``num_envs x rollout_length`` env
    steps, then takes ``num_epochs x num_minibatches`` gradient steps on them."""

    #: GAE's lambda (IMPALA: V-trace's lambda; 1 gives n-step returns).
    gae_lambda: float = 0.95
    #: Passes over each iteration's rollout.
    num_epochs: int = 4
    #: Minibatches per epoch (must divide num_envs x rollout_length).
    num_minibatches: int = 4
    #: Evaluate with the policy's most likely action (greedy); false: with sampled actions, as
    #: it acts in training (an undertrained Atari policy's argmax often repeats one action).
    eval_deterministic: bool = True

    def validate(self, where: str = "training") -> None:
        super().validate(where)
        for key in ("num_epochs", "num_minibatches"):
            require(getattr(self, key) >= 1, f"{where}.{key} must be >= 1, got {getattr(self, key)}.")
        require(0.0 <= self.gae_lambda <= 1.0, f"{where}.gae_lambda must be in [0, 1], got {self.gae_lambda}.")


@dataclass(frozen=True)
class OffPolicyTrainingConfig(LoopConfig):
    """The ``training:`` section of an off-policy run: one iteration collects ``num_envs x
    rollout_length`` env steps into the replay buffer, then takes ``num_updates`` gradient
    steps on minibatches sampled from it (evaluation is greedy)."""

    num_iterations: int = 1000
    rollout_length: int = 1
    num_envs: int = 8
    anneal_lr: bool = False
    adam_eps: float = 1e-8
    max_grad_norm: float | None = 10.0
    #: Steps per transition: the target sums up to n discounted rewards, then bootstraps.
    n_step: int = 1
    #: Transitions the replay buffer holds (per agent; a multiple of ``num_envs``: one row per
    #: env step of all environments); the oldest are overwritten.
    buffer_size: int = 10_000
    #: Transitions per gradient step, sampled uniformly from the buffer.
    batch_size: int = 128
    #: Gradient steps per iteration.
    num_updates: int = 1
    #: Transitions in the buffer before the first gradient step.
    learning_starts: int = 1000
    #: Env steps (per agent) acting uniformly at random before the behaviour policy takes over.
    warmup_steps: int = 0
    #: Gradient steps between target network updates.
    target_update_period: int = 1
    #: Polyak coefficient of a target update (1: copy the online parameters).
    tau: float = 1.0

    def validate(self, where: str = "training") -> None:
        super().validate(where)
        for key in ("n_step", "buffer_size", "batch_size", "num_updates", "target_update_period"):
            require(getattr(self, key) >= 1, f"{where}.{key} must be >= 1, got {getattr(self, key)}.")
        for key in ("learning_starts", "warmup_steps"):
            require(getattr(self, key) >= 0, f"{where}.{key} must be >= 0, got {getattr(self, key)}.")
        require(self.buffer_size >= self.env_steps_per_iteration,
                f"{where}.buffer_size={self.buffer_size} must hold one iteration's transitions, num_envs x "
                f"rollout_length = {self.env_steps_per_iteration}.")
        require(self.buffer_size % self.num_envs == 0,
                f"{where}.buffer_size={self.buffer_size} must be a multiple of {where}.num_envs={self.num_envs}: the "
                f"buffer stores rows of one transition per environment (e.g. {where}.buffer_size="
                f"{-(-self.buffer_size // self.num_envs) * self.num_envs}).")
        require(self.learning_starts <= self.buffer_size,
                f"{where}.learning_starts={self.learning_starts} exceeds {where}.buffer_size={self.buffer_size}: "
                f"the buffer would never hold enough transitions to start learning.")
        require(self.batch_size <= self.buffer_size,
                f"{where}.batch_size={self.batch_size} exceeds {where}.buffer_size={self.buffer_size}: a batch is "
                f"drawn from the buffer's transitions.")
        require(self.n_step <= self.rollout_length,
                f"{where}.n_step={self.n_step} exceeds {where}.rollout_length={self.rollout_length}: an n-step "
                f"window stays inside one rollout (evorl.rl.replay.n_step_transitions), so n_step can be at most "
                f"rollout_length.")
        require(0.0 < self.tau <= 1.0, f"{where}.tau must be in (0, 1], got {self.tau}.")

    def run_length_notes(self, where: str = "training") -> list[str]:
        """What this run's length leaves undone (no gradient step, no action of the policy):
        notes, not errors, since a short run may fill the buffer for a longer one to resume."""
        steps, notes = self.num_iterations * self.env_steps_per_iteration, []
        if self.learning_starts > steps:
            notes.append(f"{where}.learning_starts={self.learning_starts} exceeds the run's {steps} env steps per "
                         f"agent (num_iterations x num_envs x rollout_length): it takes no gradient step.")
        if self.warmup_steps >= steps:
            notes.append(f"{where}.warmup_steps={self.warmup_steps} covers the run's {steps} env steps per agent: "
                         f"every action is random.")
        return notes
