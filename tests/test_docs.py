"""The docs site: ``mkdocs build --strict`` succeeds, and the code blocks of the getting-started
and tutorial pages and of the README run, so those pages cannot rot.

A page's fenced blocks run in order, in one subprocess whose working directory is a fresh
temporary folder: ```` ```python ```` blocks share one namespace (as in a notebook), ```` ```bash ````
blocks run with ``bash -euo pipefail``. The HTML comment on the line before a block says what
to do with it (invisible on the site):

* ``<!-- test: run -->``: run it (a bash block must say so: nothing runs by default);
* ``<!-- test: skip (why) -->``: do not run it, for the reason given (a GPU, a cluster, a
  full-length run); the reason is required;
* ``<!-- test: file NAME -->``: write it to ``NAME`` in the working folder (a module a later
  block imports).

A Python block without a comment runs; a bash block without one is an error. The pages keep
their blocks small (2 iterations, 2 evaluation episodes); the pages run two at a time and
share the CLI's persistent XLA compilation cache, so a program compiled by one page (or by an
earlier run of these tests) is reused.

The README shows commands as a user runs them, at their real length, so the rule for skipping
is explicit there: a README block runs unless it trains at full length for a minute or more
on 2 CPU cores, needs an optional extra, a GPU, several processes or a cluster, or starts a
server; its skip reason says which (and where a shortened copy runs, if one does). Its
sections in ``README_SECTIONS_THAT_RUN`` run whatever they hold.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
import traceback
import types
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
#: The pages whose blocks run: paths below docs/, and the README.
TESTED_PAGES = ["getting-started.md", *sorted(f"tutorials/{p.name}" for p in (DOCS / "tutorials").glob("*.md")),
                "README.md"]
#: README sections whose every block runs (none may be skipped).
README_SECTIONS_THAT_RUN = ["## Your own environment", "## Use it from Python"]
MARKER = re.compile(r"^<!-- test: (?:(?P<run>run)|skip \((?P<reason>[^)]+)\)|file (?P<file>[\w./-]+)) -->$")
FENCE = re.compile(r"^```(?P<lang>\w*)\s*$")
PAGE_TIMEOUT_S = 600
PARALLEL_PAGES = 2


def page_path(page: str) -> Path:
    return ROOT / page if page == "README.md" else DOCS / page


@dataclass
class Block:
    page: str
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    action: str  # "run", "skip" or "file"
    file: str | None = None
    reason: str | None = None


def page_blocks(text: str, page: str) -> list[Block]:
    """The fenced blocks of a Markdown page with what to do with each (see the module docstring).

    Raises ValueError for a bash block without a marker, a marker not followed by a block, or
    an unclosed fence."""
    lines = text.splitlines()
    blocks, marker, i = [], None, 0
    while i < len(lines):
        line = lines[i]
        fence = FENCE.match(line)
        if line.startswith("<!-- test:"):
            marker = MARKER.match(line.strip())
            if marker is None:
                raise ValueError(f"{page}:{i + 1}: malformed marker {line!r}; expected <!-- test: run -->, "
                                 f"<!-- test: skip (reason) --> or <!-- test: file NAME -->")
            if i + 1 >= len(lines) or not FENCE.match(lines[i + 1]):
                raise ValueError(f"{page}:{i + 1}: a test marker must be right above a fenced block")
        elif fence:
            start, lang = i, fence.group("lang")
            i += 1
            body = []
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            if i == len(lines):
                raise ValueError(f"{page}:{start + 1}: unclosed code fence")
            code = "\n".join(body) + "\n"
            if marker is not None:
                action = "run" if marker.group("run") else "skip" if marker.group("reason") else "file"
                blocks.append(Block(page, start + 1, lang, code, action, marker.group("file"), marker.group("reason")))
            elif lang == "bash":
                raise ValueError(f"{page}:{start + 1}: a bash block needs <!-- test: run --> or "
                                 f"<!-- test: skip (reason) --> on the line above it")
            elif lang == "python":
                blocks.append(Block(page, start + 1, lang, code, "run"))
            marker = None
        elif line.strip():
            marker = None
        i += 1
    return blocks


def run_blocks(blocks: list[dict]) -> int:
    """Runs the blocks of one page in order in the current folder (the subprocess's side);
    returns the exit status: 0, or 1 at the first block that fails."""
    # As in a script or `python -c`: the blocks' own __main__ module, the working folder importable.
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    namespace = main.__dict__
    sys.path.insert(0, "")
    for b in blocks:
        where = f"{b['page']}:{b['line']}"
        if b["action"] == "skip":
            print(f"--- {where}: {b['lang']} block not run: {b['reason']}", flush=True)
            continue
        if b["action"] == "file":
            Path(b["file"]).write_text(b["code"])
            print(f"--- {where}: written to {b['file']}", flush=True)
            continue
        print(f"--- {where}: {b['lang']} block", flush=True)
        start = time.perf_counter()
        if b["lang"] == "python":
            try:
                exec(compile(b["code"], where, "exec"), namespace)
            except BaseException:  # noqa: BLE001 - reported with the page and line
                traceback.print_exc()
                print(f"FAILED: the python block at {where}", flush=True)
                return 1
        elif b["lang"] == "bash":
            result = subprocess.run(["bash", "-euo", "pipefail", "-c", b["code"]])
            if result.returncode != 0:
                print(f"FAILED: the bash block at {where} exited with status {result.returncode}", flush=True)
                return 1
        else:
            print(f"FAILED: {where}: cannot run a {b['lang']!r} block", flush=True)
            return 1
        print(f"--- {where}: {time.perf_counter() - start:.1f} s", flush=True)
    return 0


def block_env(cache_dir: Path | None) -> dict[str, str]:
    """The environment of a page's subprocess: this checkout's evorl first, this Python's
    scripts (evorl-train, ...) on the PATH, one compilation cache for every page."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    if cache_dir is None:
        env["EVORL_COMPILATION_CACHE"] = "0"
    else:
        env["EVORL_COMPILATION_CACHE"] = str(cache_dir)  # the CLI's cache
        env["JAX_COMPILATION_CACHE_DIR"] = str(cache_dir)  # the Python blocks'
        env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    env["MPLBACKEND"] = "Agg"
    env.pop("XLA_FLAGS", None)
    return env


def run_page(page: str, blocks: list[Block], cwd: Path, cache_dir: Path | None) -> subprocess.CompletedProcess:
    cwd.mkdir(parents=True, exist_ok=True)
    (cwd / "examples").symlink_to(ROOT / "examples")  # pages run "from the repository's root"
    spec = cwd.parent / f"{cwd.name}.blocks.json"
    spec.write_text(json.dumps([asdict(b) for b in blocks]))
    return subprocess.run([sys.executable, str(Path(__file__).resolve()), str(spec)], cwd=cwd,
                          env=block_env(cache_dir), capture_output=True, text=True, timeout=PAGE_TIMEOUT_S)


@pytest.fixture(scope="module")
def page_runs(request, tmp_path_factory):
    """Starts every selected page at once, ``PARALLEL_PAGES`` at a time (each subprocess is
    mostly XLA compiling on one core); ``{page: future of its CompletedProcess}``."""
    cache = cli_compilation_cache()
    selected = [item.callspec.params["page"] for item in request.session.items
                if getattr(item, "originalname", None) == "test_page_code_blocks_run"]
    pool = ThreadPoolExecutor(max_workers=PARALLEL_PAGES)
    runs = {}
    for page in selected:
        blocks = page_blocks(page_path(page).read_text(), page)
        cwd = tmp_path_factory.mktemp(re.sub(r"\W", "_", page)) / "cwd"
        runs[page] = pool.submit(_timed, run_page, page, blocks, cwd, cache)
    yield runs
    pool.shutdown(wait=True, cancel_futures=True)


def cli_compilation_cache() -> Path | None:
    """The persistent compilation cache ``evorl-train`` uses (``$EVORL_COMPILATION_CACHE``, else
    ``~/.cache/evorl/xla``): the pages' commands run as a user's would, and a second run of
    these tests skips the compilations of the first. None: turned off (``=0``)."""
    setting = os.environ.get("EVORL_COMPILATION_CACHE", "")
    if setting.lower() in ("0", "off", "false", "no"):
        return None
    if setting:
        return Path(setting)
    cache_home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache_home) / "evorl" / "xla"


