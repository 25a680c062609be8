"""Rendering one world, several side by side, and videos (headless: MUJOCO_GL=egl)."""

import imageio.v3 as iio
import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from mujoco import mjx

from mjxrunner import MultiEnvRunner
from mjxrunner.engine import models
from mjxrunner.kit import render

N = 4


@pytest.fixture(scope="module")
def runner():
    """Cartpole worlds in three states: 0 pushed left, 1 pushed right, 2 and 3 alike."""
    r = MultiEnvRunner("cartpole", N, keyframe="upright")
    r.set_actions(np.array([[-1.0], [1.0], [0.0], [0.0]]))
    for _ in range(30):
        r.step()
    return r


def _batch(m, n, qpos):
    """``n`` worlds all at ``qpos``, batched on the host side: no step is compiled."""
    d = mujoco.MjData(m)
    d.qpos[:] = qpos
    mujoco.mj_forward(m, d)
    one = mjx.put_data(m, d, impl="jax")
    return jax.device_put(jax.tree.map(lambda x: np.repeat(np.asarray(x)[None], n, 0), one))


def _red_pixels(image):
    """Pixels whose red exceeds both green and blue by more than 60 (of 255)."""
    return int((image[..., 0].astype(int) - image[..., 1:].max(axis=-1) > 60).sum())


def _distinct_colours(image):
    return np.unique(image.reshape(-1, 3), axis=0).shape[0]


# --- one world ------------------------------------------------------------------------


def test_frame_is_an_rgb_picture_not_a_blank(runner):
    image = runner.render(world=0)
    assert image.shape == (240, 320, 3) and image.dtype == np.uint8
    assert image.std() > 10 and _distinct_colours(image) > 50
    wide = runner.render(world=0, width=400, height=200)
    assert wide.shape == (200, 400, 3)


def test_worlds_in_different_states_render_differently(runner):
    qpos = np.asarray(runner.data.qpos)
    assert qpos[0, 0] < -0.1 < 0.1 < qpos[1, 0]  # the carts really went apart
    np.testing.assert_array_equal(qpos[2], qpos[3])
    left, right, a, b = (runner.render(world=w) for w in range(N))
    assert np.abs(left.astype(int) - right).mean() > 1.0
    np.testing.assert_array_equal(a, b)  # same state, same picture: the index is honoured


def test_cameras_by_name_index_and_free(runner):
    named = runner.render(world=1, camera="side")
    np.testing.assert_array_equal(named, runner.render(world=1))  # None = first camera
    np.testing.assert_array_equal(named, runner.render(world=1, camera=0))
    free = runner.render(world=1, camera=-1)
    assert free.std() > 10 and np.abs(free.astype(int) - named).mean() > 1.0


def test_render_moves_one_world_not_the_batch(runner, monkeypatch):
    moved = []
    real = jax.device_get

    def counting(tree):
        host = real(tree)
        moved.append(sum(np.asarray(x).nbytes for x in jax.tree.leaves(host)))
        return host

    monkeypatch.setattr(jax, "device_get", counting)
    runner.render(world=2)
    one_world = sum(getattr(runner.data, f)[2].nbytes for f in render.STATE_FIELDS)
    batch = sum(x.nbytes for x in jax.tree.leaves(runner.data))
    assert sum(moved) == one_world
    assert sum(moved) * N < batch  # a world's slice, and only the fields a frame needs


def test_bytes_moved_do_not_grow_with_the_batch():
    m = models.load("cartpole")
    mx = mjx.put_model(m, impl="jax")
    renderer = render.WorldRenderer(m)
    try:
        sizes = []
        for n in (2, 64):
            data = _batch(m, n, [0.0, 0.2])
            renderer.frame(mx, data, world=n - 1)
            sizes.append(renderer.last_fetch_bytes)
        assert sizes[0] == sizes[1] > 0
    finally:
        renderer.close()


def test_per_world_model_leaf_is_drawn_for_its_world():
    m = models.load("cartpole")
    mx = mjx.put_model(m, impl="jax")
    data = _batch(m, 3, [0.0, 0.3])  # three worlds in the same state
    cart = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, "cart")
    rgba = np.tile(m.geom_rgba, (3, 1, 1))
    rgba[1, cart] = [1.0, 0.0, 0.0, 1.0]  # world 1's cart is red
    per_world = mx.tree_replace({"geom_rgba": jnp.asarray(rgba)})
    renderer = render.WorldRenderer(m)
    try:
        plain = renderer.frame(mx, data, world=1)
        first, red, third = (renderer.frame(per_world, data, world=w) for w in range(3))
        # only world 1's row of geom_rgba came along
        state = sum(getattr(data, f)[1].nbytes for f in render.STATE_FIELDS)
        assert renderer.last_fetch_bytes == state + rgba[0].astype(np.float32).nbytes
        np.testing.assert_array_equal(first, plain)
        np.testing.assert_array_equal(third, plain)
        assert _red_pixels(red) > 200 and _red_pixels(plain) == 0
        # shared again: the host colours come back
        np.testing.assert_array_equal(renderer.frame(mx, data, world=1), plain)
        assert m.geom_rgba[cart].tolist() != [1.0, 0.0, 0.0, 1.0]  # the caller's model untouched
    finally:
        renderer.close()


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"world": N}, ValueError, r"world must lie in \[0, 4\)"),
        ({"world": -1}, ValueError, "world must be >= 0"),
        ({"world": 1.0}, TypeError, "world must be an int"),
        ({"camera": "top"}, ValueError, r"no camera named 'top'; cameras: \['side'\]"),
        ({"camera": 3}, ValueError, "camera index 3 out of range"),
        ({"width": 0}, ValueError, "width must be >= 1"),
        ({"height": 10_000}, ValueError, "<= 8192"),
    ],
)
def test_bad_render_arguments_are_refused(runner, kwargs, error, match):
    with pytest.raises(error, match=match):
        runner.render(**kwargs)


