"""The application: the config front end (Hydra groups), the commands (``evorl-train``,
``evorl-eval``, ``evorl-plot``), experiments and their run folders, checkpoints, signals,
recorders, plots, renderings and ``load_policy``. Imports every layer below it."""
