"""Writes the checkpoints of tests/test_old_checkpoints.py with an earlier mjxrunner,
and what their runs reach next, as ``LABEL_runner.npz``, ``LABEL_env.npz`` and
``LABEL_expected.npz``.

Run once from a checkout of each version (its package on ``sys.path``), with the XLA
flags the suite sets (tests/conftest.py):
``python tests/data/make_old_checkpoints.py tests/data LABEL``. The files are
committed. ``v2``: d1c24f7, before the move into layers (format version 2); ``v3``:
bf8b8f1, before the backend redesign (format version 3).
"""

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from mjxrunner import MultiEnvRunner
from mjxrunner import env as mjxenv

out, label = Path(sys.argv[1]), sys.argv[2]
actions = np.linspace(-1, 1, 4, dtype=np.float32)[:, None]

r = MultiEnvRunner("cartpole", 4, seed=3, max_qvel=1e6)
r.set_param("dof_damping", [0.0, 0.1], env_ids=[1])
for _ in range(3):
    r.set_actions(actions)
    r.step()
r.save(out / f"{label}_runner.npz")
for _ in range(5):
    r.set_actions(actions)
    r.step()
expected = {"runner_qpos": np.asarray(r.data.qpos), "runner_qvel": np.asarray(r.data.qvel)}

e = mjxenv.make("cartpole_balance", 4, autoreset="same_step")
s = mjxenv.jit_reset(e, jax.random.key(1))
for _ in range(3):
    s = mjxenv.jit_step(e, s, jnp.asarray(actions))
mjxenv.save(out / f"{label}_env.npz", e, s)
for _ in range(5):
    s = mjxenv.jit_step(e, s, jnp.asarray(actions))
expected["env_obs"] = np.asarray(s.obs)
expected["env_reward"] = np.asarray(s.reward)
np.savez(out / f"{label}_expected.npz", **expected)
print("written", sorted(p.name for p in out.glob(f"{label}_*")))
