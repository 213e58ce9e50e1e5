r"""CEM-RL (Pourchot & Sigaud, 2019): a separable cross-entropy method over the actor's
parameters, half of each generation improved by a shared TD3 critic; one generation is one
pure function, run by :class:`~evorl.workflows.cemrl.CEMRLWorkflow` (``cfg`` below is its
``cemrl:`` section, :class:`~evorl.workflows.cemrl.CEMRLConfig`).

**sep-CEM.** The search distribution over the flattened actor parameters ``x [D]`` is
:math:`\mathcal N(\mu, \mathrm{diag}(v))` (:class:`CEMState`). A generation samples
:math:`x_i = \mu + \sqrt{v} \odot n_i`, :math:`n_i \sim \mathcal N(0, I)`, ``i < N``; with the
``K_e`` best (elites, by fitness, best first) :math:`z_1, \dots, z_{K_e}` and the log-rank
weights :math:`\lambda_j = \log(1 + K_e) - \log j` normalised to sum to 1:

.. math::
    \mu' = \sum_j \lambda_j z_j, \qquad
    v' = \sum_j \lambda_j (z_j - \mu)^2 + \epsilon_t, \qquad
    \epsilon_{t+1} = \tau_\epsilon \epsilon_t + (1 - \tau_\epsilon) \epsilon_{end}

(the squares around the *old* mean :math:`\mu`, the paper's eq. 2 restricted to the diagonal;
the authors' code also divides the sum by :math:`K_e`, which we do not). The initial
variance is ``sigma_init`` in every coordinate (the paper's :math:`\Sigma = \sigma_{init} I`).

**One generation** (:func:`make_generation`), read top to bottom:

1. sample ``N`` actors from the distribution ``[N, D]``;
2. once the buffer holds ``learning_starts`` transitions: the first ``K = num_learning``
   actors (the paper's ``N/2``) learn for ``num_updates`` gradient steps. Each step samples
   one batch per learning actor; the shared critic descends the mean over the ``K`` actors of
   TD3's critic loss (:meth:`~evorl.algorithms.td3.TD3Agent.critic_loss`: actor ``k``'s batch,
   its target actor, a copy of the actor at the generation's start, and the shared target
   critic, which lives across generations), then every ``policy_delay`` steps each
   learning actor ascends its :math:`Q_1` (:meth:`~evorl.algorithms.td3.TD3Agent.actor_loss`,
   vmapped, a fresh Adam state per actor and generation, as the authors' code) and the targets
   move by Polyak (``tau``). The schedule is fixed: ``num_updates`` critic steps per
   generation, the paper's "as many steps as the previous generation's env steps" when
   ``num_updates = N x episode_length``, which one compiled program can hold;
3. all ``N`` actors play ``episodes_per_actor`` episodes each, vmapped: a fixed rollout of
   ``episode_length`` steps per environment (an episode that ends early is followed by the
   next one, whose steps are stored too); every transition goes into the shared buffer;
4. the fitness of actor ``i`` is the mean return of its episodes that ended; the CEM update
   moves the distribution (kept as it was while the actions are uniformly random, during the
   first ``warmup_steps`` env steps).

The evaluated and checkpointed agent is TD3's, its ``actor`` the distribution's mean.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct
from jax import lax
from jax.flatten_util import ravel_pytree

from evorl import metrics as M
from evorl import replay
from evorl.agent import AgentState
from evorl.algorithms.td3 import TD3Agent
from evorl.continuous_control import ExploringActor
from evorl.envs import VectorEnv
from evorl.rollout import EpisodeStats, rollout_with_policy_state
from evorl.workflows.on_policy import episode_metrics


# --------------------------------------------------------------------------------------
# sep-CEM
# --------------------------------------------------------------------------------------
@struct.dataclass
class CEMState:
    mean: jax.Array  # [D] the distribution's mean
    var: jax.Array  # [D] its diagonal covariance
    eps: jax.Array  # [] the additive noise the next update adds to var


def log_rank_weights(num_elites: int) -> jax.Array:
    r""":math:`\lambda_j \propto \log(1 + K_e) - \log j`, ``j = 1..K_e``, summing to 1: ``[K_e]``."""
    w = jnp.log(1.0 + num_elites) - jnp.log(jnp.arange(1, num_elites + 1, dtype=jnp.float32))
    return w / jnp.sum(w)


def cem_init(mean: jax.Array, sigma_init: float, eps_init: float) -> CEMState:
    return CEMState(mean=jnp.asarray(mean, jnp.float32), var=jnp.full(jnp.shape(mean), sigma_init, jnp.float32),
                    eps=jnp.asarray(eps_init, jnp.float32))


def cem_sample(cem: CEMState, key: jax.Array, num: int) -> jax.Array:
    r""":math:`x_i = \mu + \sqrt v \odot n_i`, :math:`n_i \sim \mathcal N(0, I)`: ``[num, D]``."""
    return cem.mean + jnp.sqrt(cem.var) * jax.random.normal(key, (num,) + cem.mean.shape)


def cem_update(cem: CEMState, population: jax.Array, fitness: jax.Array, num_elites: int, tau_eps: float,
               eps_end: float) -> CEMState:
    r"""The sep-CEM update (module docstring) from ``population [N, D]`` and ``fitness [N]``
    (higher is better; a non-finite fitness ranks last): the weighted mean of the elites, their
    weighted squared deviations from the old mean plus :math:`\epsilon_t`, and the decayed
    :math:`\epsilon_{t+1}`."""
    fitness = jnp.where(jnp.isfinite(fitness), fitness, -jnp.inf)
    elites = population[lax.top_k(fitness, num_elites)[1]]  # [K_e, D], best first
    weights = log_rank_weights(num_elites)  # [K_e]
    mean = weights @ elites  # [D]
    var = weights @ jnp.square(elites - cem.mean) + cem.eps  # [D]
    eps = tau_eps * cem.eps + (1.0 - tau_eps) * eps_end
    return CEMState(mean=mean, var=var, eps=eps)


# --------------------------------------------------------------------------------------
# State
# --------------------------------------------------------------------------------------
@struct.dataclass
class CEMRLState:
    key: jax.Array
    #: TD3's agent state: ``params["actor"]`` the CEM mean's actor, ``params["critic"]`` the shared critic.
    agent_state: AgentState
    cem: CEMState  # mean [D], var [D], eps []
    target_critic: Any
    critic_opt_state: Any
    buffer: replay.ReplayBuffer  # the shared buffer, leaves [capacity, ...]
    iteration: jax.Array  # [] int32, completed generations


def init_cemrl_state(env: VectorEnv, agent: TD3Agent, critic_optimizer, cfg: Any, hparams: Any,
                     key: jax.Array) -> CEMRLState:
    """Fresh state: TD3's initial actor as the distribution's mean, an empty buffer."""
    key, agent_key = jax.random.split(key)
    agent_state = agent.init(agent_key).replace(hparams=hparams)
    flat, _ = ravel_pytree(agent_state.params["actor"])
    obs = jnp.zeros(env.obs_space.shape, jnp.float32)
    example = replay.Transition(obs=obs, action=jnp.zeros((agent.action_dim,), jnp.float32),
                                reward=jnp.zeros((), jnp.float32), discount=jnp.zeros((), jnp.float32), next_obs=obs)
    return CEMRLState(key=key, agent_state=agent_state, cem=cem_init(flat, cfg.sigma_init, cfg.eps_init),
                      target_critic=agent_state.params["critic"],
                      critic_opt_state=critic_optimizer.init(agent_state.params["critic"]),
                      buffer=replay.init(example, cfg.buffer_size), iteration=jnp.zeros((), jnp.int32))


# --------------------------------------------------------------------------------------
# One generation
# --------------------------------------------------------------------------------------
def polyak(tau: float, online: Any, target: Any) -> Any:
    return jax.tree.map(lambda o, t: tau * o + (1.0 - tau) * t, online, target)


def make_rl_phase(agent: TD3Agent, optimizer, cfg: Any):
    """``rl_phase(agent_state, target_critic, critic_opt_state, actors, buffer, key) ->
    (critic, target_critic, critic_opt_state, actors, metrics)``: step 2 of a generation for the
    learning actors ``actors`` (leaves ``[K, ...]``), as the module docstring says."""

    def view(agent_state, actor, critic):
        return agent_state.replace(params={"actor": actor, "critic": critic})

    def rl_phase(agent_state, target_critic, critic_opt_state, actors, buffer, key):
        num = jax.tree.leaves(actors)[0].shape[0]
        actor_opt_states = jax.vmap(optimizer.init)(actors)  # fresh Adam per actor and generation

        def critic_objective(critic, target_critic, target_actors, batches, keys):
            def one(target_actor, batch, k):  # actor k's batch and target actor, the shared target critic
                return agent.critic_loss(view(agent_state, target_actor, critic),
                                         {"actor": target_actor, "critic": target_critic}, batch, k)
            losses, metrics = jax.vmap(one)(target_actors, batches, keys)  # [K]
            return jnp.mean(losses), jax.tree.map(jnp.mean, metrics)

        def actor_step(actor, opt_state, critic, batch):
            (loss, _), grad = jax.value_and_grad(
                lambda a: agent.actor_loss(view(agent_state, a, critic), None, batch, None), has_aux=True)(actor)
            updates, opt_state = optimizer.update(grad, opt_state, actor)
            return optax.apply_updates(actor, updates), opt_state, loss

        def step(carry, inputs):
            critic, target_critic, critic_opt, actors, target_actors, actor_opts = carry
            index, step_key = inputs
            batch_key, loss_key = jax.random.split(step_key)
            batches = jax.vmap(replay.sample, in_axes=(None, 0, None))(
                buffer, jax.random.split(batch_key, num), cfg.batch_size)  # [K, batch_size, ...]
            (critic_loss, metrics), grad = jax.value_and_grad(critic_objective, has_aux=True)(
                critic, target_critic, target_actors, batches, jax.random.split(loss_key, num))
            updates, critic_opt = optimizer.update(grad, critic_opt, critic)
            critic = optax.apply_updates(critic, updates)

            def move_actors(actors, target_actors, actor_opts, target_critic):
                actors, actor_opts, losses = jax.vmap(actor_step, in_axes=(0, 0, None, 0))(
                    actors, actor_opts, critic, batches)  # [K]
                return (actors, polyak(cfg.tau, actors, target_actors), actor_opts,
                        polyak(cfg.tau, critic, target_critic), jnp.mean(losses))

            def keep(actors, target_actors, actor_opts, target_critic):
                return actors, target_actors, actor_opts, target_critic, jnp.zeros(())

            due = index % agent.policy_delay == 0
            actors, target_actors, actor_opts, target_critic, actor_loss = lax.cond(
                due, move_actors, keep, actors, target_actors, actor_opts, target_critic)
            metrics = {**metrics, "critic_loss": critic_loss, "actor_loss": actor_loss}
            return (critic, target_critic, critic_opt, actors, target_actors, actor_opts), (metrics, due)

        carry = (agent_state.params["critic"], target_critic, critic_opt_state, actors, actors, actor_opt_states)
        steps = (jnp.arange(cfg.num_updates), jax.random.split(key, cfg.num_updates))
        (critic, target_critic, critic_opt_state, actors, _, _), (metrics, due) = lax.scan(step, carry, steps)
        actor_loss = metrics.pop("actor_loss")
        metrics = {k: jnp.mean(v) for k, v in metrics.items()}
        metrics["actor_loss"] = jnp.sum(actor_loss) / jnp.maximum(jnp.sum(due), 1)
        return critic, target_critic, critic_opt_state, actors, metrics

    return rl_phase


def make_learn(agent: TD3Agent, optimizer, cfg: Any):
    """``learn(state, population [N, D], unravel, key) -> (critic, target_critic,
    critic_opt_state, population [N, D], metrics)``: step 2 of a generation, the first
    ``num_learning`` rows of ``population`` replaced by the trained actors (the rest as they
    were); before the buffer holds ``learning_starts`` transitions nothing moves (``lax.cond``)."""
    learners = cfg.learners
    rl_phase = make_rl_phase(agent, optimizer, cfg)

    def learn(state: CEMRLState, population: jax.Array, unravel, key):
        """Step 2: the critic and the learning actors (the first ``learners`` of ``population``)."""
        actors = jax.vmap(unravel)(population[:learners])  # leaves [K, ...]
        args = (state.agent_state, state.target_critic, state.critic_opt_state, actors, state.buffer, key)
        shapes = jax.eval_shape(rl_phase, *args)[-1]

        def skip(agent_state, target_critic, critic_opt_state, actors, buffer, key):
            zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
            return agent_state.params["critic"], target_critic, critic_opt_state, actors, zeros

        learning = state.buffer.size >= max(cfg.learning_starts, 1)
        critic, target_critic, critic_opt_state, actors, metrics = lax.cond(learning, rl_phase, skip, *args)
        trained = jax.vmap(lambda a: ravel_pytree(a)[0])(actors)  # [K, D]
        metrics["learning"] = learning.astype(jnp.float32)
        return critic, target_critic, critic_opt_state, population.at[:learners].set(trained), metrics

    return learn


def make_generation(env: VectorEnv, agent: TD3Agent, optimizer, cfg: Any):
    """``generation(state) -> (state, metrics)``, one generation (module docstring); ``env``
    holds ``episodes_per_actor`` environments, each actor plays them for ``episode_length`` steps."""
    num, learners, length = cfg.population_size, cfg.learners, env.episode_length
    steps_per_generation = num * env.num_envs * length
    learn = make_learn(agent, optimizer, cfg)

    def generation(state: CEMRLState) -> tuple[CEMRLState, dict]:
        key, sample_key, learn_key, play_key = jax.random.split(state.key, 4)
        _, unravel = ravel_pytree(state.agent_state.params["actor"])
        population = cem_sample(state.cem, sample_key, num)  # [N, D]
        critic, target_critic, critic_opt_state, metrics = (state.agent_state.params["critic"], state.target_critic,
                                                            state.critic_opt_state, {})
        if learners > 0:
            critic, target_critic, critic_opt_state, population, metrics = learn(state, population, unravel, learn_key)
        agent_state = state.agent_state.replace(params={**state.agent_state.params, "critic": critic})
        random_actions = state.iteration * steps_per_generation < cfg.warmup_steps
        behaviour = ExploringActor(agent, random_actions)

        def play(x, k):  # actor x's episodes: [T, E] transitions and its ended episodes' sums
            reset_key, rollout_key = jax.random.split(k)
            member = agent_state.replace(params={**agent_state.params, "actor": unravel(x)})
            _, _, trajectory, stats = rollout_with_policy_state(env, behaviour, member, env.reset(reset_key), None,
                                                                 rollout_key, length)  # [T, E, ...]
            discounts = agent_state.hparams.discount * (1.0 - trajectory.terminated.astype(jnp.float32))  # [T, E]
            transitions = replay.n_step_transitions(
                trajectory.obs, trajectory.actions, trajectory.rewards, discounts,
                trajectory.terminated | trajectory.truncated, trajectory.next_obs, 1)  # [T, E]
            return transitions, stats

        transitions, stats = jax.vmap(play)(population, jax.random.split(play_key, num))  # [N, T, E], [N]
        buffer = replay.add(state.buffer, jax.tree.map(lambda x: x.reshape((-1,) + x.shape[3:]), transitions))
        fitness = stats.return_sum / jnp.maximum(stats.count, 1.0)  # [N] mean return of the ended episodes
        updated = cem_update(state.cem, population, fitness, cfg.num_elites, cfg.tau_eps, cfg.eps_end)
        cem = jax.tree.map(lambda old, new: jnp.where(random_actions, old, new), state.cem, updated)
        agent_state = agent_state.replace(params={"actor": unravel(cem.mean), "critic": critic})
        elites = lax.top_k(jnp.where(jnp.isfinite(fitness), fitness, -jnp.inf), cfg.num_elites)[1]  # [K_e]
        metrics.update(episode_metrics(EpisodeStats(*(jnp.sum(x) for x in (stats.return_sum, stats.length_sum,
                                                                             stats.count))), None))
        metrics.update(
            best_actor_return=M.Metric(jnp.max(fitness), "max"),
            fitness_mean=jnp.mean(fitness),
            fitness_std=jnp.std(fitness),
            elites_from_rl=jnp.sum(elites < learners).astype(jnp.float32),
            cem_std=jnp.mean(jnp.sqrt(cem.var)),
            cem_eps=cem.eps,
            buffer_size=M.Metric(buffer.size.astype(jnp.float32), "max"),
        )
        state = state.replace(key=key, agent_state=agent_state, cem=cem, target_critic=target_critic,
                              critic_opt_state=critic_opt_state, buffer=buffer, iteration=state.iteration + 1)
        return state, metrics

    return generation


__all__ = ["CEMRLState", "CEMState", "cem_init", "cem_sample", "cem_update", "init_cemrl_state",
           "log_rank_weights", "make_generation", "make_rl_phase"]
