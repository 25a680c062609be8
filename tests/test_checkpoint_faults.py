"""Faults against checkpoints (issue 29): every truncation and bit flip of every kind
of file is refused with CheckpointError by every loader; a cut file of groups is
never read as its last group; a killed save leaves the old file and its temp file
goes at the next save. The fault matrix is benchmarks/checkpoint_faults.py's."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
import zipfile

import conftest
import jax
import numpy as np
import pytest
from conftest import load_benchmark

from mjxrunner import MultiEnvRunner, checkpoint
from mjxrunner.checkpoint import CheckpointError
from mjxrunner.doors.group_runner import GroupRunner
from mjxrunner.rl import env as mjxenv

faults = load_benchmark("checkpoint_faults")
N = 4  # worlds per group: the runners and envs of test_groups (persistent-cache hits)
OWN = {  # the loader of each kind; the others must refuse its file
    "runner": "MultiEnvRunner.load",
    "env": "mjxrunner.env.load",
    "group runner": "GroupRunner.load",
    "group env": "mjxrunner.env.load",
}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return faults.write_files(tmp_path_factory.mktemp("faults"), N)


def test_each_file_loads_with_its_own_loader_only(files):
    """The faults below are refused, not every file: each whole file loads."""
    for kind, path in files.items():
        for name, loader in faults.LOADERS.items():
            want = "loaded" if name == OWN[kind] else "refused"
            assert faults.attempt(loader, path) == want, (kind, name)


def test_every_truncation_and_bit_flip_of_every_kind_is_refused(files, tmp_path):
    results = faults.run_matrix(files, tmp_path)
    bad = [k for counts in results.values() for k in counts if k[0] == "bad"]
    assert bad == [], bad[:10]
    for kind, counts in results.items():
        raw = files[kind].read_bytes()
        own = len(zipfile.ZipFile(files[kind]).namelist())
        # a groups file's faults reach into its groups' files, stored inside it
        assert (len(faults.members(raw)) > own) == kind.startswith("group")
        assert counts[("cut", "refused")] == 3 * len(faults.landmarks(raw))
        assert counts[("flip", "refused")] == 3 * len(faults.flip_offsets(raw, 300))
    assert len(faults.faults(files["group env"].read_bytes())) > 1000


def test_a_cut_group_file_is_not_read_as_its_last_group(tmp_path):
    """Issue 29, defect 1, as reported: a cut group env loaded as a 4-world env."""
    genv = mjxenv.make("puck_reach", 8, groups=[("puck", 4), ("puck_steps", 4)])
    st = mjxenv.jit_reset(genv, jax.random.key(0))
    mjxenv.save(tmp_path / "g.npz", genv, st)
    b = (tmp_path / "g.npz").read_bytes()
    (tmp_path / "t.npz").write_bytes(b[:-30])
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        mjxenv.load(tmp_path / "t.npz")
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        MultiEnvRunner.load(tmp_path / "t.npz")


def as_version_2(raw: bytes, folder) -> bytes:
    """The file ``raw`` as mjxrunner wrote it at format version 2: a bare zip,
    its groups' files (stored inside it) too."""
    src = folder / "src.ckpt"
    src.write_bytes(raw)
    header, arrays = checkpoint.read(src)
    for name in [k for k in arrays if k.startswith("group/")]:
        inner = as_version_2(arrays[name].tobytes(), folder)
        arrays[name] = np.frombuffer(inner, np.uint8)
    header["version"] = 2
    header["arrays"] = {
        n: {"dtype": a.dtype.str, "shape": list(a.shape)} for n, a in arrays.items()
    }
    header["sha256"] = checkpoint._checksum(arrays, header)
    arrays["__header__"] = np.frombuffer(json.dumps(header).encode(), np.uint8)
    out = folder / "v2.npz"
    np.savez(out, **arrays)
    return out.read_bytes()


