"""JaxMARL's multi-agent environments (MPE, MABrax, ...) behind the multi-agent protocol
(:class:`~evorl.envs.multi_agent.MultiAgentVectorEnv`).

Each copy is JaxMARL's ``step_env`` / ``reset`` (no JaxMARL auto-reset): the agents'
dictionaries become arrays stacked on the agent axis in ``env.agents`` order, and an episode
ends ``terminated`` when JaxMARL's ``dones["__all__"]`` says so. A family whose ``done`` also
marks its step limit is built without that limit and reports it as ``truncated`` instead, at
the same step as JaxMARL ends the episode, so that return estimators bootstrap from the final
observation instead of treating it as terminal (:data:`STEP_LIMITS`):

* MPE (``max_steps``, 25): built with ``max_steps`` out of reach; its episodes last
  ``max_steps + 1`` steps, as ``done`` is checked before the step counter is incremented;
* MABrax (``episode_length``, 1000): built with ``episode_length=None`` (no brax
  ``EpisodeWrapper``, whose ``done`` is 1 at the limit) and ``auto_reset=False`` (brax's
  ``AutoResetWrapper`` would reset inside the step, hiding the final observation; evorl
  resets); ``done`` is then brax's termination (a fallen ant), and episodes last
  ``episode_length`` steps.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from evorl.config import ConfigError
from evorl.config.env import checked_env_name, import_env_package
from evorl.envs.multi_agent import MultiAgentVectorEnv, homogeneous
from evorl.envs.spaces import Box, Discrete

#: The step limit a JaxMARL env is built with when evorl applies the time limit itself.
UNREACHED_STEPS = 2**30


def jaxmarl_env_names() -> list[str]:
    return list(import_env_package("jaxmarl").registered_envs)


def jaxmarl_class(env_name: str):
    """The class ``jaxmarl.make(env_name)`` builds, read from ``make``'s source (its branches
    ``if env_id == "name": env = Class(**env_kwargs)``); None where that cannot be read."""
    import ast
    import inspect

    from jaxmarl import registration

    try:
        tree = ast.parse(inspect.getsource(registration.make).lstrip())
    except (OSError, TypeError, SyntaxError):
        return None
    for node in ast.walk(tree):
        if not (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
                and isinstance(node.test.comparators[0], ast.Constant) and node.test.comparators[0].value == env_name):
            continue
        for statement in node.body:
            call = getattr(statement, "value", None)
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name):
                return getattr(registration, call.func.id, None)
    return None


def accepted_keywords(cls) -> set[str] | None:
    """The keywords ``cls(**kwargs)`` reads: each ``__init__``'s parameters along the MRO
    (``inspect.signature``) and the names its body reads from ``**kwargs`` (``"rad" in
    kwargs``); None when an ``__init__`` hands ``**kwargs`` on to anything but its base's
    (MABrax passes them to brax): then any keyword may be valid."""
    import inspect
    import re

    if not inspect.isclass(cls):  # a registry entry that is a factory function, not a class
        parameters = inspect.signature(cls).parameters
        if any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
            return None
        return {n for n, p in parameters.items() if p.kind is not p.VAR_POSITIONAL}
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or klass is object:
            continue
        parameters = inspect.signature(init).parameters
        names |= {n for n, p in parameters.items() if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and n != "self"}
        var_keyword = next((n for n, p in parameters.items() if p.kind is p.VAR_KEYWORD), None)
        if var_keyword is None:
            break
        try:
            source = inspect.getsource(init)
        except (OSError, TypeError):
            return None
        forwarded = re.findall(rf"([\w.]+)\([^()]*\*\*{var_keyword}\b", source)
        if any(not f.endswith("__init__") for f in forwarded):
            return None
        quoted = r"[\"']([A-Za-z_]\w*)[\"']"
        names |= set(re.findall(rf"{quoted}\s+in\s+{var_keyword}\b", source))
        names |= set(re.findall(rf"{var_keyword}(?:\.get\(|\[)\s*{quoted}", source))
    return names


def check_jaxmarl_kwargs(env_name: str, kwargs: dict) -> None:
    """A ConfigError naming the ``env.kwargs`` that ``jaxmarl.make(env_name)``'s env does not
    read (it would silently ignore them), with the ones it reads."""
    cls = jaxmarl_class(env_name)
    accepted = None if cls is None else accepted_keywords(cls)
    unknown = sorted(set(kwargs) - accepted) if accepted is not None else []
    if unknown and accepted is not None:  # (unknown keys imply a known signature)
        raise ConfigError(f"env.kwargs {', '.join(unknown)}: JaxMARL's {env_name} ({cls.__name__}) has no such "
                          f"keyword{'s' if len(unknown) > 1 else ''} and would ignore it; it reads: "
                          f"{', '.join(sorted(accepted))}.")


def jaxmarl_step_size(env_name: str, kwargs: dict) -> tuple[int, int]:
    """``(agents, observation size of one agent)`` of ``jaxmarl.make(env_name, **kwargs)``,
    read from the JaxMARL env alone (evorl's adapter, built next, stacks every agent's spaces:
    an absurd agent count is refused by the memory estimate before it is). Refuses unknown
    keywords and an env without agents."""
    jaxmarl = import_env_package("jaxmarl")
    env_name = checked_env_name("jaxmarl", env_name, list(jaxmarl.registered_envs))
    check_jaxmarl_kwargs(env_name, kwargs)
    env = _make(jaxmarl, env_name, kwargs)
    if not env.agents:
        raise ConfigError(f"jaxmarl.make({env_name!r}, **{kwargs}) has no agents (env.kwargs); give it at least one.")
    return len(env.agents), math.prod(env.observation_space(env.agents[0]).shape)


def _make(jaxmarl, env_name: str, kwargs: dict):
    """``jaxmarl.make``, its refusal of the keywords a ConfigError."""
    try:
        return jaxmarl.make(env_name, **kwargs)
    except (TypeError, ValueError, NotImplementedError, AssertionError) as err:
        raise ConfigError(f"jaxmarl.make({env_name!r}, **{kwargs}) refused its keywords (env.kwargs): "
                          f"{type(err).__name__}: {err}") from err


def _convert_space(space, what: str):
    kind = type(space).__name__
    if kind == "Discrete":
        return Discrete(int(space.n))
    if kind == "Box":
        shape = tuple(space.shape)
        return Box(np.broadcast_to(np.asarray(space.low, np.float32), shape),
                   np.broadcast_to(np.asarray(space.high, np.float32), shape))
    raise ValueError(f"JaxMARL {what} space {space!r} is not supported (Box and Discrete are).")


def step_limit(env) -> tuple[str, int, dict] | None:
    """``(keyword, episode steps, keywords without the limit)`` of a JaxMARL env whose ``done``
    marks its step limit (module docstring), by its family; None: its ``done`` is termination
    alone (or it has no limit)."""
    from jaxmarl.environments.mpe.simple import SimpleMPE

    if isinstance(env, SimpleMPE):
        return "max_steps", int(env.max_steps) + 1, {"max_steps": UNREACHED_STEPS}
    try:  # MABrax needs brax, an optional dependency of jaxmarl
        from jaxmarl.environments.mabrax.mabrax_env import MABraxEnv
    except ImportError:
        return None
    if isinstance(env, MABraxEnv):
        return "episode_length", int(env.episode_length), {"episode_length": None, "auto_reset": False}
    return None


class JaxMARLEnv(MultiAgentVectorEnv):
    """A JaxMARL environment (``jaxmarl.make(env_name, **kwargs, **env_kwargs)``; ``kwargs`` is
    the config's ``env.kwargs``, e.g. MPE's ``{"action_type": "Continuous"}``: actions in
    ``Box(0, 1, (5,))`` per agent); observations float32 ``[n_agents, obs_dim]``.
    ``episode_length`` None: the env's own (MPE: ``max_steps + 1``)."""

    typed_keys = True  # JaxMARL calls jax.random on the key it is given

    def __init__(self, env_name: str, num_envs: int, episode_length: int | None = None,
                 reward_scale: float = 1.0, action_repeat: int = 1, kwargs: dict | None = None, **env_kwargs):
        jaxmarl = import_env_package("jaxmarl")
        env_kwargs = {**(kwargs or {}), **env_kwargs}
        self.env_name = checked_env_name("jaxmarl", env_name, list(jaxmarl.registered_envs))
        check_jaxmarl_kwargs(self.env_name, env_kwargs)
        env = _make(jaxmarl, self.env_name, env_kwargs)
        if not env.agents:
            raise ConfigError(f"jaxmarl.make({self.env_name!r}, **{env_kwargs}) has no agents (env.kwargs).")
        default_length = UNREACHED_STEPS
        limit = step_limit(env)
        if limit is not None:
            keyword, length, unlimited_kwargs = limit
            default_length = length
            if keyword not in env_kwargs:  # a limit the user set stays the env's own
                env = jaxmarl.make(self.env_name, **env_kwargs, **unlimited_kwargs)
        self._env = env
        self.agents = list(env.agents)
        super().__init__(num_envs, default_length if episode_length is None else episode_length,
                         reward_scale, action_repeat)
        obs_space = homogeneous(self.env_name, self.agents, [
            _convert_space(env.observation_space(a), "observation") for a in self.agents], "observation")
        action_space = homogeneous(self.env_name, self.agents, [
            _convert_space(env.action_space(a), "action") for a in self.agents], "action")
        self._set_agent_spaces(len(self.agents), obs_space, action_space)

    def _stack(self, per_agent: dict) -> jnp.ndarray:
        return jnp.stack([jnp.asarray(per_agent[a], jnp.float32) for a in self.agents])

    def _reset_one(self, key):
        obs, state = self._env.reset(key)
        return self._stack(obs), state

    def _step_one(self, key, backend_state, action):
        actions = {a: action[i] for i, a in enumerate(self.agents)}
        obs, state, rewards, dones, _ = self._env.step_env(key, backend_state, actions)
        return self._stack(obs), state, self._stack(rewards), dones["__all__"]
