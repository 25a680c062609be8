"""The joystick tasks on MJX (impls "jax" and "warp") against impl "c": run by
tests/test_robots.py in a process of its own, in the background, since each task's
env compiles for about a minute on 2 cores on the jax impl.

Usage: ``python joystick_impls_script.py OUT.json``. For each task and impl of
:data:`RUNS`, two worlds with the kit (latency, pushes, sensor noise and history)
step 40 control steps (200 physics steps) under a target wave from the same seed as
on impl "c", through a door: the Go1 tasks through the Gymnasium door, the G1's
through the torch door (one compiled step per task and impl serves the parity run
and the door's check). Writes, per impl and task, the door, the observation terms,
whether the rewards were finite, the largest difference in qpos and in reward, how
far the joints moved, and the seconds of ``reset`` plus the first ``step``.
``go1_joystick`` runs on impl "c" only: on MJX it is ``go1_joystick_rough``'s
functions on the flat scene, and tests/test_robots.py checks the flat Go1 scene's
parity on both MJX impls already (each task's env here costs a compile of about
half a minute per impl).
"""

import json
import sys
import time

import conftest  # noqa: F401  (the suite's caches and compiler settings, Warp's too)
import numpy as np
import torch

from mjxrunner.doors.gym import MjxVectorEnv
from mjxrunner.doors.torch import TorchVecEnv
from mjxrunner.tasks import joystick

STEPS = 40
# MJX's jax impl leaves MuJoCo once the G1's feet move (tests/test_robots.py): it
# stands there; everything else follows a 0.1 rad target wave
AMPLITUDE = {("g1_joystick_mjx", "jax"): 0.0}


def run(task, impl, amplitude):
    start = time.perf_counter()
    options = {"latency": joystick.LATENCY, "pushes": joystick.PUSHES, "impl": impl}
    if impl == "c":
        options["num_threads"] = 1
    torch_door = task.name.startswith("g1")
    if torch_door:
        door = TorchVecEnv(task, 2, seed=7, **options)
    else:
        door = MjxVectorEnv(task, 2, seed=7, **options)
    obs, _ = door.reset()
    qpos, rewards, falls = [], [], 0
    for t in range(STEPS):
        phase = 0.1 * t * np.arange(1, 3)[:, None] + np.arange(door.env.action_size)[None, :]
        action = (amplitude * np.sin(phase)).astype(np.float32)
        if torch_door:
            obs, reward, terminated, _, _ = door.step(torch.from_numpy(action))
            reward, terminated = reward.numpy(), terminated.numpy()
        else:
            obs, reward, terminated, _, _ = door.step(action)
        if t == 0:
            seconds = time.perf_counter() - start
        qpos.append(np.asarray(door.state.runner.data.qpos, np.float64))
        rewards.append(np.asarray(reward, np.float64))
        falls += int(np.asarray(terminated).sum())  # each restarts at once
    door.close()
    assert not np.asarray(terminated).any(), f"{task.name} fell on {impl} at the end"
    checks = {
        "falls": falls,
        "door": "torch" if torch_door else "gym",
        "terms": sorted(obs),
        "worlds": sorted({int(v.shape[0]) for v in obs.values()}),
        "finite": bool(np.isfinite(rewards).all()),
    }
    return np.stack(qpos), np.stack(rewards), seconds, checks


RUNS = {impl: (joystick.G1_JOYSTICK_MJX, joystick.GO1_JOYSTICK_ROUGH) for impl in ("warp", "jax")}


def main(out):
    results, natives = {}, {}
    for impl, runs in RUNS.items():
        results[impl] = {}
        for task in runs:
            amplitude = AMPLITUDE.get((task.name, impl), 0.1)
            qpos, reward, seconds, checks = run(task, impl, amplitude)
            if (task.name, amplitude) not in natives:
                natives[task.name, amplitude] = run(task, "c", amplitude)
            native, native_reward, _, _ = natives[task.name, amplitude]
            results[impl][task.name] = checks | {
                "qpos": float(np.abs(qpos - native).max()),
                "reward": float(np.abs(reward - native_reward).max()),
                "moved": float(np.abs(qpos[-1, :, 7:] - qpos[0, :, 7:]).max()),
                "amplitude": amplitude,
                "reset_and_first_step_s": seconds,
            }
            print(impl, task.name, results[impl][task.name], flush=True)
    with open(out, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main(sys.argv[1])
