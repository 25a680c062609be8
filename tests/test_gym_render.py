"""MjxVectorEnv as a complete Gymnasium citizen: render modes, Gymnasium's own
RecordVideo over it, and every task registered for ``gymnasium.make_vec``.

Frames are drawn from host copies of the drawn worlds only; the tests check what
those copies cost (``WorldRenderer.last_fetch_bytes``) against the batch. The envs
run on impl "c" (MuJoCo's C engine: the physics does not compile, and frames are
drawn by ``mujoco.Renderer`` on the host whatever the impl), but for those
``make_vec`` builds with the registered defaults.
"""

import gymnasium
import jax
import numpy as np
import pytest
from gymnasium.wrappers.vector import RecordVideo

import mjxrunner
from mjxrunner import tasks
from mjxrunner.doors import registration
from mjxrunner.doors.gym import MjxVectorEnv, WorldFrames

N = 8
SIZE = (96, 64)
IMPL = "c"  # the frames, not the physics: see the module docstring


@pytest.fixture(scope="module")
def vec():
    env = MjxVectorEnv("cartpole_balance", N, render_mode="rgb_array", render_size=SIZE, impl=IMPL)
    env.reset(seed=0)
    return env


def test_rgb_array_gives_one_lazy_frame_per_world(vec):
    frames = vec.render()
    assert isinstance(frames, WorldFrames) and len(frames) == N
    renderer = vec._world_renderer()
    first = frames[0]
    assert first.shape == (SIZE[1], SIZE[0], 3) and first.dtype == np.uint8
    assert first.std() > 5  # a picture, not a blank
    batch_bytes = sum(x.nbytes for x in jax.tree.leaves(vec.state.runner.data))
    assert 0 < renderer.last_fetch_bytes < batch_bytes / N  # one world's state, not the batch
    assert frames[0] is first and frames[-1] is frames[N - 1]  # drawn once
    with pytest.raises(IndexError):
        frames[N]
    assert len(frames[2:5]) == 3


def test_frames_follow_the_state_and_keep_their_snapshot(vec):
    before = vec.render()
    image = before[1].copy()
    for _ in range(15):
        vec.step(np.full((N, 1), 1.0, np.float32))  # the carts move
    after = vec.render()
    assert not np.array_equal(after[1], image)
    np.testing.assert_array_equal(before[1], image)  # a snapshot of the earlier state


def test_tiled_view_shows_the_render_worlds_side_by_side():
    env = MjxVectorEnv(
        "cartpole_balance", N, render_mode="rgb_array_list", render_worlds=[0, 3, 5], impl=IMPL
    )
    env.reset(seed=0)
    for _ in range(3):
        env.step(np.zeros((N, 1), np.float32))
    frames = env.render()
    assert len(frames) == 4 and env.render() == []  # reset + 3 steps, then cleared
    one = MjxVectorEnv("cartpole_balance", N, render_mode="rgb_array", render_worlds=[0], impl=IMPL)
    one.reset(seed=0)
    assert carts(env.render_tiled()) == 3 and carts(one.render_tiled()) == 1
    np.testing.assert_array_equal(frames[0].shape, (480, 640, 3))


def carts(image: np.ndarray) -> int:
    """Separate groups of image columns holding the brown cart or the olive pole."""
    r, b = image[..., 0].astype(int), image[..., 2].astype(int)
    columns = ((r > 80) & (r > b + 40)).any(axis=0)
    return int((np.diff(columns.astype(int)) == 1).sum() + columns[0])


def test_record_video_writes_a_video_of_real_frames(tmp_path):
    env = MjxVectorEnv(
        "cartpole_balance", 4, render_mode="rgb_array", render_size=SIZE, seed=1, impl=IMPL
    )
    rec = RecordVideo(
        env,
        str(tmp_path / "videos"),
        record_first_only=True,
        step_trigger=lambda t: t == 0,
        video_length=10,
    )
    rec.reset(seed=0)
    for t in range(12):
        rec.step(np.full((4, 1), np.sin(0.5 * t), np.float32))
    rec.close()
    videos = sorted((tmp_path / "videos").glob("*.mp4"))
    assert videos and videos[0].stat().st_size > 1000
    import imageio.v3 as iio

    clip = iio.imread(videos[0])
    assert clip.shape[0] >= 10 and clip.shape[1:] == (SIZE[1], SIZE[0], 3)
    assert clip.std() > 5 and not np.array_equal(clip[0], clip[-1])  # non-blank, moving


def test_render_options_are_checked():
    with pytest.raises(ValueError, match="render_mode"):
        MjxVectorEnv("cartpole_balance", 2, render_mode="human", impl=IMPL)
    with pytest.raises(ValueError, match=r"render_worlds must lie in \[0, 2\)"):
        MjxVectorEnv("cartpole_balance", 2, render_mode="rgb_array", render_worlds=[5], impl=IMPL)
    with pytest.raises(ValueError, match="render_worlds"):
        MjxVectorEnv("cartpole_balance", 2, render_mode="rgb_array", render_worlds=[], impl=IMPL)
    with pytest.raises(ValueError, match="width must be >= 1"):
        MjxVectorEnv("cartpole_balance", 2, render_mode="rgb_array", render_size=(0, 10), impl=IMPL)
    with pytest.raises(ValueError, match="camera"):
        MjxVectorEnv("cartpole_balance", 2, render_mode="rgb_array", camera="nope", impl=IMPL)
    plain = MjxVectorEnv("cartpole_balance", 2, impl=IMPL)
    plain.reset(seed=0)
    assert plain.render() is None
    assert plain.metadata["render_fps"] == 100  # the cartpole's 0.01 s control step


def test_every_task_is_registered_and_built_by_make_vec():
    ids = registration.register_all()
    assert len(ids) == len(tasks.list()) and "mjxrunner/CartpoleBalance-v0" in ids
    for name, env_id in zip(tasks.list(), ids, strict=True):
        assert env_id == registration.gym_id(name) and env_id in gymnasium.registry
        env = gymnasium.make_vec(env_id, num_envs=3, vectorization_mode="vector_entry_point")
        assert isinstance(env, MjxVectorEnv) and env.num_envs == 3
        assert env.env.task.name == name and env.spec.id == env_id
        spec = env.env.observation_spec
        if isinstance(spec, dict):  # observation terms: a Dict space
            assert set(env.single_observation_space.spaces) == set(spec)
        else:
            assert env.observation_space.shape == (3, env.env.observation_size)
        if env.env.task.pixels is not None:  # rendered with impl "warp" (the ids' default)
            assert env.env.impl == "warp"


def test_make_vec_passes_keyword_arguments_through():
    env = gymnasium.make_vec(
        "mjxrunner/CartpoleBalance-v0",
        num_envs=4,
        vectorization_mode="vector_entry_point",
        autoreset_mode="SameStep",
        render_mode="rgb_array",
        normalize_obs=True,
    )
    assert env.metadata["autoreset_mode"] == gymnasium.vector.AutoresetMode.SAME_STEP
    assert env.render_mode == "rgb_array" and env.env.normalize is not None
    assert env.spec.kwargs["normalize_obs"] is True
    with pytest.raises(gymnasium.error.Error):
        gymnasium.make("mjxrunner/CartpoleBalance-v0")  # batched only: no single env


def test_registering_is_idempotent_and_refuses_unknown_tasks():
    assert registration.register("cartpole_balance") == "mjxrunner/CartpoleBalance-v0"
    with pytest.raises(ValueError, match="cartpole_balance"):
        registration.register("no_such_task")
    assert mjxrunner.registration is registration
