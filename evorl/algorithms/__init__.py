"""The algorithms: each module holds an agent (its loss and hyperparameters), its factory and
a workflow subclass on the engine (``evorl.workflows``); ES's pure generation is in ``es.py``,
its workflow in ``es_workflow.py``. Imports run one way: algorithms -> engine."""
