"""``OnPolicyWorkflow``, the one training loop PPO, A2C and IMPALA share, on top of
``RLWorkflow`` (config, env, agent, services; :mod:`evorl.engine.rl_base`).

The workflow is the glue of three parts:

* the algorithm, one pure training iteration (:func:`evorl.rl.on_policy.make_iteration`:
  rollout, observation statistics, targets, epochs of minibatch updates);
* the execution layer (:class:`evorl.engine.execution.Executor`): the population axis,
  placement over devices, chunks of ``eval_interval`` iterations compiled once;
* the host loop (:class:`~evorl.engine.host_loop.ChunkedWorkflow`):
  ``learn`` runs a chunk, checks that every agent is still finite
  (:mod:`evorl.engine.health`; in a population a diverged agent is frozen and reported,
  and training stops only when all are), evaluates greedily, logs and checkpoints; asked to
  stop (``stop_requested``), it checkpoints and raises :class:`~evorl.engine.host_loop.TrainingInterrupted`.

With ``training.actor_lag = k`` the rollout acts with the parameters of ``k`` iterations
ago (IMPALA's decoupled actors simulated on one machine).
"""

from __future__ import annotations

import functools

import jax

from evorl.config import num_agents
from evorl.config.env import HOST_ENV_TYPES
from evorl.config.runs import check_minibatches, check_on_policy_placement, check_one_gradient_step
from evorl.engine.actor_learner import check_async_config, learner_device_count, learner_placement
from evorl.engine.execution import DEVICE_AXIS, Placement
from evorl.engine.host_loop import ChunkedWorkflow
from evorl.engine.pbt import check_pbt_config
from evorl.rl.learner import make_optimizer
from evorl.rl.on_policy import OnPolicyState


class OnPolicyWorkflow(ChunkedWorkflow):
    """The one on-policy training loop (see the module docstring).

    ``training.num_seeds`` x the variants of any hyperparameter lists train as one population;
    ``enable_multi_devices`` places it over all devices as ``distributed.layout`` says.
    """

    #: The algorithm takes one gradient step per rollout (A2C, REINFORCE): the config must
    #: keep ``training.num_epochs = num_minibatches = 1``.
    one_gradient_step: bool = False

    def __init__(self, config, env, agent, enable_multi_devices=False, services=None):
        tc = config.training
        eval_env, env = self.runner_and_envs(config, env)  # evaluation: whole episodes
        learner_mesh = actor_devices = None
        if self.asynchronous:
            learner_mesh, actor_devices = learner_placement(enable_multi_devices, config.runner.learner_devices)
            self.placement = Placement(self.num_agents, None)
            axis_name = None if learner_mesh is None else DEVICE_AXIS
        else:
            self.placement = Placement.create(self.num_agents, enable_multi_devices, config.distributed.layout)
            axis_name = self.placement.step_axis_name
        if axis_name is not None:
            agent = agent.with_axis_name(axis_name)
        super().__init__(config, env, agent, services)
        self.optimizer = make_optimizer(tc)
        self._variant_data = self.variant_data(config)
        family = self.algorithm.family  # evorl.rl.algorithm.ON_POLICY
        self.build_runner(config, env, eval_env, agent, family.make_iteration, family.make_learner_update,
                          family.state_cls, learner_mesh=learner_mesh, actor_devices=actor_devices,
                          deterministic=tc.eval_deterministic)

    @classmethod
    def check_config(cls, config, agent, num_devices):
        tc = config.training
        agents = num_agents(config)
        asynchronous = config.runner.asynchronous(env_on_host=config.env.env_type in HOST_ENV_TYPES)
        if config.pbt.enabled:
            check_pbt_config(config, cls, agents, asynchronous,
                             split_envs=num_devices > 1 and config.distributed.layout == "envs")
        if cls.one_gradient_step:
            check_one_gradient_step(cls.name(), tc.num_epochs, tc.num_minibatches)
        if asynchronous:
            check_async_config(config, agent, num_devices)
            learner_devices = learner_device_count(num_devices, config.runner.learner_devices)
            check_minibatches(tc.num_minibatches, tc.rollout_length, tc.num_envs // learner_devices,
                              agent.sequence_minibatches)
            return
        num_devices = check_on_policy_placement(num_devices, config.distributed.layout, agents, tc.num_envs)
        check_minibatches(tc.num_minibatches, tc.rollout_length, tc.num_envs // num_devices, agent.sequence_minibatches)

    # --- state --------------------------------------------------------------------------
    def init(self, key: jax.Array) -> OnPolicyState:
        """The initial state; for a population, agent ``v * num_seeds + s`` trains variant
        ``v`` with the ``s``-th key split from ``key`` (shared by all variants)."""
        env = None if self.env.on_host else self.env  # host envs are reset by the actors that own them
        init_state = functools.partial(self.algorithm.family.init_state, env, self.agent, self.optimizer,
                                       self.config.training)
        return self.init_agents(init_state, key)
