"""No-framework PPO reference for gymnax CartPole-v1 (throughput baseline).

A minimal, single-file, fully jitted PPO in the style of PureJaxRL's ppo.py,
written from scratch with plain JAX + optax (MLPs are hand-rolled pytrees).
The whole training run (all iterations) is ONE jitted function built from
`lax.scan`s; it is the baseline a framework's throughput is compared against.

Hyperparameters (RefConfig defaults):
  num_envs=4, rollout_length=128, total_env_steps=500_000
  num_iterations = total_env_steps // (num_envs * rollout_length)  (= 976)
  num_epochs=4, num_minibatches=4 (minibatch = 128 samples, reshuffled per epoch)
  adam(lr=2.5e-4 linearly annealed to 0, eps=1e-5) after clip_by_global_norm(0.5)
    lr * (1 - (update_count // (num_minibatches*num_epochs)) / num_iterations)
  gamma=0.99, gae_lambda=0.95, clip_epsilon=0.2, vf_coef=0.5, ent_coef=0.01
  loss = pg_loss + vf_coef * 0.5*mean((V - target)^2) - ent_coef * entropy
  advantages normalised per minibatch ((A - mean) / (std + 1e-8)); value loss unclipped
  separate actor / critic MLPs [64, 64] tanh, orthogonal init (sqrt(2) hidden,
  0.01 policy head, 1.0 value head), zero biases; categorical policy over logits.

Time limits: GAE bootstraps from V(info["final_observation"]) on truncation and
from 0 on termination; the GAE trace is cut at every episode end:
  delta_t = r_t + gamma * (1 - term_t) * V(s'_t) - V(s_t)
  A_t     = delta_t + gamma * lambda * (1 - done_t) * A_{t+1},  done = term | trunc
  target  = A_t + V(s_t)
V(s_t) and V(s'_t) are computed in one batched pass after the rollout.

With ``--num-seeds S`` the whole run is ``jax.vmap``-ed over S seeds in one program (each
seed its own parameters, environments and keys); throughput then counts every seed's steps.

Usage: python benchmarks/ppo_reference.py [--seed 0] [--total-env-steps N] [--num-envs 4] [--num-seeds 1] [--json]
"""

import argparse
import dataclasses
import json
import time

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import optax


@dataclasses.dataclass(frozen=True)
class RefConfig:
    num_envs: int = 4
    rollout_length: int = 128
    total_env_steps: int = 500_000
    num_epochs: int = 4
    num_minibatches: int = 4
    learning_rate: float = 2.5e-4
    adam_eps: float = 1e-5
    max_grad_norm: float = 0.5
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_epsilon: float = 0.2
    vf_coef: float = 0.5
    ent_coef: float = 0.01
    hidden: int = 64

    @property
    def num_iterations(self) -> int:
        return self.total_env_steps // (self.num_envs * self.rollout_length)


# --------------------------------------------------------------------------- networks
def _init_mlp(key, sizes, head_scale):
    """Orthogonal init: sqrt(2) for hidden layers, `head_scale` for the last layer."""
    keys = jax.random.split(key, len(sizes) - 1)
    layers = []
    for i, (k, n_in, n_out) in enumerate(zip(keys, sizes[:-1], sizes[1:])):
        scale = head_scale if i == len(sizes) - 2 else np.sqrt(2.0)
        w = jax.nn.initializers.orthogonal(scale)(k, (n_in, n_out), jnp.float32)
        layers.append({"w": w, "b": jnp.zeros((n_out,), jnp.float32)})
    return layers


def _mlp(layers, x):
    for layer in layers[:-1]:
        x = jnp.tanh(x @ layer["w"] + layer["b"])
    return x @ layers[-1]["w"] + layers[-1]["b"]


def init_params(key, obs_dim, num_actions, hidden=64):
    ka, kc = jax.random.split(key)
    return {
        "actor": _init_mlp(ka, [obs_dim, hidden, hidden, num_actions], 0.01),
        "critic": _init_mlp(kc, [obs_dim, hidden, hidden, 1], 1.0),
    }


def policy_logits(params, obs):  # [..., obs_dim] -> [..., A]
    return _mlp(params["actor"], obs)


def value(params, obs):  # [..., obs_dim] -> [...]
    return _mlp(params["critic"], obs)[..., 0]


