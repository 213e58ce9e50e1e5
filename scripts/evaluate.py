"""Evaluate a run's checkpoint: ``python scripts/evaluate.py RUN_DIR [--episodes N] [--render out.gif]``
(the same as ``evorl-eval``)."""

from evorl.app.scripts.evaluate import main

if __name__ == "__main__":
    main()
