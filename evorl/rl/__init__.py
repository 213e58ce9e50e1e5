"""The math: agents, rollouts, replay, every return target, the training iterations, the
collectives and the gradient step, evolution operators and the population optimisers behind one
ask/tell interface (:mod:`evorl.rl.optimisers`: sep-CEM, ERL's GA, evosax strategies). Pure
functions over pytrees; imports only the foundation (``evorl.envs``, ``evorl.networks``,
``evorl.hardware``, ``evorl.config``)."""
