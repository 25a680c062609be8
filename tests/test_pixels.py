"""Batched pixel observations (mjxrunner.pixels) against MuJoCo's own renderer.

World states are posed on the host (``mj_forward``) and copied into one batched
impl "warp" ``mjx.Data``, so ``mujoco.Renderer`` and the batched renderer see exactly
the same poses; one test runs the physics step before the render. Measured on
cartpole at 64 x 48 (non-square, so a transposed image cannot pass): depth agrees to
about 1 mm where both hit a geom, segmentation on every pixel, RGB within about 1.5
of 255 on average (shading differs slightly).
"""

import dataclasses
import types

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from mujoco import mjx

from mjxrunner import CompileCounter, MultiEnvRunner, world_mask
from mjxrunner.engine import core, models
from mjxrunner.kit import pixels
from mjxrunner.kit.pixels import PixelRenderer, PixelSpec

N = 4
W, H = 64, 48
QPOS = np.array([[0.0, 0.0], [0.5, 0.3], [-0.6, -1.0], [1.0, 2.0]])
RED = np.array([1.0, 0.0, 0.0, 1.0])
DEPTH_ATOL = 0.01  # metres, on pixels where both renderers hit a geom
SEG_AGREE = 0.98  # fraction of pixels with the same (id, type)
RGB_MAD = 6.0  # mean |difference| per channel, of 255


def host_data(m, qpos):
    d = mujoco.MjData(m)
    d.qpos[:] = qpos
    mujoco.mj_forward(m, d)
    return d


def batch(m, qpos):
    """One impl "warp" batch whose world i is ``host_data(m, qpos[i])``, committed to
    the first device as compiled steps return it (else the first call after a step
    compiles again for the new placement)."""
    worlds = [mjx.put_data(m, host_data(m, q), impl="warp") for q in qpos]
    template = jax.vmap(lambda _: worlds[0])(jnp.arange(len(worlds)))
    stacked = jax.tree.map(
        lambda w, t, *xs: jnp.stack(xs) if w else t, world_mask(template), template, *worlds
    )
    return jax.device_put(stacked, jax.devices()[0])


def reference(m, qpos, camera="side", width=W, height=H):
    """``mujoco.Renderer``'s rgb, depth and segmentation of each world."""
    out = []
    with mujoco.Renderer(m, height, width) as r:
        for q in qpos:
            d = host_data(m, q)
            frame = {}
            for kind in ("rgb", "depth", "segmentation"):
                r.disable_depth_rendering()
                r.disable_segmentation_rendering()
                if kind == "depth":
                    r.enable_depth_rendering()
                if kind == "segmentation":
                    r.enable_segmentation_rendering()
                r.update_scene(d, camera=camera)
                frame[kind] = r.render().copy()
            out.append(frame)
    return out


@pytest.fixture(scope="module")
def scene():
    """A warp runner (for its device model), its model before and after world 1's pole
    is made red, the renderer and its compiled render."""
    runner = MultiEnvRunner("cartpole", N, impl="warp")
    m = runner.mj_model
    shared = runner.model
    rgba = np.array(m.geom_rgba)
    rgba[m.geom("pole").id] = RED
    runner.set_param("geom_rgba", rgba, env_ids=[1])
    spec = PixelSpec("side", width=W, height=H, depth=True, segmentation=True)
    renderer = PixelRenderer(m, N, spec)
    return types.SimpleNamespace(
        m=m,
        runner=runner,
        shared=shared,
        randomized=runner.model,
        renderer=renderer,
        render=jax.jit(renderer.render),
        data=batch(m, QPOS),
    )


@pytest.fixture(scope="module")
def frames(scene):
    """Frames of the posed worlds, with shared colours and with world 1 randomized."""
    out = {}
    for name in ("shared", "randomized"):
        _, f = scene.render(getattr(scene, name), scene.data)
        out[name] = jax.tree.map(np.asarray, f)
    return out


