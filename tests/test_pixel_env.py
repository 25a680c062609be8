"""Pixel observations in the env (``Task.pixels``): frames rendered inside the compiled
step after the physics, merged into the observation as terms, checked world by world
against MuJoCo's own renderer (tolerances of tests/test_pixels.py).

One env of 4 cartpoles at 64 x 48 renders RGB, depth and segmentation every second
step, stacks two RGB frames and redraws the pole's colour, the camera pose and the
light position per world at every restart; every test shares its compiled reset,
step and reset_worlds. The Gymnasium and torch doors run the registered
``cartpole_balance_pixels`` task on 2 worlds.
"""

import types

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_pixels import DEPTH_ATOL, RGB_MAD, SEG_AGREE, reference

from mjxrunner import CompileCounter
from mjxrunner.doors import registration
from mjxrunner.engine import models
from mjxrunner.engine.params import Term
from mjxrunner.kit.observations import ObsConfig
from mjxrunner.kit.pixels import PixelSpec
from mjxrunner.rl import env as mjxenv
from mjxrunner.tasks import cartpole, cartpole_pixels

N = 4
W, H = 64, 48
SPEC = PixelSpec("side", width=W, height=H, depth=True, segmentation=True, every=2)


def lively_start(model, data, key):
    """Starts that move enough in two steps to move pixels (and fall soon)."""
    k_pos, k_vel = jax.random.split(key)
    qpos = data.qpos + jax.random.uniform(k_pos, (2,), data.qpos.dtype, -0.15, 0.15)
    qvel = jax.random.uniform(k_vel, (2,), data.qvel.dtype, -2.0, 2.0)
    return data.replace(qpos=qpos, qvel=qvel)


TASK = cartpole.BALANCE.replace(
    name="test_cartpole_pixels",
    initial_state=lively_start,
    pixels=SPEC,
    obs_config=ObsConfig(history={"pixels": 2}),
)
POLE = models.load("cartpole").geom("pole").id
# Drawn around the defaults at every restart, per world.
TERMS = [
    Term("geom_rgba", 0.1, 1.1, index=(POLE, [0, 1, 2])),  # the pole's colour
    Term("cam_pos", -0.2, 0.2, operation="add"),  # camera position
    Term("cam_quat", -0.05, 0.05, operation="add"),  # and orientation (normalized)
    Term("light_pos", -1.0, 1.0, operation="add"),  # light position
]
VISUAL = ("geom_rgba", "cam_pos", "cam_quat", "light_pos")


def world_host_model(env, state, i):
    """The host model with world ``i``'s drawn visual parameters."""
    m = models.load("cartpole")
    tree = state.model.tree
    for name in VISUAL:
        value = np.asarray(getattr(tree, name))
        getattr(m, name)[:] = value[i] if value.ndim > getattr(m, name).ndim else value
    m.cam_quat[:] /= np.linalg.norm(m.cam_quat, axis=-1, keepdims=True)
    return m


def assert_matches_mujoco(env, state, worlds=range(N)):
    """The newest frames of ``worlds`` agree with ``mujoco.Renderer`` given each
    world's own parameters and state."""
    qpos = np.asarray(state.runner.data.qpos)
    obs = state.obs
    for i in worlds:
        m = world_host_model(env, state, i)
        ref = reference(m, qpos[i : i + 1], "side", W, H)[0]
        seg, want_seg = np.asarray(obs["segmentation"][i]), ref["segmentation"]
        assert np.mean(np.all(seg == want_seg, axis=-1)) >= SEG_AGREE, f"world {i}"
        both = (seg[..., 0] >= 0) & (want_seg[..., 0] >= 0)
        assert both.mean() > 0.3
        np.testing.assert_allclose(
            np.asarray(obs["depth"][i])[both], ref["depth"][both], atol=DEPTH_ATOL, err_msg=str(i)
        )
        rgb = np.asarray(obs["pixels"][i, -1]).astype(int)
        mad = np.abs(rgb - ref["rgb"]).mean()
        assert mad < RGB_MAD, f"world {i}: rgb off by {mad:.1f} on average"