# --------------------------------------------------------------------------- training
def make_train(cfg: RefConfig):
    env, env_params = gymnax.make("CartPole-v1")
    num_actions = env.action_space(env_params).n
    obs_dim = env.observation_space(env_params).shape[0]
    T, B = cfg.rollout_length, cfg.num_envs
    num_iters = cfg.num_iterations
    mb_size = T * B // cfg.num_minibatches
    updates_per_iter = cfg.num_minibatches * cfg.num_epochs

    def lr_schedule(count):
        frac = 1.0 - (count // updates_per_iter) / num_iters
        return cfg.learning_rate * frac

    tx = optax.chain(
        optax.clip_by_global_norm(cfg.max_grad_norm),
        optax.adam(learning_rate=lr_schedule, eps=cfg.adam_eps),
    )
    v_reset = jax.vmap(env.reset, in_axes=(0, None))
    v_step = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def loss_fn(params, mb):
        logits = policy_logits(params, mb["obs"])  # [N, A]
        logp_all = jax.nn.log_softmax(logits)
        logp = jnp.take_along_axis(logp_all, mb["action"][:, None], axis=-1)[:, 0]
        entropy = -jnp.sum(jnp.exp(logp_all) * logp_all, axis=-1).mean()
        adv = mb["adv"]
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        ratio = jnp.exp(logp - mb["logp"])
        clipped = jnp.clip(ratio, 1.0 - cfg.clip_epsilon, 1.0 + cfg.clip_epsilon)
        pg_loss = -jnp.minimum(ratio * adv, clipped * adv).mean()
        v_loss = 0.5 * jnp.mean((value(params, mb["obs"]) - mb["target"]) ** 2)
        return pg_loss + cfg.vf_coef * v_loss - cfg.ent_coef * entropy

    def env_step(carry, _):
        params, env_state, obs, ep_ret, key = carry
        key, k_act, k_env = jax.random.split(key, 3)
        logits = policy_logits(params, obs)  # [B, A]
        action = jax.random.categorical(k_act, logits)  # [B]
        logp = jnp.take_along_axis(jax.nn.log_softmax(logits), action[:, None], -1)[:, 0]
        next_obs, env_state, reward, term, trunc, info = v_step(
            jax.random.split(k_env, B), env_state, action, env_params
        )
        done = term | trunc  # [B]
        ep_ret = ep_ret + reward
        transition = {
            "obs": obs, "action": action, "logp": logp, "reward": reward,
            "term": term, "done": done, "final_obs": info["final_observation"],
            "finished_ret": jnp.where(done, ep_ret, 0.0),
        }
        ep_ret = jnp.where(done, 0.0, ep_ret)
        return (params, env_state, next_obs, ep_ret, key), transition

    def gae(traj, v, v_next):  # all [T, B]
        not_term = 1.0 - traj["term"].astype(jnp.float32)
        not_done = 1.0 - traj["done"].astype(jnp.float32)
        delta = traj["reward"] + cfg.gamma * not_term * v_next - v  # [T, B]

        def back(a_next, x):
            d, nd = x
            a = d + cfg.gamma * cfg.gae_lambda * nd * a_next
            return a, a

        _, adv = jax.lax.scan(back, jnp.zeros((B,), jnp.float32), (delta, not_done), reverse=True)
        return adv, adv + v  # [T, B], [T, B]

    def update_minibatch(carry, mb):
        params, opt_state = carry
        grads = jax.grad(loss_fn)(params, mb)
        updates, opt_state = tx.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), None

    def update_epoch(carry, key):
        params, opt_state, batch = carry
        perm = jax.random.permutation(key, T * B)
        mbs = jax.tree.map(
            lambda x: x[perm].reshape((cfg.num_minibatches, mb_size) + x.shape[1:]), batch
        )
        (params, opt_state), _ = jax.lax.scan(update_minibatch, (params, opt_state), mbs)
        return (params, opt_state, batch), None

    def iteration(carry, _):
        params, opt_state, env_state, obs, ep_ret, key = carry
        key, k_roll, k_epochs = jax.random.split(key, 3)
        (_, env_state, obs, ep_ret, _), traj = jax.lax.scan(
            env_step, (params, env_state, obs, ep_ret, k_roll), None, length=T
        )  # traj leaves: [T, B, ...]
        # One batched critic pass over s_t and s'_t (true next state).
        v_both = value(params, jnp.stack([traj["obs"], traj["final_obs"]]))  # [2, T, B]
        adv, target = gae(traj, v_both[0], v_both[1])
        batch = {
            "obs": traj["obs"], "action": traj["action"], "logp": traj["logp"],
            "adv": adv, "target": target,
        }
        batch = jax.tree.map(lambda x: x.reshape((T * B,) + x.shape[2:]), batch)  # [T*B, ...]
        (params, opt_state, _), _ = jax.lax.scan(
            update_epoch, (params, opt_state, batch), jax.random.split(k_epochs, cfg.num_epochs)
        )
        metrics = {
            "ep_return_sum": traj["finished_ret"].sum(),
            "ep_count": traj["done"].sum().astype(jnp.int32),
        }
        return (params, opt_state, env_state, obs, ep_ret, key), metrics

    def train(key):
        k_init, k_reset, k_loop = jax.random.split(key, 3)
        params = init_params(k_init, obs_dim, num_actions, cfg.hidden)
        opt_state = tx.init(params)
        obs, env_state = v_reset(jax.random.split(k_reset, B), env_params)  # [B, obs_dim]
        carry = (params, opt_state, env_state, obs, jnp.zeros((B,), jnp.float32), k_loop)
        carry, metrics = jax.lax.scan(iteration, carry, None, length=num_iters)
        return carry[0], metrics  # metrics leaves: [num_iters]

    return train


