"""docs/tpu.md's table is what benchmarks/tpu_scale.py renders from the committed TPU data."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_tpu_page_table_is_the_rendered_data():
    rendered = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "tpu_scale.py"), "--render",
                               str(ROOT / "benchmarks" / "results" / "tpu" / "v5e.jsonl")],
                              capture_output=True, text=True, check=True).stdout
    page = (ROOT / "docs" / "tpu.md").read_text()
    block = page.split("<!-- tpu-table:start -->\n", 1)[1].split("<!-- tpu-table:end -->", 1)[0]
    assert block == rendered
    assert "| 1024 x 4 |" in rendered and "PureJaxRL" in rendered  # the headline row is there
