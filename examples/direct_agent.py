"""The seed's "Direct Agent Instantiation" example. One addition: ``obs_space=env.obs_space``,
because a network's parameters cannot be created without knowing the observation shape."""

import jax

from evorl.algorithms.ppo import make_mlp_ppo_agent
from evorl.envs import create_env

# Setup environment

env = create_env(
    dict(env_name="CartPole-v1", env_type="gymnax"),
    episode_length=200,
    parallel=8
)

# Build PPO agent with custom architecture

agent = make_mlp_ppo_agent(
    action_space=env.action_space,
    obs_space=env.obs_space,
    clip_epsilon=0.2,
    actor_hidden_layer_sizes=(256, 256),
    critic_hidden_layer_sizes=(256, 256),
    normalize_obs=True,
    normalize_gae=True,
)

# Access network parameters

key = jax.random.PRNGKey(0)
agent_state = agent.init(key)
print(f"Policy network initialized with parameters: {agent_state.params.keys()}")
