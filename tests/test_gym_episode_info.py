"""The Gymnasium door's ``infos`` carry finished episodes as Gymnasium's own
``RecordEpisodeStatistics`` wrapper adds them: the same keys, masks, returns and
lengths, step by step, in both autoreset modes; and ``episode_statistics()`` sums
the same episodes."""

import gymnasium
import numpy as np
import pytest

from mjxrunner.doors.gym import MjxVectorEnv

N = 4


def pushes(t: int) -> np.ndarray:
    """Pushes that drop poles within tens of steps, world by world apart."""
    return np.sign(np.sin(0.05 * t + np.arange(N)))[:, None].astype(np.float32)


@pytest.mark.parametrize("mode", ["next_step", "same_step"])
def test_infos_match_record_episode_statistics(mode):
    own = MjxVectorEnv("cartpole_balance", N, autoreset_mode=mode, impl="c", seed=1)
    plain = MjxVectorEnv(
        "cartpole_balance", N, autoreset_mode=mode, impl="c", seed=1, episode_info=False
    )
    wrapped = gymnasium.wrappers.vector.RecordEpisodeStatistics(plain)
    own.reset(seed=1)
    wrapped.reset(seed=1)
    ended = []
    for t in range(150):
        *_, info = own.step(pushes(t))
        *_, expected = wrapped.step(pushes(t))
        assert ("episode" in info) == ("episode" in expected), t
        if "episode" not in info:
            continue
        np.testing.assert_array_equal(info["_episode"], expected["_episode"])
        got, want = info["episode"], expected["episode"]
        np.testing.assert_allclose(got["r"], want["r"], rtol=1e-5)
        np.testing.assert_array_equal(got["l"], want["l"])
        assert got["l"].dtype.kind == "i" and got["r"].dtype.kind == "f"
        assert (got["t"][info["_episode"]] > 0).all() and (got["t"][~info["_episode"]] == 0).all()
        ended += list(got["r"][info["_episode"]])
    assert len(ended) >= N  # every world ended at least one episode
    stats = own.episode_statistics()
    assert stats["episodes"] == len(ended)
    np.testing.assert_allclose(stats["mean_return"], np.mean(ended), rtol=1e-5)


def test_no_episode_info_when_asked_not_to():
    env = MjxVectorEnv("cartpole_balance", N, impl="c", episode_info=False)
    env.reset(seed=0)
    ends = 0
    for t in range(150):
        *_, terminated, truncated, info = env.step(pushes(t))
        assert "episode" not in info and "_episode" not in info
        ends += int((terminated | truncated).sum())
    assert ends >= N  # episodes ended, and no info told of them
    with pytest.raises(TypeError, match="episode_info"):
        MjxVectorEnv("cartpole_balance", N, impl="c", episode_info="yes")
