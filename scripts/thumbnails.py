"""Renders a thumbnail of every scene (models/ and the robots) into docs/images/<name>.png.

Each scene is posed with native MuJoCo (a keyframe, a few settling steps or a set
pose), then drawn through :class:`mjxrunner.render.WorldRenderer` from one world's
``mjx.Data``, the same path ``runner.render`` takes. Prints the table of docs/models.md.

    MUJOCO_GL=egl python scripts/thumbnails.py            # every scene
    MUJOCO_GL=egl python scripts/thumbnails.py ant hopper
"""

from __future__ import annotations

import argparse
import copy
import os
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

import imageio.v3 as iio
import mujoco
import numpy as np
from mujoco import mjx

from mjxrunner.engine import models
from mjxrunner.kit.render import WorldRenderer

OUT = Path(__file__).resolve().parents[1] / "docs" / "images"
WIDTH, HEIGHT = 320, 240

# name -> (qpos changes from the keyframe {index: value}, settling steps, camera,
# azimuth). Camera None frames the world's solid geoms from that azimuth (90: from
# the side of the planar scenes); the reacher moves in the horizontal plane, so it
# is seen from its top camera.
POSES = {
    "acrobot": ({0: 2.3, 1: 0.9}, 0, None, 90),
    "ant": ({}, 150, None, 120),
    "cartpole": ({1: 0.5}, 0, None, 90),
    "g1": ({}, 30, "track", 0),
    "g1_cpu": ({}, 10, "track", 0),
    "go1": ({}, 50, "track", 0),
    "go1_cpu": ({}, 50, "track", 0),
    "hopper": ({3: -0.3, 4: -0.5, 5: 0.3}, 0, None, 90),
    "humanoid": ({}, 30, None, 140),
    "pendulum": ({0: 2.2}, 0, None, 90),
    "puck": ({0: -0.2, 1: -0.1}, 0, "top", 90),
    "puck_blocks": ({0: -0.2, 1: -0.1}, 0, "top", 90),
    "puck_steps": ({0: -0.2, 1: -0.1}, 0, "top", 90),
    "reacher": ({0: 0.6, 1: 1.4}, 0, "top", 90),
}


def pose(name: str) -> tuple[mujoco.MjModel, mujoco.MjData, str | None, float]:
    """The scene at its keyframe, moved and settled for its picture."""
    m = models.load(name)
    d = mujoco.MjData(m)
    key = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_KEY, models.info(name).keyframe)
    mujoco.mj_resetDataKeyframe(m, d, key)
    changes, settle, camera, azimuth = POSES.get(name, ({}, 0, None, 90))
    for i, value in changes.items():
        d.qpos[i] = value
    for _ in range(settle):
        mujoco.mj_step(m, d)
    mujoco.mj_forward(m, d)
    return m, d, camera, azimuth


def thumbnail(name: str) -> np.ndarray:
    """``(HEIGHT, WIDTH, 3)`` uint8 picture of scene ``name``."""
    m, d, camera, azimuth = pose(name)
    renderer = WorldRenderer(m)
    if m.opt.solver == mujoco.mjtSolver.mjSOL_PGS:  # MJX has no PGS; a picture needs no solver
        m = copy.copy(m)
        m.opt.solver = mujoco.mjtSolver.mjSOL_NEWTON
    try:
        model, data = mjx.put_model(m, impl="jax"), mjx.put_data(m, d, impl="jax")
        if camera is None:
            origin = np.zeros((1, 3))
            return renderer.tiled(model, data, [0], origin, None, WIDTH, HEIGHT, azimuth)
        return renderer.frame(model, data, 0, camera, WIDTH, HEIGHT)
    finally:
        renderer.close()


def table(names: list[str]) -> str:
    """The markdown table of scenes in docs/models.md, with their thumbnails."""
    rows = [
        "| scene | what it is | nq / nv / nu | contacts (Warp: naconmax per world, njmax) |",
        "| --- | --- | --- | --- |",
    ]
    for name in names:
        m, info = models.load(name), models.info(name)
        contacts = f"yes ({info.naconmax_per_world}, {info.njmax})" if info.contacts else "none"
        rows.append(
            f"| `{name}`<br>![{name}](images/{name}.png) | {info.summary} | "
            f"{m.nq} / {m.nv} / {m.nu} | {contacts} |"
        )
    return "\n".join(rows)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", help="scenes to draw (default: all)")
    args = p.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    for name in args.names or models.list():
        path = OUT / f"{name}.png"
        iio.imwrite(path, thumbnail(name))
        print(f"wrote {path.relative_to(OUT.parents[1])}")
    print()
    print(table(models.list()))


if __name__ == "__main__":
    main()
