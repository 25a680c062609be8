"""Packing a pytree into a few flat buffers, for the compiled calls of the shells.

On a CPU a compiled call's host time grows with the number of arrays it takes and
returns (measured ~0.2 us per argument and ~3-6 us per result, more for donated
ones): a batch's state has ~100 leaves and a model ~120, whose separate buffers
cost more host time per step than the physics of hundreds of small worlds. A
shell keeps such trees as the few buffers of a :class:`Layout` (one per dtype and
placement) and its compiled calls unpack them, work, and pack the result again;
the slices and concatenations compile into the call's own loops.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec

from mjxrunner.engine import deprecated, programs

_FLAT, _ROWS, _OWN = "flat", "rows", "own"


def _kind(leaf: jax.Array) -> tuple[str, Any]:
    """How a leaf is packed, and the sharding of its buffer: ``flat`` (raveled into a
    1-D buffer) where it lies whole on each device, ``rows`` (``(rows, -1)`` into a
    2-D buffer split the same way) where it is split along its leading axis only,
    else ``own`` (a buffer of its own: PRNG keys, other splits)."""
    sharding = leaf.sharding
    if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.extended):
        return _OWN, sharding
    if sharding.is_fully_replicated:
        return _FLAT, sharding
    spec = getattr(sharding, "spec", None)
    if (
        isinstance(sharding, NamedSharding)
        and leaf.ndim >= 1
        and spec
        and spec[0] is not None
        and all(p is None for p in spec[1:])
    ):
        return _ROWS, NamedSharding(sharding.mesh, PartitionSpec(spec[0]))
    return _OWN, sharding


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where each leaf of a pytree lies in a few buffers (hashable: compiled
    functions are cached by it).

    Leaves of one dtype and placement share a buffer, each in a range along the
    buffer's last axis: raveled into a ``(size,)`` buffer where they lie whole on
    each device (one device, or replicated), or as ``(rows, -1)`` into a
    ``(rows, size)`` buffer where they are split along their leading axis over a
    mesh, so the buffer keeps their split. Any other leaf is a buffer of its own.

    Attributes:
      treedef: the pytree's structure.
      buffers: ``(kind, dtype, sharding, shape)`` per buffer.
      leaves: ``(buffer, start, stop, shape, sharding)`` per leaf.
    """

    treedef: Any
    buffers: tuple[tuple[str, Any, Any, tuple[int, ...]], ...]
    leaves: tuple[tuple[int, int, int, tuple[int, ...], Any], ...]

    @classmethod
    def of(cls, tree: Any, first: tuple[int, ...] = (), apart: tuple[int, ...] = ()) -> Layout:
        """The layout of ``tree`` (a pytree of ``jax.Array`` s). Leaves ``first`` (flat
        indices) come first in their buffers, in that order, then the rest in tree
        order: adjacent leaves are one range (impl "c"'s host call reads the model
        fields it takes there, in place). Leaves ``apart`` share buffers only among
        themselves: impl "c"'s step writes its results into such buffers in place,
        whole, with nothing to write after it. A flat leaf with no values joins any
        flat buffer of its dtype and placement: a buffer of nothing would still cost
        every compiled call a parameter and a copy."""
        leaves, treedef = jax.tree.flatten(tree)
        apart = frozenset(apart)
        groups: dict[Any, int] = {}  # (kind, dtype, sharding, rows, apart) -> buffer
        buffers: list[list[Any]] = []  # [kind, dtype, sharding, shape], sizes added up
        where: list[Any] = [None] * len(leaves)
        chosen = set(first)
        empty = []  # flat leaves with no values: placed last, in a buffer of their kind
        for i in (*first, *(i for i in range(len(leaves)) if i not in chosen)):
            x = leaves[i]
            kind, sharding = _kind(x)
            if kind == _FLAT and x.size == 0:
                empty.append(i)
                continue
            rows = x.shape[0] if kind == _ROWS else None
            key = (_OWN, i) if kind == _OWN else (kind, x.dtype, sharding, rows, i in apart)
            if key not in groups:
                groups[key] = len(buffers)
                shape = {_FLAT: (0,), _ROWS: (rows, 0), _OWN: tuple(x.shape)}[kind]
                buffers.append([kind, x.dtype, sharding, shape])
            b = groups[key]
            at = buffers[b][3][-1] if kind != _OWN else 0
            size = math.prod(x.shape[1:] if kind == _ROWS else x.shape)
            where[i] = (b, at, at + size, tuple(x.shape), x.sharding)
            if kind != _OWN:
                buffers[b][3] = (*buffers[b][3][:-1], at + size)
        for i in empty:
            x = leaves[i]
            b = next(
                (
                    b
                    for b, (kind, dtype, sharding, _) in enumerate(buffers)
                    if kind == _FLAT and dtype == x.dtype and sharding == x.sharding
                ),
                None,
            )
            if b is None:
                b = len(buffers)
                buffers.append([_FLAT, x.dtype, x.sharding, (0,)])
            where[i] = (b, 0, 0, tuple(x.shape), x.sharding)
        return cls(treedef, tuple(tuple(b) for b in buffers), tuple(where))

    def pack(
        self, leaves: list[jax.Array], into: dict | None = None, placed: dict | None = None
    ) -> tuple[jax.Array, ...]:
        """The buffers of ``leaves`` (traceable).

        ``into``: buffer index -> a flat buffer of this layout that already holds some
        leaves, as ``placed`` (leaf index -> value) says: those buffers are updated
        in place with the other leaves, where a concatenation would copy them all
        (impl "c"'s host call writes into a step's packed state:
        :class:`mjxrunner.engine.native.Placement`). A leaf counts as placed only if
        it is that very value."""
        into, placed = into or {}, placed or {}
        if len(leaves) != len(self.leaves) or any(
            x.shape != w[3] or x.dtype != self.buffers[w[0]][1]
            for x, w in zip(leaves, self.leaves, strict=True)
        ):
            raise ValueError("these leaves do not fit the layout (shapes or dtypes changed)")
        parts: list[list[tuple[int, jax.Array]]] = [[] for _ in self.buffers]
        for x, (b, start, *_) in zip(leaves, self.leaves, strict=True):
            kind = self.buffers[b][0]
            if kind == _FLAT:
                x = x.reshape(-1)
            elif kind == _ROWS:
                x = x.reshape(x.shape[0], math.prod(x.shape[1:]))
            parts[b].append((start, x))
        out = []
        for b, ((kind, _, sharding, _), p) in enumerate(zip(self.buffers, parts, strict=True)):
            if b in into:
                buf = into[b]
                for i, (x, (at, lo, *_)) in enumerate(zip(leaves, self.leaves, strict=True)):
                    if at == b and placed.get(i) is not x:
                        buf = jax.lax.dynamic_update_slice(buf, x.reshape(-1), (lo,))
                out.append(buf)
                continue
            p = [x for _, x in sorted(p, key=lambda item: item[0])]  # buffer order
            buf = p[0] if kind == _OWN else jnp.concatenate(p, axis=-1)
            if isinstance(sharding, NamedSharding):
                buf = jax.lax.with_sharding_constraint(buf, sharding)
            out.append(buf)
        return tuple(out)

    def unpack(self, buffers: tuple[jax.Array, ...], start: int = 0, end: int | None = None):
        """Leaves ``start:end`` of the buffers (traceable), each placed as it was."""
        out = []
        for b, lo, hi, shape, sharding in self.leaves[start:end]:
            kind, buf = self.buffers[b][0], buffers[b]
            if kind == _FLAT:
                x = jax.lax.slice(buf, (lo,), (hi,)).reshape(shape)
            elif kind == _ROWS:
                x = jax.lax.slice(buf, (0, lo), (buf.shape[0], hi)).reshape(shape)
            else:
                x = buf
            if isinstance(sharding, NamedSharding):
                x = jax.lax.with_sharding_constraint(x, sharding)
            out.append(x)
        return out

    def unflatten(self, buffers: tuple[jax.Array, ...]) -> Any:
        """The pytree of the buffers (traceable)."""
        return self.treedef.unflatten(self.unpack(buffers))

    def write(self, buffers: tuple[jax.Array, ...], i: int, value: jax.Array) -> tuple:
        """The buffers with leaf ``i`` replaced by ``value`` (traceable): an update of
        its range alone, in place where the buffers are donated."""
        b, lo, _, shape, _ = self.leaves[i]
        kind, buf = self.buffers[b][0], buffers[b]
        value = jnp.asarray(value, self.buffers[b][1])
        if kind == _FLAT:
            buf = jax.lax.dynamic_update_slice(buf, value.reshape(-1), (lo,))
        elif kind == _ROWS:
            buf = jax.lax.dynamic_update_slice(buf, value.reshape(shape[0], -1), (0, lo))
        else:
            buf = value
        return (*buffers[:b], buf, *buffers[b + 1 :])

    def flat_range(self, i: int) -> tuple[int, int, int] | None:
        """``(buffer, offset, size)`` of leaf ``i`` where it lies in a flat buffer
        (raveled, in elements), else None."""
        b, lo, hi, _, _ = self.leaves[i]
        return (b, lo, hi - lo) if self.buffers[b][0] == _FLAT else None

    def index(self, tree: Any, *path: str) -> int:
        """The index of the leaf at attribute ``path`` of ``tree`` (of this layout)."""
        for i, (p, _) in enumerate(jax.tree_util.tree_flatten_with_path(tree)[0]):
            if tuple(getattr(k, "name", None) for k in p) == path:
                return i
        raise KeyError(f"no leaf at {'.'.join(path)}")


