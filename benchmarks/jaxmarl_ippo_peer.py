"""The peer of ``configs/ippo_mpe_simple_spread.yaml`` and ``mappo_mpe_simple_spread.yaml``:
JaxMARL's own feed-forward IPPO for MPE (``baselines/IPPO/ippo_ff_mpe.py`` of a JaxMARL
checkout, run as it is), with its config ``ippo_ff_mpe.yaml``'s settings, at a budget you pick.

The script imports ``make_train`` from the checkout's file and runs ``--seeds`` seeds vmapped,
as that file's ``main`` does (keys split from ``PRNGKey(--seed)``); W&B stays off. Settings,
both sides: ``MPE_simple_spread_v3`` (3 agents, 26-step episodes), 16 envs x 128 steps, 4
epochs of 4 minibatches, Adam 2.5e-4 annealed linearly to 0 over the run, clip 0.2, entropy
0.01, value 0.5, gradient norm 0.5, gamma 0.99, GAE lambda 0.95, [64, 64] tanh actor and
critic shared by the agents. One difference is JaxMARL's: it treats the 26-step time limit
as a terminal state, evorl as a truncation (it bootstraps from the last observation).

**Scale.** JaxMARL logs ``returned_episode_returns`` through ``MPELogWrapper``, which multiplies
every agent's reward by the number of agents (3) "to match the on-policy codebase"; averaged
over the agents it is the team's summed reward. evorl's return is the agents' mean reward
summed over the episode, so JaxMARL's figure is 3x evorl's: the script prints both.
Printed: the training return (JaxMARL's, the mean over its rollout's steps and actors) every
100 updates per seed, and the mean of the last 10 updates per seed.

    pip install jaxmarl distrax wandb hydra-core    # a separate venv: the peer's own needs
    python benchmarks/jaxmarl_ippo_peer.py --jaxmarl-repo PATH/TO/JaxMARL --steps 2048000 --seeds 5 --seed 5501
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

#: ``baselines/IPPO/config/ippo_ff_mpe.yaml`` (JaxMARL, commit c793d09), TOTAL_TIMESTEPS and
#: seeds aside.
SETTINGS = {"LR": 2.5e-4, "NUM_ENVS": 16, "NUM_STEPS": 128, "UPDATE_EPOCHS": 4, "NUM_MINIBATCHES": 4,
            "GAMMA": 0.99, "GAE_LAMBDA": 0.95, "CLIP_EPS": 0.2, "ENT_COEF": 0.01, "VF_COEF": 0.5,
            "MAX_GRAD_NORM": 0.5, "ACTIVATION": "tanh", "ENV_NAME": "MPE_simple_spread_v3", "ENV_KWARGS": {},
            "ANNEAL_LR": True}
NUM_AGENTS = 3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jaxmarl-repo", required=True, type=Path, help="a JaxMARL checkout (its baselines/)")
    parser.add_argument("--steps", type=float, default=2_048_000, help="TOTAL_TIMESTEPS per seed")
    parser.add_argument("--seeds", type=int, default=5, help="seeds vmapped in one program (NUM_SEEDS)")
    parser.add_argument("--seed", type=int, default=0, help="SEED: the keys are split from PRNGKey(seed)")
    args = parser.parse_args()

    source = args.jaxmarl_repo / "baselines" / "IPPO"
    if not (source / "ippo_ff_mpe.py").is_file():
        parser.error(f"{source / 'ippo_ff_mpe.py'} does not exist: --jaxmarl-repo names a JaxMARL checkout")
    import jax
    import numpy as np
    import wandb

    sys.path.insert(0, str(source))
    import ippo_ff_mpe

    config = {**SETTINGS, "TOTAL_TIMESTEPS": args.steps, "SEED": args.seed, "NUM_SEEDS": args.seeds}
    wandb.init(mode="disabled")  # the file's update step logs through wandb
    keys = jax.random.split(jax.random.PRNGKey(args.seed), args.seeds)
    start = time.perf_counter()
    out = jax.block_until_ready(jax.vmap(jax.jit(ippo_ff_mpe.make_train(config)))(keys))
    wall = time.perf_counter() - start
    logged = np.asarray(out["metrics"]["returned_episode_returns"])  # [seeds, updates]
    updates = logged.shape[1]
    steps_per_update = SETTINGS["NUM_ENVS"] * SETTINGS["NUM_STEPS"]
    print(f"JaxMARL ippo_ff_mpe, {args.seeds} seeds vmapped (PRNGKey({args.seed}) split), {updates} updates x "
          f"{steps_per_update} = {updates * steps_per_update:,} env steps per seed, wall {wall:.0f} s incl. compile")
    print("update, env steps, JaxMARL's logged return per seed | / 3 (evorl's scale)")
    for u in sorted({*range(99, updates, 100), updates - 1}):
        print(f"{u + 1:6d} {(u + 1) * steps_per_update:>11,}  " + " ".join(f"{r:7.2f}" for r in logged[:, u])
              + "  | " + " ".join(f"{r / NUM_AGENTS:7.2f}" for r in logged[:, u]))
    last = logged[:, -10:].mean(axis=1) / NUM_AGENTS
    print("last 10 updates' mean, evorl's scale: " + ", ".join(f"{r:.2f}" for r in last) + f"; mean {last.mean():.2f}")


if __name__ == "__main__":
    main()
