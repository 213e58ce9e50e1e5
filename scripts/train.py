"""Train an on-policy agent: ``python scripts/train.py [--config-name=NAME] [key=value ...]``.

Configs live in ``configs/``; the default (``config.yaml``) is PPO on gymnax CartPole-v1.
Any key can be overridden on the command line (``training.num_envs=16``).
"""

import sys

import hydra
from omegaconf import DictConfig

from evorl.cli import allow_new_keys, exit_on_config_error, train


@hydra.main(config_path="../configs", config_name="config", version_base=None)
def main(cfg: DictConfig) -> None:
    with exit_on_config_error():
        train(cfg)


if __name__ == "__main__":
    sys.argv = allow_new_keys(sys.argv)
    main()
