"""The user code that test_sharding.py runs unsharded, on 2 devices and in 2 processes."""

import numpy as np

from mjxrunner.engine.params import Term

N = 4


def run(r) -> list[np.ndarray]:
    """Steps, masked resets, per-world parameters and randomization on reset;
    returns host copies (gathered from every device and process) along the way.
    Kept to few distinct compiled functions: each costs a compile per layout."""
    out = []
    r.set_actions(np.linspace(-1, 1, N)[:, None])
    for _ in range(3):
        r.step()
    out.append(r.to_numpy(r.data.qpos))
    r.reset_envs([1])
    r.reset(np.array([True, False, False, False, True]))
    out.append(r.episode_length)
    r.set_gravity([0, 0, -1.6], world=3)
    r.set_randomization([Term("dof_damping", 0.5, 2.0)], at_startup=False)
    r.step()
    r.reset_envs([0, 2])  # redraws those worlds' damping
    r.step()
    out.append(r.param("dof_damping"))
    out.append(r.param("opt.gravity"))
    out.append(r.contact_count())
    out.append(r.terminated)
    out.append(r.to_numpy(r.data.qpos))
    out.append(r.to_numpy(r.data.qvel))
    return out
