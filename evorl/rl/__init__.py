"""The math: agents, rollouts, replay, every return target, the training iterations, the
collectives and the gradient step, evolution operators. Pure functions over pytrees; imports
only the foundation (``evorl.envs``, ``evorl.networks``, ``evorl.hardware``, ``evorl.config``)."""
