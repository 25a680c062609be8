"""The hostile-input properties (tests/test_hostile.py: the runner; and
tests/test_hostile_doors.py: the torch, rsl_rl, Brax and group doors) at scale.

Runs the property tests under the "fuzz" hypothesis profile (tests/conftest.py:
1000 examples per property instead of the suite's 40) in one pytest process and
prints, per property and in total, the examples tried (from hypothesis'
statistics: passing + failing + invalid, over every phase), per file and in total,
and the failures.
Exits non-zero if any property failed.

    .venv/bin/python benchmarks/fuzz.py [--profile fuzz] [-k EXPR]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FILES = ("test_hostile.py", "test_hostile_doors.py")
# e.g. "40 passing, 0 failing, and 0 invalid test cases" (older: "... examples")
COUNTS = re.compile(r"(\d+) passing\b.*?(\d+) failing\b.*?(\d+) invalid")
TEST = re.compile(r"^(\S+::\S+):\s*$")


def parse(stats: str) -> dict[str, list[int]]:
    """``{test id: [passing, failing, invalid]}`` summed over hypothesis' phases."""
    out: dict[str, list[int]] = {}
    current = None
    for line in stats.splitlines():
        if m := TEST.match(line.strip()):
            current = m.group(1)
            out.setdefault(current, [0, 0, 0])
        elif (m := COUNTS.search(line)) and current is not None:
            for i, n in enumerate(m.groups()):
                out[current][i] += int(n)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profile", default="fuzz")
    parser.add_argument("-k", default=None, help="pytest -k expression")
    args = parser.parse_args()
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        *(str(ROOT / "tests" / f) for f in FILES),
        "-q",
        "-p",
        "no:cacheprovider",
        "--hypothesis-show-statistics",
    ]
    if args.k:
        cmd += ["-k", args.k]
    env = {**os.environ, "MJXRUNNER_HYPOTHESIS_PROFILE": args.profile}
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    seconds = time.perf_counter() - start
    counts = parse(proc.stdout)
    failed_tests = re.findall(r"^FAILED (\S+)", proc.stdout, re.M)
    width = max((len(t.split("::")[-1]) for t in counts), default=10)
    print(f"profile {args.profile!r}: {len(counts)} properties in {seconds:.0f} s")
    print(f"{'property':<{width}} {'tried':>7} {'failing':>7} {'invalid':>7}")
    for test, (passing, failing, invalid) in counts.items():
        tried = passing + failing + invalid
        print(f"{test.split('::')[-1]:<{width}} {tried:>7} {failing:>7} {invalid:>7}")
    for file in FILES:
        mine = [c for t, c in counts.items() if t.split("::")[0].endswith(file)]
        tried = sum(sum(c) for c in mine)
        print(f"{file:<{width}} {tried:>7} {sum(c[1] for c in mine):>7} {'':>7}")
    total = [sum(c[i] for c in counts.values()) for i in range(3)]
    print(f"{'total':<{width}} {sum(total):>7} {total[1]:>7} {total[2]:>7}")
    print(f"failed properties: {len(failed_tests)} {failed_tests}")
    if proc.returncode != 0:
        print(proc.stdout[-6000:], proc.stderr[-2000:], sep="\n")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
