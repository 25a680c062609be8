"""Faults against every kind of checkpoint: truncations and bit flips.

Writes one small checkpoint of each kind (runner, env, group runner, group env),
then hands every truncated and every bit-flipped copy of each to every loader
(``MultiEnvRunner.load``, ``GroupRunner.load``, ``mjxrunner.env.load``) and counts
the outcomes: refused with ``CheckpointError``, loaded, or another exception. The
faults sit where a format can go wrong: every byte of the file's prefix, the start,
middle and end of every zip member (the members of the groups' inner checkpoints
too), each member's compression-method fields and central directory entry, the
end-of-directory record, the last byte, and a spread of offsets over the file.
tests/test_checkpoint_faults.py
runs the same matrix and requires every fault refused; the killed save is there.

    .venv/bin/python benchmarks/checkpoint_faults.py [--spread 300]
"""

from __future__ import annotations

import argparse
import collections
import io
import struct
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import jax
import numpy as np

from mjxrunner import MultiEnvRunner
from mjxrunner.checkpoint import CheckpointError
from mjxrunner.doors.group_runner import GroupRunner
from mjxrunner.engine import archive, models
from mjxrunner.rl import env as mjxenv

KINDS = ("runner", "env", "group runner", "group env")
# A post beside the rail: one more geom, another structure (a group of its own).
POSTED = (
    models.path("cartpole")
    .read_text()
    .replace(
        '<body name="cart"',
        '<geom name="post" type="box" pos="1.2 0.4 0.6" size="0.08 0.08 0.6"/>'
        '\n    <body name="cart"',
    )
)
LOADERS: dict[str, Callable[[Path], object]] = {
    "MultiEnvRunner.load": MultiEnvRunner.load,
    "GroupRunner.load": GroupRunner.load,
    "mjxrunner.env.load": mjxenv.load,
}
_LOCAL = struct.Struct("<4sHHHHHIIIHH")  # a zip member's local header (30 bytes)
_METHOD = 8  # offset of the compression-method field in a local header
_CENTRAL, _CENTRAL_METHOD = 46, 10  # a central directory entry's fixed size, its method


def write_files(folder: Path, worlds: int = 2) -> dict[str, Path]:
    """One checkpoint of each kind in ``folder``, of ``worlds`` worlds per group."""
    files = {k: folder / f"{k.replace(' ', '_')}.ckpt" for k in KINDS}
    MultiEnvRunner("cartpole", worlds, seed=1).save(files["runner"])
    env = mjxenv.make("cartpole_balance", worlds)
    mjxenv.save(files["env"], env, mjxenv.jit_reset(env, jax.random.key(0)))
    groups = [("cartpole", worlds), (POSTED, worlds)]
    MultiEnvRunner.from_groups(groups, seed=1).save(files["group runner"])
    genv = mjxenv.make("cartpole_balance", 2 * worlds, groups=groups)
    mjxenv.save(files["group env"], genv, mjxenv.jit_reset(genv, jax.random.key(0)))
    return files


def members(raw: bytes, at: int = 0) -> list[tuple[str, int, int, int, int]]:
    """``(name, local header offset, data start, data end, central directory entry
    offset)`` of every member of the checkpoint ``raw`` (which lies at ``at`` in the
    file), offsets in the file, the members of checkpoints stored inside it (the
    groups') included."""
    payload = raw[archive._PREFIX.size :] if raw.startswith(archive.MAGIC) else raw
    base = at + len(raw) - len(payload)
    out = []
    with zipfile.ZipFile(io.BytesIO(payload)) as z:
        entry = z.start_dir
        for info in z.infolist():
            fields = _LOCAL.unpack_from(payload, info.header_offset)
            start = info.header_offset + _LOCAL.size + fields[-2] + fields[-1]
            end = start + info.compress_size
            row = (info.filename, info.header_offset, start, end, entry)
            out.append((row[0], *(base + x for x in row[1:])))
            entry += _CENTRAL + sum(struct.unpack_from("<HHH", payload, entry + 28))
            if info.filename.startswith("group/") and info.compress_type == zipfile.ZIP_STORED:
                npy = io.BytesIO(payload[start:end])
                np.lib.format.read_magic(npy)
                np.lib.format.read_array_header_1_0(npy)
                inner = start + npy.tell()  # the .npy header, then the group's file
                out += members(payload[inner:end], base + inner)
    return out


