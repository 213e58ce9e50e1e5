"""The RL and evolution math: pure functions over pytrees, no host loop."""
