"""Sharding worlds across devices and processes.

World-indexed leaves are split along a 1-D mesh axis ``"worlds"``; shared leaves are
replicated; both derived from :func:`mjxrunner.world_mask`. Steps run under
``jax.shard_map``, so each device steps its own worlds with no communication: plain
``jit`` over sharded MJX inputs lets XLA insert collectives on every step, which was
measured 17x slower than one device on this project's CPUs.

MJX-Warp's pooled contact buffers are shared leaves, hence replicated: under
``shard_map`` each device keeps and writes its own copy, i.e. one contact pool per
device (``naconmax`` is then a per-device size).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from mjxrunner.engine.worlds import world_mask

AXIS = "worlds"


def make_mesh(devices: Any) -> Mesh:
    """A 1-D ``"worlds"`` mesh from an int (the first n devices), a device list or
    ``"all"`` (every device of every process)."""
    if isinstance(devices, Mesh):
        if devices.axis_names != (AXIS,):
            raise ValueError(f"mesh must have the single axis {AXIS!r}, got {devices.axis_names}")
        return devices
    if isinstance(devices, str):
        if devices != "all":
            raise ValueError(
                f"devices must be 'all', an int, a list of devices or a Mesh, got {devices!r}"
            )
        devices = jax.devices()
    elif isinstance(devices, (int, np.integer)) and not isinstance(devices, bool):
        if not 1 <= devices <= jax.device_count():
            raise ValueError(f"devices={devices}: there are {jax.device_count()} devices")
        devices = jax.devices()[: int(devices)]
    elif (
        isinstance(devices, Sequence)
        and devices
        and all(isinstance(d, jax.Device) for d in devices)
    ):
        if len(set(devices)) != len(devices):
            raise ValueError("devices must not repeat")
    else:
        raise TypeError(
            f"devices must be 'all', an int, a list of jax.Device or a Mesh, got {devices!r}"
        )
    return Mesh(np.array(devices), (AXIS,))


def check_divisible(num_envs: int, mesh: Mesh) -> None:
    n = mesh.devices.size
    if num_envs % n:
        raise ValueError(
            f"num_envs={num_envs} is not divisible by the {n} devices of the mesh; "
            f"use a multiple of {n}"
        )


def specs(tree: Any) -> Any:
    """``PartitionSpec`` per leaf: split world-indexed leaves, replicate shared ones."""
    return jax.tree.map(lambda w: PartitionSpec(AXIS) if w else PartitionSpec(), world_mask(tree))


def _placement_specs(tree: Any) -> Any:
    """:func:`specs`, except that empty leaves (``na == 0``, no contacts, ...) are
    replicated: that is the sharding JAX gives them on output, and a mismatch
    between a step's input and output shardings would compile every step anew."""
    return jax.tree.map(
        lambda spec, leaf: spec if np.size(leaf) else PartitionSpec(), specs(tree), tree
    )


def place(tree: Any, mesh: Mesh) -> Any:
    """Puts ``tree`` on ``mesh``; each process supplies only its own shards.

    Every process must hold the same full host values (same seed, same calls), as a
    JAX multi-controller program does.
    """

    def put(leaf, spec):
        sharding = NamedSharding(mesh, spec)
        if isinstance(leaf, jax.Array) and leaf.sharding == sharding:
            return leaf
        host = np.asarray(host_copy(leaf))
        return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])

    return jax.tree.map(put, tree, _placement_specs(tree))


_gathers = itertools.count()


def host_copy(x: Any) -> np.ndarray:
    """A NumPy copy of a whole array, gathering other processes' shards if needed.

    Processes first meet at a barrier of JAX's coordination service (10 minute
    timeout): the CPU collectives' own rendezvous gives up after 30 s, less than the
    difference in compile time two busy processes can reach before a gather.
    """
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        from jax._src import distributed  # the coordination client has no public handle

        client = distributed.global_state.client
        if client is not None:
            client.wait_at_barrier(f"mjxrunner_gather_{next(_gathers)}", 600_000)
        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.array(x)


def on_worlds(
    fn: Callable[..., Any],
    mesh: Mesh | None,
    *args: Any,
    per_world: Sequence[int] = (),
    out_specs: Callable[[Any], Any] | None = None,
    replicated: Sequence[int] = (),
) -> Any:
    """Calls ``fn(*args)``; with a mesh, under ``shard_map`` over the worlds axis.

    Specs come from the world-axis rule; the positional args listed in
    ``per_world`` (e.g. a ``(num_envs,)`` done mask, which declares nothing) are
    split along the worlds axis whole, those in ``replicated`` (e.g. a pool of
    starts, whose leading axis is not the world axis) are replicated whole;
    ``out_specs`` maps the output's shapes to
    specs where the rule cannot know (e.g. a trajectory). The output's shapes are
    evaluated on one device's share of the arguments, as ``fn`` will see them.
    ``check_vma=False``: MJX's internal ``cond`` calls are not typed for varying manual
    axes.
    """
    if mesh is None:
        return fn(*args)

    def spec(i, a):
        if i in per_world:
            return jax.tree.map(lambda _: PartitionSpec(AXIS), a)
        if i in replicated:
            return jax.tree.map(lambda _: PartitionSpec(), a)
        return specs(a)

    in_specs = tuple(spec(i, a) for i, a in enumerate(args))
    # The output's shapes as one device sees them: ``fn`` runs on a shard, and may
    # depend on its size (a render context is sized for a device's worlds).
    local = [_shard_shapes(a, s, mesh.devices.size) for a, s in zip(args, in_specs, strict=True)]
    shapes = jax.eval_shape(fn, *local)
    out = specs(shapes) if out_specs is None else out_specs(shapes)
    mapped = jax.shard_map(fn, mesh=mesh, in_specs=in_specs, out_specs=out, check_vma=False)
    return mapped(*args)


def _shard_shapes(tree: Any, spec_tree: Any, num_devices: int) -> Any:
    """``tree``'s array leaves as ``ShapeDtypeStruct`` s of one device's shard: the
    leading size divided by ``num_devices`` where the spec splits the worlds axis."""

    def shard(leaf, spec):
        if not hasattr(leaf, "shape") or not hasattr(leaf, "dtype"):
            return leaf
        shape = tuple(leaf.shape)
        if len(spec) and spec[0] == AXIS:
            shape = (shape[0] // num_devices, *shape[1:])
        return jax.ShapeDtypeStruct(shape, leaf.dtype, weak_type=getattr(leaf, "weak_type", False))

    return jax.tree.map(shard, tree, spec_tree)
