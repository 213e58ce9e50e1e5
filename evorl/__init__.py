"""evorl: reinforcement learning in JAX: on- and off-policy RL, evolution-guided RL (CEM-RL, ERL), evolution strategies and population-based training."""

__version__ = "0.1.0"

__all__ = ["load_policy", "Policy"]


def __getattr__(name: str):
    # imported on first use: ``import evorl`` stays free of JAX
    if name in ("load_policy", "Policy"):
        from evorl.app import policy

        return getattr(policy, name)
    raise AttributeError(f"module 'evorl' has no attribute {name!r}")
