"""How much memory a run needs, estimated before anything is compiled or allocated.

An order-of-magnitude estimate in float32 words (4 bytes), from the validated config and the
sizes of the agent's networks (:class:`NetworkSizes`: read with ``jax.eval_shape``, which
allocates nothing, or, before the agent is built, lower bounds from the config's widths).
With ``P`` parameters, ``N = training.num_seeds x variants`` agents, ``D`` devices (the
parameters replicated on each when ``distributed.layout=envs``), ``T x B`` rollout steps,
``M`` minibatches, ``W`` the summed input and output widths of the layers (activations per
sample and agent), ``n`` the agents acting in each env step (a multi-agent env's, declared by
the agent as ``Agent.num_agents``; 1 otherwise):

* parameters: ``N x P x (4 + actor_lag) x D_rep`` -- weights, gradient, Adam's two moments
  and the lagged copies of ``training.actor_lag``;
* rollout: ``N x T x B x (2 obs + action + 5 n + 2 + recurrent state) x copies`` -- obs and
  next obs (every agent's), the actions (every agent's), each agent's reward, log-prob, value,
  advantage and target, the shared terminated and truncated; ``copies = 2``
  (the rollout and its shuffled minibatch copy), ``3 + queue_size / num_actors`` with
  ``runner.mode=async`` (the actors' rollouts and the queue);
* activations: ``N x max(T x B / M, B) x n x W`` -- what the forward pass keeps for the
  backward one: each layer's input (for its weight gradient; a centralised critic's is the
  global state) and its output (for the nonlinearity's), the networks run once per agent
  (convolutions count their channels only: an underestimate for image torsos).

ES (:func:`es_terms`): the mean and its optimiser ``4 P`` (CMA-ES: its covariance and
eigenbasis, ``3 P^2``), the sampled candidates and their noise ``2 x population_size x P``,
and each member's episodes' observations and activations. Off-policy and evolution-guided
runs count their replay buffer (:func:`transition_words` per transition) and parameters
(``memory_terms`` in :mod:`evorl.engine.off_policy_workflow` and
:mod:`evorl.algorithms.population_rl`).

:func:`check_memory` compares the total with what the run may use (``runner.max_memory_gb``,
or the machine's: MemAvailable on CPU, the devices' ``bytes_limit`` on an accelerator) and
raises a one-line :class:`~evorl.config.ConfigError` naming the main contributors.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from evorl.config import num_agents
from evorl.config.runner import check_memory_fits, memory_message  # noqa: F401  (importable from here too)

#: Bytes of one stored number (float32, int32).
WORD_BYTES = 4
#: Scalars a rollout stores per step and agent: reward, log-prob, value, advantage, target.
AGENT_STEP_SCALARS = 5
#: Scalars a rollout stores per step that the agents share: terminated, truncated.
SHARED_STEP_SCALARS = 2
OVERRIDE = "runner.max_memory_gb"


@dataclass(frozen=True)
class NetworkSizes:
    """What the estimate reads of an agent's networks."""

    num_params: int
    #: Summed input and output widths of the layers: activations per sample and agent.
    activation_width: int
    #: One env step's observations (every agent's) in float32 words (a uint8 frame's pixels
    #: count a quarter each).
    obs_size: float
    #: One env step's actions (every agent's) in words.
    action_size: int
    #: Floats of a recurrent agent's state per environment (0 for a feed-forward agent).
    policy_state_size: int
    #: The layer with the most weights, as ``(inputs, outputs)``.
    largest_layer: tuple[int, ...]
    #: False: lower bounds from the config (before the agent is built).
    exact: bool = True
    #: The agents acting in each env step (``Agent.num_agents``): per-agent scalars are
    #: stored, and the networks run, this many times per step.
    agents_per_step: int = 1


@dataclass(frozen=True)
class Term:
    """One contributor: a name, its formula as text, its size in float32 words and the config
    keys that make it smaller."""

    name: str
    formula: str
    words: float
    keys: str

    @property
    def bytes(self) -> float:
        return self.words * WORD_BYTES


