"""What a heightfield terrain costs a step: the ant on flat ground vs on terrains of
several resolutions, impl "jax", at a few batch sizes.

MJX-jax collides each robot geom that can touch a heightfield with a fixed window of
the grid, ``ceil(2 * rbound / resolution) + 1`` cells a side, two prisms per cell,
and keeps 4 contacts per pair; the terrain's extent does not matter. This prints,
per scene, that window, the contacts and constraint rows MJX allocates per world,
the compile time and the world-steps per second of the raw
``vmap(scan(mjx.step))`` (``mjxrunner.tools.bench``, variant ``raw``). Each
resolution runs twice: with the ant's own collision geoms (torso sphere, shin
capsules) and with its shins replaced by foot spheres (``terrain.ANT_FEET``).

    python benchmarks/terrain_cost.py                      # 64 and 256 worlds
    python benchmarks/terrain_cost.py --sizes 1024 --resolutions 0.1
"""

from __future__ import annotations

import argparse
import math

import mujoco
from mujoco import mjx

from mjxrunner.engine import models
from mjxrunner.kit import terrain
from mjxrunner.tools import bench


def window(m: mujoco.MjModel) -> list[int]:
    """Cells per side of the grid window MJX-jax tests for each geom against the
    heightfield (0 for a flat floor)."""
    hf = [g for g in range(m.ngeom) if m.geom_type[g] == mujoco.mjtGeom.mjGEOM_HFIELD]
    if not hf:
        return []
    res = 2 * m.hfield_size[0, 0] / (m.hfield_ncol[0] - 1)
    touching = [
        g for g in range(m.ngeom) if g not in hf and (m.geom_contype[g] & m.geom_conaffinity[hf[0]])
    ]
    return [math.ceil(2 * m.geom_rbound[g] / res) + 1 for g in touching]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[64, 256])
    p.add_argument("--resolutions", type=float, nargs="+", default=[0.2, 0.1, 0.05])
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()

    scenes = {"flat": models.load("ant")}
    for res in args.resolutions:
        config = terrain.TerrainConfig(resolution=res)
        scenes[f"terrain {res} m"] = terrain.scene(config)[0]
        scenes[f"terrain {res} m, sphere feet"] = terrain.scene(config, feet=terrain.ANT_FEET)[0]
    rows = []
    for name, m in scenes.items():
        d = mjx.make_data(m, impl="jax")
        ncon, nefc = d._impl.contact.dist.shape[0], d._impl.efc_J.shape[0]
        hf = m.hfield_nrow[0] * m.hfield_ncol[0] if m.nhfield else 0
        report = bench.run(
            m,
            args.sizes,
            args.steps,
            repeats=args.repeats,
            impl="jax",
            variants=["raw"],
            progress=False,
        )
        for r in report["results"]:
            rows.append(
                f"| {name} | {hf} | {window(m)} | {ncon} | {nefc} | {r['num_envs']} | "
                f"{r['compile_s']:.1f} | {r['steps_per_s']:.0f} |"
            )
            print(rows[-1], flush=True)
    print()
    print(
        "| scene | hfield samples | window cells/side per geom | contacts | efc rows "
        "| worlds | compile s | world-steps/s |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    print("\n".join(rows))
    print(f"backend: {report['backend']}")


if __name__ == "__main__":
    main()