def _timed(fn, *args):
    start = time.perf_counter()
    result = fn(*args)
    return result, time.perf_counter() - start


# --------------------------------------------------------------------------------------
# The site builds, strict
# --------------------------------------------------------------------------------------
@pytest.mark.slow  # builds the docs site
def test_mkdocs_build_strict(tmp_path):
    for module in ("mkdocs", "material", "mkdocstrings_handlers.python"):
        pytest.importorskip(module, reason=f"{module} is not installed: pip install -e '.[docs]'")
    start = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    print(f"mkdocs build --strict: {time.perf_counter() - start:.1f} s")
    config_page = (tmp_path / "site" / "reference" / "config" / "index.html").read_text()
    assert "training.num_envs" in config_page and "agent.vtrace_rho_bar" in config_page
    ppo_page = (tmp_path / "site" / "algorithms" / "ppo" / "index.html").read_text()
    assert "docstring-math" not in ppo_page and r"\mathrm{clip}" in ppo_page
    # MathJax is served by the site itself: the formulas render without internet access
    assert "javascripts/mathjax/tex-svg.js" in ppo_page and "cdn.jsdelivr.net" not in ppo_page
    assert (tmp_path / "site" / "javascripts" / "mathjax" / "tex-svg.js").stat().st_size > 1_000_000


def test_config_reference_documents_every_key():
    """Every key of every config section has a type, a default and a comment in the source
    (a new key without its ``#:`` comment fails here)."""
    sys.path.insert(0, str(DOCS))
    try:
        import gen_config_reference
    finally:
        sys.path.remove(str(DOCS))
    page = gen_config_reference.page()
    rows = [line for line in page.splitlines() if line.startswith("| `") and line.count("|") >= 5]
    undocumented = [row.split("|")[1].strip() for row in rows if row.rstrip().endswith("|  |")]
    assert not undocumented, f"config keys without a #: comment in their dataclass: {undocumented}"
    from evorl.config import TrainingConfig
    from evorl.config.training import OffPolicyTrainingConfig
    import dataclasses

    for field in dataclasses.fields(TrainingConfig):
        assert f"`training.{field.name}`" in page
    off_policy = page[page.index("### training (off-policy)"):page.index("## agent")]
    for field in dataclasses.fields(OffPolicyTrainingConfig):
        assert f"`training.{field.name}`" in off_policy


