"""Greedy evaluation: one episode in each of ``num_episodes`` parallel environments."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from evorl.agent import Agent, AgentState
from evorl.envs.vec_env import VectorEnv


class Evaluator:
    """Runs ``num_episodes`` greedy episodes (``agent.evaluate_actions``) side by side.

    Each environment plays exactly one episode, until it terminates or reaches the time
    limit; ``evaluate`` returns the episode returns and lengths ``[num_episodes]``. The time
    limit ends every episode within ``episode_length`` steps, so the loop always finishes.
    """

    def __init__(self, env: VectorEnv, agent: Agent, num_episodes: int):
        self.env = env.with_num_envs(num_episodes)
        self.agent = agent
        self.num_episodes = num_episodes

    def evaluate(self, agent_state: AgentState, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        env, agent = self.env, self.agent
        zeros = jnp.zeros((self.num_episodes,), jnp.float32)

        def cond(carry):
            _, _, _, active, t = carry
            return jnp.any(active) & (t < env.episode_length)

        def body(carry):
            env_state, returns, lengths, active, t = carry
            actions = agent.evaluate_actions(agent_state, env_state.obs)
            env_state = env.step(env_state, agent.to_env_action(actions))
            # the env's own (unscaled) episode return, read when the episode ends
            ended = active & env_state.done  # [E]
            returns = jnp.where(ended, env_state.episode_return, returns)
            lengths = jnp.where(ended, env_state.episode_length.astype(jnp.float32), lengths)
            return env_state, returns, lengths, active & ~env_state.done, t + 1

        init = (env.reset(key), zeros, zeros, jnp.ones((self.num_episodes,), bool), jnp.zeros((), jnp.int32))
        _, returns, lengths, _, _ = lax.while_loop(cond, body, init)
        return returns, lengths


def make_evaluator(env, agent: Agent, num_episodes: int):
    """The evaluator for ``env``: compiled for JAX envs, stepped on the host for host envs."""
    if env.on_host:
        from evorl.evaluator_host import HostEvaluator  # noqa: F401  (merged from the host-env work)

        return HostEvaluator(env, agent, num_episodes)
    return Evaluator(env, agent, num_episodes)
