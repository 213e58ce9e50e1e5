"""A trained policy as a plain callable: ``evorl.load_policy(run_dir)``, or
``Policy.from_workflow(workflow, state)`` for one trained from Python; ``policy.save(path)``
writes it to a folder that ``evorl.load_policy(path)`` reads back.

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

A saved policy (:meth:`Policy.save`) is a folder of two files: ``policy.yaml``, the resolved
experiment config the agent is built from (its ``env`` section gives the spaces) and the
training iteration, and ``policy.msgpack``, the agent's state (parameters, observation
statistics, the hyperparameters sampled acting reads) in flax's msgpack format, which holds
arrays only: loading it runs no code.

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

from evorl.app.errors import ArgumentError, RunFolderError
from evorl.engine.evaluator import act as evaluator_act
from evorl.rl.rollout import reset_policy_state

#: The files of a saved policy's folder (:meth:`Policy.save`).
POLICY_YAML = "policy.yaml"
POLICY_STATE = "policy.msgpack"


class Policy:
    """The acting part of a trained agent: ``policy(obs, deterministic=True, key=None, seed=None)``.

    ``obs_space`` / ``action_space`` are the environment's spaces (``evorl.envs.Box`` /
    ``Discrete``). Sampling takes ``key`` (a JAX PRNG key) or ``seed`` (an int); with neither,
    the policy's own key advances on every call (seeded 0).
    """

    def __init__(self, agent: Any, agent_state: Any, obs_space: Any, action_space: Any, iteration: int = 0,
                 config: dict | None = None):
        self.agent = agent
        self.agent_state = agent_state
        self.obs_space = obs_space
        self.action_space = action_space
        #: The training iteration of the checkpoint the parameters come from.
        self.iteration = iteration
        #: The resolved experiment config the agent was built from (plain data), which
        #: :meth:`save` writes; None for a policy assembled by hand, which cannot be saved.
        self.config = config
        self._key = jax.random.PRNGKey(0)
        #: A recurrent policy's state of the episodes in progress (leaves ``[B, ...]``), else None.
        self.policy_state = None

        def act(state, policy_state, obs, key):
            actions, policy_state = evaluator_act(agent, state, policy_state, obs, key)
            return agent.to_env_action(actions), policy_state

        self._act = jax.jit(act)

    @classmethod
    def from_workflow(cls, workflow: Any, state: Any, agent: int | None = None) -> "Policy":
        """The policy of ``workflow`` in its training ``state`` (what ``workflow.learn`` returns,
        or ``workflow.init``'s): agent ``agent`` of a population (``training.num_seeds`` > 1 or
        hyperparameter lists), which must be named; the only one otherwise."""
        from evorl.app.experiment import resolved_config

        return cls._of(workflow, state, agent, int(np.max(jax.device_get(state.iteration))),
                       resolved_config(workflow.config), lambda: "; ".join(workflow.agent_labels()),
                       "the workflow", "Policy.from_workflow")

    @classmethod
    def _of(cls, workflow: Any, state: Any, agent: int | None, iteration: int, config: dict,
            agents_text: Any, where: str, call: str) -> "Policy":
        agent_state = state.agent_state
        if workflow.population:
            if agent is None or not 0 <= agent < workflow.num_agents:
                raise ArgumentError(f"{where} trained {workflow.num_agents} agents: pass agent=0..{workflow.num_agents - 1} "
                                  f"to {call} ({agents_text()}); got agent={agent}.")
            agent_state = jax.tree.map(lambda x: x[agent], agent_state)
        elif agent not in (None, 0):
            raise ArgumentError(f"{where} trained one agent: agent={agent} does not exist (leave it out, or 0).")
        agent_state = jax.device_put(jax.device_get(agent_state))  # one device, whatever the training placement
        env = workflow.env
        return cls(workflow.agent, agent_state, env.obs_space, env.action_space, iteration, config)

    def save(self, path: str | Path) -> Path:
        """Writes the policy to the folder ``path`` (created; its two files replaced):
        ``evorl.load_policy(path)`` reads it back, the same actions for the same observations.
        A recurrent policy's episodes in progress are not saved: the loaded one starts new ones."""
        import yaml
        from flax import serialization

        if self.config is None:
            raise ValueError("policy.save: this policy has no config to rebuild its agent from (it was assembled "
                             "by hand); get it with Policy.from_workflow(workflow, state) or evorl.load_policy.")
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / POLICY_YAML).write_text(yaml.safe_dump({"iteration": self.iteration, "config": self.config},
                                                         sort_keys=False), encoding="utf-8")
        (folder / POLICY_STATE).write_bytes(serialization.to_bytes(jax.device_get(self.agent_state)))
        return folder

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
    from evorl.app.experiment import load_run, resolved_config

    if (Path(run_dir) / POLICY_STATE).is_file():
        if step is not None or agent is not None:
            raise ArgumentError(f"{run_dir} is a saved policy (Policy.save), one agent at one step: leave out step and "
                              f"agent.")
        return load_saved_policy(run_dir)
    workflow, state, iteration = load_run(run_dir, step)
    return Policy._of(workflow, state, agent, int(iteration), resolved_config(workflow.config),
                      lambda: agent_list(workflow, run_dir, int(iteration)), str(run_dir), "load_policy")


def load_saved_policy(folder: str | Path) -> Policy:
    """The policy :meth:`Policy.save` wrote to ``folder``: its agent rebuilt from the saved
    config (the env made once, for its spaces), its state read into the agent's own layout."""
    import yaml
    from flax import serialization

    from evorl.app.run_folder import utf8_text
    from evorl.envs import create_env
    from evorl.workflows import resolve_workflow_cls

    folder = Path(folder)
    saved = yaml.safe_load(utf8_text(folder / POLICY_YAML))
    cls = resolve_workflow_cls(saved["config"]["workflow_cls"])
    config = cls.parse_config(saved["config"])
    env = create_env(config.env, episode_length=config.env.episode_length, parallel=1)
    agent = cls.build_agent(env, config)
    layout = jax.eval_shape(agent.init, jax.random.PRNGKey(0))
    state = serialization.msgpack_restore((folder / POLICY_STATE).read_bytes())
    try:  # the saved hyperparameters keep their own layout (init's may be None: PPO's)
        agent_state = serialization.from_state_dict(layout.replace(hparams=None), {**state, "hparams": None})
    except (ValueError, KeyError) as e:
        raise RunFolderError(f"{folder / POLICY_STATE} does not fit the agent its {POLICY_YAML} builds: {e}") from None
    agent_state = agent_state.replace(hparams=_restore_like(agent.default_hparams(), state["hparams"]))
    agent_state = jax.device_put(agent_state)
    return Policy(agent, agent_state, env.obs_space, env.action_space, int(saved["iteration"]), saved["config"])


def _restore_like(default: Any, saved: Any) -> Any:
    """The saved hyperparameters in the layout of the agent's ``default`` ones (a dataclass of
    arrays); as saved (a mapping of arrays, or None) where the agent has no default."""
    from flax import serialization

    from evorl.rl.agent import hparams_as_arrays

    if default is None or saved is None:
        return saved
    return serialization.from_state_dict(hparams_as_arrays(default), saved)



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
