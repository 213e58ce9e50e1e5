"""IMPALA (Espeholt et al., 2018): actor-critic with V-trace off-policy correction.

The actors' policy :math:`\\mu` lags behind the learner's :math:`\\pi`: the learner takes
several minibatch steps per rollout, and with ``training.actor_lag = k`` the rollout acts
with the parameters of ``k`` iterations ago. V-trace corrects for the difference; the loss
recomputes it on every minibatch of whole sequences ``[T, b]`` with the current parameters.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax.numpy as jnp
from flax import struct
from jax import lax

from evorl.config import FloatOrInf
from evorl.config.hparams import check_impala
from evorl.engine.on_policy_workflow import OnPolicyWorkflow
from evorl.envs.spaces import Box, Space
from evorl.rl import metrics as M
from evorl.rl.actor_critic import ActorCriticAgent, NetworkFactory, build_actor_critic
from evorl.rl.algorithm import ON_POLICY, Algorithm
from evorl.rl.gae import explained_variance
from evorl.rl.vtrace import compute_pg_advantage, compute_vtrace  # noqa: F401  (importable from here too)


@struct.dataclass
class IMPALAHParams:
    """IMPALA's loss hyperparameters (data: a population may vary each field, see
    ``PPOHParams``; ``gamma`` and ``gae_lambda`` are ``training.gamma`` and
    ``training.gae_lambda``). ``pg_rho_bar`` None means ``vtrace_rho_bar``."""

    #: The discount :math:`\gamma` (``training.gamma``).
    gamma: float
    #: V-trace's :math:`\lambda` (``training.gae_lambda``; the paper uses 1).
    gae_lambda: float
    #: :math:`\bar\rho`, the clip of the importance ratio in the TD errors (``.inf``: no clip).
    vtrace_rho_bar: float
    #: :math:`\bar c`, the clip of the trace coefficients; at most ``vtrace_rho_bar``.
    vtrace_c_bar: float
    #: The clip of the ratio in the policy-gradient advantage (null: ``vtrace_rho_bar``).
    pg_rho_bar: float | None
    #: :math:`c_b`, the value loss's weight.
    baseline_cost: float
    #: :math:`c_e`, the entropy bonus's weight.
    ent_coef: float
    #: :math:`c_{kl}`, the weight of the KL penalty to the behaviour policy.
    kl_coef: float

    def validated(self) -> "IMPALAHParams":
        """Range checks, and ``pg_rho_bar`` filled in; returns the hyperparameters to use."""
        hp = self.replace(pg_rho_bar=self.vtrace_rho_bar) if self.pg_rho_bar is None else self
        check_impala(hp)
        return hp


@dataclass(frozen=True, eq=False)
class IMPALAAgent(ActorCriticAgent):
    r"""IMPALA's loss on a minibatch of whole sequences ``[T, b]`` acted by :math:`\mu`:

    .. math::
        L = -\mathbb{E}[\log \pi(a_t|s_t) A_t] + c_b \tfrac12 \mathbb{E}[(v_t - V(s_t))^2]
            - c_e \mathbb{E}[H(\pi(\cdot|s_t))] + c_{kl} \mathbb{E}[KL(\mu(\cdot|s_t) \| \pi(\cdot|s_t))]

    with V-trace targets :math:`v_t` (:func:`compute_vtrace`) and advantages :math:`A_t`
    (:func:`compute_pg_advantage`) recomputed with the current parameters. The behaviour
    log-probabilities and distribution parameters come from the rollout's extras.
    ``vtrace_correction=False`` treats the data as on-policy (:math:`\pi/\mu := 1`, the
    paper's "no correction" baseline).
    """

    sequence_minibatches = True  # V-trace runs along time
    #: Correct for the actors' lag (false: :math:`\pi/\mu := 1`, the paper's "no correction").
    vtrace_correction: bool = True

    def sample_actions(self, dist_params, key):
        actions, extras = super().sample_actions(dist_params, key)
        return actions, {**extras, "behaviour_params": dist_params}

    def compute_targets(self, agent_state, trajectory):
        return trajectory  # V-trace needs the current parameters: computed in the loss

    def loss(self, agent_state, batch, key):
        hp = agent_state.hparams
        dist = self.distribution
        dist_params, values, next_values = self.unroll(agent_state, batch)  # [T, b, num_params], [T, b], [T, b]

        log_prob = dist.log_prob(dist_params, batch.actions)  # [T, b]
        log_rhos = lax.stop_gradient(log_prob - batch.extras["logp"])  # [T, b]
        correction_log_rhos = log_rhos if self.vtrace_correction else jnp.zeros_like(log_rhos)
        vs = compute_vtrace(
            batch.rewards, values, next_values, batch.terminated, batch.truncated, correction_log_rhos,
            hp.gamma, hp.gae_lambda, hp.vtrace_rho_bar, hp.vtrace_c_bar,
        )
        pg_advantages = compute_pg_advantage(
            batch.rewards, values, next_values, vs, batch.terminated, batch.truncated,
            correction_log_rhos, hp.gamma, hp.pg_rho_bar,
        )
        policy_loss = -jnp.mean(log_prob * pg_advantages)
        value_loss = 0.5 * jnp.mean(jnp.square(vs - values))
        entropy = jnp.mean(dist.entropy(dist_params, key))
        kl = jnp.mean(dist.kl(batch.extras["behaviour_params"], dist_params))
        loss = policy_loss + hp.baseline_cost * value_loss - hp.ent_coef * entropy + hp.kl_coef * kl

        ratios = jnp.exp(log_rhos)
        metrics = {
            "loss": loss,
            "policy_loss": policy_loss,
            "value_loss": value_loss,
            "entropy": entropy,
            "kl": kl,
            "mean_importance_ratio": jnp.mean(ratios),
            "max_importance_ratio": M.Metric(jnp.max(ratios), "max"),
            "min_importance_ratio": M.Metric(jnp.min(ratios), "min"),
            "rho_clip_fraction": jnp.mean((ratios > hp.vtrace_rho_bar).astype(jnp.float32)),
            "c_clip_fraction": jnp.mean((ratios > hp.vtrace_c_bar).astype(jnp.float32)),
            "pg_rho_clip_fraction": jnp.mean((ratios > hp.pg_rho_bar).astype(jnp.float32)),
            "abs_log_ratio": jnp.mean(jnp.abs(log_rhos)),
            "explained_variance": explained_variance(values, vs),
        }
        return loss, lax.stop_gradient(metrics)


def make_mlp_impala_agent(
    action_space: Space,
    obs_space: Box | None = None,
    vtrace_rho_bar: FloatOrInf = 1.0,
    vtrace_c_bar: FloatOrInf = 1.0,
    pg_rho_bar: FloatOrInf | None = None,
    vtrace_correction: bool = True,
    baseline_cost: float = 0.5,
    ent_coef: float = 0.01,
    kl_coef: float = 0.0,
    gamma: float = 0.99,
    gae_lambda: float = 1.0,
    network_factory: NetworkFactory | None = None,
    **network_options,
) -> IMPALAAgent:
    """An IMPALA agent (see :class:`IMPALAAgent`); networks as in
    :func:`~evorl.algorithms.ppo.make_mlp_ppo_agent`.

    ``pg_rho_bar`` clips the ratio of the policy-gradient term; None uses ``vtrace_rho_bar``
    as the paper does. ``.inf`` disables a clip.
    """
    hparams = IMPALAHParams(
        gamma=gamma, gae_lambda=gae_lambda, vtrace_rho_bar=vtrace_rho_bar, vtrace_c_bar=vtrace_c_bar,
        pg_rho_bar=pg_rho_bar, baseline_cost=baseline_cost, ent_coef=ent_coef, kl_coef=kl_coef,
    ).validated()
    return build_actor_critic(IMPALAAgent, "make_mlp_impala_agent", action_space, obs_space, network_factory,
                              network_options, hparams, vtrace_correction=vtrace_correction)


IMPALA = Algorithm("IMPALA", make_mlp_impala_agent, IMPALAHParams, ON_POLICY)


class IMPALAWorkflow(OnPolicyWorkflow):
    """IMPALA. V-trace's lambda is ``training.gae_lambda`` (the paper uses 1)."""

    algorithm = IMPALA


#: The ``agent:`` config section of IMPALA (derived from ``make_mlp_impala_agent``).
IMPALAAgentConfig = IMPALA.agent_config_cls