def test_frame_shapes_and_dtypes(scene, frames):
    f = frames["shared"]
    assert f["rgb"].shape == (N, H, W, 3) and f["rgb"].dtype == np.uint8
    assert f["depth"].shape == (N, H, W) and f["depth"].dtype == np.float32
    assert f["segmentation"].shape == (N, H, W, 2) and f["segmentation"].dtype == np.int32
    expected = scene.renderer.frame_shapes()
    assert {k: (v.shape, v.dtype) for k, v in expected.items()} == {
        k: (v.shape, v.dtype) for k, v in f.items()
    }


def test_frames_agree_with_mujoco_renderer_world_by_world(scene, frames):
    ref = reference(scene.m, QPOS)
    f = frames["shared"]
    for i in range(N):
        seg, want_seg = f["segmentation"][i], ref[i]["segmentation"]
        assert np.mean(np.all(seg == want_seg, axis=-1)) >= SEG_AGREE, f"world {i}"
        both = (seg[..., 0] >= 0) & (want_seg[..., 0] >= 0)
        assert both.mean() > 0.3  # the floor, cart and pole fill much of the view
        np.testing.assert_allclose(
            f["depth"][i][both], ref[i]["depth"][both], atol=DEPTH_ATOL, err_msg=f"world {i}"
        )
        assert np.all(f["depth"][i][seg[..., 0] < 0] == 0)  # no hit reads 0
        # Channel order and orientation: a swapped or flipped image is ~40 off.
        mad = np.abs(f["rgb"][i].astype(int) - ref[i]["rgb"]).mean()
        assert mad < RGB_MAD, f"world {i}: rgb off by {mad:.1f} on average"
    # The worlds differ from each other: the pole is drawn where each world puts it.
    pole = scene.m.geom("pole").id
    masks = [f["segmentation"][i][..., 0] == pole for i in range(N)]
    assert all(mask.sum() > 10 for mask in masks)
    assert not np.array_equal(masks[0], masks[1])


def test_per_world_colour_changes_that_world_only(scene, frames):
    shared, rand = frames["shared"]["rgb"], frames["randomized"]["rgb"]
    for i in (0, 2, 3):
        np.testing.assert_array_equal(rand[i], shared[i])
    pole = frames["shared"]["segmentation"][1][..., 0] == scene.m.geom("pole").id
    changed = np.any(rand[1] != shared[1], axis=-1)
    assert changed.any() and not np.any(changed & ~pole)  # only pole pixels change
    red = rand[1][pole].astype(int)
    assert np.all(red[:, 0] > red[:, 1] + red[:, 2])
    # ... and match MuJoCo's renderer given that colour.
    m = models.load("cartpole")
    m.geom_rgba[m.geom("pole").id] = RED
    want = reference(m, QPOS[1:2])[0]["rgb"]
    assert np.abs(rand[1].astype(int) - want).mean() < RGB_MAD


def test_render_returns_data_with_only_the_token_replaced(scene):
    out, _ = scene.render(scene.shared, scene.data)
    token = out._impl._jax_token
    assert token.shape == (N,) and token.dtype == scene.data._impl._jax_token.dtype
    before = jax.tree_util.tree_leaves_with_path(scene.data)
    after = dict(jax.tree_util.tree_leaves_with_path(out))
    for path, leaf in before:
        if "_jax_token" not in jax.tree_util.keystr(path):
            np.testing.assert_array_equal(after[path], leaf)


def test_physics_then_render_changes_frames_and_never_recompiles(scene, frames):
    """A step and a render in one compiled function, the render after the physics
    through the data it returns; new states and parameter values do not recompile."""

    @jax.jit
    def step_and_render(model, data, ctrl):
        data, _ = core.physics_step(model, data, ctrl, None, 5)
        return scene.renderer.render(model, data)

    ctrl, back = jnp.ones((N, 1)), -jnp.ones((N, 1))
    qvel = jax.device_put(np.tile([2.0, -3.0], (N, 1)).astype(np.float32), jax.devices()[0])
    data = scene.data.replace(qvel=qvel)
    data, first = step_and_render(scene.shared, data, ctrl)
    jax.block_until_ready(first)
    reversed_worlds = batch(scene.m, QPOS[::-1])
    with CompileCounter() as count:
        data, second = step_and_render(scene.shared, data, back)
        _, f = scene.render(scene.randomized, reversed_worlds)
        jax.block_until_ready((second, f))
    assert count.count == 0
    for i in range(N):  # every world moved between the two frames
        assert np.any(np.asarray(first["depth"][i]) != np.asarray(second["depth"][i]))
    # The same compiled render, other states: world 0 now shows world 3's pose.
    np.testing.assert_array_equal(
        np.asarray(f["segmentation"][0]), frames["shared"]["segmentation"][3]
    )


