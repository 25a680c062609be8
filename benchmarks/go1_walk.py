"""Does the Go1 walk after minutes on a CPU? Trains ``go1_joystick`` with the bare
command a user types, then plays it under fixed commands and checks the targets.

    .venv/bin/python -m benchmarks.go1_walk --out RUN            # train, play, check
    .venv/bin/python -m benchmarks.go1_walk --run RUN --wall-s S # check a run made before

Training is ``mjxrunner train go1_joystick --out RUN`` (impl "c" on every core, the
task's suggested settings, ``mjxrunner.tools.train.ppo.SUGGESTED``) in its own
process, timed from start to exit (compile included). Walking is measured by
``mjxrunner play RUN`` with fixed commands, not by the reward: 32 worlds hold forward
1.0 m/s, 0.5 m/s, a yaw rate of 1 rad/s and standing still, 5 s each, and the base's
mean velocity in its own frame is read from 1 s after each command on. The targets
(issue "A robot that walks on a CPU"): forward speed >= 0.8 m/s at 1.0, within
0.15 m/s at 0.5, yaw rate within 0.25 rad/s at 1 rad/s, below 0.1 m/s standing,
fewer than 5 % of episodes falling, all within 10 minutes of wall time.

Writes ``benchmarks/results/ppo/cpu-go1-joystick.json`` (with ``--record``): the run's
config, backend, learning curve, play figures and the checks.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

COMMANDS = [[1.0, 0.0, 0.0], [0.5, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 0.0]]
HOLD = 250  # control steps per command: 5 s at 50 Hz
RECORD = Path(__file__).parent / "results" / "ppo" / "cpu-go1-joystick.json"


def checks(tracking: list[dict], falls: float, wall_s: float | None) -> dict[str, bool]:
    """The walking targets against ``play``'s figures."""
    got = {tuple(x["command"]): x["achieved"] for x in tracking}
    fast, half, turn, still = (got[tuple(c)] for c in COMMANDS)
    out = {
        "forward 1.0 m/s: >= 0.8": fast[0] >= 0.8,
        "forward 0.5 m/s: within 0.15": abs(half[0] - 0.5) <= 0.15,
        "yaw 1 rad/s: within 0.25": abs(turn[2] - 1.0) <= 0.25,
        "standing: < 0.1 m/s": float(sum(v * v for v in still[:2]) ** 0.5) < 0.1,
        "falls < 5 %": falls < 0.05,
    }
    if wall_s is not None:
        out["<= 10 minutes on the CPU"] = wall_s <= 600
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", help="train a new run into this folder")
    parser.add_argument("--run", help="check a run trained before (no training)")
    parser.add_argument("--wall-s", type=float, help="with --run: its measured wall time")
    parser.add_argument("--record", action="store_true", help=f"write {RECORD.name}")
    args = parser.parse_args(argv)
    if (args.out is None) == (args.run is None):
        parser.error("give --out (train) or --run (a run trained before)")
    folder, wall_s = Path(args.run or args.out), args.wall_s
    if args.out is not None:
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "mjxrunner.tools.cli", "train", "go1_joystick", "--out",
             args.out, "--no-progress"], check=True,
        )  # fmt: skip
        wall_s = time.perf_counter() - t0

    from mjxrunner.tools.train import play

    r = play.play(folder, episodes=32, commands=COMMANDS, command_every=HOLD)
    result = checks(r["tracking"], r["falls"], wall_s)
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
        RECORD.write_text(json.dumps({
            "command": "mjxrunner train go1_joystick --out RUN",
            "config": record["config"], "backend": record["backend"],
            "versions": record["versions"], "env_steps": record["env_steps_done"],
            "wall_s": None if wall_s is None else round(wall_s, 1),
            "train_s": curve["wall_s"][-1], "curve": curve,
            "play_commands": {"commands": COMMANDS, "hold_steps": HOLD, **r},
            "checks": result,
        }, indent=1))  # fmt: skip
        print(f"written: {RECORD}")
    return 0 if all(result.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
