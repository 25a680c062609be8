"""The world axis: which leaves of a pytree carry a leading ``num_envs`` axis.

A shape alone never says whether a leaf is per-world: with 3 worlds ``opt.gravity``
has shape ``(3,)``, and with ``num_envs == nbody`` one world's ``xfrc_applied`` is
``(nbody, 6)``. So every leaf gets a *core ndim*, its ndim in a single world, and a
leaf is world-indexed exactly when its ndim exceeds its core ndim:

* leaves of ``mjx.Model`` / ``mjx.Data`` take the ndim of the unbatched template at
  the same tree path (MJX fixes the rank of every field, whatever the model);
* fields of our own dataclasses declare it once as field metadata (``CORE_NDIM``);
* anything else (plain dicts, bare arrays) declares nothing and is shared.

Resets, ``vmap`` axes and sharding are all derived from :func:`world_mask`.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from mujoco import mjx

CORE_NDIM = "core_ndim"
"""Dataclass field-metadata key: the field's ndim in a single world."""

SHARED = -1
"""Core ndim of a leaf that declares none: it is never world-indexed."""

BATCHED = "batched"
"""The core ndim of a field whose every leaf has a leading world axis, whatever its
rank: observations made of terms of different ranks, a task's per-world state."""


def world_field(core_ndim: int | str, **kwargs: Any) -> Any:
    """A dataclass field whose array leaves have ``core_ndim`` dims in one world
    (:data:`BATCHED`: every leaf has one axis more, the leading world axis)."""
    if core_ndim != BATCHED and (
        not isinstance(core_ndim, int) or isinstance(core_ndim, bool) or core_ndim < 0
    ):
        raise TypeError(f"core_ndim must be a non-negative int or BATCHED, got {core_ndim!r}")
    return dataclasses.field(metadata={CORE_NDIM: core_ndim}, **kwargs)


def static_field(**kwargs: Any) -> Any:
    """A dataclass field kept out of the pytree's leaves (hashable metadata)."""
    return dataclasses.field(metadata={"static": True}, **kwargs)


def pytree_dataclass(cls: type) -> type:
    """Freezes ``cls`` as a dataclass and registers it as a pytree.

    Fields made with :func:`static_field` become treedef metadata; all others are
    children. Use ``.replace(**changes)`` to update.
    """
    cls = dataclasses.dataclass(frozen=True)(cls)
    fields = dataclasses.fields(cls)
    data = [f.name for f in fields if not f.metadata.get("static")]
    meta = [f.name for f in fields if f.metadata.get("static")]
    jax.tree_util.register_dataclass(cls, data_fields=data, meta_fields=meta)
    cls.replace = lambda self, **changes: dataclasses.replace(self, **changes)
    return cls


@dataclasses.dataclass(frozen=True, eq=False)
class _Treedef:
    """A treedef that hashes and compares by identity (interned by :func:`_interned`).

    Comparing the treedef of an ``mjx.Model`` compares ~100 NumPy static fields: about
    half a millisecond per jit call, as much as a step of hundreds of cartpoles.
    """

    value: Any


@functools.lru_cache(maxsize=256)
def _interned(treedef: Any) -> _Treedef:
    return _Treedef(treedef)