def sizes_of_agent(agent: Any) -> NetworkSizes:
    """The sizes of ``agent``'s networks, read from ``jax.eval_shape`` of its ``init`` (shapes
    only: nothing is allocated or compiled), and of one env step's data from its declared
    spaces and agents (``obs_space`` the step's observations, ``action_space`` one agent's)."""
    state = jax.eval_shape(lambda: agent.init(jax.random.PRNGKey(0)))
    leaves = jax.tree.leaves(state.params)
    kernels = [x.shape for x in leaves if len(x.shape) >= 2]
    largest = max(kernels, key=math.prod, default=())
    policy_state = jax.eval_shape(lambda: agent.initial_policy_state(1)) if agent.recurrent else None
    return NetworkSizes(
        num_params=sum(math.prod(x.shape) for x in leaves),
        activation_width=sum(shape[-2] + shape[-1] for shape in kernels),
        obs_size=math.prod(agent.obs_space.shape) * np.dtype(agent.obs_space.dtype).itemsize / WORD_BYTES,
        action_size=agent.num_agents * math.prod(agent.action_space.shape),
        policy_state_size=sum(math.prod(x.shape) for x in jax.tree.leaves(policy_state)),
        largest_layer=(math.prod(largest[:-1]), largest[-1]) if largest else (),
        agents_per_step=agent.num_agents,
    )


def sizes_from_config(agent_cfg: Any, default_networks: bool = True,
                      env_step: tuple[int, int] | None = None) -> NetworkSizes:
    """Lower bounds of the sizes from the ``agent:`` keys alone (one observation and action
    dimension), as the default networks use them: each head an MLP of its hidden sizes, after
    a ``core_size`` torso layer and a recurrent core of at least ``3 core_size^2`` weights when
    ``agent.core`` is set. With ``default_networks=False`` (a custom network factory, free to
    ignore those keys) the networks count as empty. ``env_step``: ``(agents, observation size
    of one agent)`` where known before the env is built (a multi-agent env's), else one of each."""
    agents, obs = env_step or (1, 1)
    step = dict(obs_size=agents * obs, action_size=agents, agents_per_step=agents)
    if not default_networks:
        return NetworkSizes(0, 0, policy_state_size=0, largest_layer=(), exact=False, **step)
    core = getattr(agent_cfg, "core", "none") != "none"
    core_size = agent_cfg.core_size if core else 0
    head_input = core_size if core else 1
    layers = [(1, core_size), (core_size, 3 * core_size)] if core else []
    for key in ("actor_hidden_layer_sizes", "critic_hidden_layer_sizes"):
        widths = (head_input, *getattr(agent_cfg, key, ()), 1)
        layers += list(zip(widths[:-1], widths[1:]))
    largest = max(layers, key=math.prod)
    return NetworkSizes(
        num_params=sum(a * b for a, b in layers),
        activation_width=sum(a + b for a, b in layers),
        policy_state_size=core_size, largest_layer=largest, exact=False, **step,
    )


def _count(n: float) -> str:
    """``9,155``; ``4.00e+10`` from a billion on."""
    return f"{n:,.0f}" if n < 1e9 else f"{n:.2e}"


def _params_formula(sizes: NetworkSizes) -> str:
    largest = f" (largest layer {' x '.join(f'{n:,}' for n in sizes.largest_layer)})" if sizes.largest_layer else ""
    return f"{'' if sizes.exact else 'at least '}{_count(sizes.num_params)} parameters{largest}"


def transition_words(sizes: NetworkSizes) -> float:
    """One replay-buffer transition in float32 words: obs and next obs, the actions, a reward
    per agent and the discount the agents share (:class:`evorl.rl.q_targets.Transition`)."""
    return 2 * sizes.obs_size + sizes.action_size + sizes.agents_per_step + 1


