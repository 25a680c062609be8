"""Renders the ant's terrain scene into docs/images/: the whole tile grid, and a
close-up of the ant standing on stairs.

    MUJOCO_GL=egl python scripts/terrain_thumbnail.py

The scene is :func:`mjxrunner.terrain.scene` with the default config: levels along
x (easy at the front left, hard at the back), one column per terrain type along y.
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

import imageio.v3 as iio
import mujoco
import numpy as np

from mjxrunner.kit import terrain

OUT = Path(__file__).resolve().parents[1] / "docs" / "images"
WIDTH, HEIGHT = 320, 240


def posed(m: mujoco.MjModel, t: terrain.Terrain, level: int, kind: str) -> mujoco.MjData:
    """The ant dropped at the centre of the tile and settled for half a second."""
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, 0)
    origin = t.origins[level, t.column_types.index(kind)]
    d.qpos[:3] = origin + np.array([0.0, 0.0, 0.5])
    for _ in range(100):
        mujoco.mj_step(m, d)
    return d


def render(m, d, lookat, distance, azimuth, elevation) -> np.ndarray:
    camera = mujoco.MjvCamera()
    camera.lookat[:], camera.distance = lookat, distance
    camera.azimuth, camera.elevation = azimuth, elevation
    with mujoco.Renderer(m, HEIGHT, WIDTH) as renderer:
        renderer.update_scene(d, camera)
        return renderer.render()


def main() -> None:
    config = terrain.TerrainConfig()
    m, t = terrain.scene(config)
    m.vis.map.zfar = 200.0  # the whole grid in view
    m.vis.headlight.ambient[:] = 0.3  # shaded slopes, but no black faces
    level = config.levels - 2
    d = posed(m, t, level, "stairs_down")
    centre = t.origins.reshape(-1, 3).mean(axis=0)
    OUT.mkdir(parents=True, exist_ok=True)
    pictures = {
        "ant_terrain": render(m, d, centre, 30.0, 225.0, -40.0),
        "ant_terrain_stairs": render(m, d, d.qpos[:3] - [0.0, 0.0, 0.4], 4.5, 120.0, -22.0),
    }
    for name, image in pictures.items():
        path = OUT / f"{name}.png"
        iio.imwrite(path, image)
        print(f"wrote {path.relative_to(OUT.parents[1])}")


if __name__ == "__main__":
    main()
