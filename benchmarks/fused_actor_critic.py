"""Actor and critic MLPs as separate calls or as one fused call: forward + backward time.

A PPO-shaped loss (log-softmax policy term and squared value error) over a minibatch of
``N`` observations, differentiated and applied 2000 times in one ``lax.scan``, for three
ways of evaluating an actor ``[D, H, H, 2]`` and a critic ``[D, H, H, 1]`` that read the
same input:

* ``separate``: two MLPs, as ``ActorCriticAgent`` computes them;
* ``stacked``: first layers concatenated (one ``[N, D] x [D, 2H]`` product), second layers
  as one batched product ``[2, N, H] x [2, H, H]``;
* ``block-diagonal``: every layer one product with block-diagonal weights.

All three compute the same function of the same parameters (checked). Prints microseconds
per gradient step.

    python benchmarks/fused_actor_critic.py [--batch 128] [--hidden 64]
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


def mlp_params(key, sizes):
    keys = jax.random.split(key, len(sizes) - 1)
    return [(jax.random.normal(k, (a, b)) * 0.1, jnp.zeros(b)) for k, a, b in zip(keys, sizes[:-1], sizes[1:])]


def mlp(params, x):
    for w, b in params[:-1]:
        x = jnp.tanh(x @ w + b)
    w, b = params[-1]
    return x @ w + b


def loss_of(logits, values, y):  # [N, 2], [N], [N]
    return jnp.mean(jax.nn.log_softmax(logits)[:, 0] * y) + jnp.mean((values - y) ** 2)


def separate(params, x, y):
    actor, critic = params
    return loss_of(mlp(actor, x), mlp(critic, x)[:, 0], y)


def stacked(params, x, y):
    actor, critic = params
    n, hidden = x.shape[0], actor[0][0].shape[1]
    h = jnp.tanh(x @ jnp.concatenate([actor[0][0], critic[0][0]], 1) + jnp.concatenate([actor[0][1], critic[0][1]]))
    h = h.reshape(n, 2, hidden).transpose(1, 0, 2)  # [2, N, H]
    w2, b2 = jnp.stack([actor[1][0], critic[1][0]]), jnp.stack([actor[1][1], critic[1][1]])
    h = jnp.tanh(jnp.einsum("gnh,ghk->gnk", h, w2) + b2[:, None])
    return loss_of(h[0] @ actor[2][0] + actor[2][1], (h[1] @ critic[2][0] + critic[2][1])[:, 0], y)


def block_diagonal(params, x, y):
    actor, critic = params
    hidden = actor[0][0].shape[1]
    h = jnp.tanh(x @ jnp.concatenate([actor[0][0], critic[0][0]], 1) + jnp.concatenate([actor[0][1], critic[0][1]]))
    zero = jnp.zeros((hidden, hidden))
    h = jnp.tanh(h @ jnp.block([[actor[1][0], zero], [zero, critic[1][0]]]) + jnp.concatenate([actor[1][1], critic[1][1]]))
    w3 = jnp.block([[actor[2][0], jnp.zeros((hidden, 1))], [jnp.zeros((hidden, 2)), critic[2][0]]])
    out = h @ w3 + jnp.concatenate([actor[2][1], critic[2][1]])
    return loss_of(out[:, :2], out[:, 2], y)


def timed_steps(loss_fn, params, xs, ys, repeats=5) -> float:
    grad = jax.grad(loss_fn)

    @jax.jit
    def run(params, xs, ys):
        def body(p, xy):
            g = grad(p, *xy)
            return jax.tree.map(lambda a, b: a - 1e-3 * b, p, g), ()
        return lax.scan(body, params, (xs, ys))[0]

    jax.block_until_ready(run(params, xs, ys))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(run(params, xs, ys))
        times.append(time.perf_counter() - start)
    return float(np.median(times)) / xs.shape[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--obs-dim", type=int, default=4)
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args()
    key = jax.random.PRNGKey(0)
    params = (mlp_params(key, [args.obs_dim, args.hidden, args.hidden, 2]),
              mlp_params(jax.random.PRNGKey(1), [args.obs_dim, args.hidden, args.hidden, 1]))
    xs = jax.random.normal(key, (args.steps, args.batch, args.obs_dim))
    ys = jax.random.normal(jax.random.PRNGKey(2), (args.steps, args.batch))
    reference = jax.grad(separate)(params, xs[0], ys[0])
    for name, fn in (("separate", separate), ("stacked", stacked), ("block-diagonal", block_diagonal)):
        same = jax.tree.map(lambda a, b: float(jnp.max(jnp.abs(a - b))), reference, jax.grad(fn)(params, xs[0], ys[0]))
        assert max(jax.tree.leaves(same)) < 1e-5, (name, same)
        print(f"{name:15s} {1e6 * timed_steps(fn, params, xs, ys):7.1f} us per gradient step", flush=True)


if __name__ == "__main__":
    main()
