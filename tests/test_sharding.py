"""Sharding across 2 forced host devices (conftest sets them) and 2 processes."""

import socket

import conftest
import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec
from sharded_script import N, run

from mjxrunner import CompileCounter, MultiEnvRunner, world_mask


@pytest.fixture(scope="module")
def unsharded():
    """The script on one device, for every split run below to match: on impl "c",
    which compiles no physics; it stays within 1.2e-7 of impl "jax" on one device
    (measured), under the 1e-6 that the comparisons allow."""
    return run(MultiEnvRunner("cartpole", N, seed=7, impl="c"))


def assert_same(a, b):
    assert len(a) == len(b)
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        np.testing.assert_allclose(
            np.asarray(y, float), np.asarray(x, float), atol=1e-6, err_msg=f"{i}"
        )


def test_two_devices_match_one(unsharded):
    assert jax.device_count() >= 2
    r = MultiEnvRunner("cartpole", N, seed=7, devices=2)
    assert world_mask(r.data).qpos
    assert r.data.qpos.sharding.spec == PartitionSpec("worlds")
    assert r.model.opt.gravity.sharding.spec == PartitionSpec()  # shared: replicated
    shards = {s.device for s in r.data.qpos.addressable_shards}
    assert len(shards) == 2 and all(
        s.data.shape == (N // 2, 2) for s in r.data.qpos.addressable_shards
    )
    assert_same(unsharded, run(r))
    with CompileCounter() as c:  # input and output shardings agree: no recompiles
        r.step()
        r.step()
    assert c.count == 0
    # promoted parameters are split too
    assert r.model.opt.gravity.sharding.spec == PartitionSpec("worlds")
    assert r.model.dof_damping.sharding.spec == PartitionSpec("worlds")


def test_shard_an_existing_runner_and_bad_meshes():
    r = MultiEnvRunner("cartpole", N, seed=7)
    r.set_actions(np.ones((N, 1)))
    r.step()
    before = np.array(r.data.qpos)
    r.shard(jax.devices()[:2])
    np.testing.assert_array_equal(np.asarray(r.data.qpos), before)
    r.step()
    assert r.mesh is not None and r.data.qpos.sharding.spec == PartitionSpec("worlds")
    with pytest.raises(ValueError, match="divisible"):
        MultiEnvRunner("cartpole", 3, devices=2)
    with pytest.raises(ValueError, match="devices"):
        MultiEnvRunner("cartpole", 2, devices=5)
    with pytest.raises(TypeError, match="devices"):
        MultiEnvRunner("cartpole", 2, devices=1.5)
    with pytest.raises(ValueError, match="repeat"):
        MultiEnvRunner("cartpole", 2, devices=[jax.devices()[0]] * 2)


def test_warp_across_devices_keeps_one_pool_per_device():
    single = MultiEnvRunner("cartpole", N, impl="warp", seed=7)
    sharded = MultiEnvRunner("cartpole", N, impl="warp", seed=7, devices=2)
    for r in (single, sharded):
        r.set_actions(np.linspace(-1, 1, N)[:, None])
        for _ in range(5):
            r.step()
        r.reset_envs([2])
        r.step()
    np.testing.assert_allclose(
        np.asarray(sharded.data.qpos), np.asarray(single.data.qpos), atol=1e-6
    )
    assert sharded.data._impl.contact__dist.sharding.spec == PartitionSpec()
    np.testing.assert_array_equal(sharded.contact_count(), single.contact_count())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def two_processes(impl):
    def launch(out):
        """Both processes of the two-process test, started when collection ends."""
        port, env = str(free_port()), conftest.subprocess_env()
        result = str(out / "out.npz")
        return [
            conftest.start("distributed_worker.py", str(i), port, result, impl, out=out, env=env)
            for i in range(2)
        ]

    return launch


conftest.background("test_sharding")(two_processes("jax"))
# impl "c" across processes: each steps its share of the worlds on its own threads
conftest.background("test_sharding_c", needed_by="test_sharding")(two_processes("c"))


@pytest.mark.parametrize("impl", ["jax", "c"])
def test_two_processes_match_one(impl, unsharded):
    logs, out = conftest.finished("test_sharding" if impl == "jax" else "test_sharding_c", 600)
    assert all(code == 0 for code, _ in logs), "\n".join(log[-3000:] for _, log in logs)
    with np.load(out / "out.npz") as f:
        results = [f[f"r{i}"] for i in range(len(f.files))]
    assert_same(unsharded, results)


def test_impl_c_refuses_several_devices_of_one_process():
    with pytest.raises(ValueError, match="threads"):
        MultiEnvRunner("cartpole", N, seed=7, impl="c", devices=2)
    r = MultiEnvRunner("cartpole", N, seed=7, impl="c")
    with pytest.raises(ValueError, match="threads"):
        r.shard(2)
    assert r.mesh is None
