"""Measures the contacts and constraint rows each scene needs, to size Warp's buffers.

MJX-Warp preallocates contact and constraint storage: ``naconmax`` contacts for all
worlds together and ``njmax`` constraint rows per world. This script runs native
MuJoCo with random controls (uniform over each actuator's range, episodes restarted
from the first keyframe every ``--episode`` steps) and prints the largest ``ncon`` and
``nefc`` seen, next to the upper bound (the sizes MJX's jax impl preallocates) and
the capacities declared in ``mjxrunner.models.info``.

    python scripts/contact_capacity.py            # every model
    python scripts/contact_capacity.py ant --steps 4000
"""

from __future__ import annotations

import argparse

import mujoco
import numpy as np
from mujoco import mjx

from mjxrunner.engine import models


def measure(name: str, steps: int, episode: int, seeds: int) -> tuple[int, int]:
    """Largest ``(ncon, nefc)`` over ``seeds`` random-control runs of ``steps`` steps."""
    m = models.load(name)
    d = mujoco.MjData(m)
    low, high = m.actuator_ctrlrange[:, 0], m.actuator_ctrlrange[:, 1]
    max_ncon = max_nefc = 0
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        for t in range(steps):
            if t % episode == 0:
                mujoco.mj_resetDataKeyframe(m, d, 0) if m.nkey else mujoco.mj_resetData(m, d)
            d.ctrl[:] = rng.uniform(low, high)
            mujoco.mj_step(m, d)
            max_ncon = max(max_ncon, d.ncon)
            max_nefc = max(max_nefc, d.nefc)
    return max_ncon, max_nefc


def bound(name: str) -> tuple[int, int]:
    """``(contacts, constraint rows)`` MJX's jax impl allocates: the most possible."""
    d = mjx.make_data(models.load(name), impl="jax")
    return d._impl.contact.dist.shape[0], d._impl.efc_J.shape[0]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", help="models to measure (default: all)")
    p.add_argument("--steps", type=int, default=2000, help="steps per seed")
    p.add_argument("--episode", type=int, default=500, help="steps between restarts")
    p.add_argument("--seeds", type=int, default=4)
    args = p.parse_args()
    head = ("model", "max ncon", "max nefc", "bound ncon", "bound nefc", "naconmax/w", "njmax")
    print(" ".join(f"{h:>10}" for h in head))
    for name in args.names or models.list():
        info = models.info(name)
        row = (
            *measure(name, args.steps, args.episode, args.seeds),
            *bound(name),
            info.naconmax_per_world,
            info.njmax,
        )
        print(f"{name:>10} " + " ".join(f"{v:10d}" for v in row))


if __name__ == "__main__":
    main()
