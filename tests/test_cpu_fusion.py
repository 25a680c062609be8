"""XLA:CPU's fusion emitters are off in every process that imports mjxrunner first,
unless the user chose otherwise, and back on for the programs of impl "c"
(mjxrunner/cpu_fusion.py says why)."""

import os

import jax
import numpy as np
import pytest

from mjxrunner import backend_info, tasks
from mjxrunner.doors import door
from mjxrunner.doors.gym import MjxVectorEnv
from mjxrunner.engine import cpu_fusion
from mjxrunner.engine.backend import describe_backend
from mjxrunner.rl import env as E


def test_this_process_runs_with_the_emitters_off():
    assert cpu_fusion.active()
    assert cpu_fusion.FLAG in os.environ["XLA_FLAGS"]
    assert backend_info()["cpu_fusion_emitters"] is False


def test_the_backend_identity_says_which_programs_get_the_emitters_back():
    for impl, back in (("c", True), ("jax", None), ("warp", None)):
        info = backend_info(impl)
        assert info["env_fusion_emitters"] is back, impl
        line = describe_backend(info)
        assert "fusion_emitters=off" in line
        assert ("env_fusion_emitters=on" in line) is bool(back), line


@pytest.mark.parametrize(
    ("flags", "opt_out", "started", "known", "active", "added"),
    [
        ("", "", False, True, True, True),
        ("--xla_force_host_platform_device_count=2", "", False, True, True, True),
        ("", "1", False, True, False, False),  # opted out
        ("", "", True, True, False, False),  # too late: XLA read its flags already
        ("", "", False, False, False, False),  # a jaxlib whose XLA aborts on the flag
        ("--xla_cpu_use_fusion_emitters=true", "", False, True, False, False),  # the user's
        ("--xla_cpu_use_fusion_emitters=false", "", False, True, True, False),
    ],
)
def test_install_respects_the_users_choice(
    monkeypatch, flags, opt_out, started, known, active, added
):
    monkeypatch.setattr(cpu_fusion, "KNOWN", known)
    monkeypatch.setenv("XLA_FLAGS", flags)
    monkeypatch.setenv(cpu_fusion.OPT_OUT, opt_out)
    monkeypatch.setattr(cpu_fusion.xla_bridge, "backends_are_initialized", lambda: started)
    monkeypatch.setattr(cpu_fusion, "_active", cpu_fusion._active)  # restored afterwards
    assert cpu_fusion.install() is active
    assert cpu_fusion.active() is active
    after = os.environ["XLA_FLAGS"]
    assert after.startswith(flags.strip())
    assert (cpu_fusion.FLAG in after and cpu_fusion.FLAG not in flags) is added


@pytest.mark.parametrize(
    ("impl", "active", "options"),
    [
        ("c", True, {"xla_cpu_use_fusion_emitters": True}),
        ("jax", True, None),  # MJX's tree passes: the emitters stay off
        ("warp", True, None),
        ("c", False, None),  # the process keeps XLA's options (opted out, or too late)
    ],
)
def test_impl_c_programs_get_the_emitters_back(monkeypatch, impl, active, options):
    monkeypatch.setattr(cpu_fusion, "_active", active)
    assert cpu_fusion.compiler_options(impl) == options


def assert_same_bits(a, b):
    """Every leaf of ``a`` and ``b``: same dtype, same values (NaN where NaN)."""
    pairs = zip(jax.tree.leaves(jax.device_get(a)), jax.tree.leaves(jax.device_get(b)), strict=True)
    for x, y in pairs:
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=True)


def test_a_door_on_impl_c_steps_with_the_emitters_as_without():
    """The door's step on impl "c" compiled with the emitters (scatters as kernels,
    not loops) gives the same bits as the same step compiled with the process's
    options, over steps that restart worlds."""
    v = MjxVectorEnv(tasks.for_model("hopper")[0], 4, seed=0, impl="c", num_threads=1)
    v.reset(seed=0)
    d = v._door
    # impl "jax" names the process's own options here: the env is impl "c" either way.
    on, off = (
        door.packed_step(d._env_layout, d._held.layout, d._pack, False, i) for i in ("c", "jax")
    )
    loops = [
        f.lower(d._env_buffers, d._held.buffers, np.zeros((4, 3), np.float32)).compile().as_text()
        for f in (on, off)
    ]
    assert loops[0].count(" while(") < loops[1].count(" while(")
    actions = np.random.default_rng(0).uniform(-1, 1, (40, 4, 3)).astype(np.float32)
    a = b = d._held.buffers
    restarts = 0
    for u in actions:
        a, out_a = on(d._env_buffers, a, u)
        b, out_b = off(d._env_buffers, b, u)
        assert_same_bits((a, out_a), (b, out_b))
        out = v._outputs.split(*jax.device_get(out_a))
        restarts += int((out["terminated"] | out["truncated"]).sum())
    assert restarts > 0  # the restart's scatters ran


def test_the_envs_jitted_reset_on_impl_c_equals_the_processs():
    env = E.make(tasks.for_model("hopper")[0], 4, impl="c", num_threads=1)
    key = jax.random.key(1)
    ours, plain = E.jit_reset(env, key), jax.jit(E.reset)(env, key)
    assert_same_bits(ours, plain)
    mask = np.array([True, False, True, False])
    ours, plain = E.jit_reset_worlds(env, ours, mask), jax.jit(E.reset_worlds)(env, plain, mask)
    assert_same_bits(ours, plain)