@pytest.fixture(scope="module")
def pix():
    env = mjxenv.make(TASK, N, impl="warp", autoreset="disabled").with_randomization(TERMS)
    ns = types.SimpleNamespace(env=env)
    ns.reset = mjxenv.jit_reset
    ns.step = mjxenv.jit_step
    ns.reset_worlds = mjxenv.jit_reset_worlds
    ns.start = ns.reset(env, jax.random.key(3))
    actions = jnp.asarray([[1.0], [-1.0], [0.5], [0.0]])
    ns.push = actions
    ns.one = ns.step(env, ns.start, actions)  # not due: frames of the start again
    ns.two = ns.step(env, ns.one, actions)  # due: rendered after the physics
    jax.block_until_ready(ns.two)
    return ns


def test_observation_is_a_dict_of_terms_with_the_stated_dtypes(pix):
    spec = pix.env.observation_spec
    assert spec == {
        "state": jax.ShapeDtypeStruct((5,), jnp.float32),
        "pixels": jax.ShapeDtypeStruct((2, H, W, 3), jnp.uint8),
        "depth": jax.ShapeDtypeStruct((H, W), jnp.float32),
        "segmentation": jax.ShapeDtypeStruct((H, W, 2), jnp.int32),
    }
    for state in (pix.start, pix.two):
        assert {k: (v.shape[1:], v.dtype) for k, v in state.obs.items()} == {
            k: (s.shape, s.dtype) for k, s in spec.items()
        }
    # The state term is the task's own observation.
    np.testing.assert_allclose(
        pix.two.obs["state"][:, 0], pix.two.runner.data.qpos[:, 0], rtol=1e-6
    )


def test_frames_agree_with_mujoco_renderer_world_by_world(pix):
    """At the start and after two steps (frames of the state after the physics),
    with each world's own drawn colour, camera pose and light."""
    assert_matches_mujoco(pix.env, pix.start)
    assert_matches_mujoco(pix.env, pix.two)


def test_visual_parameters_are_drawn_per_world_around_the_defaults(pix):
    tree, default = pix.two.model.tree, pix.env.model.tree
    rgba = np.asarray(tree.geom_rgba)
    assert rgba.shape == (N, pix.env.host.mj_model.ngeom, 4)
    factor = rgba[:, POLE, :3] / np.asarray(default.geom_rgba)[POLE, :3]
    assert np.all((factor >= 0.1 - 1e-6) & (factor <= 1.1 + 1e-6))
    assert len({tuple(np.round(f, 4)) for f in factor}) == N  # a colour per world
    others = np.delete(rgba, POLE, axis=1)  # other geoms keep their colour
    kept = np.delete(np.asarray(default.geom_rgba), POLE, axis=0)
    np.testing.assert_array_equal(others, np.broadcast_to(kept, others.shape))
    offset = np.asarray(tree.cam_pos) - np.asarray(default.cam_pos)
    assert np.all(np.abs(offset) <= 0.2 + 1e-6) and np.ptp(offset[:, 0, 0]) > 0


def test_a_drawn_colour_changes_only_its_worlds_pole_pixels(pix):
    """The same states rendered with the default pole colour: each world's frame
    differs exactly on its pole's pixels."""
    tree = pix.two.model.tree
    default_rgba = jnp.broadcast_to(pix.env.model.tree.geom_rgba, tree.geom_rgba.shape)
    plain = tree.replace(geom_rgba=default_rgba)
    _, frames = jax.jit(pix.env.renderer.observe)(plain, pix.two.runner.data)
    drawn = np.asarray(pix.two.obs["pixels"][:, -1])
    plain_rgb = np.asarray(frames["rgb"])
    seg = np.asarray(pix.two.obs["segmentation"][..., 0])
    for i in range(N):
        pole = seg[i] == POLE
        changed = np.any(drawn[i] != plain_rgb[i], axis=-1)
        assert pole.sum() > 10 and changed.mean() > 0
        assert not np.any(changed & ~pole), f"world {i}: pixels off the pole changed"
        np.testing.assert_array_equal(
            np.asarray(frames["segmentation"][i]), pix.two.obs["segmentation"][i]
        )