def on_policy_terms(config: Any, sizes: NetworkSizes, num_devices: int, asynchronous: bool) -> list[Term]:
    """The contributors of an on-policy run (PPO, A2C, IMPALA); see the module docstring."""
    tc, rc = config.training, config.runner
    agents = num_agents(config)
    replicas = num_devices if config.distributed.layout == "envs" else 1
    copies = 3 + rc.queue_size / rc.num_actors if asynchronous else 2
    n = sizes.agents_per_step
    per_step = (2 * sizes.obs_size + sizes.action_size + AGENT_STEP_SCALARS * n + SHARED_STEP_SCALARS
                + sizes.policy_state_size)
    minibatch = max(tc.rollout_length * tc.num_envs // tc.num_minibatches, tc.num_envs)
    on = f" on {replicas} devices" if replicas > 1 else ""
    per_agent = f" x {n} agents per env step" if n > 1 else ""
    return [
        Term("parameters", f"{agents} agent(s) x {_params_formula(sizes)} x {4 + tc.actor_lag} copies (weights, "
                           f"gradient, Adam's 2 moments{', lagged' if tc.actor_lag else ''}){on}",
             agents * sizes.num_params * (4 + tc.actor_lag) * replicas,
             "agent.*_hidden_layer_sizes, agent.core_size, training.num_seeds"),
        Term("rollout", f"{agents} agent(s) x {tc.rollout_length:,} x {tc.num_envs:,} steps x "
                        f"{_count(per_step)} floats x {copies:g} copies",
             agents * tc.rollout_length * tc.num_envs * per_step * copies,
             "training.num_envs, training.rollout_length, training.num_seeds"),
        Term("activations", f"{agents} agent(s) x {minibatch:,} samples{per_agent} x "
                            f"{_count(sizes.activation_width)} units",
             agents * minibatch * n * sizes.activation_width,
             "training.num_minibatches (more), training.num_envs, agent.*_hidden_layer_sizes"),
    ]


def es_terms(config: Any, sizes: NetworkSizes) -> list[Term]:
    """The contributors of an ES run (``N`` independent searches with ``training.num_seeds``
    or lists); see the module docstring."""
    es = config.es
    p = sizes.num_params
    n = num_agents(config)
    searches = f"{n} search(es) x " if n > 1 else ""
    players = es.population_size * es.episodes_per_member
    terms = [
        Term("search state", f"{searches}{_params_formula(sizes)} x 4 (mean, optimiser)", n * 4 * p,
             "agent.actor_hidden_layer_sizes"),
        Term("candidates",
             f"{searches}{es.population_size:,} members x {_params_formula(sizes)} x 2 (candidate, noise)",
             n * 2 * es.population_size * p, "es.population_size, agent.actor_hidden_layer_sizes"),
        Term("episodes",
             f"{searches}{players:,} episodes x ({_count(sizes.obs_size)} obs + {_count(sizes.activation_width)} units)",
             n * players * (sizes.obs_size + sizes.activation_width),
             "es.population_size, es.episodes_per_member, agent.actor_hidden_layer_sizes"),
    ]
    if es.strategy == "CMA_ES":
        terms.append(Term("covariance", f"{searches}3 x P^2 (CMA-ES's covariance, eigenbasis), "
                                        f"P = {_params_formula(sizes)}",
                          n * 3 * p * p, "agent.actor_hidden_layer_sizes, es.strategy"))
    return terms


def memory_available(max_memory_gb: float | None, num_devices: int) -> tuple[float, str]:
    """The bytes the run may use over its ``num_devices`` devices, and where that number comes
    from: ``runner.max_memory_gb`` when set; else the accelerator's ``bytes_limit`` per device;
    else (CPU devices share the host's memory) MemAvailable of /proc/meminfo, or the physical memory."""
    if max_memory_gb is not None:
        return max_memory_gb * 1e9, f"{OVERRIDE}={max_memory_gb:g}"
    device = jax.local_devices()[0]
    stats = device.memory_stats() if device.platform != "cpu" else None
    if stats and stats.get("bytes_limit"):
        return float(stats["bytes_limit"]) * num_devices, f"{num_devices} {device.platform} device(s)' bytes_limit"
    try:
        with open("/proc/meminfo") as f:
            fields = dict(line.split(":", 1) for line in f)
        return float(fields["MemAvailable"].split()[0]) * 1024, "this machine's available memory"
    except (OSError, KeyError, ValueError):
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")), "this machine's memory"


def check_memory(terms: list[Term], max_memory_gb: float | None, num_devices: int = 1) -> None:
    """Raises a one-line :class:`ConfigError` when ``terms`` need more memory than the run may
    use (:func:`memory_available`); ``max_memory_gb=inf`` skips the check."""
    if max_memory_gb == math.inf:
        return
    check_memory_fits(terms, *memory_available(max_memory_gb, num_devices))
