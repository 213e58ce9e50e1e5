"""Atari (Arcade Learning Environment) preprocessing options, shared by the gymnasium and
envpool backends.

The defaults are the DeepMind preprocessing (Mnih et al., 2015; Machado et al., 2018 for
sticky actions), applied to the raw ALE frames of a game stepped one frame at a time:

* ``noop_max = 30``: a fresh episode starts with a random number in ``[0, noop_max]`` of
  no-op frames (``0`` disables them);
* ``frame_skip = 4``: one agent step repeats the action for ``frame_skip`` frames, sums
  their rewards and observes the elementwise maximum of the last two frames;
* ``screen_size = 84`` and ``grayscale = True``: the frame is resized to
  ``[screen_size, screen_size]`` (area interpolation) and converted to luminance;
* ``frame_stack = 4``: the observation holds the last ``frame_stack`` frames on the channel
  axis, channels last: ``[84, 84, frame_stack]`` uint8 (RGB: ``[84, 84, 3 * frame_stack]``,
  frame-major, ``[..., 3 k + c]`` is channel ``c`` of frame ``k``);
* ``clip_rewards = True``: the training reward is ``sign(r)`` of the agent step's summed
  reward, while ``episode_return`` keeps summing the raw game score;
* ``repeat_action_probability = 0.25``: sticky actions, as ALE v5 sets them;
* ``terminal_on_life_loss = False``: losing a life does not end the episode; when true, a
  lost life ends the learner's episode (``terminated``: no bootstrap across it) while the
  game goes on from that frame (DeepMind's training setup); game over or the time limit,
  counted in whole games, starts a new game. Training statistics then count lives, and
  evaluation plays whole games (``for_evaluation``);
* ``fire_reset = False``: when true, the env presses FIRE (the game's serve) for the agent
  at the start of every episode and after every lost life, one extra agent step whose reward
  counts (games without a FIRE action refuse it). In Breakout a policy that has not learnt
  to serve otherwise waits out the episode's time limit. Not part of the DeepMind
  preprocessing (it is OpenAI baselines' ``FireResetEnv``, here also after a lost life).

An agent step is ``frame_skip`` game frames, so ALE's own limit of
``max_num_frames_per_episode`` (108,000 frames, 30 minutes) is ``108000 // frame_skip``
agent steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from evorl.config.errors import ConfigError

#: The game frames per episode after which ALE truncates an episode (v5 default).
ALE_MAX_FRAMES = 108_000


@dataclass(frozen=True)
class AtariOptions:
    """The DeepMind Atari preprocessing, one field per ``env:`` config key."""

    noop_max: int = 30
    frame_skip: int = 4
    screen_size: int = 84
    grayscale: bool = True
    frame_stack: int = 4
    clip_rewards: bool = True
    repeat_action_probability: float = 0.25
    terminal_on_life_loss: bool = False
    fire_reset: bool = False

    @property
    def obs_shape(self) -> tuple[int, int, int]:
        """``[H, W, C]`` of the preprocessed, stacked observation."""
        channels = self.frame_stack * (1 if self.grayscale else 3)
        return (self.screen_size, self.screen_size, channels)

    def check(self, where: str = "env") -> None:
        for key, low in (("noop_max", 0), ("frame_skip", 1), ("screen_size", 1), ("frame_stack", 1)):
            value = getattr(self, key)
            if not value >= low:
                raise ConfigError(f"{where}.{key} must be >= {low}, got {value}.")
        if not 0.0 <= self.repeat_action_probability <= 1.0:
            raise ConfigError(
                f"{where}.repeat_action_probability must be in [0, 1], got {self.repeat_action_probability}."
            )


ATARI_DEFAULTS = AtariOptions()
#: The action ALE names FIRE in a minimal action set that has it (Breakout, Pong, ...).
FIRE = 1


def check_fire_action(action_meanings: list[str], env_name: str) -> None:
    """``env.fire_reset`` needs FIRE at :data:`FIRE` in the game's action set."""
    if len(action_meanings) <= FIRE or action_meanings[FIRE] != "FIRE":
        raise ConfigError(f"env.fire_reset: {env_name!r} has no FIRE action (its actions: "
                          f"{', '.join(action_meanings)}); set env.fire_reset=false.")


def env_id(env_name: str) -> str:
    """The gymnasium id of ``env_name``, without a ``module:`` import prefix."""
    return env_name.split(":", 1)[1] if ":" in env_name else env_name


def is_atari(env_name: str) -> bool:
    return env_id(env_name).startswith("ALE/")


def atari_options(env_name: str, values: Mapping[str, Any], where: str = "env") -> AtariOptions | None:
    """The preprocessing of ``env_name`` from the config ``values`` (None = default): an
    :class:`AtariOptions` for an ``ALE/...`` id, None for any other env, where setting one
    of the keys is an error naming it."""
    given: dict[str, Any] = {f.name: values.get(f.name) for f in fields(AtariOptions) if values.get(f.name) is not None}
    if not is_atari(env_name):
        if given:
            raise ConfigError(
                f"{where}.{next(iter(given))} is Atari preprocessing; it applies to ALE/... ids only, "
                f"not {env_name!r}."
            )
        return None
    options = AtariOptions(**given)
    options.check(where)
    return options
