"""distrax's ``Categorical`` as PureJaxRL's PPO uses it: ``sample(seed=key)`` draws with
``jax.random.categorical`` (what distrax's sampler calls), ``log_prob`` and ``entropy`` of the
softmax distribution over the last axis of ``logits``."""

import jax
import jax.numpy as jnp


class Categorical:
    def __init__(self, logits):
        self.logits = logits

    def sample(self, seed):
        return jax.random.categorical(seed, self.logits, axis=-1)

    def log_prob(self, value):
        log_p = jax.nn.log_softmax(self.logits, axis=-1)
        return jnp.take_along_axis(log_p, value[..., None].astype(jnp.int32), axis=-1)[..., 0]

    def entropy(self):
        log_p = jax.nn.log_softmax(self.logits, axis=-1)
        return -jnp.sum(jnp.exp(log_p) * log_p, axis=-1)
