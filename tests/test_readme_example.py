"""The README's "Use it from Python" example says where it logs (iter=10, 20, ..., 200): its
config's logging points, without training it (a run of it compiles for a minute under load)."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def python_example() -> str:
    text = README.read_text()
    section = text[text.index("## Use it from Python"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_python_example_logs_where_its_comment_says():
    code = python_example()
    build, rest = code.split("state = workflow.init(", 1)
    namespace = {}
    exec(build, namespace)  # the imports, the config and build_from_config: nothing is compiled
    training = namespace["workflow"].config.training
    first, last = training.eval_interval, training.num_iterations
    assert f"iter={first}, {2 * first}, ..., {last}" in rest
    code_lines = [line.split("#")[0] for line in rest.splitlines()]
    assert not any(".step(" in line for line in code_lines)  # no iteration before learn (it logged iter=11, 21, ...)
