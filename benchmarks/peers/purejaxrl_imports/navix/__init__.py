"""Imported by PureJaxRL's wrappers.py for its NavixGymnaxWrapper, which CartPole PPO never builds."""
