"""The benchmark's report once made: its layout (:data:`SCHEMA`, :func:`validate`),
JSON (:func:`to_json`, :func:`save`), the text :func:`table` and the :func:`plot`.

:func:`mjxrunner.tools.bench.run` makes the report; that module re-exports
everything here.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from mjxrunner.engine.backend import describe_backend
from mjxrunner.tools.bench_variants import NATIVE, RAW, VARIANTS

SCHEMA = "mjxrunner.bench/1"
"""Identifies the layout of a report; bump it when a field changes meaning (not when
the module moves: recorded reports keep validating)."""


_RECORD_KEYS = {
    "variant": str,
    "num_envs": int,
    "status": str,
    "ratio_to_raw": (float, type(None)),
    "ratio_to_native": (float, type(None)),
}
_OK_KEYS = {
    "steps_per_s": float,
    "steps_per_s_min": float,
    "steps_per_s_max": float,
    "spread": float,
    "run_s": list,
    "setup_s": float,
    "first_call_s": float,
    "compile_s": float,
}


def validate(report: Any) -> None:
    """Checks that ``report`` has the layout :func:`run` writes (e.g. after loading JSON).

    Raises:
      ValueError: a key is missing, has the wrong type, or a ratio disagrees with
        the rates it is computed from.
    """

    def need(d: Any, key: str, kind: Any, where: str) -> Any:
        if not isinstance(d, dict) or key not in d:
            raise ValueError(f"{where}: missing key {key!r}")
        value = d[key]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            return value  # JSON writes 2.0 as 2.0, but a hand-made report may hold ints
        if not isinstance(value, kind):
            raise ValueError(f"{where}.{key}: expected {kind}, got {type(value).__name__}")
        return value

    if need(report, "schema", str, "report") != SCHEMA:
        raise ValueError(f"report.schema: expected {SCHEMA!r}, got {report['schema']!r}")
    info = need(report, "backend", dict, "report")
    for key in ("versions", "impl", "platform", "device_kind", "device_count", "qpos_dtype"):
        need(info, key, object, "report.backend")
    for key in ("mujoco", "mujoco-mjx", "jax", "jaxlib"):
        need(info["versions"], key, str, "report.backend.versions")
    need(info, "jax_enable_x64", bool, "report.backend")
    config = need(report, "config", dict, "report")
    for key, kind in (("model", str), ("num_envs", list), ("n_steps", int), ("repeats", int)):
        need(config, key, kind, "report.config")
    need(report, "host", dict, "report")
    names = need(report, "variants", dict, "report")
    results = need(report, "results", list, "report")
    rates: dict[tuple[int, str], float] = {}
    for i, r in enumerate(results):
        where = f"report.results[{i}]"
        for key, kind in _RECORD_KEYS.items():
            need(r, key, kind, where)
        if r["variant"] not in names:
            raise ValueError(f"{where}.variant: {r['variant']!r} is not in report.variants")
        if r["status"] == "ok":
            for key, kind in _OK_KEYS.items():
                need(r, key, kind, where)
            rates[r["num_envs"], r["variant"]] = r["steps_per_s"]
        elif r["status"] in ("unavailable", "failed"):
            need(r, "reason", str, where)
        else:
            raise ValueError(f"{where}.status: unknown status {r['status']!r}")
    for i, r in enumerate(results):
        for ref, key in ((RAW, "ratio_to_raw"), (NATIVE, "ratio_to_native")):
            mine, base = rates.get((r["num_envs"], r["variant"])), rates.get((r["num_envs"], ref))
            expected = None if mine is None or base is None else mine / base
            got = r[key]
            if (expected is None) != (got is None) or (
                got is not None and not math.isclose(got, expected, rel_tol=1e-9)
            ):
                raise ValueError(f"report.results[{i}].{key}: {got} != rates' ratio {expected}")


def to_json(report: dict[str, Any]) -> str:
    """The report as indented JSON text."""
    return json.dumps(report, indent=2)


def save(report: dict[str, Any], path: str | os.PathLike) -> Path:
    """Writes the report as JSON to ``path`` (folders created) and returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(to_json(report) + "\n")
    return path


def _ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def table(report: dict[str, Any]) -> str:
    """A plain-text table of the report, one row per size and variant."""
    c = report["config"]
    host = report["host"]
    lines = [
        f"{c['model']}: {c['n_steps']} steps x {c['substeps']} substeps, "
        f"{c['repeats']} repeats, median (spread = (max - min) / median)",
        describe_backend(report["backend"]),
        f"host: {host['cpu']}, {host['native_threads']} threads for native"
        f"{' and impl c' if c.get('impl') == 'c' else ''}, "
        f"load avg {host.get('load_avg_start')} -> {host.get('load_avg_end')}",
        "",
        f"{'num_envs':>8}  {'variant':<11} {'impl':<6} {'steps/s':>12} {'spread':>7} "
        f"{'x raw':>6} {'x native':>8} {'compile s':>9} {'peak RSS':>9}",
    ]
    for r in report["results"]:
        head = f"{r['num_envs']:>8}  {r['variant']:<11} {r.get('impl') or '-':<6}"
        if r["status"] != "ok":
            lines.append(f"{head} {r['status']}: {r['reason']}")
            continue
        rss = r.get("peak_rss_bytes")
        rss_text = "-" if rss is None else f"{rss / 2**20:.0f} MiB"
        lines.append(
            f"{head} {r['steps_per_s']:>12,.0f} {r['spread']:>6.0%} "
            f"{_ratio(r['ratio_to_raw']):>6} {_ratio(r['ratio_to_native']):>8} "
            f"{r['compile_s']:>9.1f} {rss_text:>9}"
        )
    return "\n".join(lines)


def plot(report: dict[str, Any], path: str | os.PathLike) -> Path:
    """Writes a PNG of steps/s versus ``num_envs`` (log axes), one line per variant.

    Bars span the slowest to the fastest repeat. Needs matplotlib
    (``pip install 'mjxrunner[bench]'``).
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import NullLocator
    except ImportError:
        raise ImportError("plotting needs matplotlib: pip install 'mjxrunner[bench]'") from None
    fig = Figure(figsize=(7, 4.5), dpi=120)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for name, label in report["variants"].items():
        rows = [r for r in report["results"] if r["variant"] == name and r["status"] == "ok"]
        if not rows:
            continue
        x = np.array([r["num_envs"] for r in rows])
        y = np.array([r["steps_per_s"] for r in rows])
        err = [y - [r["steps_per_s_min"] for r in rows], [r["steps_per_s_max"] for r in rows] - y]
        color = f"C{list(VARIANTS).index(name)}" if name in VARIANTS else None  # same in every plot
        ax.errorbar(x, y, yerr=err, marker="o", capsize=3, color=color, label=f"{name}: {label}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    sizes = report["config"]["num_envs"]
    ax.set_xticks(sizes, [str(n) for n in sizes])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("num_envs (worlds)")
    ax.set_ylabel("env steps / s")
    c, info = report["config"], report["backend"]
    ax.set_title(
        f"{c['model']}, impl {c['impl']}, {info['platform']} ({info['device_kind']}), "
        f"{c['n_steps']} steps x {c['substeps']} substeps",
        fontsize=9,
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    host = report["host"]
    fig.text(
        0.01,
        0.01,
        f"{describe_backend(info)}\nhost: {host['cpu']}, load avg {host.get('load_avg_start')}",
        fontsize=6,
        color="0.4",
    )
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    return path