# --------------------------------------------------------------------------------------
# The code blocks of the getting-started and tutorial pages run
# --------------------------------------------------------------------------------------
def test_every_bash_block_is_marked_and_no_python_block_is_skipped():
    assert len(TESTED_PAGES) >= 10, TESTED_PAGES
    for page in TESTED_PAGES:
        blocks = page_blocks(page_path(page).read_text(), page)  # raises on an unmarked bash block
        assert any(b.action == "run" for b in blocks), f"{page} has no block that runs"
        skipped = [f"{page}:{b.line}" for b in blocks if b.lang == "python" and b.action == "skip"]
        assert not skipped, f"every python block of these pages runs; skipped: {skipped}"


def test_the_readme_sections_users_paste_run_whole():
    """"Your own environment" (it once needed PYTHONPATH=.) and "Use it from Python" run as
    pasted: none of their blocks is skipped."""
    text = (ROOT / "README.md").read_text()
    headings, fenced = [], False  # (1-based line, level, heading) outside code blocks
    for number, line in enumerate(text.splitlines(), 1):
        fenced ^= line.startswith("```")
        if not fenced and re.match(r"#+ ", line):
            headings.append((number, len(line.split()[0]), line))
    blocks = page_blocks(text, "README.md")
    for heading in README_SECTIONS_THAT_RUN:
        [(start, level)] = [(n, lv) for n, lv, h in headings if h == heading]
        end = next((n for n, lv, _ in headings if n > start and lv <= level), math.inf)
        inside = [b for b in blocks if start < b.line < end]
        assert inside and all(b.action != "skip" for b in inside), (heading, inside)
        assert any(b.action == "run" for b in inside), heading


def test_the_readme_opens_with_install_and_stays_short():
    """The README is the front door: at most 200 lines, its first block the two commands a
    fresh machine runs from the checkout's root (install and train, install and test)."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200, f"README.md has {len(text.splitlines())} lines; the rest goes to docs/"
    first = page_blocks(text, "README.md")[0].code.splitlines()
    assert first[0].startswith("pip install -e . && python scripts/train.py"), first
    assert first[1].startswith('pip install -e ".[test]" && python -m pytest'), first


@pytest.mark.slow  # minutes on 2 cores: every page trains briefly in fresh processes
@pytest.mark.parametrize("page", TESTED_PAGES)
def test_page_code_blocks_run(page, page_runs):
    result, seconds = page_runs[page].result()
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"a code block of {page_path(page).relative_to(ROOT)} failed:\n{output[-6000:]}"
    print(result.stdout)
    print(f"{page}: {seconds:.1f} s")


# --- the harness itself ---------------------------------------------------------------
def test_a_broken_block_fails_the_page(tmp_path):
    page = ("Text.\n\n```python\nx = 1\n```\n\n<!-- test: run -->\n```bash\ntest -f data.txt\n```\n\n"
            "<!-- test: file data.txt -->\n```python\nhello\n```\n\n```python\nassert x == 2, 'x is not 2'\n```\n")
    blocks = page_blocks(page, "broken.md")
    assert [b.action for b in blocks] == ["run", "run", "file", "run"]
    result = run_page("broken.md", blocks, tmp_path / "cwd", tmp_path / "cache")
    assert result.returncode == 1
    assert "FAILED: the bash block at broken.md:8" in result.stdout  # data.txt is written after it
    blocks = [blocks[0], blocks[2], blocks[1], blocks[3]]
    result = run_page("broken.md", blocks, tmp_path / "cwd2", tmp_path / "cache")
    assert result.returncode == 1 and "x is not 2" in result.stderr
    assert "FAILED: the python block at broken.md:17" in result.stdout


def test_unmarked_bash_blocks_and_bad_markers_are_errors():
    with pytest.raises(ValueError, match="page.md:1: a bash block needs"):
        page_blocks("```bash\nevorl-train\n```\n", "page.md")
    with pytest.raises(ValueError, match="malformed marker"):
        page_blocks("<!-- test: skip -->\n```bash\nevorl-train\n```\n", "page.md")
    with pytest.raises(ValueError, match="right above a fenced block"):
        page_blocks("<!-- test: run -->\n\n```bash\nevorl-train\n```\n", "page.md")
    skipped = page_blocks("<!-- test: skip (needs a GPU) -->\n```bash\nevorl-train\n```\n", "page.md")
    assert skipped[0].action == "skip" and skipped[0].reason == "needs a GPU"


if __name__ == "__main__":  # the subprocess of run_page: python tests/test_docs.py BLOCKS.json
    sys.exit(run_blocks(json.loads(Path(sys.argv[1]).read_text())))