# --------------------------------------------------------------------------- evaluation
def _make_eval(num_episodes):
    env, env_params = gymnax.make("CartPole-v1")
    v_reset = jax.vmap(env.reset, in_axes=(0, None))
    v_step = jax.vmap(env.step, in_axes=(0, 0, 0, None))
    max_steps = env_params.max_steps_in_episode

    @jax.jit
    def run(params, key):
        k_reset, k_steps = jax.random.split(key)
        obs, state = v_reset(jax.random.split(k_reset, num_episodes), env_params)

        def step(carry, k):
            obs, state, alive, ret = carry
            action = jnp.argmax(policy_logits(params, obs), axis=-1)  # [E]
            obs, state, r, term, trunc, _ = v_step(
                jax.random.split(k, num_episodes), state, action, env_params
            )
            ret = ret + r * alive
            alive = alive * (1.0 - (term | trunc).astype(jnp.float32))
            return (obs, state, alive, ret), None

        init = (obs, state, jnp.ones((num_episodes,)), jnp.zeros((num_episodes,)))
        (_, _, _, ret), _ = jax.lax.scan(step, init, jax.random.split(k_steps, max_steps))
        return ret.mean()

    return run


_EVAL_CACHE = {}


def evaluate(params, key, num_episodes=16) -> float:
    """Mean greedy (argmax) return over `num_episodes` parallel CartPole-v1 episodes."""
    if num_episodes not in _EVAL_CACHE:
        _EVAL_CACHE[num_episodes] = _make_eval(num_episodes)
    return float(_EVAL_CACHE[num_episodes](params, key))


# --------------------------------------------------------------------------- main
def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--total-env-steps", type=int, default=RefConfig.total_env_steps)
    parser.add_argument("--num-envs", type=int, default=RefConfig.num_envs)
    parser.add_argument("--num-seeds", type=int, default=1, help="seeds vmapped in one program")
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    args = parser.parse_args()

    cfg = RefConfig(total_env_steps=args.total_env_steps, num_envs=args.num_envs)
    env_steps = cfg.num_iterations * cfg.num_envs * cfg.rollout_length * args.num_seeds
    key = jax.random.PRNGKey(args.seed)
    train_key, eval_key = jax.random.split(key)
    train = make_train(cfg)
    if args.num_seeds > 1:
        train_key = jax.random.split(train_key, args.num_seeds)
        train = jax.vmap(train)

    t0 = time.perf_counter()
    compiled = jax.jit(train).lower(train_key).compile()
    compile_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    params, metrics = jax.block_until_ready(compiled(train_key))
    run_s = time.perf_counter() - t0

    # Mean return of episodes completed in the last 10 iterations (~5k env steps per seed).
    ret_sum = np.asarray(metrics["ep_return_sum"])[..., -10:].sum()
    ret_cnt = np.asarray(metrics["ep_count"])[..., -10:].sum()
    train_return = float(ret_sum / ret_cnt) if ret_cnt > 0 else float("nan")
    if args.num_seeds > 1:  # the mean over seeds of each seed's greedy return
        eval_return = float(np.mean([evaluate(jax.tree.map(lambda x: x[i], params), eval_key)
                                     for i in range(args.num_seeds)]))
    else:
        eval_return = evaluate(params, eval_key)

    result = {
        "compile_s": round(compile_s, 3), "run_s": round(run_s, 3),
        "steps_per_s": round(env_steps / run_s, 1), "eval_return": eval_return,
        "train_return": train_return, "env_steps": env_steps,
    }
    print(f"PPO reference | CartPole-v1 | seed {args.seed} | {cfg.num_iterations} iterations | "
          f"{cfg.num_envs} envs | {args.num_seeds} seed(s)")
    print(f"compile time      : {compile_s:.2f} s")
    print(f"run time          : {run_s:.2f} s for {env_steps} env steps")
    print(f"throughput        : {env_steps / run_s:,.0f} env steps/s")
    print(f"train return      : {train_return:.1f} (episodes finished in last 10 iterations)")
    print(f"greedy eval return: {eval_return:.1f} (16 episodes)")
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
