"""docs/tpu.md's table is what benchmarks/tpu_scale.py renders from the committed TPU data."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def rendered_and_page_block(script: str, data: Path, marker: str) -> tuple[str, str]:
    """What ``script --render data`` prints, and docs/tpu.md's block between ``marker``'s lines."""
    rendered = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--render", str(data)],
                              capture_output=True, text=True, check=True).stdout
    page = (ROOT / "docs" / "tpu.md").read_text()
    return rendered, page.split(f"<!-- {marker}:start -->\n", 1)[1].split(f"<!-- {marker}:end -->", 1)[0]


def test_the_tpu_page_table_is_the_rendered_data():
    rendered, block = rendered_and_page_block("tpu_scale.py", ROOT / "benchmarks" / "results" / "tpu" / "v5e.jsonl",
                                              "tpu-table")
    assert block == rendered
    assert "| 1024 x 4 |" in rendered and "PureJaxRL" in rendered  # the headline row is there


def test_the_minatar_table_is_the_rendered_data():
    rendered, block = rendered_and_page_block(
        "minatar_published.py", ROOT / "benchmarks" / "results" / "minatar" / "published.jsonl", "minatar-table")
    assert block == rendered
    assert "| Breakout-MinAtar | 8 | 10.0M |" in rendered


def test_the_device_check_table_is_the_data():
    import json

    rows = [json.loads(x) for x in (ROOT / "benchmarks" / "results" / "tpu" / "device_check_v5e.jsonl").read_text().splitlines()]
    page = (ROOT / "docs" / "tpu.md").read_text().split("## The device check on the chip", 1)[1].split("\n## ", 1)[0]

    def short(x: float) -> str:
        return f"{x / 1e6:.2f}M" if x >= 1e6 else f"{x / 1e3:.0f}k"

    measured = [r for r in rows if "steps_per_s" in r]
    assert {r["case"] for r in measured} == {"cartpole", "cartpole-seeds", "minatar-cnn", "ant"}
    for r in measured:
        cell = f"{short(r['steps_per_s'])} ({r['compile_s']:.1f})"
        assert cell in page, (r["case"], r["side"], r["path"], cell)