def test_cadence_shows_the_last_frames_exactly_until_the_next_render(pix):
    start, one, two = pix.start, pix.one, pix.two
    assert int(start.last_frames.age) == 0 and int(one.last_frames.age) == 1
    assert int(two.last_frames.age) == 0
    moved = np.asarray(one.runner.data.qpos) != np.asarray(start.runner.data.qpos)
    assert moved.any(axis=1).all()  # the physics moved every world ...
    for term in ("pixels", "depth", "segmentation"):  # ... the frames are the start's
        np.testing.assert_array_equal(
            np.asarray(one.obs[term])[:, -1] if term == "pixels" else one.obs[term],
            np.asarray(start.obs[term])[:, -1] if term == "pixels" else start.obs[term],
        )
    # Frame stacking: the start twice, then the start and the new frame.
    np.testing.assert_array_equal(one.obs["pixels"][:, 0], start.obs["pixels"][:, 1])
    np.testing.assert_array_equal(two.obs["pixels"][:, 0], one.obs["pixels"][:, 1])
    # Frames change when the state changes: every world's depth moved.
    for i in range(N):
        assert np.any(np.asarray(two.obs["depth"][i]) != np.asarray(start.obs["depth"][i]))


def test_a_masked_restart_changes_only_the_restarted_worlds_frames(pix):
    mask = jnp.asarray([False, True, False, True])
    before = pix.two
    after = pix.reset_worlds(pix.env, before, mask)
    for term in ("pixels", "depth", "segmentation"):
        for i in (0, 2):
            np.testing.assert_array_equal(after.obs[term][i], before.obs[term][i])
            np.testing.assert_array_equal(
                after.last_frames.frames["depth"][i], before.obs["depth"][i]
            )
        for i in (1, 3):
            assert np.any(np.asarray(after.obs[term][i]) != np.asarray(before.obs[term][i]))
    # A restarted world's stack holds only its new episode: its first frame twice.
    for i in (1, 3):
        np.testing.assert_array_equal(after.obs["pixels"][i, 0], after.obs["pixels"][i, 1])
        np.testing.assert_array_equal(after.last_frames.frames["depth"][i], after.obs["depth"][i])
    assert_matches_mujoco(pix.env, after, worlds=(1, 3))  # new state, new colours


def test_a_restart_inside_the_step_shows_only_the_new_episode(pix):
    """With autoreset "same_step", the step that ends a world's episode returns the
    terminal frames in final_obs and the new episode's first frame (stacked) in obs,
    whether or not the step's frames were due."""
    env = pix.env.with_autoreset("same_step")
    state = pix.two
    for _ in range(80):
        state = pix.step(env, state, pix.push)
        if state.final_mask.any():
            break
    mask = np.asarray(state.final_mask)
    assert mask.any() and not mask.all()
    for i in np.flatnonzero(mask):
        np.testing.assert_array_equal(state.obs["pixels"][i, 0], state.obs["pixels"][i, 1])
        assert np.any(
            np.asarray(state.final_obs["pixels"][i]) != np.asarray(state.obs["pixels"][i])
        )
        assert int(state.episode_length[i]) == 0
    for i in np.flatnonzero(~mask):
        for term in ("pixels", "depth", "segmentation"):
            np.testing.assert_array_equal(state.final_obs[term][i], state.obs[term][i])
    assert_matches_mujoco(env, state, worlds=np.flatnonzero(mask))


