"""Writes a PNG grid of one batch of pixel observations (default
``docs/images/pixels.png``): the newest frame of each of 16 worlds of the
``cartpole_swingup_pixels`` env (impl "warp"), rendered together inside the env's
compiled step after random pushes, with the pole's colour and the light's position
drawn per world at every restart (``env.with_randomization``).

    python scripts/pixel_batch.py [path] [--size 128x96] [--columns 4] [--steps 120]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import imageio.v3 as iio
import jax
import numpy as np

from mjxrunner.engine.params import Term
from mjxrunner.kit.pixels import PixelSpec
from mjxrunner.rl import env as mjxenv
from mjxrunner.tasks import cartpole_pixels

OUT = Path(__file__).resolve().parents[1] / "docs" / "images" / "pixels.png"
NUM_ENVS = 16
GAP = 2  # pixels of background between tiles
HOLD = 15  # steps each random push is held, so the poles swing visibly


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
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    width, height = (int(v) for v in args.size.lower().split("x"))

    import warp as wp

    wp.config.quiet = True
    task = cartpole_pixels.SWINGUP_PIXELS.replace(
        pixels=PixelSpec("side", width=width, height=height)
    )
    env = mjxenv.make(task, NUM_ENVS, impl="warp")
    pole = env.host.mj_model.geom("pole").id
    env = env.with_randomization(
        [
            Term("geom_rgba", 0.2, 1.1, index=(pole, [0, 1, 2])),  # the pole's colour
            Term("light_pos", -2.0, 2.0, operation="add"),  # where the light hangs
        ]
    )
    state = mjxenv.jit_reset(env, jax.random.key(args.seed))
    rng = np.random.default_rng(args.seed)
    for t in range(args.steps):
        if t % HOLD == 0:
            push = rng.uniform(-1.0, 1.0, (NUM_ENVS, 1)).astype(np.float32)
        state = mjxenv.jit_step(env, state, push)
    frames = np.asarray(state.obs["pixels"][:, -1])  # the newest of the stacked frames
    path = Path(args.path)
    path.parent.mkdir(parents=True, exist_ok=True)
    iio.imwrite(path, grid(frames, args.columns))
    print(f"wrote {path}: {NUM_ENVS} worlds of {width}x{height} after {args.steps} steps")


if __name__ == "__main__":
    main()
