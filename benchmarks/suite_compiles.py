"""Where the test suite's time goes: JAX's tracing, lowering and XLA compiles, per test.

Runs pytest (by default as ``make test`` does: 2 workers, whole files) from empty
caches in a temporary folder, with a ``sitecustomize`` on ``PYTHONPATH`` that every
Python process of the run loads (the workers and their background jobs: notebooks,
scripts, the two-process tests). It listens to ``jax.monitoring``'s duration events
and writes each with the test that was running (``PYTEST_CURRENT_TEST``, which
subprocesses inherit). Then it prints, per test file and per test, the seconds
pytest measured beside the seconds JAX spent tracing, lowering and compiling.

Usage::

    python -m benchmarks.suite_compiles [--top 30] [-- PYTEST ARGS]

e.g. ``python -m benchmarks.suite_compiles -- tests/test_groups.py -n 0``. A whole
cold run takes as long as ``make test`` from a clean clone (~26 min on 2 cores).
"""

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Loaded at the start of every process; it patches jax._src.monitoring once JAX
# imports it, so a process that never imports JAX pays nothing.
SITECUSTOMIZE = textwrap.dedent(
    """
    import importlib.abc, json, os, sys

    EVENTS = {
        "/jax/core/compile/jaxpr_trace_duration": "trace",
        "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
        "/jax/core/compile/backend_compile_duration": "compile",
        "/jax/compilation_cache/cache_retrieval_time_sec": "cache_read",
    }

    def _listener(event, seconds, **_):
        kind = EVENTS.get(event)
        if kind is None:
            return
        test = os.environ.get("PYTEST_CURRENT_TEST", " ".join(sys.argv[:2]))
        path = os.path.join(os.environ["SUITE_COMPILES_LOG"], f"{os.getpid()}.jsonl")
        with open(path, "a") as f:
            f.write(json.dumps({"kind": kind, "s": seconds, "test": test}) + "\\n")

    class _Hook(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name != "jax._src.monitoring":
                return None
            sys.meta_path.remove(self)
            from importlib.util import find_spec
            spec = find_spec(name)
            run = spec.loader.exec_module
            def exec_module(module):
                run(module)
                module.register_event_duration_secs_listener(_listener)
            spec.loader.exec_module = exec_module
            return spec

    if os.environ.get("SUITE_COMPILES_LOG"):
        sys.meta_path.insert(0, _Hook())
    """
)
KINDS = ("trace", "lower", "compile", "cache_read")


def run_suite(folder: Path, pytest_args: list[str]) -> Path:
    hook, log = folder / "hook", folder / "log"
    hook.mkdir()
    log.mkdir()
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE)
    junit = folder / "junit.xml"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")]),
        "SUITE_COMPILES_LOG": str(log),
        # The suite's JAX cache and impl "c"'s host library: empty.
        "MJXRUNNER_CACHE_DIR": str(folder / "cache"),
        "WARP_CACHE_PATH": str(folder / "warp"),
    }
    cmd = [sys.executable, "-m", "pytest", "-q", f"--junitxml={junit}", *pytest_args]
    subprocess.run(cmd, cwd=ROOT, env=env, check=False)
    return folder


def summarize(folder: Path, top: int) -> None:
    jax_s: dict[tuple[str, str], collections.Counter] = collections.defaultdict(collections.Counter)
    for path in (folder / "log").glob("*.jsonl"):
        for line in path.read_text().splitlines():
            event = json.loads(line)
            nodeid = event["test"].split(" (")[0].split("::")
            key = (Path(nodeid[0]).stem, nodeid[1]) if len(nodeid) > 1 else ("-", nodeid[0])
            jax_s[key][event["kind"]] += event["s"]
    tests = []
    for case in ET.parse(folder / "junit.xml").iter("testcase"):
        key = (case.get("classname").split(".")[-1], case.get("name"))
        tests.append((float(case.get("time")), key, jax_s.pop(key, collections.Counter())))
    for key, counts in jax_s.items():  # outside any test: collection, jobs' start-up
        tests.append((0.0, key, counts))
    total = collections.Counter()
    files: dict[str, list] = collections.defaultdict(lambda: [0.0, collections.Counter()])
    for seconds, (file, _), counts in tests:
        total.update(counts)
        files[file][0] += seconds
        files[file][1].update(counts)
    pytest_s = sum(t[0] for t in tests)
    print(f"pytest's seconds, all tests: {pytest_s:.0f}")
    print("JAX's seconds: " + ", ".join(f"{k} {total[k]:.0f}" for k in KINDS))

    def row(name: str, seconds: float, counts: collections.Counter) -> str:
        jax_total = sum(counts[k] for k in KINDS)
        parts = " ".join(f"{counts[k]:7.1f}" for k in KINDS)
        return f"{seconds:8.1f} {jax_total:8.1f} {parts}  {name}"

    header = f"{'pytest':>8} {'jax':>8} " + " ".join(f"{k:>7}" for k in KINDS)
    print(f"\nper file (largest first)\n{header}")
    for file, (seconds, counts) in sorted(files.items(), key=lambda f: -f[1][0])[:top]:
        print(row(file, seconds, counts))
    print(f"\nper test (largest first)\n{header}")
    for seconds, (file, name), counts in sorted(tests, key=lambda t: -t[0])[:top]:
        print(row(f"{file}::{name}", seconds, counts))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=30, help="rows per table")
    parser.add_argument("pytest_args", nargs="*", help="after --: pytest's arguments")
    args = parser.parse_args()
    pytest_args = args.pytest_args or ["-n", "2", "--dist", "loadfile"]
    with tempfile.TemporaryDirectory() as tmp:
        summarize(run_suite(Path(tmp), pytest_args), args.top)


if __name__ == "__main__":
    main()
