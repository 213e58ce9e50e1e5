"""Shared fixtures: a tiny PPO CartPole config that compiles and runs in seconds; the
compiled programs of each test file released after it; each process's peak memory written
where ``EVORL_TEST_FOOTPRINT_DIR`` says (``benchmarks/test_suite_footprint.py`` reads it)."""

import contextlib
import copy
import ctypes
import ctypes.util
import gc
import io
import json
import os
import resource
import sys

import pytest

TINY = {
    "workflow_cls": "evorl.workflows.PPOWorkflow",
    "seed": 3,
    "env": {"env_name": "CartPole-v1", "env_type": "gymnax"},
    "agent": {"actor_hidden_layer_sizes": [8], "critic_hidden_layer_sizes": [8], "normalize_obs": True},
    "training": {"num_iterations": 6, "eval_interval": 1, "rollout_length": 16, "num_envs": 4,
                 "num_minibatches": 2, "num_epochs": 1, "eval_episodes": 2},
    "checkpoint": {"save_interval": 2, "max_to_keep": None},
    "logging": {"recorders": [], "plot": False},
}


@pytest.fixture
def tiny_cfg():
    """A fresh copy of the tiny config (tests may edit it)."""
    return copy.deepcopy(TINY)


@pytest.fixture(scope="session", autouse=True)
def compilation_cache(tmp_path_factory):
    """Many tests build the same tiny workflow: compile each program once per session."""
    import jax

    jax.config.update("jax_compilation_cache_dir", str(tmp_path_factory.mktemp("jax_cache")))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    yield
    jax.config.update("jax_compilation_cache_dir", None)


@pytest.fixture(scope="module", autouse=True)
def release_compiled_programs(request):
    """After each test file, its compiled programs and traces are dropped: a worker that runs
    a hundred files would otherwise keep every one of them (gigabytes). Programs compiled
    again later are read back from the session's compilation cache above. With
    ``EVORL_TEST_FOOTPRINT_DIR`` set, a file that raises its process's peak memory is recorded
    (the peak before and after it), so the file behind a worker's peak can be named."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    yield
    _record_peak_growth(request.module.__name__, before)
    import jax

    jax.clear_caches()
    gc.collect()
    if _LIBC is not None:
        _LIBC.malloc_trim(0)  # the freed heap back to the system: the worker's memory stays flat


def _record_peak_growth(module: str, before_kib: int) -> None:
    out = os.environ.get("EVORL_TEST_FOOTPRINT_DIR")
    after_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if not out or after_kib <= before_kib:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "controller")
    with open(os.path.join(out, f"{worker}.files.jsonl"), "a") as f:
        f.write(json.dumps({"module": module, "peak_before_mb": round(before_kib / 1024, 1),
                            "peak_after_mb": round(after_kib / 1024, 1)}) + "\n")


def _glibc():
    """The C library where it is glibc (``malloc_trim``), else None."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc if hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


_LIBC = _glibc()


def pytest_sessionfinish(session):
    """With ``EVORL_TEST_FOOTPRINT_DIR`` set: this process's peak resident memory, one JSON
    file per process (the controller and each xdist worker)."""
    out = os.environ.get("EVORL_TEST_FOOTPRINT_DIR")
    if not out:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "controller")
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    with open(os.path.join(out, f"{worker}.json"), "w") as f:
        json.dump({"process": worker, "peak_rss_mb": round(peak_kib / 1024, 1)}, f)


@pytest.fixture
def train_in_process(monkeypatch):
    """``train_in_process(args, cwd) -> (status, stdout, stderr)``: ``evorl-train args`` run in
    this process (no interpreter start and no imports: a second instead of several), for the
    command's answers to bad input. Tests of what only a process shows (its real exit, signals)
    start ``scripts/train.py`` instead."""
    from evorl.app.cli import train_main

    def run(args, cwd):
        monkeypatch.chdir(cwd)
        monkeypatch.setattr("sys.argv", ["evorl-train", *args])
        monkeypatch.setenv("EVORL_COMPILATION_CACHE", "0")  # the session's cache stays as it is
        monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
        # Hydra's logging setup closes every log handler; absl's closes its stream (pytest's
        # capture, when absl was imported during collection) unless that is one of sys's own
        monkeypatch.setattr("sys.__stdout__", sys.stdout)
        monkeypatch.setattr("sys.__stderr__", sys.stderr)
        out, err = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                train_main()
            status = 0
        except SystemExit as e:
            status = e.code if isinstance(e.code, int) else 1
        return status, out.getvalue(), err.getvalue()

    return run
