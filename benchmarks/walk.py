"""Does a robot walk after minutes on a CPU? Trains a joystick task with the bare
command a user types, then plays it under fixed commands and checks the targets.

    .venv/bin/python -m benchmarks.walk --out RUN                   # the Go1
    .venv/bin/python -m benchmarks.walk --task g1_joystick --out RUN  # the G1
    .venv/bin/python -m benchmarks.walk --run RUN --wall-s S        # a run made before

Training is ``mjxrunner train TASK --out RUN`` (impl "c" on every core, the task's
suggested settings, ``mjxrunner.tools.train.ppo.SUGGESTED``) in its own process,
timed from start to exit (compile included). Walking is measured by ``mjxrunner
play RUN`` with fixed commands, not by the reward: 32 worlds hold each of the task's
commands (:data:`TARGETS`) for 5 s, and the base's mean velocity in its own frame is
read from 1 s after each command on. The targets (issue "A robot that walks on a
CPU"): the Go1's forward speed >= 0.8 m/s at 1.0, within 0.15 m/s at 0.5, yaw rate
within 0.25 rad/s at 1 rad/s, below 0.1 m/s standing, fewer than 5 % of episodes
falling, within 10 minutes of wall time; the G1's forward speed within 0.15 m/s at
0.5, below 0.1 m/s standing, fewer than 5 % falling, within 60 minutes (its yaw rate
at 0.5 rad/s is printed, not checked).

Writes ``benchmarks/results/ppo/cpu-<task>.json`` (with ``--record``): the run's
config, backend, learning curve, play figures and the checks.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HOLD = 250  # control steps per command: 5 s at 50 Hz


def _speed(v: list[float]) -> float:
    return float(sum(x * x for x in v[:2]) ** 0.5)


TARGETS = {
    "go1_joystick": (
        [[1.0, 0.0, 0.0], [0.5, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 0.0]],
        {
            "forward 1.0 m/s: >= 0.8": lambda got: got[0][0] >= 0.8,
            "forward 0.5 m/s: within 0.15": lambda got: abs(got[1][0] - 0.5) <= 0.15,
            "yaw 1 rad/s: within 0.25": lambda got: abs(got[2][2] - 1.0) <= 0.25,
            "standing: < 0.1 m/s": lambda got: _speed(got[3]) < 0.1,
        },
        600,
    ),
    "g1_joystick": (
        [[0.5, 0.0, 0.0], [0.0, 0.0, 0.5], [0.0, 0.0, 0.0]],
        {
            "forward 0.5 m/s: within 0.15": lambda got: abs(got[0][0] - 0.5) <= 0.15,
            "standing: < 0.1 m/s": lambda got: _speed(got[2]) < 0.1,
        },
        3600,
    ),
}
"""Per task: the commands played in turn, the checks on the base's velocity under
each (in that order), and the wall-time target in seconds."""


def record_path(task: str) -> Path:
    return Path(__file__).parent / "results" / "ppo" / f"cpu-{task.replace('_', '-')}.json"


def checks(task: str, tracking: list[dict], falls: float, wall_s: float | None) -> dict[str, bool]:
    """The walking targets of ``task`` against ``play``'s figures."""
    commands, velocity, limit = TARGETS[task]
    got = {tuple(x["command"]): x["achieved"] for x in tracking}
    achieved = [got[tuple(c)] for c in commands]
    out = {name: bool(ok(achieved)) for name, ok in velocity.items()}
    out["falls < 5 %"] = falls < 0.05
    if wall_s is not None:
        out[f"<= {limit // 60} minutes on the CPU"] = wall_s <= limit
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--task", choices=sorted(TARGETS), help="default: the run's, or go1_joystick"
    )
    parser.add_argument("--out", help="train a new run into this folder")
    parser.add_argument("--run", help="check a run trained before (no training)")
    parser.add_argument("--wall-s", type=float, help="with --run: its measured wall time")
    parser.add_argument("--record", action="store_true", help="write the record")
    args = parser.parse_args(argv)
    if (args.out is None) == (args.run is None):
        parser.error("give --out (train) or --run (a run trained before)")
    folder, wall_s = Path(args.run or args.out), args.wall_s
    if args.task is None:
        done = args.run and json.loads((folder / "run.json").read_text())["config"]["task"]
        args.task = done or "go1_joystick"
    if args.out is not None:
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "mjxrunner.tools.cli", "train", args.task, "--out",
             args.out, "--no-progress"], check=True,
        )  # fmt: skip
        wall_s = time.perf_counter() - t0

    from mjxrunner.tools.train import play

    commands = TARGETS[args.task][0]
    r = play.play(folder, episodes=32, commands=commands, command_every=HOLD)
    result = checks(args.task, r["tracking"], r["falls"], wall_s)
    for x in r["tracking"]:
        c, a = x["command"], x["achieved"]
        print(f"command ({c[0]:+.2f}, {c[1]:+.2f}, {c[2]:+.2f}): base "
              f"({a[0]:+.3f}, {a[1]:+.3f}, {a[2]:+.3f})")  # fmt: skip
    print(f"falls: {100 * r['falls']:.1f} %; wall time: "
          + ("not measured" if wall_s is None else f"{wall_s:.0f} s"))  # fmt: skip
    for name, ok in result.items():
        print(f"{'met' if ok else 'NOT MET'}: {name}")
    if args.record:
        record = json.loads((folder / "run.json").read_text())
        lines = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]
        curve = {k: [x[k] for x in lines] for k in lines[0]}
        record_path(args.task).write_text(json.dumps({
            "command": f"mjxrunner train {args.task} --out RUN",
            "config": record["config"], "backend": record["backend"],
            "versions": record["versions"], "env_steps": record["env_steps_done"],
            "wall_s": None if wall_s is None else round(wall_s, 1),
            "train_s": curve["wall_s"][-1], "curve": curve,
            "play_commands": {"commands": commands, "hold_steps": HOLD, **r},
            "checks": result,
        }, indent=1))  # fmt: skip
        print(f"written: {record_path(args.task)}")
    return 0 if all(result.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
