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

``--task`` picks one of :data:`TASKS`, each the shape of one evorl config (same code, other
settings):

* ``cartpole`` (the default): the job above.
* ``breakout-cnn``: gymnax Breakout-MinAtar with ``configs/ppo_minatar_breakout.yaml``'s
  settings and ``agent.network=cnn``: actor and critic each a 16-channel 3x3 VALID
  convolution (relu, flattened: 8 x 8 x 16 = 1024 features) then [256, 256] relu; 64 envs x
  128 steps, 4 epochs x 8 minibatches, lr 5e-4 constant, gamma 0.999, entropy 0.02.
  ``--conv xla`` (the default) is ``lax.conv_general_dilated``, what a single-file script
  writes (flax's ``nn.Conv``); ``--conv im2col`` is the matrix product over 3x3 patches that
  evorl's torso computes.
* ``inverted-pendulum``: brax inverted_pendulum (spring backend) with
  ``configs/ppo_brax_inverted_pendulum.yaml``'s settings at 64 envs (the config has 128):
  64 envs x 32 steps, 4 x 4
  minibatches, [64, 64] tanh, lr 1e-3 annealed, entropy 0, rewards scaled by 0.1, a time
  limit of 1000 steps, observations normalised by running statistics (Chan et al.'s merge
  of each rollout's observations; ``clip((x - mean) / sqrt(var + 1e-8), +-10)``, the
  identity before the first update), and a Gaussian policy with a state-independent log std
  (initially 0) whose sample ``u`` is clipped to ``[-1, 1]`` for the env (log-probabilities
  of ``u``). Every env is reset on every step and the fresh episode kept where one ended
  (as gymnax's auto-reset does).

Usage: python benchmarks/ppo_reference.py [--task cartpole] [--seed 0] [--total-env-steps N] [--num-envs 4]
       [--num-seeds 1] [--conv xla|im2col] [--json]
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
    anneal_lr: bool = True
    adam_eps: float = 1e-5
    max_grad_norm: float = 0.5
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_epsilon: float = 0.2
    vf_coef: float = 0.5
    ent_coef: float = 0.01
    hidden: tuple = (64, 64)
    activation: str = "tanh"
    env: str = "gymnax:CartPole-v1"  # or "brax:<name>"
    conv_channels: int = 0  # > 0: a 3x3 VALID conv torso with this many channels (image observations)
    conv: str = "xla"  # the conv torso's kernel: "xla" (lax.conv_general_dilated) or "im2col"
    normalize_obs: bool = False
    reward_scale: float = 1.0
    episode_length: int = 1000  # brax envs' time limit (gymnax envs keep their own)

    @property
    def num_iterations(self) -> int:
        return self.total_env_steps // (self.num_envs * self.rollout_length)


#: The shapes ``--task`` picks (see the module docstring).
TASKS = {
    "cartpole": RefConfig(),
    "breakout-cnn": RefConfig(
        env="gymnax:Breakout-MinAtar", num_envs=64, rollout_length=128, total_env_steps=64 * 128 * 30,
        num_minibatches=8, learning_rate=5e-4, anneal_lr=False, gamma=0.999, ent_coef=0.02, hidden=(256, 256),
        activation="relu", conv_channels=16),
    "inverted-pendulum": RefConfig(
        env="brax:inverted_pendulum", num_envs=64, rollout_length=32, total_env_steps=64 * 32 * 200,
        learning_rate=1e-3, ent_coef=0.0, normalize_obs=True, reward_scale=0.1),
}


# --------------------------------------------------------------------------- networks
def _act(name):
    return {"tanh": jnp.tanh, "relu": jax.nn.relu}[name]


def _init_mlp(key, sizes, head_scale):
    """Orthogonal init: sqrt(2) for hidden layers, `head_scale` for the last layer."""
    keys = jax.random.split(key, len(sizes) - 1)
    layers = []
    for i, (k, n_in, n_out) in enumerate(zip(keys, sizes[:-1], sizes[1:])):
        scale = head_scale if i == len(sizes) - 2 else np.sqrt(2.0)
        w = jax.nn.initializers.orthogonal(scale)(k, (n_in, n_out), jnp.float32)
        layers.append({"w": w, "b": jnp.zeros((n_out,), jnp.float32)})
    return layers


def _mlp(layers, x, act=jnp.tanh):
    for layer in layers[:-1]:
        x = act(x @ layer["w"] + layer["b"])
    return x @ layers[-1]["w"] + layers[-1]["b"]


def _init_net(key, obs_shape, out_size, head_scale, cfg: RefConfig):
    """An MLP over the flat observation, or (``conv_channels``) over a 3x3 conv torso's features."""
    if not cfg.conv_channels:
        return {"mlp": _init_mlp(key, [int(np.prod(obs_shape)), *cfg.hidden, out_size], head_scale)}
    h, w, c = obs_shape
    k_conv, k_mlp = jax.random.split(key)
    conv = {"w": jax.nn.initializers.orthogonal(np.sqrt(2.0))(k_conv, (9 * c, cfg.conv_channels), jnp.float32),
            "b": jnp.zeros((cfg.conv_channels,), jnp.float32)}  # [3*3*C, F]: (dy, dx, c) rows
    features = (h - 2) * (w - 2) * cfg.conv_channels
    return {"conv": conv, "mlp": _init_mlp(k_mlp, [features, *cfg.hidden, out_size], head_scale)}


def _conv3x3(conv, x, kind):  # [..., H, W, C] -> [..., H-2, W-2, F]
    lead, (h, w, c) = x.shape[:-3], x.shape[-3:]
    x = x.reshape((-1, h, w, c))
    if kind == "im2col":
        patches = jnp.concatenate([x[:, dy:dy + h - 2, dx:dx + w - 2] for dy in range(3) for dx in range(3)], -1)
        y = patches @ conv["w"]
    else:
        kernel = conv["w"].reshape(3, 3, c, -1)  # HWIO, the same weights
        y = jax.lax.conv_general_dilated(x, kernel, (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return (y + conv["b"]).reshape(lead + y.shape[1:])


def _net(params, obs, cfg: RefConfig):
    act = _act(cfg.activation)
    x = obs.astype(jnp.float32)
    if "conv" in params:
        x = act(_conv3x3(params["conv"], x, cfg.conv))
        x = x.reshape(x.shape[:-3] + (-1,))
    return _mlp(params["mlp"], x, act)


def init_params(key, obs_shape, num_actions, cfg: RefConfig, action_dim=None):
    """Separate actor and critic; a Gaussian policy (``action_dim``) adds a free ``log_std``."""
    ka, kc = jax.random.split(key)
    params = {"actor": _init_net(ka, obs_shape, action_dim or num_actions, 0.01, cfg),
              "critic": _init_net(kc, obs_shape, 1, 1.0, cfg)}
    if action_dim:
        params["log_std"] = jnp.zeros((action_dim,), jnp.float32)
    return params


def policy_out(params, obs, cfg: RefConfig):  # [..., *obs] -> [..., A] logits, or [..., d] means
    return _net(params["actor"], obs, cfg)


def value(params, obs, cfg: RefConfig):  # [..., *obs] -> [...]
    return _net(params["critic"], obs, cfg)[..., 0]


def gaussian_logp(mean, log_std, u):  # [..., d] -> [...]
    return jnp.sum(-0.5 * jnp.square((u - mean) / jnp.exp(log_std)) - log_std - 0.5 * np.log(2 * np.pi), -1)


# --------------------------------------------------------------------------- observation statistics
def init_stats(obs_shape):
    return {"count": jnp.zeros(()), "mean": jnp.zeros(obs_shape), "var": jnp.ones(obs_shape)}


def update_stats(stats, x, obs_shape):  # Chan et al.'s merge of the batch x [..., *obs_shape]
    x = x.reshape((-1,) + obs_shape).astype(jnp.float32)
    n_b = jnp.asarray(x.shape[0], jnp.float32)
    mean_b = x.mean(0)
    m2_b = jnp.sum(jnp.square(x - mean_b), 0)
    n = stats["count"] + n_b
    delta = mean_b - stats["mean"]
    m2 = stats["var"] * stats["count"] + m2_b + jnp.square(delta) * stats["count"] * n_b / n
    return {"count": n, "mean": stats["mean"] + delta * n_b / n, "var": m2 / n}


def normalize(stats, x):
    y = jnp.clip((x - stats["mean"]) / jnp.sqrt(stats["var"] + 1e-8), -10.0, 10.0)
    return jnp.where(stats["count"] > 0, y, x)


# --------------------------------------------------------------------------- environments
def make_env(cfg: RefConfig):
    """Vectorised ``reset(keys [B]) -> (obs, state)`` and ``step(keys [B], state, action) ->
    (obs, state, reward, term, trunc, final_obs)`` (auto-resetting), the observation shape,
    and ``num_actions`` (discrete) or ``action_dim`` (continuous, actions in [-1, 1])."""
    suite, name = cfg.env.split(":")
    if suite == "gymnax":
        env, env_params = gymnax.make(name)
        v_reset = jax.vmap(env.reset, in_axes=(0, None))
        v_step = jax.vmap(env.step, in_axes=(0, 0, 0, None))

        def step(keys, state, action):
            obs, state, reward, term, trunc, info = v_step(keys, state, action, env_params)
            return obs, state, reward, term, trunc, info["final_observation"]

        obs_shape = env.observation_space(env_params).shape
        return (lambda keys: v_reset(keys, env_params)), step, obs_shape, env.action_space(env_params).n, None

    from brax import envs

    env = envs.get_environment(name, backend="spring")

    def reset_one(key):
        s = env.reset(key)
        return s.obs, (s, jnp.zeros((), jnp.int32))

    def step_one(key, state, action):
        s, t = state
        s = env.step(s, action)
        t = t + 1
        term, trunc = s.done > 0.5, (t >= cfg.episode_length) & (s.done <= 0.5)
        fresh_obs, fresh = reset_one(key)  # every env resets; the fresh episode is kept where one ended
        done = term | trunc
        keep = lambda a, b: jnp.where(done, a, b)  # noqa: E731
        state = jax.tree.map(keep, fresh, (s, t))
        return keep(fresh_obs, s.obs), state, s.reward, term, trunc, s.obs

    return jax.vmap(reset_one), jax.vmap(step_one), (env.observation_size,), None, env.action_size


# --------------------------------------------------------------------------- training
def make_train(cfg: RefConfig):
    reset, step, obs_shape, num_actions, action_dim = make_env(cfg)
    T, B = cfg.rollout_length, cfg.num_envs
    num_iters = cfg.num_iterations
    mb_size = T * B // cfg.num_minibatches
    updates_per_iter = cfg.num_minibatches * cfg.num_epochs

    def lr_schedule(count):
        frac = 1.0 - (count // updates_per_iter) / num_iters
        return cfg.learning_rate * frac

    tx = optax.chain(
        optax.clip_by_global_norm(cfg.max_grad_norm),
        optax.adam(learning_rate=lr_schedule if cfg.anneal_lr else cfg.learning_rate, eps=cfg.adam_eps),
    )
    norm = normalize if cfg.normalize_obs else (lambda stats, x: x)

    def logp_entropy(params, out, action):  # [N, A] or [N, d] -> [N], []
        if action_dim:
            log_std = params["log_std"]
            entropy = jnp.sum(log_std + 0.5 * np.log(2 * np.pi * np.e))
            return gaussian_logp(out, log_std, action), entropy
        logp_all = jax.nn.log_softmax(out)
        logp = jnp.take_along_axis(logp_all, action[:, None], axis=-1)[:, 0]
        return logp, -jnp.sum(jnp.exp(logp_all) * logp_all, axis=-1).mean()

    def loss_fn(params, stats, mb):
        obs = norm(stats, mb["obs"])
        logp, entropy = logp_entropy(params, policy_out(params, obs, cfg), mb["action"])
        adv = mb["adv"]
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        ratio = jnp.exp(logp - mb["logp"])
        clipped = jnp.clip(ratio, 1.0 - cfg.clip_epsilon, 1.0 + cfg.clip_epsilon)
        pg_loss = -jnp.minimum(ratio * adv, clipped * adv).mean()
        v_loss = 0.5 * jnp.mean((value(params, obs, cfg) - mb["target"]) ** 2)
        return pg_loss + cfg.vf_coef * v_loss - cfg.ent_coef * entropy

    def act(params, stats, obs, key):  # [B, *obs] -> action [B] or [B, d], its log-probability [B]
        out = policy_out(params, norm(stats, obs), cfg)
        if action_dim:
            u = out + jnp.exp(params["log_std"]) * jax.random.normal(key, out.shape)
            return u, gaussian_logp(out, params["log_std"], u)
        action = jax.random.categorical(key, out)
        return action, jnp.take_along_axis(jax.nn.log_softmax(out), action[:, None], -1)[:, 0]

    def env_step(carry, _):
        params, stats, env_state, obs, ep_ret, key = carry
        key, k_act, k_env = jax.random.split(key, 3)
        action, logp = act(params, stats, obs, k_act)
        env_action = jnp.clip(action, -1.0, 1.0) if action_dim else action
        next_obs, env_state, reward, term, trunc, final_obs = step(jax.random.split(k_env, B), env_state, env_action)
        done = term | trunc  # [B]
        ep_ret = ep_ret + reward
        transition = {
            "obs": obs, "action": action, "logp": logp, "reward": reward * cfg.reward_scale,
            "term": term, "done": done, "final_obs": final_obs,
            "finished_ret": jnp.where(done, ep_ret, 0.0),
        }
        ep_ret = jnp.where(done, 0.0, ep_ret)
        return (params, stats, env_state, next_obs, ep_ret, key), transition

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
        params, opt_state, stats = carry
        grads = jax.grad(loss_fn)(params, stats, mb)
        updates, opt_state = tx.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state, stats), None

    def update_epoch(carry, key):
        params, opt_state, stats, batch = carry
        perm = jax.random.permutation(key, T * B)
        mbs = jax.tree.map(
            lambda x: x[perm].reshape((cfg.num_minibatches, mb_size) + x.shape[1:]), batch
        )
        (params, opt_state, _), _ = jax.lax.scan(update_minibatch, (params, opt_state, stats), mbs)
        return (params, opt_state, stats, batch), None

    def iteration(carry, _):
        params, opt_state, stats, env_state, obs, ep_ret, key = carry
        key, k_roll, k_epochs = jax.random.split(key, 3)
        (_, _, env_state, obs, ep_ret, _), traj = jax.lax.scan(
            env_step, (params, stats, env_state, obs, ep_ret, k_roll), None, length=T
        )  # traj leaves: [T, B, ...]
        if cfg.normalize_obs:  # this rollout's observations join the statistics the update uses
            stats = update_stats(stats, traj["obs"], obs_shape)
        # One batched critic pass over s_t and s'_t (true next state).
        v_both = value(params, norm(stats, jnp.stack([traj["obs"], traj["final_obs"]])), cfg)  # [2, T, B]
        adv, target = gae(traj, v_both[0], v_both[1])
        batch = {
            "obs": traj["obs"], "action": traj["action"], "logp": traj["logp"],
            "adv": adv, "target": target,
        }
        batch = jax.tree.map(lambda x: x.reshape((T * B,) + x.shape[2:]), batch)  # [T*B, ...]
        (params, opt_state, _, _), _ = jax.lax.scan(
            update_epoch, (params, opt_state, stats, batch), jax.random.split(k_epochs, cfg.num_epochs)
        )
        metrics = {
            "ep_return_sum": traj["finished_ret"].sum(),
            "ep_count": traj["done"].sum().astype(jnp.int32),
        }
        return (params, opt_state, stats, env_state, obs, ep_ret, key), metrics

    def train(key):
        k_init, k_reset, k_loop = jax.random.split(key, 3)
        params = init_params(k_init, obs_shape, num_actions, cfg, action_dim)
        opt_state = tx.init(params)
        obs, env_state = reset(jax.random.split(k_reset, B))  # [B, *obs]
        carry = (params, opt_state, init_stats(obs_shape), env_state, obs, jnp.zeros((B,), jnp.float32), k_loop)
        carry, metrics = jax.lax.scan(iteration, carry, None, length=num_iters)
        return (carry[0], carry[2]), metrics  # (params, obs statistics), metrics leaves: [num_iters]

    return train


# --------------------------------------------------------------------------- evaluation
def _make_eval(cfg: RefConfig, num_episodes):
    reset, step, _, _, action_dim = make_env(cfg)
    max_steps = cfg.episode_length if cfg.env.startswith("brax") else \
        gymnax.make(cfg.env.split(":")[1])[1].max_steps_in_episode
    norm = normalize if cfg.normalize_obs else (lambda stats, x: x)

    @jax.jit
    def run(params_stats, key):
        params, stats = params_stats
        k_reset, k_steps = jax.random.split(key)
        obs, state = reset(jax.random.split(k_reset, num_episodes))

        def one_step(carry, k):
            obs, state, alive, ret = carry
            out = policy_out(params, norm(stats, obs), cfg)
            action = jnp.clip(out, -1.0, 1.0) if action_dim else jnp.argmax(out, axis=-1)  # greedy
            obs, state, r, term, trunc, _ = step(jax.random.split(k, num_episodes), state, action)
            ret = ret + r * alive
            alive = alive * (1.0 - (term | trunc).astype(jnp.float32))
            return (obs, state, alive, ret), None

        init = (obs, state, jnp.ones((num_episodes,)), jnp.zeros((num_episodes,)))
        (_, _, _, ret), _ = jax.lax.scan(one_step, init, jax.random.split(k_steps, max_steps))
        return ret.mean()

    return run


_EVAL_CACHE = {}


def evaluate(cfg: RefConfig, params_stats, key, num_episodes=16) -> float:
    """Mean greedy return (argmax, or the Gaussian's mean) over `num_episodes` parallel episodes."""
    if (cfg, num_episodes) not in _EVAL_CACHE:
        _EVAL_CACHE[(cfg, num_episodes)] = _make_eval(cfg, num_episodes)
    return float(_EVAL_CACHE[(cfg, num_episodes)](params_stats, key))


# --------------------------------------------------------------------------- main
def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=sorted(TASKS), default="cartpole")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--total-env-steps", type=int, default=None, help="default: the task's")
    parser.add_argument("--num-envs", type=int, default=None, help="default: the task's")
    parser.add_argument("--num-seeds", type=int, default=1, help="seeds vmapped in one program")
    parser.add_argument("--conv", choices=["xla", "im2col"], default="xla", help="the conv torso's kernel")
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    args = parser.parse_args()

    cfg = TASKS[args.task]
    cfg = dataclasses.replace(cfg, conv=args.conv,
                              total_env_steps=args.total_env_steps or cfg.total_env_steps,
                              num_envs=args.num_envs or cfg.num_envs)
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
    params_stats, metrics = jax.block_until_ready(compiled(train_key))
    run_s = time.perf_counter() - t0

    # Mean return of episodes completed in the last 10 iterations.
    ret_sum = np.asarray(metrics["ep_return_sum"])[..., -10:].sum()
    ret_cnt = np.asarray(metrics["ep_count"])[..., -10:].sum()
    train_return = float(ret_sum / ret_cnt) if ret_cnt > 0 else float("nan")
    if args.num_seeds > 1:  # the mean over seeds of each seed's greedy return
        eval_return = float(np.mean([evaluate(cfg, jax.tree.map(lambda x: x[i], params_stats), eval_key)
                                     for i in range(args.num_seeds)]))
    else:
        eval_return = evaluate(cfg, params_stats, eval_key)

    result = {
        "compile_s": round(compile_s, 3), "run_s": round(run_s, 3),
        "steps_per_s": round(env_steps / run_s, 1), "eval_return": eval_return,
        "train_return": train_return, "env_steps": env_steps,
    }
    print(f"PPO reference | {args.task} ({cfg.env}) | seed {args.seed} | {cfg.num_iterations} iterations | "
          f"{cfg.num_envs} envs | {args.num_seeds} seed(s)")
    print(f"compile time      : {compile_s:.2f} s")
    print(f"run time          : {run_s:.2f} s for {env_steps} env steps")
    print(f"throughput        : {env_steps / run_s:,.0f} env steps/s")
    print(f"train return      : {train_return:.1f} (episodes finished in the last 10 iterations)")
    print(f"greedy eval return: {eval_return:.1f} (16 episodes)")
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
