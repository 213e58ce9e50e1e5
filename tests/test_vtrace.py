"""V-trace (``compute_vtrace``, ``compute_pg_advantage``) against independent references."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from evorl.algorithms.impala import compute_pg_advantage, compute_vtrace
from evorl.utils.rl_toolkits import compute_gae

GAMMA = 0.97


def random_trajectory(rng, T, B, ends=()):
    """Random rewards/values with consistent bootstrapping: ``next_values[t] = values[t+1]``
    inside an episode. ``ends`` are ``(t, "terminated" | "truncated")`` episode ends."""
    rewards = rng.normal(size=(T, B)).astype(np.float32)
    values = rng.normal(size=(T, B)).astype(np.float32)
    terminated = np.zeros((T, B), bool)
    truncated = np.zeros((T, B), bool)
    for t, kind in ends:
        (terminated if kind == "terminated" else truncated)[t] = True
    next_values = np.concatenate([values[1:], rng.normal(size=(1, B))]).astype(np.float32)
    final_values = rng.normal(size=(T, B)).astype(np.float32)  # V(final_obs) at episode ends
    next_values = np.where(terminated | truncated, final_values, next_values)
    log_rhos = rng.normal(scale=0.8, size=(T, B)).astype(np.float32)
    return dict(rewards=rewards, values=values, next_values=next_values,
                terminated=terminated, truncated=truncated, log_rhos=log_rhos)


def paper_vtrace_reference(d, gamma, lam, rho_bar, c_bar, pg_rho_bar):
    """A plain loop over Espeholt et al. (2018), eq. (1) and section 4.2, one env column:

        v_s = V(x_s) + sum_{t=s}^{s+n-1} gamma^{t-s} (prod_{i=s}^{t-1} c_i) delta_t V
        delta_t V = rho_t (r_t + gamma V(x_{t+1}) - V(x_t))
        A_s = rho_s (r_s + gamma v_{s+1} - V(x_s))

    The sum runs to the end of the episode or of the trajectory; at an episode end
    V(x_{t+1}) is V(final obs) (truncated) or 0 (terminated); after the last step v = V.
    """
    r, V, V_next = (np.asarray(d[k], np.float64) for k in ("rewards", "values", "next_values"))
    term, trunc = d["terminated"], d["truncated"]
    ratio = np.exp(np.asarray(d["log_rhos"], np.float64))
    T = len(r)

    def next_state_value(t):  # V(x_{t+1})
        if term[t]:
            return 0.0
        if trunc[t] or t == T - 1:
            return V_next[t]
        return V[t + 1]

    vs = np.zeros(T)
    for s in range(T):
        total, weight = V[s], 1.0  # weight = gamma^{t-s} prod_{i=s}^{t-1} c_i
        for t in range(s, T):
            rho_t = min(rho_bar, ratio[t])
            total += weight * rho_t * (r[t] + gamma * next_state_value(t) - V[t])
            if term[t] or trunc[t]:
                break
            weight *= gamma * lam * min(c_bar, ratio[t])
        vs[s] = total

    advantages = np.zeros(T)
    for s in range(T):
        if term[s]:
            v_next = 0.0
        elif trunc[s] or s == T - 1:
            v_next = V_next[s]
        else:
            v_next = vs[s + 1]
        advantages[s] = min(pg_rho_bar, ratio[s]) * (r[s] + gamma * v_next - V[s])
    return vs, advantages


def vtrace(d, gamma=GAMMA, lam=1.0, rho_bar=1.0, c_bar=1.0, pg_rho_bar=1.0, log_rhos=None):
    log_rhos = d["log_rhos"] if log_rhos is None else log_rhos
    args = (d["rewards"], d["values"], d["next_values"], d["terminated"], d["truncated"])
    vs = compute_vtrace(*args, log_rhos, gamma, lam, rho_bar, c_bar)
    pg = compute_pg_advantage(*args[:3], vs, *args[3:], log_rhos, gamma, pg_rho_bar)
    return np.asarray(vs), np.asarray(pg)


@pytest.mark.parametrize("lam", [1.0, 0.9])
def test_on_policy_vtrace_equals_lambda_returns(lam):
    d = random_trajectory(np.random.default_rng(0), T=16, B=3, ends=[(4, "terminated"), (10, "truncated")])
    on_policy = np.zeros_like(d["log_rhos"])
    vs, pg = vtrace(d, lam=lam, log_rhos=on_policy)
    advantages, returns = compute_gae(d["rewards"], d["values"], d["next_values"], d["terminated"],
                                      d["truncated"], GAMMA, lam)
    np.testing.assert_allclose(vs, returns, rtol=1e-5, atol=1e-5)
    if lam == 1.0:  # r + gamma v_{t+1} - V is then the Monte-Carlo (GAE lambda=1) advantage
        np.testing.assert_allclose(pg, advantages, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["terminated", "truncated"])
def test_episode_boundary_equals_two_episodes(kind):
    d = random_trajectory(np.random.default_rng(1), T=12, B=2, ends=[(5, kind)])
    hp = dict(lam=0.95, rho_bar=1.2, c_bar=0.9, pg_rho_bar=1.1)
    vs, pg = vtrace(d, **hp)
    first = {k: v[:6] for k, v in d.items()}
    second = {k: v[6:] for k, v in d.items()}
    vs1, pg1 = vtrace(first, **hp)
    vs2, pg2 = vtrace(second, **hp)
    np.testing.assert_allclose(vs, np.concatenate([vs1, vs2]), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(pg, np.concatenate([pg1, pg2]), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("hp", [
    dict(lam=1.0, rho_bar=1.0, c_bar=1.0, pg_rho_bar=1.0),
    dict(lam=0.9, rho_bar=1.5, c_bar=0.8, pg_rho_bar=1.2),
    dict(lam=0.95, rho_bar=np.inf, c_bar=np.inf, pg_rho_bar=np.inf),
])
def test_vtrace_equals_paper_loop(hp):
    T, B = 20, 4
    d = random_trajectory(np.random.default_rng(2), T, B,
                          ends=[(3, "terminated"), (11, "truncated"), (19, "terminated")])
    vs, pg = vtrace(d, **hp)
    ratios = np.exp(d["log_rhos"])
    assert (ratios > 1.0).mean() > 0.3  # clipping is active
    for b in range(B):
        column = {k: v[:, b] for k, v in d.items()}
        ref_vs, ref_pg = paper_vtrace_reference(column, GAMMA, **hp)
        np.testing.assert_allclose(vs[:, b], ref_vs, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(pg[:, b], ref_pg, rtol=1e-5, atol=1e-5)


def test_gradients_are_stopped_through_targets():
    d = random_trajectory(np.random.default_rng(3), T=8, B=2, ends=[(2, "truncated")])

    def total(values, next_values):
        args = (d["rewards"], values, next_values, d["terminated"], d["truncated"])
        vs = compute_vtrace(*args, d["log_rhos"], GAMMA)
        pg = compute_pg_advantage(*args[:3], vs, *args[3:], d["log_rhos"], GAMMA)
        return jnp.sum(vs) + jnp.sum(pg)

    grads = jax.grad(total, argnums=(0, 1))(jnp.asarray(d["values"]), jnp.asarray(d["next_values"]))
    for g in grads:
        np.testing.assert_array_equal(g, 0.0)


def test_shape_mismatch_is_reported():
    d = random_trajectory(np.random.default_rng(4), T=8, B=2)
    with pytest.raises(ValueError, match="same shape"):
        compute_vtrace(d["rewards"], d["values"][:-1], d["next_values"], d["terminated"],
                       d["truncated"], d["log_rhos"], GAMMA)