def test_a_cut_version_2_group_file_is_refused(files, tmp_path):
    """Files of version 2 still load, but a cut one is not read as its last group:
    their zip must start at the file's first byte."""
    for kind, loader in (("group runner", GroupRunner.load), ("group env", mjxenv.load)):
        old = as_version_2(files[kind].read_bytes(), tmp_path)
        assert old.startswith(b"PK\x03\x04")
        (tmp_path / "old").write_bytes(old)
        assert faults.attempt(loader, tmp_path / "old") == "loaded"
        (tmp_path / "cut").write_bytes(old[:-30])
        for name, any_loader in faults.LOADERS.items():
            assert faults.attempt(any_loader, tmp_path / "cut") == "refused", (kind, name)
        with pytest.raises(CheckpointError, match="zip does not start at the first byte"):
            checkpoint.read(tmp_path / "cut")


def test_an_unknown_compression_method_is_a_checkpoint_error(tmp_path):
    """Issue 29, defect 6: zipfile raised NotImplementedError (a version-2 file, whose
    zip is read without a hash over it first)."""
    raw = (conftest.HERE / "data" / "v2_runner.npz").read_bytes()
    entries = [m[4] for m in faults.members(raw)]  # zipfile reads the method there
    for at in entries[:3] + entries[-3:]:
        bad = bytearray(raw)
        bad[at + 10] ^= 0x40  # the compression method: 0 (stored) -> 64, unknown
        (tmp_path / "m").write_bytes(bytes(bad))
        for loader in faults.LOADERS.values():
            assert faults.attempt(loader, tmp_path / "m") == "refused"
        with pytest.raises(CheckpointError, match="compression method"):
            checkpoint.read(tmp_path / "m")


CHILD = """
import sys
import jax.numpy as jnp
from mjxrunner import MultiEnvRunner
r = MultiEnvRunner("cartpole", 4, seed=1)
r.set_user_state({"big": jnp.arange(8 << 20, dtype=jnp.float32)})  # 32 MB: slow saves
print("saving", flush=True)
while True:
    r.save(sys.argv[1])
"""


def temps(path) -> list:
    return sorted(path.parent.glob(f".{path.name}.*.tmp"))


def kill_mid_save(path) -> int:
    """A child saving to ``path`` in a loop, SIGKILLed while its temp file is being
    written; returns its pid. Tries again (3 children at most) if the kill fell
    between two saves."""
    for _ in range(3):
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(path)],
            env=conftest.subprocess_env(),
            stdout=subprocess.PIPE,
            text=True,
        )
        watchdog = threading.Timer(180, child.kill)  # bounds the wait for its line too
        watchdog.start()
        try:
            assert child.stdout.readline().strip() == "saving"
            tmp = path.with_name(f".{path.name}.{child.pid}.tmp")
            while not (tmp.exists() and tmp.stat().st_size > 0):
                assert child.poll() is None, "the child ended before a save began"
                time.sleep(0.001)
            child.send_signal(signal.SIGKILL)
        finally:
            watchdog.cancel()
            child.kill()
            child.wait(timeout=60)  # reaped: its pid runs no process now
        if tmp.exists():
            return child.pid
    raise AssertionError("three kills in a row fell between saves")


def test_a_killed_save_leaves_a_loadable_file_and_the_next_save_removes_its_temp(files, tmp_path):
    """Issue 29, defect 7: a killed save's temp file stayed forever."""
    path = tmp_path / "run.ckpt"
    path.write_bytes(files["runner"].read_bytes())  # the previous checkpoint
    pid = kill_mid_save(path)
    assert [p.name for p in temps(path)] == [f".run.ckpt.{pid}.tmp"]
    loaded = MultiEnvRunner.load(path)  # the previous one, or a whole newer one
    assert loaded.num_envs == N
    live = path.with_name(f".run.ckpt.{os.getppid()}.tmp")  # a running process's
    live.write_bytes(b"in progress")
    loaded.save(path)
    assert temps(path) == [live]  # the dead save's file went, the live one stays
    assert MultiEnvRunner.load(path).num_envs == N
