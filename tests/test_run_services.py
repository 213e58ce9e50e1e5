"""A workflow receives its services (recorders, checkpointer, run folder, stop request) when it
is built: nothing outside the workflow classes sets an attribute on a workflow."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from evorl.engine.recording import ConsoleRecorder
from evorl.engine.services import RunServices, StopRequest

ROOT = Path(__file__).resolve().parents[1]
#: Where workflow classes live: their own methods set their attributes.
WORKFLOW_CLASSES = ("evorl/engine", "evorl/workflows", "evorl/algorithms")
#: Calls that return a workflow.
BUILDERS = {"build_from_config", "with_services", "load_run"}
#: Names that hold a workflow wherever they appear.
WORKFLOW_NAMES = {"workflow", "wf"}


def _holds_workflow(node: ast.expr, bound: set[str]) -> bool:
    """``workflow``, a name bound to a builder's result, or ``<anything>.workflow``."""
    if isinstance(node, ast.Name):
        return node.id in WORKFLOW_NAMES or node.id in bound
    return isinstance(node, ast.Attribute) and node.attr == "workflow"


def _builder_call(node: ast.expr | None) -> bool:
    if isinstance(node, ast.Subscript):  # workflow, state, iteration = load_run(...)[...]
        node = node.value
    return isinstance(node, ast.Call) and (
        isinstance(node.func, ast.Attribute) and node.func.attr in BUILDERS
        or isinstance(node.func, ast.Name) and node.func.id in BUILDERS)


def workflow_assignments(source: str, filename: str) -> list[str]:
    """``file:line`` of each attribute set on a workflow: ``w.x = ...`` (also ``+=``, annotated,
    and ``setattr(w, ...)``), where ``w`` is named ``workflow``/``wf``, is bound in the same
    module to what ``build_from_config``, ``with_services`` or ``load_run`` returned, or is
    ``something.workflow``."""
    tree = ast.parse(source, filename=filename)
    bound = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and _builder_call(node.value):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                first = target.elts[0] if isinstance(target, ast.Tuple) else target
                if isinstance(first, ast.Name):
                    bound.add(first.id)
    found = []
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Assign):
            targets = [t for target in node.targets
                       for t in (target.elts if isinstance(target, ast.Tuple) else [target])]
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" and node.args:
            if _holds_workflow(node.args[0], bound):
                found.append(f"{filename}:{node.lineno}")
        found += [f"{filename}:{node.lineno}" for t in targets
                  if isinstance(t, ast.Attribute) and _holds_workflow(t.value, bound)]
    return found


def test_nothing_sets_an_attribute_on_a_workflow_from_outside():
    problems = []
    for folder in ("evorl", "tests", "benchmarks", "examples", "docs"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if relative.startswith(WORKFLOW_CLASSES):
                continue
            problems += workflow_assignments(path.read_text(), relative)
    assert not problems, ("attributes set on a workflow from outside (give them as RunServices to "
                          "build_from_config or with_services):\n" + "\n".join(problems))


@pytest.mark.parametrize("source", [
    "workflow.recorders = []\n",
    "wf.checkpointer: object = None\n",
    "w = PPOWorkflow.build_from_config(cfg)\nw.run_dir = path\n",
    "w, state, it = load_run(path)\nw.last_metrics += {}\n",
    "result.workflow.lineage = None\n",
    "setattr(workflow, 'stop_requested', 'SIGINT')\n",
])
def test_the_check_finds_an_attribute_set_from_outside(source):
    assert workflow_assignments(source, "x.py"), source


def test_the_check_passes_other_assignments():
    source = ("w = PPOWorkflow.build_from_config(cfg)\nstate = w.init(key)\nstate.x = 1\nself.recorders = []\n"
              "result = run_experiment(cfg)\nconfig.workflow_cls = 'x'\n")
    assert workflow_assignments(source, "x.py") == []


def test_services_default_to_one_console_recorder_and_nothing_else():
    from evorl.workflows import PPOWorkflow

    cfg = {"env": {"env_name": "CartPole-v1", "env_type": "gymnax"},
           "agent": {"actor_hidden_layer_sizes": [8], "critic_hidden_layer_sizes": [8]},
           "training": {"num_iterations": 2, "num_envs": 2, "rollout_length": 8, "num_minibatches": 1,
                        "eval_interval": 2, "eval_episodes": 1}}
    workflow = PPOWorkflow.build_from_config(cfg)
    services = workflow.services
    assert [type(r) for r in services.recorders] == [ConsoleRecorder]
    assert services.recorders[0].prefix == "[PPO] "
    assert (services.checkpointer, services.lineage, services.front_recorder, services.run_dir) == (None,) * 4
    assert services.stop.reason is None

    quiet = workflow.with_services(RunServices(recorders=[], run_dir=Path("runs/x")))
    assert quiet.services.recorders == () and quiet.services.run_dir == Path("runs/x")
    assert quiet.executor is workflow.executor and workflow.services is services  # the original keeps its own
    with pytest.raises(TypeError, match="recorders or services, not both"):
        PPOWorkflow.build_from_config(cfg, recorders=[], services=RunServices())


def test_a_stop_request_carries_its_reason():
    stop = StopRequest()
    assert stop.reason is None
    stop.request("SIGTERM")
    assert stop.reason == "SIGTERM"