# --- several worlds, videos ----------------------------------------------------------------


def test_tiled_view_shows_each_world_at_its_origin(runner):
    renderer = render.renderer_for(runner)
    origins = np.array([[-2.0, 0, 0], [2.0, 0, 0]])
    both = renderer.tiled(runner.model, runner.data, [0, 1], origins)
    swapped = renderer.tiled(runner.model, runner.data, [1, 0], origins)
    alike = renderer.tiled(runner.model, runner.data, [2, 3], origins)
    alike_swapped = renderer.tiled(runner.model, runner.data, [3, 2], origins)
    assert both.shape == (480, 640, 3) and both.std() > 10
    # the left and right halves trade places when the worlds do
    half = both.shape[1] // 2
    assert np.abs(both[:, :half].astype(int) - swapped[:, :half]).mean() > 0.5
    np.testing.assert_array_equal(alike, alike_swapped)  # equal states: order is moot
    with pytest.raises(ValueError, match="unique"):
        renderer.tiled(runner.model, runner.data, [1, 1], np.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"origins must have shape \(2, 3\)"):
        renderer.tiled(runner.model, runner.data, [0, 1], np.zeros((3, 3)))


def test_video_frames_and_files(runner, tmp_path):
    before = np.asarray(runner.data.qpos).copy()
    frames = runner.render_video(worlds=[0, 1], n_steps=10, fps=20, width=160, height=112)
    assert frames.shape == (3, 112, 160, 3) and frames.dtype == np.uint8  # every 5 steps
    assert not np.array_equal(frames[0], frames[-1])  # the worlds moved
    assert not np.allclose(np.asarray(runner.data.qpos), before)  # the runner advanced
    gif = render.write_video(tmp_path / "clip.gif", frames, fps=20)
    mp4 = render.write_video(tmp_path / "clip.mp4", frames, fps=20)
    assert iio.imread(gif).shape[0] == 3
    assert mp4.read_bytes()[4:8] == b"ftyp" and mp4.stat().st_size > 1000  # an MP4 box


def test_video_follows_given_actions(runner, tmp_path):
    actions = np.zeros((4, N, 1))
    actions[:, 2] = 1.0  # push world 2 right only
    before = np.asarray(runner.data.qpos).copy()
    frames = runner.render_video(
        worlds=2, n_steps=4, policy=actions, fps=50, path=tmp_path / "w2.gif", width=64, height=48
    )
    after = np.asarray(runner.data.qpos)
    assert frames.shape == (3, 48, 64, 3) and (tmp_path / "w2.gif").is_file()
    assert after[2, 0] > before[2, 0] and after[3, 0] <= before[3, 0] + 1e-6


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"worlds": [0, 0]}, ValueError, "unique"),
        ({"worlds": [N]}, ValueError, "env_ids must lie in"),
        ({"worlds": []}, ValueError, "at least one world"),
        ({"n_steps": 0}, ValueError, "n_steps must be >= 1"),
        ({"fps": 0}, ValueError, "fps must be finite and > 0"),
        ({"path": "clip.avi"}, ValueError, r"path must end in \.mp4 or \.gif"),
        ({"path": "no/such/folder/clip.gif"}, ValueError, "does not exist"),
        ({"camera": "top"}, ValueError, "no camera named"),
        ({"policy": np.zeros((3, N, 1))}, ValueError, "policy actions must have shape"),
        ({"policy": np.full((5, N, 1), np.nan)}, ValueError, "finite"),
    ],
)
def test_bad_video_arguments_change_nothing(runner, kwargs, error, match):
    qpos = np.asarray(runner.data.qpos).copy()
    steps = runner.episode_length.copy()
    with pytest.raises(error, match=match):
        runner.render_video(**{"n_steps": 5, **kwargs})
    np.testing.assert_array_equal(np.asarray(runner.data.qpos), qpos)
    np.testing.assert_array_equal(runner.episode_length, steps)
