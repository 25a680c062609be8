"""Kept programs (mjxrunner.engine.programs): found by what built them, read back
whole by a new process, and never kept for what cannot be described by value."""

import functools
import json
import subprocess
import sys
import textwrap

import conftest
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mjxrunner.engine import programs
from mjxrunner.rl import env as E

# A new process makes a cartpole env, resets it and steps it three times, with the
# programs kept in MJXRUNNER_CACHE_DIR (as the command line and the Gymnasium door
# run); it prints what it read and wrote and the final state's bits.
SCRIPT = textwrap.dedent(
    """
    import hashlib, json
    import jax, jax.numpy as jnp, numpy as np
    from mjxrunner.engine import cache, programs
    from mjxrunner.rl import env as E
    cache.use_compile_cache()
    env = E.make("cartpole_balance", 4, impl="jax")
    state = E.jit_reset(env, jax.random.key(1))
    for t in range(3):
        state = E.jit_step(env, state, jnp.full((4, 1), 0.5 - 0.3 * t))
    bits = hashlib.sha256(b"".join(np.asarray(x).tobytes() for x in jax.tree.leaves(
        jax.tree.map(lambda x: x, state), is_leaf=lambda x: hasattr(x, "dtype")
    ) if not jax.dtypes.issubdtype(x.dtype, jax.dtypes.extended))).hexdigest()
    print("RESULT", json.dumps({"stats": programs.stats(), "bits": bits}))
    """
)


def run_once(cache_dir) -> dict:
    # The suite keeps no programs (conftest); here the door's setting is the user's.
    env = conftest.subprocess_env(MJXRUNNER_CACHE_DIR=str(cache_dir), MJXRUNNER_COMPILE_CACHE="on")
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.split("RESULT ")[-1])


def test_a_second_process_reads_the_programs_back_and_steps_alike(tmp_path):
    first = run_once(tmp_path)
    assert first["stats"]["written"] >= 2 and first["stats"]["read"] == 0, first
    kept = sorted(p.name for p in (tmp_path / "programs").glob("*.bin"))
    assert any(n.startswith("env.reset-") for n in kept), kept
    assert any(n.startswith("env.step-") for n in kept), kept
    second = run_once(tmp_path)
    # Found before any tracing: nothing traced again, every program read back.
    assert second["stats"]["exported"] == 0, second
    assert second["stats"]["read"] == first["stats"]["written"], (first, second)
    assert second["stats"]["not_kept"] == 0, second
    assert second["bits"] == first["bits"]


@pytest.fixture
def keeping(tmp_path):
    programs.enable(tmp_path)
    yield tmp_path
    programs.enable(None)


def test_a_kept_program_gives_what_jit_gives_for_every_shape(keeping):
    f = programs.kept(jax.jit(jnp.cumsum), "cumsum")
    x = jnp.arange(5.0)
    np.testing.assert_array_equal(f(x), jnp.cumsum(x))
    assert len(list(keeping.glob("cumsum-*.bin"))) == 1
    again = programs.kept(jax.jit(jnp.cumsum), "cumsum")  # as a new process would
    before = programs.stats()["read"]
    np.testing.assert_array_equal(again(x), jnp.cumsum(x))
    assert programs.stats()["read"] == before + 1
    y = jnp.arange(7, dtype=jnp.int32)  # another shape and dtype: jit's own path
    np.testing.assert_array_equal(again(y), jnp.cumsum(y))
    np.testing.assert_array_equal(again(x), jnp.cumsum(x))


def test_a_kept_program_donates_what_the_jitted_one_donates(keeping):
    for _ in range(2):  # exported, then read back
        f = programs.kept(jax.jit(jnp.negative, donate_argnums=0), "negative")
        x = jnp.arange(4.0)
        np.testing.assert_array_equal(f(x), -np.arange(4.0))
        assert x.is_deleted()
    assert programs.stats()["read"] >= 1
    # The same function jitted without donation is another program: never the one
    # that deletes its argument.
    kept = programs.kept(jax.jit(jnp.negative), "negative")
    x = jnp.arange(4.0)
    np.testing.assert_array_equal(kept(x), -np.arange(4.0))
    assert not x.is_deleted()
    assert len(list(keeping.glob("negative-*.bin"))) == 2


def test_a_damaged_file_is_exported_again(keeping):
    f = programs.kept(jax.jit(jnp.cumprod), "cumprod")
    x = jnp.arange(1.0, 5.0)
    f(x)
    [path] = keeping.glob("cumprod-*.bin")
    path.write_bytes(path.read_bytes()[:100])
    exported = programs.stats()["exported"]
    g = programs.kept(jax.jit(jnp.cumprod), "cumprod")
    np.testing.assert_array_equal(g(x), jnp.cumprod(x))
    assert programs.stats()["exported"] == exported + 1
    assert "could not read" in programs.stats()["reason"]
    read = programs.stats()["read"]
    programs.kept(jax.jit(jnp.cumprod), "cumprod")(x)  # written whole again
    assert programs.stats()["read"] == read + 1


def test_a_host_callback_is_never_kept(keeping):
    shape = jax.ShapeDtypeStruct((3,), jnp.float32)
    f = programs.kept(jax.jit(functools.partial(jax.pure_callback, np.sin, shape)), "cb")
    x = jnp.arange(3.0)
    np.testing.assert_allclose(f(x), np.sin(np.arange(3.0)), rtol=1e-6)
    assert "callback" in programs.stats()["reason"]
    assert list(keeping.glob("cb-*.bin")) == []


def own_reward(m, d, action, next_d):
    return -jnp.sum(next_d.qpos**2)


def test_what_cannot_be_described_by_value_is_named():
    fp = programs.fingerprint
    assert fp(np.arange(3)) == fp(np.arange(3)) != fp(np.arange(3.0))
    assert fp(functools.partial(jnp.add, 1.0)) == fp(functools.partial(jnp.add, 1.0))
    assert fp(functools.partial(jnp.add, 1.0)) != fp(functools.partial(jnp.add, 2.0))
    with pytest.raises(programs.NotKept, match="own_reward"):
        fp(own_reward)

    @functools.wraps(jnp.add)  # named as JAX's function, written here
    def disguised(a, b):
        return a - b

    with pytest.raises(programs.NotKept, match="outside its module"):
        fp(disguised)


def test_the_package_tasks_are_kept_and_a_task_of_your_own_is_not():
    from mjxrunner import tasks

    key = jax.random.key(0)
    builtin = E.make("cartpole_balance", 2, impl="jax")
    assert programs.key(E.jit_reset, (builtin, key)) == programs.key(
        E.jit_reset, (E.make("cartpole_balance", 2, impl="jax"), key)
    )
    # One world more: another program.
    assert programs.key(E.jit_reset, (builtin, key)) != programs.key(
        E.jit_reset, (E.make("cartpole_balance", 3, impl="jax"), key)
    )
    own = tasks.get("cartpole_balance").replace(name="own_balance", reward=own_reward)
    with pytest.raises(programs.NotKept, match="own_reward"):
        programs.key(E.jit_reset, (E.make(own, 2, impl="jax"), key))
    native = E.make("cartpole_balance", 2, impl="c", num_threads=1)
    with pytest.raises(programs.NotKept, match="belongs to this process"):
        programs.key(E.jit_reset, (native, key))