def test_several_cameras_stack_after_the_world_axis():
    spec = mujoco.MjSpec.from_file(str(models.path("cartpole")))
    spec.worldbody.add_camera(name="front", pos=[3.0, -3.0, 1.5], xyaxes=[1, 1, 0, -0.2, 0.2, 1])
    m = spec.compile()
    qpos = QPOS[:2]
    renderer = PixelRenderer(
        m, 2, PixelSpec(("front", "side"), width=32, height=24, rgb=False, depth=True)
    )
    _, f = jax.jit(renderer.render)(mjx.put_model(m, impl="warp"), batch(m, qpos))
    assert set(f) == {"depth"} and f["depth"].shape == (2, 2, 24, 32)
    for c, camera in enumerate(("front", "side")):
        ref = reference(m, qpos, camera, 32, 24)
        for i in range(2):
            got = np.asarray(f["depth"][i, c])
            hit = got > 0
            assert hit.mean() > 0.3
            np.testing.assert_allclose(got[hit], ref[i]["depth"][hit], atol=DEPTH_ATOL)


def test_pose_places_bodies_cameras_and_lights_like_mj_forward():
    """``pose`` from qpos alone (stale kinematics in the data) matches MuJoCo's own
    kinematics and camlight for every camera and light mode, with a non-unit
    per-world camera quaternion normalized as MuJoCo's compiler would."""
    mode = mujoco.mjtCamLight
    spec = mujoco.MjSpec.from_file(str(models.path("cartpole")))
    world, cart, pole = spec.worldbody, spec.body("cart"), spec.body("pole")
    pole.add_camera(name="fixed", pos=[0.1, -0.5, 0.5], quat=[0.9, 0.3, 0.1, 0.0])
    cart.add_camera(name="track", pos=[0, -3, 0.5], mode=mode.mjCAMLIGHT_TRACK)
    cart.add_camera(name="trackcom", pos=[0, -3, 0.5], mode=mode.mjCAMLIGHT_TRACKCOM)
    target = dict(mode=mode.mjCAMLIGHT_TARGETBODY, targetbody="pole")
    world.add_camera(name="target", pos=[1, -3, 2], **target)
    targetcom = dict(mode=mode.mjCAMLIGHT_TARGETBODYCOM, targetbody="cart")
    world.add_camera(name="targetcom", pos=[-1, -3, 2], **targetcom)
    pole.add_light(pos=[0, -0.3, 0.8], dir=[0, 0.6, -0.8])
    cart.add_light(pos=[0, 0, 2], mode=mode.mjCAMLIGHT_TRACK)
    cart.add_light(pos=[0, 0, 2], mode=mode.mjCAMLIGHT_TRACKCOM)
    world.add_light(pos=[1, -1, 3], **target)
    world.add_light(pos=[1, -1, 3], **targetcom)
    m = spec.compile()
    assert set(m.cam_mode) == set(m.light_mode) == set(range(5))  # every mode
    qpos = QPOS[1:]
    renderer = PixelRenderer(m, len(qpos), PixelSpec("side", width=8, height=8))
    mx = mjx.put_model(m, impl="warp")
    quat = np.tile(m.cam_quat, (len(qpos), 1, 1)) * np.array([1.0, 2.0, 0.5])[:, None, None]
    mx = mx.replace(cam_quat=jnp.asarray(quat, jnp.float32))  # per world, not unit
    stale = jax.vmap(lambda _: mjx.make_data(m, impl="warp"))(jnp.arange(len(qpos)))
    stale = stale.replace(qpos=jnp.asarray(qpos, jnp.float32))
    posed = jax.jit(renderer.pose)(mx, stale)
    for i, q in enumerate(qpos):
        d = host_data(m, q)
        got = {
            "geom_xpos": posed.geom_xpos[i],
            "cam_xpos": posed.cam_xpos[i],
            "cam_xmat": np.asarray(posed.cam_xmat[i]).reshape(m.ncam, 9),
            "light_xpos": posed._impl.light_xpos[i],
            "light_xdir": posed._impl.light_xdir[i],
        }
        for name, value in got.items():
            np.testing.assert_allclose(value, getattr(d, name), atol=1e-5, err_msg=name)


