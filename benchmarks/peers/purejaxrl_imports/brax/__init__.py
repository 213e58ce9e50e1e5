"""Imported by PureJaxRL's wrappers.py for its Brax wrappers, which CartPole PPO never builds."""
