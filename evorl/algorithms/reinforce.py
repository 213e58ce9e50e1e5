r"""REINFORCE with a learned baseline (Williams, 1992; Sutton & Barto, 2018, section 13.4).

The return is Monte Carlo: the discounted sum of rewards to the end of the episode,

.. math::
    G_t = \sum_{k=0}^{\tau_t - t} \gamma^k r_{t+k}, \qquad
    L = -\mathbb{E}_m[\log \pi(a_t|s_t)\, (G_t - V(s_t))]
        + c_v \tfrac12 \mathbb{E}_m[(G_t - V(s_t))^2] - c_e \mathbb{E}_m[H(\pi(\cdot|s_t))]

with :math:`\tau_t` the step at which :math:`s_t`'s episode ends (terminated, or truncated by the
time limit: the return up to the limit) and :math:`G_t - V(s_t)` held constant in the policy
term. :math:`\mathbb{E}_m` averages over the *complete* steps only: those whose episode ends
inside the rollout. A step whose episode the rollout's end cuts has no return yet and is left
out of the loss. :math:`V` is a baseline and never a target, which is what makes this
REINFORCE rather than actor-critic: A2C with ``gae_lambda = 1`` would complete the cut return
with :math:`\gamma^n V(s_{t+n})` (and :math:`V(s_{final})` at a time limit) and learn from every
step. The mask favours episodes short enough to end inside the rollout, a bias that shrinks as
the rollout grows: give it at least the longest episode (500 steps for CartPole-v1), where most
steps are complete. ``training.gae_lambda`` is not used.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
from flax import struct

from evorl.config.hparams import check_a2c
from evorl.engine.on_policy_workflow import OnPolicyWorkflow
from evorl.envs.spaces import Box, Space
from evorl.rl.actor_critic import ActorCriticAgent, NetworkFactory, build_actor_critic
from evorl.rl.algorithm import ON_POLICY, Algorithm
from evorl.rl.gae import compute_gae


@struct.dataclass
class REINFORCEHParams:
    """REINFORCE's loss hyperparameters (data: a population may vary each field)."""

    #: The discount :math:`\gamma` (``training.gamma``).
    gamma: float
    #: :math:`c_v`, the baseline loss's weight.
    vf_coef: float
    #: :math:`c_e`, the entropy bonus's weight.
    ent_coef: float

    def validated(self) -> "REINFORCEHParams":
        check_a2c(self)
        return self


@dataclass(frozen=True, eq=False)
class REINFORCEAgent(ActorCriticAgent):
    """The module docstring's loss; ``compute_targets`` gives the returns and the mask."""

    def compute_targets(self, agent_state, trajectory):
        zeros = jnp.zeros_like(trajectory.rewards)  # [T, B]: no value enters the return
        returns, _ = compute_gae(trajectory.rewards, zeros, zeros, trajectory.terminated,
                                 trajectory.truncated, agent_state.hparams.gamma, 1.0)  # [T, B]
        done = jnp.logical_or(trajectory.terminated, trajectory.truncated)  # [T, B]
        complete = jax.lax.cummax(done.astype(jnp.float32), axis=0, reverse=True)  # [T, B]: an end at or after t
        return trajectory.replace(extras={**trajectory.extras, "returns": returns, "complete": complete})

    def loss(self, agent_state, batch, key):
        hp = agent_state.hparams
        dist_params, values, _ = self.unroll(agent_state, batch)  # [N, num_params], [N]
        returns, complete = batch.extras["returns"], batch.extras["complete"]  # [N], [N]
        count = jnp.maximum(jnp.sum(complete), 1.0)

        def masked_mean(x):
            return jnp.sum(x * complete) / count

        advantages = jax.lax.stop_gradient(returns - values)  # [N]
        log_prob = self.distribution.log_prob(dist_params, batch.actions)  # [N]
        policy_loss = -masked_mean(log_prob * advantages)
        value_loss = 0.5 * masked_mean(jnp.square(returns - values))
        entropy = masked_mean(self.distribution.entropy(dist_params, key))
        loss = policy_loss + hp.vf_coef * value_loss - hp.ent_coef * entropy
        metrics = {"loss": loss, "policy_loss": policy_loss, "value_loss": value_loss, "entropy": entropy,
                   "complete_fraction": jnp.mean(complete)}
        return loss, jax.lax.stop_gradient(metrics)


def make_mlp_reinforce_agent(
    action_space: Space,
    obs_space: Box | None = None,
    vf_coef: float = 0.5,
    ent_coef: float = 0.01,
    gamma: float = 0.99,
    network_factory: NetworkFactory | None = None,
    **network_options,
) -> REINFORCEAgent:
    """A REINFORCE agent (see :class:`REINFORCEAgent`); networks as in
    :func:`~evorl.algorithms.ppo.make_mlp_ppo_agent`."""
    hparams = REINFORCEHParams(gamma=gamma, vf_coef=vf_coef, ent_coef=ent_coef).validated()
    return build_actor_critic(REINFORCEAgent, "make_mlp_reinforce_agent", action_space, obs_space,
                              network_factory, network_options, hparams)


#: Monte-Carlo returns: ``training.gamma`` is its one training key that is a hyperparameter.
REINFORCE = Algorithm("REINFORCE", make_mlp_reinforce_agent, REINFORCEHParams, ON_POLICY, training_hparams=("gamma",),
                      training_defaults={"num_epochs": 1, "num_minibatches": 1})


class REINFORCEWorkflow(OnPolicyWorkflow):
    """REINFORCE: one gradient step on the complete steps of each (long) rollout."""

    algorithm = REINFORCE
    one_gradient_step = True
