"""The joystick tasks on MJX (impls "jax" and "warp") against impl "c": run by
tests/test_robots.py in a process of its own, in the background, since each task's
env compiles for about a minute on 2 cores on the jax impl.

Usage: ``python joystick_impls_script.py OUT.json``. For each task and impl of
:data:`RUNS`, two worlds with the kit (latency, pushes, sensor noise and history)
step 40 control steps (200 physics steps) under a target wave from the same key as
on impl "c"; writes, per impl and task, the largest difference in qpos and in
reward, how far the joints moved, and the seconds of ``reset`` plus the first
``step``. ``go1_joystick`` runs on Warp only: on jax it is ``go1_joystick_rough``'s
functions on the flat scene, whose jax parity tests/test_robots.py checks already.
Then the Gymnasium and torch doors step joystick tasks on Warp (``"doors"``).
"""

import json
import sys
import time

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import torch

from mjxrunner.doors.torch import TorchVecEnv
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


RUNS = {
    "warp": (joystick.GO1_JOYSTICK, joystick.G1_JOYSTICK, joystick.GO1_JOYSTICK_ROUGH),
    "jax": (joystick.G1_JOYSTICK, joystick.GO1_JOYSTICK_ROUGH),
}


def main(out):
    results, natives = {}, {}
    for impl, runs in RUNS.items():
        results[impl] = {}
        for task in runs:
            amplitude = AMPLITUDE.get((task.name, impl), 0.1)
            qpos, reward, seconds = run(task, impl, amplitude)
            if (task.name, amplitude) not in natives:
                natives[task.name, amplitude] = run(task, "c", amplitude)
            native, native_reward, _ = natives[task.name, amplitude]
            results[impl][task.name] = {
                "qpos": float(np.abs(qpos - native).max()),
                "reward": float(np.abs(reward - native_reward).max()),
                "moved": float(np.abs(qpos[-1, :, 7:] - qpos[0, :, 7:]).max()),
                "amplitude": amplitude,
                "reset_and_first_step_s": seconds,
            }
            print(impl, task.name, results[impl][task.name], flush=True)
    results["doors"] = doors()
    print("doors", results["doors"], flush=True)
    with open(out, "w") as f:
        json.dump(results, f)


def doors():
    """The Gymnasium and torch doors over joystick tasks on Warp (its kernels are
    compiled above): 20 steps each; the shapes, and whether the rewards were finite
    and every world stayed up."""
    gym = gymnasium.make_vec(
        "mjxrunner/Go1JoystickRough-v0",
        num_envs=2,
        vectorization_mode="vector_entry_point",
        impl="warp",
    )
    obs, _ = gym.reset(seed=0)
    rewards, fell = [], False
    for _ in range(20):
        obs, reward, terminated, _, _ = gym.step(np.zeros((2, 12), np.float32))
        rewards.append(reward)
        fell |= bool(terminated.any())
    gym.close()
    result = {
        "gym": {
            "terms": sorted(obs),
            "worlds": sorted({v.shape[0] for v in obs.values()}),
            "finite": bool(np.isfinite(rewards).all()),
            "fell": fell,
        }
    }
    door = TorchVecEnv("g1_joystick", 2, seed=0, impl="warp")
    obs, _ = door.reset()
    rewards, fell = [], False
    for _ in range(20):
        obs, reward, terminated, _, _ = door.step(torch.zeros((2, 29)))
        rewards.append(reward)
        fell |= bool(terminated.any())
    result["torch"] = {
        "terms": sorted(obs),
        "finite": bool(torch.isfinite(torch.stack(rewards)).all()),
        "fell": fell,
    }
    return result


if __name__ == "__main__":
    main(sys.argv[1])
