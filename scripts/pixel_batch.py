"""Writes a PNG grid of one batch of pixel observations (default
``docs/images/pixels.png``): 16 cartpoles in different states, rendered together by
:class:`mjxrunner.pixels.PixelRenderer` from the ``"side"`` camera, world 5 with a
pole made red per world through ``runner.set_param`` (the others keep the model's
colour).

    python scripts/pixel_batch.py [path] [--size 128x96] [--columns 4]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import imageio.v3 as iio
import jax
import numpy as np
from mujoco import mjx

from mjxrunner import MultiEnvRunner, world_axes
from mjxrunner.pixels import PixelRenderer, PixelSpec

OUT = Path(__file__).resolve().parents[1] / "docs" / "images" / "pixels.png"
NUM_ENVS = 16
RED_WORLD = 5
GAP = 2  # pixels of background between tiles


def posed_batch(runner: MultiEnvRunner) -> mjx.Data:
    """The runner's worlds moved to 16 states (cart across the rail, pole swinging)
    and their kinematics computed on device."""
    n = runner.num_envs
    qpos = np.stack([np.linspace(-1.2, 1.2, n), np.linspace(-2.6, 2.6, n)[::-1]], axis=1)
    data = runner.data.replace(qpos=jax.device_put(qpos.astype(np.float32), runner.device))
    model = runner.model
    return jax.jit(jax.vmap(mjx.forward, in_axes=(world_axes(model), 0)))(model, data)


def grid(images: np.ndarray, columns: int) -> np.ndarray:
    """``(n, H, W, 3)`` images tiled row by row, ``GAP`` white pixels apart."""
    n, h, w, _ = images.shape
    rows = -(-n // columns)
    out = np.full((rows * (h + GAP) + GAP, columns * (w + GAP) + GAP, 3), 255, np.uint8)
    for i, image in enumerate(images):
        r, c = divmod(i, columns)
        y, x = GAP + r * (h + GAP), GAP + c * (w + GAP)
        out[y : y + h, x : x + w] = image
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("path", nargs="?", default=str(OUT))
    p.add_argument("--size", default="128x96", help="WIDTHxHEIGHT of each observation")
    p.add_argument("--columns", type=int, default=4)
    args = p.parse_args()
    width, height = (int(v) for v in args.size.lower().split("x"))

    import warp as wp

    wp.config.quiet = True
    runner = MultiEnvRunner("cartpole", NUM_ENVS, impl="warp")
    m = runner.mj_model
    rgba = np.array(m.geom_rgba)
    rgba[m.geom("pole").id] = (0.9, 0.1, 0.1, 1.0)
    runner.set_param("geom_rgba", rgba, env_ids=[RED_WORLD])
    renderer = PixelRenderer(m, NUM_ENVS, PixelSpec("side", width=width, height=height))
    _, frames = jax.jit(renderer.render)(runner.model, posed_batch(runner))
    path = Path(args.path)
    path.parent.mkdir(parents=True, exist_ok=True)
    iio.imwrite(path, grid(np.asarray(frames["rgb"]), args.columns))
    print(f"wrote {path}: {NUM_ENVS} worlds of {width}x{height}, world {RED_WORLD} red pole")


if __name__ == "__main__":
    main()
