"""A trained policy as a plain callable: ``evorl.load_policy(run_dir)``.

::

    policy = evorl.load_policy("runs/ppo")               # the newest checkpoint
    action = policy(obs)                                 # one observation [*obs_shape] -> env action
    actions = policy(batch)                              # [B, *obs_shape] -> [B, *action_shape]
    actions = policy(batch, deterministic=False, seed=1) # sampled instead of greedy

Actions are the environment's (NumPy): a ``Discrete`` index, or a ``Box`` vector within its
bounds, exactly what evaluation steps the environment with (``agent.to_env_action`` of
``agent.policy_step``, greedy or sampled, environment ``i`` of a batch with
``fold_in(key, i)``). Observations are raw: the agent's observation statistics
(``normalize_obs``) are applied inside it. Both paths are jitted once per batch size.

A recurrent policy (``agent.core``) remembers: each call continues the episodes of the last
one (a batch of size ``B`` is ``B`` episodes side by side); ``policy.reset()`` starts new
episodes, ``policy.reset(done)`` those of the environments where ``done [B]`` is true. A call
with another batch size starts new episodes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import numpy as np

from evorl.config import ConfigError
from evorl.engine.evaluator import act as evaluator_act
from evorl.rl.rollout import reset_policy_state


class Policy:
    """The acting part of a trained agent: ``policy(obs, deterministic=True, key=None, seed=None)``.

    ``obs_space`` / ``action_space`` are the environment's spaces (``evorl.envs.Box`` /
    ``Discrete``). Sampling takes ``key`` (a JAX PRNG key) or ``seed`` (an int); with neither,
    the policy's own key advances on every call (seeded 0).
    """

    def __init__(self, agent: Any, agent_state: Any, obs_space: Any, action_space: Any, iteration: int = 0):
        self.agent = agent
        self.agent_state = agent_state
        self.obs_space = obs_space
        self.action_space = action_space
        #: The training iteration of the checkpoint the parameters come from.
        self.iteration = iteration
        self._key = jax.random.PRNGKey(0)
        #: A recurrent policy's state of the episodes in progress (leaves ``[B, ...]``), else None.
        self.policy_state = None

        def act(state, policy_state, obs, key):
            actions, policy_state = evaluator_act(agent, state, policy_state, obs, key)
            return agent.to_env_action(actions), policy_state

        self._act = jax.jit(act)

    def reset(self, done: Any = None) -> None:
        """A recurrent policy starts new episodes: all of them, or those where ``done [B]``."""
        if done is None or self.policy_state is None:
            self.policy_state = None
            return
        done = np.asarray(done, bool).reshape(-1)
        self.policy_state = reset_policy_state(self.policy_state, done, self.agent.initial_policy_state(done.size))

    def __call__(self, obs: Any, deterministic: bool = True, key: jax.Array | None = None,
                 seed: int | None = None) -> np.ndarray:
        obs = np.asarray(obs, dtype=np.float32)
        shape = tuple(self.obs_space.shape)
        single = obs.shape == shape
        if not single and obs.shape[1:] != shape:
            raise ValueError(f"policy: observation of shape {obs.shape}; this policy takes one observation "
                             f"{list(shape)} or a batch [B, {', '.join(map(str, shape))}].")
        batch = obs[None] if single else obs
        if self.policy_state is None or jax.tree.leaves(self.policy_state)[0].shape[0] != batch.shape[0]:
            self.policy_state = self.agent.initial_policy_state(batch.shape[0])
        if deterministic:
            if key is not None or seed is not None:
                raise ValueError("policy: key / seed sample actions; pass deterministic=False with them.")
        else:
            if key is not None and seed is not None:
                raise ValueError("policy: pass key or seed, not both.")
            if key is None and seed is None:
                self._key, key = jax.random.split(self._key)
            elif seed is not None:
                key = jax.random.PRNGKey(seed)
        actions, self.policy_state = self._act(self.agent_state, self.policy_state, batch, key)
        actions = np.asarray(actions)
        return actions[0] if single else actions

    def __repr__(self) -> str:
        return (f"Policy({type(self.agent).__name__}, obs_space={self.obs_space}, action_space={self.action_space}, "
                f"iteration={self.iteration})")


def load_policy(run_dir: str | Path, step: int | None = None, agent: int | None = None) -> Policy:
    """The policy of the run folder ``run_dir`` from checkpoint ``step`` (default: the newest).

    A population run (``training.num_seeds`` > 1 or hyperparameter lists) trained several
    agents: ``agent=i`` picks agent ``i`` (numbered as in its logs and errors); without it the
    error lists them (a PBT run's: best first, with the hyperparameters they evolved to).
    """
    from evorl.app.experiment import load_run

    workflow, state, iteration = load_run(run_dir, step)
    agent_state = state.agent_state
    if workflow.population:
        if agent is None or not 0 <= agent < workflow.num_agents:
            raise ConfigError(f"{run_dir} trained {workflow.num_agents} agents: pass agent=0..{workflow.num_agents - 1} "
                              f"to load_policy ({agent_list(workflow, run_dir, int(iteration))}); got agent={agent}.")
        agent_state = jax.tree.map(lambda x: x[agent], agent_state)
    elif agent not in (None, 0):
        raise ConfigError(f"{run_dir} trained one agent: agent={agent} does not exist (leave it out, or 0).")
    agent_state = jax.device_put(jax.device_get(agent_state))  # one device, whatever the training placement
    env = workflow.env
    return Policy(workflow.agent, agent_state, env.obs_space, env.action_space, int(iteration))



def agent_list(workflow: Any, run_dir: str | Path, iteration: int) -> str:
    """The agents of a population run, as a load_policy error lists them: each one's initial
    hyperparameters and seed; for a PBT run, the population its last step (at or before the
    checkpoint's ``iteration``) left, best first, with the fitness it ranked them by."""
    from evorl.app.pbt_lineage import agent_label, population_after_step

    population = population_after_step(run_dir, iteration)
    if population is None:
        return "; ".join(workflow.agent_labels())
    step, agents = population
    return (f"population-based training, as its step at iteration {step} left them, best first: "
            + "; ".join(agent_label(a) for a in agents))
