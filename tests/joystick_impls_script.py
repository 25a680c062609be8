"""The joystick tasks on MJX (impl "jax" or "warp") against impl "c": run by
tests/test_robots.py in a process of its own, in the background, since each task's
env compiles for about a minute on 2 cores.

Usage: ``python joystick_impls_script.py IMPL OUT.json``. For each joystick task, two
worlds with the kit (latency, pushes, sensor noise and history) step 40 control steps
(200 physics steps) under a target wave from the same key on IMPL and on impl "c";
writes, per task, the largest difference in qpos and in reward, and the seconds of
``reset`` plus the first ``step``.
"""

import json
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from mjxrunner.rl import env as E
from mjxrunner.tasks import joystick

STEPS = 40
# MJX's jax impl leaves MuJoCo once the G1's feet move (tests/test_robots.py): it
# stands there; everything else follows a 0.1 rad target wave
AMPLITUDE = {("g1_joystick", "jax"): 0.0}


def run(task, impl, amplitude):
    start = time.perf_counter()
    extra = {"num_threads": 1} if impl == "c" else {}
    env = E.make(task, 2, impl=impl, latency=joystick.LATENCY, pushes=joystick.PUSHES, **extra)
    state = E.jit_reset(env, jax.random.key(7))
    qpos, rewards = [], []
    for t in range(STEPS):
        phase = 0.1 * t * np.arange(1, 3)[:, None] + np.arange(env.action_size)[None, :]
        state = E.jit_step(env, state, jnp.asarray(amplitude * np.sin(phase), jnp.float32))
        if t == 0:
            seconds = time.perf_counter() - start
        qpos.append(np.asarray(state.runner.data.qpos, np.float64))
        rewards.append(np.asarray(state.reward, np.float64))
    assert not np.asarray(state.terminated).any(), f"{task.name} fell on {impl}"
    return np.stack(qpos), np.stack(rewards), seconds


def main(impl, out):
    results = {}
    for task in (joystick.GO1_JOYSTICK, joystick.G1_JOYSTICK, joystick.GO1_JOYSTICK_ROUGH):
        amplitude = AMPLITUDE.get((task.name, impl), 0.1)
        qpos, reward, seconds = run(task, impl, amplitude)
        native, native_reward, _ = run(task, "c", amplitude)
        moved = np.abs(qpos[-1, :, 7:] - qpos[0, :, 7:]).max()
        results[task.name] = {
            "qpos": float(np.abs(qpos - native).max()),
            "reward": float(np.abs(reward - native_reward).max()),
            "moved": float(moved),
            "amplitude": amplitude,
            "reset_and_first_step_s": seconds,
        }
        print(task.name, results[task.name], flush=True)
    with open(out, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