# --- clear errors -------------------------------------------------------------------


def test_impl_jax_is_refused_naming_the_way_out(scene):
    with pytest.raises(ValueError, match="impl='warp'"):
        PixelRenderer(scene.m, N, PixelSpec("side"), impl="jax")
    jax_data = mjx.make_data(scene.m, impl="jax")
    with pytest.raises(ValueError, match="impl='warp'"):
        scene.renderer.render(scene.shared, jax.vmap(lambda _: jax_data)(jnp.arange(N)))


def test_platforms_warp_cannot_render_on_are_refused(scene):
    with pytest.raises(ValueError, match="CPU and CUDA"):
        pixels.warp_device(types.SimpleNamespace(platform="tpu"))
    cpus = jax.devices("cpu")
    if len(cpus) > 1:  # the suite forces two host devices
        with pytest.raises(ValueError, match="CPU devices"):
            PixelRenderer(scene.m, N, PixelSpec("side"), devices=cpus[:2])


def test_cameras_the_model_lacks_are_refused(scene):
    with pytest.raises(ValueError, match=r"no camera 'nope'.*side"):
        PixelRenderer(scene.m, N, PixelSpec("nope"))
    with pytest.raises(ValueError, match="camera id 1 is out of range"):
        PixelRenderer(scene.m, N, PixelSpec(1))
    with pytest.raises(ValueError, match="same camera twice"):
        PixelRenderer(scene.m, N, PixelSpec(("side", 0)))
    with pytest.raises(ValueError, match="no camera"):
        PixelRenderer(mujoco.MjModel.from_xml_string("<mujoco/>"), N, PixelSpec(0))


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"width": 0}, ValueError),
        ({"height": pixels.MAX_SIZE + 1}, ValueError),
        ({"width": 32.0}, TypeError),
        ({"cameras": ()}, ValueError),
        ({"cameras": ("side", "side")}, ValueError),
        ({"cameras": True}, TypeError),
        ({"cameras": -1}, ValueError),
        ({"rgb": False}, ValueError),  # nothing left to render
        ({"depth": 1}, TypeError),
        ({"geom_groups": (0, 6)}, ValueError),
    ],
)
def test_spec_validation(kwargs, error):
    with pytest.raises(error, match="PixelSpec"):
        PixelSpec(**{"cameras": "side", **kwargs})


def test_spec_is_frozen_and_hashable():
    a, b = PixelSpec(["side"]), PixelSpec(("side",))
    assert a == b and hash(a) == hash(b) and a.camera_axis and not PixelSpec("side").camera_axis
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.width = 3


def test_too_many_rays_and_bad_batches_are_refused(scene):
    with pytest.raises(ValueError, match="int32 launch size"):
        PixelRenderer(scene.m, 2**20, PixelSpec("side", width=64, height=64))
    two = jax.tree.map(lambda x, w: x[:2] if w else x, scene.data, world_mask(scene.data))
    with pytest.raises(ValueError, match="holds 4 worlds but data has 2"):
        scene.renderer.render(scene.shared, two)
    fovy = jnp.ones((N, 1)) * 45.0
    with pytest.raises(ValueError, match="dynamic_rays=True"):
        scene.renderer.render(scene.shared.replace(cam_fovy=fovy), scene.data)