class FlatModel:
    """An ``mjx.Model`` kept as its leaves plus an interned treedef.

    The convention for every model the engine holds: as a jit argument it flattens
    to its leaves without running MJX's flattener, and models of the same structure
    share one treedef object, hence one compiled function. The tree is rebuilt on
    first use (inside ``jit``: at trace time); attributes read through to it, so
    ``flat.opt.gravity`` works as on the ``mjx.Model``.
    """

    __slots__ = ("_tree", "leaves", "treedef")

    def __init__(self, treedef: _Treedef, leaves: list, tree: mjx.Model | None = None):
        self.treedef, self.leaves, self._tree = treedef, list(leaves), tree

    @classmethod
    def of(cls, model: mjx.Model | FlatModel) -> FlatModel:
        if isinstance(model, FlatModel):
            return model
        if not isinstance(model, mjx.Model):
            raise TypeError(f"expected an mjx.Model, got {type(model).__name__}")
        leaves, treedef = jax.tree.flatten(model)
        return cls(_interned(treedef), leaves, model)

    @property
    def tree(self) -> mjx.Model:
        """The ``mjx.Model``."""
        if self._tree is None:
            self._tree = jax.tree.unflatten(self.treedef.value, self.leaves)
        return self._tree

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.tree, name)

    def replace(self, **changes: Any) -> FlatModel:
        return FlatModel.of(self.tree.replace(**changes))

    def tree_replace(self, changes: dict[str, Any]) -> FlatModel:
        return FlatModel.of(self.tree.tree_replace(changes))

    def __repr__(self) -> str:
        return f"FlatModel({len(self.leaves)} leaves)"


jax.tree_util.register_pytree_node(
    FlatModel, lambda f: (f.leaves, f.treedef), lambda td, leaves: FlatModel(td, leaves)
)


def tree_of(model: Any) -> Any:
    """The ``mjx.Model`` of a :class:`FlatModel`; anything else as it is."""
    return model.tree if isinstance(model, FlatModel) else model


@functools.cache
def _template_ndims(kind: type, impl: str) -> dict[str, int]:
    """Core ndim of every leaf path of an mjx ``Model`` or ``Data``.

    MJX gives each field a fixed rank, so the template of an empty model tells the
    rank for every model of the same impl.
    """
    from mjxrunner.engine import native

    empty = mujoco.MjModel.from_xml_string("<mujoco/>")
    cpu = jax.local_devices(backend="cpu")[0]
    if impl == mjx.Impl.CPP.value:
        template = (
            native.put_model(empty, cpu, 1)
            if kind is mjx.Model
            else native.put_data(empty, mujoco.MjData(empty), cpu)
        )
    else:
        template = (
            mjx.put_model(empty, impl=impl)
            if kind is mjx.Model
            else mjx.make_data(empty, impl=impl)
        )
    leaves = jax.tree_util.tree_leaves_with_path(template)
    return {jax.tree_util.keystr(path): np.ndim(leaf) for path, leaf in leaves}


def _mjx_core_ndims(node: mjx.Model | mjx.Data) -> Any:
    kind = mjx.Model if isinstance(node, mjx.Model) else mjx.Data
    table = _template_ndims(kind, node.impl.value)

    def lookup(path, _):
        key = jax.tree_util.keystr(path)
        if key not in table:
            raise ValueError(f"mjx.{kind.__name__} leaf {key} is not in the template")
        return table[key]

    return jax.tree_util.tree_map_with_path(lookup, node)


def _declares_core(node: Any) -> bool:
    return (
        dataclasses.is_dataclass(node)
        and not isinstance(node, type)
        and any(CORE_NDIM in f.metadata for f in dataclasses.fields(node))
    )


def _is_described(node: Any) -> bool:
    return isinstance(node, (mjx.Model, mjx.Data, FlatModel)) or _declares_core(node)


def core_ndims(tree: Any) -> Any:
    """The same tree with each leaf replaced by its core ndim (``SHARED`` if none)."""
    if isinstance(tree, FlatModel):
        return FlatModel(tree.treedef, jax.tree.leaves(_mjx_core_ndims(tree.tree)))
    if isinstance(tree, (mjx.Model, mjx.Data)):
        return _mjx_core_ndims(tree)
    if _declares_core(tree):
        changes = {}
        for f in dataclasses.fields(tree):
            if f.metadata.get("static"):
                continue
            value = getattr(tree, f.name)
            if CORE_NDIM in f.metadata:
                n = f.metadata[CORE_NDIM]
                if n == BATCHED:
                    changes[f.name] = jax.tree.map(lambda x: np.ndim(x) - 1, value)
                else:
                    changes[f.name] = jax.tree.map(lambda _, n=n: n, value)
            else:
                changes[f.name] = core_ndims(value)
        return dataclasses.replace(tree, **changes)
    return jax.tree.map(
        lambda x: core_ndims(x) if _is_described(x) else SHARED,
        tree,
        is_leaf=_is_described,
    )


