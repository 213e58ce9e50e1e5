"""Learning curves of run folders: ``python scripts/plot.py RUN_DIR... -o curves.png``
(the same as ``evorl-plot``)."""

from evorl.app.scripts.plot import main

if __name__ == "__main__":
    main()
