"""Train an on-policy agent: ``python scripts/train.py [--config-name=NAME] [key=value ...]``.

The same as the ``evorl-train`` command. Configs live in ``configs/`` (shipped in the package
as ``evorl/configs``); the default (``config.yaml``) is PPO on gymnax CartPole-v1. Any key can
be overridden on the command line (``training.num_envs=16``); ``-m seed=1,2,3`` sweeps.
"""

from evorl.app.cli import train_command

if __name__ == "__main__":
    train_command()