def test_zero_recompiles_after_warm_up(pix):
    env = pix.env
    back, first = -pix.push, jnp.asarray([True, False, False, False])
    with CompileCounter() as count:
        state = pix.reset(env, jax.random.key(11))
        for _ in range(3):
            state = pix.step(env, state, pix.push)
        state = pix.reset_worlds(env, state, first)
        same = env.with_autoreset("same_step")
        for _ in range(3):
            state = pix.step(same, state, back)
        jax.block_until_ready(state)
    assert count.count == 0


# --- doors ------------------------------------------------------------------------------


def test_gymnasium_vector_env_of_the_registered_pixel_task_passes_space_checks():
    env_id = registration.gym_id("cartpole_balance_pixels")
    assert env_id == "mjxrunner/CartpoleBalancePixels-v0"
    vec = gymnasium.make_vec(env_id, num_envs=2, vectorization_mode="vector_entry_point")
    assert vec.env.impl == "warp"  # the registered default: the only impl that renders
    space = vec.single_observation_space
    assert isinstance(space, gymnasium.spaces.Dict) and set(space) == {"pixels"}
    assert space["pixels"].dtype == np.uint8 and space["pixels"].shape == (3, 64, 64, 3)
    obs, _ = vec.reset(seed=0)
    assert vec.observation_space.contains(obs)
    for _ in range(2):
        obs, *_ = vec.step(vec.action_space.sample())
        assert vec.observation_space.contains(obs)
    assert obs["pixels"].dtype == np.uint8 and obs["pixels"].shape == (2, 3, 64, 64, 3)


def test_torch_door_gives_a_uint8_pixel_group():
    torch = pytest.importorskip("torch")
    from mjxrunner.doors.torch import TorchVecEnv

    task = cartpole_pixels.BALANCE_PIXELS.replace(
        name="test_cartpole_pixels_torch", pixels=PixelSpec("side", width=32, height=24)
    )
    tenv = TorchVecEnv(task, 2, impl="warp")
    obs, _ = tenv.reset()
    obs, *_ = tenv.step(torch.zeros((2, 1)))
    assert set(obs) == {"pixels"}
    assert obs["pixels"].dtype == torch.uint8 and tuple(obs["pixels"].shape) == (2, 3, 24, 32, 3)
    assert tenv.observation_space.contains({"pixels": obs["pixels"].numpy()})


# --- clear errors, at make time -----------------------------------------------------------


def test_impl_jax_is_refused_naming_impl_warp():
    with pytest.raises(ValueError, match=r"test_cartpole_pixels.*impl='warp'"):
        mjxenv.make(TASK, 2, impl="jax")
    with pytest.raises(ValueError, match="impl='warp'"):
        gymnasium.make_vec(
            "mjxrunner/CartpoleBalancePixels-v0",
            num_envs=2,
            vectorization_mode="vector_entry_point",
            impl="jax",
        )


def test_several_cpu_devices_are_refused():
    if len(jax.devices("cpu")) < 2:
        pytest.skip("needs two host devices (the suite's conftest forces them)")
    with pytest.raises(ValueError, match=r"test_cartpole_pixels.*2 CPU devices"):
        mjxenv.make(TASK, 4, impl="warp", devices=2)


def test_task_and_camera_mismatches_are_refused():
    with pytest.raises(ValueError, match=r"no camera 'front'.*side"):
        mjxenv.make(TASK.replace(pixels=PixelSpec("front")), 2, impl="warp")
    clash = TASK.replace(observation=lambda m, d: {"pixels": d.qpos})
    with pytest.raises(ValueError, match=r"clash with the pixel terms"):
        mjxenv.make(clash, 2, impl="warp")
    with pytest.raises(TypeError, match="PixelSpec"):
        TASK.replace(pixels="side")
    with pytest.raises(ValueError, match=r"PixelSpec\.every"):
        PixelSpec("side", every=0)