def landmarks(raw: bytes) -> list[int]:
    """Offsets that separate the parts of the file: each prefix byte, each member's
    start, data start, middle and end, the central directory, the last bytes."""
    cuts = set(range(archive._PREFIX.size + 1)) if raw.startswith(archive.MAGIC) else {0}
    for _, header, start, end, entry in members(raw):
        cuts |= {header, header + _METHOD, start, (start + end) // 2, end - 1, end}
        cuts |= {entry, entry + _CENTRAL_METHOD}
    cuts |= {len(raw) - 22, len(raw) - 1}  # the end-of-directory record, the last byte
    return sorted(c for c in cuts if 0 <= c < len(raw))


def flip_offsets(raw: bytes, spread: int) -> list[int]:
    """Every prefix byte, every member's compression-method fields (both bytes, in
    its local header and its directory entry) and local-header signature, and
    ``spread`` offsets evenly over the file."""
    offsets = set(range(archive._PREFIX.size)) if raw.startswith(archive.MAGIC) else set()
    for _, header, _, _, entry in members(raw):
        offsets |= {header, header + _METHOD, header + _METHOD + 1}
        offsets |= {entry + _CENTRAL_METHOD, entry + _CENTRAL_METHOD + 1}
    offsets |= {int(x) for x in np.linspace(0, len(raw) - 1, spread)}
    return sorted(offsets)


def faults(raw: bytes, spread: int = 300) -> list[tuple[str, bytes]]:
    """``(label, bytes)`` of every truncated and bit-flipped copy of ``raw``."""
    out = [(f"cut {c}", raw[:c]) for c in landmarks(raw)]
    for i in flip_offsets(raw, spread):
        bad = bytearray(raw)
        bad[i] ^= 1 << (i % 8)  # one bit, a different one along the file
        out.append((f"flip {i}", bytes(bad)))
    return out


def attempt(loader: Callable[[Path], object], path: Path) -> str:
    """``"refused"`` (CheckpointError), ``"loaded"`` or the other exception's name."""
    try:
        loader(path)
    except CheckpointError:
        return "refused"
    except Exception as e:  # what a fault must never give
        return type(e).__name__
    return "loaded"


def run_matrix(
    files: dict[str, Path], folder: Path, spread: int = 300
) -> dict[str, collections.Counter]:
    """Per kind: ``Counter`` of ``(fault type, outcome)`` over every fault and loader,
    and ``("bad", label, loader, outcome)`` entries for each fault not refused."""
    results = {}
    probe = folder / "fault.ckpt"
    for kind, path in files.items():
        counts: collections.Counter = collections.Counter()
        for label, data in faults(path.read_bytes(), spread):
            probe.write_bytes(data)
            for name, loader in LOADERS.items():
                outcome = attempt(loader, probe)
                counts[(label.split()[0], outcome)] += 1
                if outcome != "refused":
                    counts[("bad", label, name, outcome)] += 1
        results[kind] = counts
    return results


def table(results: dict[str, collections.Counter], files: dict[str, Path]) -> str:
    lines = [
        f"{'kind':<13} {'bytes':>8} {'fault':<6} {'tried':>6} {'refused':>8} "
        f"{'loaded':>7} {'other':>6}",
    ]
    for kind, counts in results.items():
        for fault in ("cut", "flip"):
            n = {o: c for (f, o, *_), c in counts.items() if f == fault}
            tried = sum(n.values())
            refused, loaded = n.get("refused", 0), n.get("loaded", 0)
            lines.append(
                f"{kind:<13} {files[kind].stat().st_size:>8} {fault:<6} {tried:>6} "
                f"{refused:>8} {loaded:>7} {tried - refused - loaded:>6}"
            )
    lines.append("(tried = faults x 3 loaders: MultiEnvRunner, GroupRunner, mjxrunner.env)")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spread", type=int, default=300, help="flips spread over a file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        files = write_files(Path(tmp))
        t1 = time.perf_counter()
        results = run_matrix(files, Path(tmp), args.spread)
        t2 = time.perf_counter()
        print(table(results, files))
    print(f"files written in {t1 - t0:.1f} s, faults tried in {t2 - t1:.1f} s")
    bad = [k for c in results.values() for k in c if k[0] == "bad"]
    for entry in bad[:20]:
        print("NOT REFUSED:", entry)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
