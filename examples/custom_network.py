"""Add your own network: PPO whose actor and critic are a small residual MLP (Discrete actions).

    python examples/custom_network.py                  # trains it on CartPole-v1 (in a temporary run folder)
    PYTHONPATH=examples evorl-train workflow_cls=custom_network.ResidualPPOWorkflow

A network is any ``init(key) -> params`` / ``apply(params, obs) -> output`` pair
(:class:`evorl.networks.Network`). A network factory builds the policy and value networks from
the env's spaces and the agent's network keys (:class:`evorl.rl.actor_critic.ActorCriticOptions`); the
workflow subclass declares it and keeps PPO's loss, hyperparameters and config keys.
"""

import flax.linen as nn
import jax.numpy as jnp

from evorl.algorithms.ppo import PPOWorkflow
from evorl.app.experiment import run_experiment
from evorl.networks import Network


class ResidualMLP(nn.Module):
    width: int
    outputs: int

    @nn.compact
    def __call__(self, obs):  # [..., obs_dim] -> [..., outputs]
        x = nn.Dense(self.width)(obs)
        x = x + nn.Dense(self.width)(nn.tanh(x))
        return nn.Dense(self.outputs, kernel_init=nn.initializers.orthogonal(0.01))(nn.tanh(x))


def as_network(module: nn.Module, obs_shape: tuple[int, ...], squeeze: bool = False) -> Network:
    dummy = jnp.zeros((1,) + obs_shape, jnp.float32)
    apply = (lambda params, obs: module.apply(params, obs)[..., 0]) if squeeze else module.apply
    return Network(init=lambda key: module.init(key, dummy), apply=apply)


def residual_networks(action_space, obs_space, options):
    """Policy logits and V(s) from residual MLPs of width ``actor_hidden_layer_sizes[0]``."""
    width = options.actor_hidden_layer_sizes[0]
    policy = as_network(ResidualMLP(width, action_space.n), obs_space.shape)
    value = as_network(ResidualMLP(width, 1), obs_space.shape, squeeze=True)
    return policy, value


class ResidualPPOWorkflow(PPOWorkflow):
    network_factory = staticmethod(residual_networks)


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory(prefix="evorl-residual-") as run_dir:  # nothing written into the repository
        result = run_experiment({
            "workflow_cls": "__main__.ResidualPPOWorkflow",
            "env": {"env_name": "CartPole-v1", "env_type": "gymnax"},
            "training": {"num_iterations": 100, "eval_interval": 25},
        }, output_dir=run_dir)
    print("final evaluation return:", result.final_metrics["eval/episode_return"])