# Compiled once per layout (and what else the key holds) and process, shared by shells.
_COMPILED: dict[tuple, Any] = {}


def compiled(key: tuple, make: Callable[[], Any]) -> Any:
    """The jitted function ``make()`` made once per ``key`` (a name first, layouts
    in it) and process; its programs kept on disk by ``key`` (:mod:`.programs`)."""
    if key not in _COMPILED:
        _COMPILED[key] = programs.kept(make(), key[0])
    return _COMPILED[key]


def packer(layout: Layout) -> Callable:
    """``jit`` of :meth:`Layout.pack` (new buffers, never the leaves themselves)."""
    return compiled(("pack", layout), lambda: jax.jit(layout.pack))


def unpacker(layout: Layout, start: int = 0, end: int | None = None) -> Callable:
    """``jit`` of :meth:`Layout.unpack` of leaves ``start:end``."""
    return compiled(
        ("unpack", layout, start, end), lambda: jax.jit(lambda b: layout.unpack(b, start, end))
    )


class Held:
    """One pytree held by a stateful shell: as itself, as the buffers of a
    :class:`Layout`, or as both.

    Between compiled calls a shell keeps its state packed (each call takes and
    returns a few buffers) and rebuilds the pytree only when something reads it, at
    most once per value; :meth:`pack` makes the buffers from the pytree when a call
    needs them. Unpacked leaves are new arrays, and packing makes new buffers, so
    no array a caller holds is ever a buffer that a call donates.

    Attributes:
      layout: the layout of :attr:`buffers` (None while the value is not packed).
      buffers: the packed value (None while it is not packed).
    """

    def __init__(self, tree: Any = None):
        self.set(tree)

    def set(self, tree: Any) -> None:
        """A new value, as a pytree (packed by the next :meth:`pack`)."""
        self._tree, self._leaves, self.layout, self.buffers = tree, None, None, None

    def set_packed(self, layout: Layout, buffers: tuple, tree: Any = None) -> None:
        """A new value, as buffers of ``layout`` (and as ``tree`` too, if given: the
        same value), unpacked when it is read."""
        self._tree, self._leaves, self.layout, self.buffers = tree, None, layout, buffers

    def pack(self, layout: Layout, tree: Any = None) -> tuple:
        """The buffers of the value by ``layout``, made now if the value is not
        packed; ``tree``: the same value with its leaves placed for packing (it
        becomes the pytree held)."""
        if self.buffers is None or self.layout is not layout:
            self._tree = self._tree if tree is None else tree
            self._leaves = jax.tree.leaves(self._tree)
            self.layout, self.buffers = layout, packer(layout)(self._leaves)
        return self.buffers

    @property
    def tree(self) -> Any:
        """The value as a pytree (unpacked now if it is held packed only)."""
        if self._tree is None and self.buffers is not None:
            self._leaves = unpacker(self.layout)(self.buffers)
            self._tree = self.layout.treedef.unflatten(self._leaves)
        return self._tree

    @property
    def peek(self) -> Any:
        """The pytree if it is at hand, else None (unpacking nothing)."""
        return self._tree

    def holds(self, tree: Any) -> bool:
        """Whether ``tree`` is the pytree held (the same object), not unpacking."""
        return self._tree is not None and self._tree is tree

    def arrays(self) -> Any:
        """The value in whichever form is at hand, converting nothing (to wait on)."""
        return self._tree if self._tree is not None else self.buffers

    def leaves(self, start: int, end: int) -> list:
        """Leaves ``start:end`` of the value, unpacking only them if the pytree is not
        at hand."""
        if self._leaves is None and self._tree is not None:
            self._leaves = jax.tree.leaves(self._tree)
        if self._leaves is not None:
            return self._leaves[start:end]
        return unpacker(self.layout, start, end)(self.buffers)


def _unpacked(layout: Layout, buffers: tuple[jax.Array, ...]) -> Any:
    return layout.treedef.unflatten(unpacker(layout)(buffers))


__getattr__ = deprecated.module_getattr(
    __name__, {"unpacked": ("use Held.set_packed(layout, buffers) and Held.tree", _unpacked)}
)