def world_mask(tree: Any) -> Any:
    """The same tree with one bool per leaf: True where the leaf is world-indexed."""
    return jax.tree.map(
        lambda leaf, core: core != SHARED and np.ndim(leaf) > core,
        tree,
        core_ndims(tree),
    )


def world_axes(tree: Any) -> Any:
    """``vmap`` axes for ``tree``: 0 for world-indexed leaves, None for shared."""
    return jax.tree.map(lambda w: 0 if w else None, world_mask(tree))


def num_worlds(tree: Any) -> int | None:
    """The leading size shared by all world-indexed leaves (None if there are none)."""
    sizes = {
        np.shape(leaf)[0]
        for leaf, w in zip(jax.tree.leaves(tree), jax.tree.leaves(world_mask(tree)), strict=True)
        if w
    }
    if len(sizes) > 1:
        raise ValueError(f"world-indexed leaves disagree on num_envs: {sorted(sizes)}")
    return sizes.pop() if sizes else None


def take_worlds(tree: Any, index: jax.Array) -> Any:
    """Worlds ``index`` of ``tree``: world-indexed leaves gathered to ``(k, ...)``,
    shared leaves as they are. Indices past the end read the last world."""
    last = max((num_worlds(tree) or 1) - 1, 0)
    index = jnp.minimum(index, last)
    return jax.tree.map(lambda leaf, w: leaf[index] if w else leaf, tree, world_mask(tree))


def put_worlds(tree: Any, index: jax.Array, values: Any) -> Any:
    """``tree`` with worlds ``index`` set from ``values`` (shaped like
    :func:`take_worlds` of ``tree``); indices past the end are dropped, and shared
    leaves are kept from ``tree``."""

    def put(leaf, value, is_world):
        if not is_world:
            return leaf
        return leaf.at[index].set(value.astype(leaf.dtype), mode="drop")

    return jax.tree.map(put, tree, values, world_mask(tree))


def select_worlds(
    done: jax.Array, fresh: Any, current: Any, shared: jax.Array | bool = False
) -> Any:
    """Takes ``fresh`` for the worlds where ``done`` is True, ``current`` elsewhere.

    World-indexed leaves are selected with a scalar ``done`` inside ``vmap``, so a
    ``(num_envs,)`` mask is never broadcast against trailing axes. Shared leaves are
    taken whole from ``fresh`` only when ``shared`` is True: a shared leaf cannot be
    restored for some worlds and not others.

    A ``fresh`` leaf that is shared where ``current`` is world-indexed (a parameter
    promoted after the snapshot) is broadcast to every world first.

    Args:
      done: ``(num_envs,)`` bool, the worlds to restore.
      fresh: the values to restore from, same tree structure as ``current``.
      current: the tree to update; its world mask decides what is per-world.
      shared: scalar bool, whether shared leaves are restored too.

    Returns:
      A tree shaped like ``current``.
    """
    select_one = jax.vmap(lambda d, f, c: jnp.where(d, f, c))

    def pick(is_world, f, c):
        if is_world:
            f = jnp.broadcast_to(f, c.shape) if np.ndim(f) < np.ndim(c) else f
            return select_one(done, f.astype(c.dtype), c)
        if np.shape(f) != np.shape(c):
            # The snapshot has another shape signature (promoted or demoted since):
            # only a full restore can take it, and it takes it whole.
            return c
        return jnp.where(shared, f, c).astype(c.dtype)

    return jax.tree.map(pick, world_mask(current), fresh, current)
