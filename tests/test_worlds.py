"""The world-axis rule on the cases that break shape guessing."""

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from conftest import slider_xml
from mujoco import mjx

from mjxrunner import (
    CORE_NDIM,
    core_ndims,
    pytree_dataclass,
    select_worlds,
    world_axes,
    world_field,
    world_mask,
)
from mjxrunner.engine import core
from mjxrunner.engine.worlds import SHARED, num_worlds


def batched(mj_model, num_envs):
    d = mujoco.MjData(mj_model)
    mujoco.mj_forward(mj_model, d)
    single = mjx.put_data(mj_model, d, impl="jax")
    return jax.tree.map(lambda x: jnp.repeat(x[None], num_envs, axis=0), single)


def test_gravity_of_shape_3_with_3_worlds_is_shared(slider3):
    model = mjx.put_model(slider3, impl="jax")
    assert model.opt.gravity.shape == (3,)
    assert not world_mask(model).opt.gravity
    assert world_axes(model).opt.gravity is None
    promoted = model.tree_replace({"opt.gravity": jnp.zeros((3, 3))})
    assert world_mask(promoted).opt.gravity  # promotion: (3,) -> (num_envs=3, 3)
    demoted = promoted.tree_replace({"opt.gravity": jnp.zeros(3)})
    assert not world_mask(demoted).opt.gravity  # set back to its core shape
    others = [
        k
        for k, w in zip(jax.tree.leaves(model), jax.tree.leaves(world_mask(promoted)), strict=True)
        if w
    ]
    assert len(others) == 1  # nothing else became per-world


@pytest.mark.parametrize("kind", ["nbody", "nq"])
def test_masked_reset_picks_worlds_when_num_envs_equals_a_model_size(kind):
    # nbody == nq + 1 for the slider model; choose the size under test as num_envs.
    n = 4
    m = mujoco.MjModel.from_xml_string(slider_xml(n if kind == "nbody" else n + 1))
    assert getattr(m, kind) == n
    fresh = batched(m, n)
    # Give every world its own marks so any mixing of axes shows.
    marks = jnp.arange(1, n + 1, dtype=jnp.float32)
    current = fresh.replace(
        qpos=fresh.qpos + marks[:, None],
        xfrc_applied=fresh.xfrc_applied + marks[:, None, None],
        time=fresh.time + marks,
    )
    assert current.xfrc_applied.shape == (n, m.nbody, 6)
    mask = world_mask(current)
    assert mask.qpos and mask.xfrc_applied and mask.time
    done = jnp.array([False, True, False, True])
    out = select_worlds(done, fresh, current)
    for w in range(n):
        src = fresh if done[w] else current
        np.testing.assert_array_equal(out.qpos[w], src.qpos[w])
        np.testing.assert_array_equal(out.xfrc_applied[w], src.xfrc_applied[w])
        assert out.time[w] == src.time[w]


@pytree_dataclass
class Plugin:
    gain: jax.Array = world_field(1)  # (num_envs, k) per world
    table: dict = None  # nothing declared: shared


def test_declared_fields_and_plain_dicts():
    p = Plugin(gain=jnp.ones((5, 2)), table={"a": jnp.ones((5, 2))})
    assert world_mask(p).gain is True
    assert world_mask(p).table["a"] is False
    assert core_ndims(p).table["a"] == SHARED
    assert [f.metadata.get(CORE_NDIM) for f in Plugin.__dataclass_fields__.values()] == [1, None]
    # a single world's gain is shared: same ndim as declared core
    assert world_mask(Plugin(gain=jnp.ones(2), table={})).gain is False
    assert num_worlds(p) == 5


def test_world_field_rejects_bad_core_ndim():
    with pytest.raises(TypeError, match="core_ndim"):
        world_field(-1)


def test_all_true_world_mask_leaves_shared_alone_and_last_slot_restores_them(slider3):
    n = 3
    state = core.init(
        mjx.put_data(slider3, mujoco.MjData(slider3), impl="jax"), n, jax.random.key(0), slider3.nu
    )
    default = state
    # A shared tree beside the per-world state: same rule, no declaration.
    shared_now = {"offset": jnp.full((3,), 7.0)}
    shared_default = {"offset": jnp.zeros((3,))}
    moved = state.replace(ctrl=state.ctrl + 1.0, episode_length=state.episode_length + 5)
    tree, fresh = (moved, shared_now), (default, shared_default)

    out = select_worlds(jnp.ones(n, bool), fresh, tree)
    np.testing.assert_array_equal(out[0].ctrl, default.ctrl)
    np.testing.assert_array_equal(out[1]["offset"], 7.0)  # all-True (n,): untouched

    done, shared = core.parse_mask(np.array([False, True, False, True]), n)
    out = select_worlds(done, fresh, tree, shared)
    np.testing.assert_array_equal(out[1]["offset"], 0.0)  # last slot: restored whole
    np.testing.assert_array_equal(out[0].episode_length, [5, 0, 5])


def test_parse_mask_rejects_wrong_shapes():
    with pytest.raises(ValueError, match=r"\(4,\) or \(5,\)"):
        core.parse_mask(np.zeros(3, bool), 4)
    with pytest.raises(ValueError, match="bool"):
        core.parse_mask(np.zeros(4, int), 4)
