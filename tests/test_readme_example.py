"""The README's "Use it from Python" example builds its workflow without compiling anything,
and learns from a fresh state, so it logs at its config's evaluation points (an iteration run
before ``learn`` shifted them to iter=11, 21, ...). tests/test_docs.py runs the example whole."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def python_example() -> str:
    text = README.read_text()
    section = text[text.index("## Use it from Python"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_python_example_learns_from_a_fresh_state_at_its_evaluation_points():
    code = python_example()
    build, rest = code.split("state = workflow.", 1)
    namespace = {}
    exec(build, namespace)  # the imports, the config and build_from_config: nothing is compiled
    training = namespace["workflow"].config.training
    assert training.num_iterations % training.eval_interval == 0  # the last iteration is evaluated
    assert rest.startswith("learn(workflow.init(")
    code_lines = [line.split("#")[0] for line in rest.splitlines()]
    assert not any(".step(" in line for line in code_lines)  # no iteration before learn (it logged iter=11, 21, ...)
