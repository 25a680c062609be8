"""Draws a PPO learning curve from the JSON summary of ``benchmarks/ppo.py --out``, or
from the folder of a ``mjxrunner train`` run (its ``run.json`` and ``metrics.jsonl``).

    python scripts/learning_curve.py benchmarks/results/ppo/cpu-ant-velocity.json \\
        docs/images/ant_velocity_learning.png \\
        --reference lin_vel_error=0.383 --reference yaw_rate_error=0.25

Left: the mean return of the episodes that ended in each update (dots; updates where
none ended have none) and, if the summary has it, the mean reward per step over each
update's rollout (line, right axis). Right, for a task that logs them
(``info["metrics"]``): the mean tracking errors over each update's rollout, with
optional reference levels drawn dashed (for the ant's commands, uniform in +-0.5, a
policy that stands still errs by 0.383 m/s and 0.25 rad/s on average). The title
states the run: env steps, training wall time (compile excluded) and env steps per
second.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np


def from_run(folder: Path) -> dict:
    """The summary :func:`draw` reads, from a ``mjxrunner train`` run's folder (its
    training time includes the first chunk's compile)."""
    record = json.loads((folder / "run.json").read_text())
    rows = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]
    wall = rows[-1]["wall_s"]
    keys = [k for k in rows[0] if k not in ("update", "wall_s")]
    return {
        "config": record["config"],
        "seed": record["seed"],
        "backend": record["backend"],
        "env_steps": record["env_steps_done"],
        "train_s": wall,
        "env_steps_per_s": round(record["env_steps_done"] / wall),
        **{k: [r[k] for r in rows] for k in keys},
    }


def draw(summary: dict, out: Path, references: dict[str, float] | None = None) -> None:
    config = summary["config"]
    per_update = config["num_envs"] * config["rollout_steps"]
    returns = np.asarray(summary["mean_return"], float)
    steps = (np.arange(len(returns)) + 1) * per_update / 1e6
    # the tracking errors; a task's reward terms (info/reward/...) are left to the logs
    logged = sorted(k for k in summary if k.startswith("info/") and "/reward/" not in k)
    fig, axes = plt.subplots(1, 2 if logged else 1, figsize=(11 if logged else 6, 3.8))
    axes = np.atleast_1d(axes)
    axes[0].plot(steps, returns, "o", ms=3, color="C0")
    axes[0].set(xlabel="env steps (millions)", ylabel="mean return of ended episodes")
    axes[0].yaxis.label.set_color("C0")
    axes[0].grid(alpha=0.3)
    if "mean_reward" in summary:
        twin = axes[0].twinx()
        twin.plot(steps, summary["mean_reward"], color="C3", lw=1)
        twin.set_ylabel("mean reward per step", color="C3")
    for key in logged:
        name = key[len("info/") :]
        (line,) = axes[1].plot(steps, summary[key], label=name)
        if references and name in references:
            level = references[name]
            axes[1].axhline(level, ls="--", color=line.get_color(), lw=1, label=f"{name}: standing")
    if logged:
        axes[1].set(xlabel="env steps (millions)", ylabel="mean tracking error")
        axes[1].legend()
        axes[1].grid(alpha=0.3)
    fig.suptitle(
        f"PPO on {config['task']}: {config['num_envs']} worlds, "
        f"{summary['env_steps'] / 1e6:.2f} M env steps in {summary['train_s'] / 60:.1f} min "
        f"({summary['env_steps_per_s']} env steps/s, "
        + (f"compile {summary['compile_s']:.0f} s)" if "compile_s" in summary else "compile in)"),
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(out, dpi=100)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "summary", type=Path, help="JSON written by benchmarks/ppo.py --out, or a run folder"
    )
    parser.add_argument("out", type=Path, help="the PNG to write")
    parser.add_argument(
        "--reference",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a dashed level on the error plot (e.g. the error of standing still)",
    )
    args = parser.parse_args(argv)
    references = {}
    for item in args.reference:
        name, _, value = item.partition("=")
        references[name] = float(value)
    summary = (
        from_run(args.summary) if args.summary.is_dir() else json.loads(args.summary.read_text())
    )
    draw(summary, args.out, references)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
