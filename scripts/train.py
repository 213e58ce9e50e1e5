"""Train an on-policy agent: ``python scripts/train.py [--config-name=NAME] [key=value ...]``.

Configs live in ``configs/``; the default (``config.yaml``) is PPO on gymnax CartPole-v1.
"""

import hydra
from omegaconf import DictConfig

from evorl.cli import train


@hydra.main(config_path="../configs", config_name="config", version_base=None)
def main(cfg: DictConfig) -> None:
    train(cfg)


if __name__ == "__main__":
    main()
