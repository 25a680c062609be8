"""Heterogeneous worlds: groups of different scenes behind one world index.

One ``vmap`` steps worlds of one structure, so worlds whose models differ in
structure (other geoms, bodies or joints) form separate **groups**, each a batch of
its own with its own model and data, and the world-axis rule applies inside each
group as before. A :class:`WorldIndex` numbers the worlds of all groups globally,
group after group, like Newton's ``*_world_start`` tables: group ``g`` holds the
worlds ``world_start[g] <= i < world_start[g + 1]``, and ``world_start[-1]`` is the
total. Unlike Newton there is no global block of entities: what all worlds of a
group share (the shared leaves of its model and data) belongs to that group, and
the last entry of a ``(num_envs + 1,)`` reset mask selects the shared leaves of
every group.

Everything here is host-side bookkeeping over static sizes: splitting global
arrays, masks and ids into per-group pieces and joining per-group results back.
The compiled step of all groups is one function (:mod:`mjxrunner.doors.group_runner`,
:mod:`mjxrunner.rl.group_env`), so a step is one dispatch, not one per group.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from mjxrunner.engine import checks, health, params


@dataclasses.dataclass(frozen=True)
class WorldIndex:
    """The global numbering of the worlds of several groups.

    Attributes:
      starts: ``(num_groups + 1,)`` first global id of each group, then the total.
    """

    starts: tuple[int, ...]

    @classmethod
    def of(cls, sizes: Sequence[int]) -> WorldIndex:
        """The index of groups of ``sizes`` worlds, numbered in that order."""
        sizes = [checks.count(n, f"num_envs of group {g}") for g, n in enumerate(sizes)]
        if not sizes:
            raise ValueError("a heterogeneous runner or env needs at least one group")
        return cls(tuple(int(x) for x in np.concatenate([[0], np.cumsum(sizes)])))

    @property
    def world_start(self) -> np.ndarray:
        """``(num_groups + 1,)`` int64 copy of :attr:`starts`."""
        return np.array(self.starts, np.int64)

    @property
    def num_groups(self) -> int:
        return len(self.starts) - 1

    @property
    def num_envs(self) -> int:
        return self.starts[-1]

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(int(n) for n in np.diff(self.starts))

    def slice(self, group: int) -> slice:
        """The global ids of ``group`` as a slice."""
        return slice(self.starts[group], self.starts[group + 1])

    def group_of(self, env_ids: Any) -> Any:
        """The group of each global id (an int for an int, else an int64 array)."""
        if isinstance(env_ids, (int, np.integer)) and not isinstance(env_ids, bool):
            g = checks.env_id(env_ids, self.num_envs)
            return int(np.searchsorted(self.starts, g, side="right") - 1)
        ids = checks.env_ids(env_ids, self.num_envs)
        return np.searchsorted(self.starts, ids, side="right") - 1

    def local(self, env_id: Any) -> tuple[int, int]:
        """``(group, id within the group)`` of one global id."""
        g = self.group_of(env_id)
        return g, int(env_id) - self.starts[g]

    def split(self, values: np.ndarray) -> list[np.ndarray]:
        """Per-group pieces of an array with a leading ``(num_envs,)`` axis."""
        return [values[self.slice(g)] for g in range(self.num_groups)]

    def split_mask(self, mask: np.ndarray) -> list[np.ndarray]:
        """Per-group masks of a ``(num_envs,)`` or ``(num_envs + 1,)`` bool mask; the
        last entry of the longer one goes to every group (its shared leaves)."""
        pieces = self.split(mask[: self.num_envs])
        if mask.shape[0] == self.num_envs:
            return pieces
        return [np.append(p, mask[-1]) for p in pieces]

    def split_ids(self, env_ids: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """For each group, ``(positions in env_ids, ids within the group)`` of the
        global ids that fall in it (in the order given)."""
        groups = np.searchsorted(self.starts, env_ids, side="right") - 1
        out = []
        for g in range(self.num_groups):
            at = np.flatnonzero(groups == g)
            out.append((at, env_ids[at] - self.starts[g]))
        return out

    def join(self, pieces: Sequence[np.ndarray]) -> np.ndarray:
        """The ``(num_envs, ...)`` array of per-group pieces, in group order."""
        return np.concatenate([np.asarray(p) for p in pieces], axis=0)


def route_values(
    index: WorldIndex, models: Sequence[Any], path: str, values: Any, env_ids: Any
) -> list[tuple[int, np.ndarray]]:
    """``set_param``'s values over groups: for each group with selected worlds,
    ``(group, array)``, the validated array :func:`mjxrunner.params.new_values`
    gives for that group's ``mjx.Model`` (``models[g]``).

    ``values`` as for one runner, with global ``env_ids``: one core-shaped value for
    every selected world, or one row per selected world. The core shape must fit
    every touched group. Every group is checked before anything is returned, so a
    refusal changes nothing; errors name the group."""
    try:
        arr = np.asarray(values)
    except Exception as e:  # ragged lists and the like
        raise TypeError(f"values must be array-like: {e}") from None
    n = index.num_envs
    ids = None if env_ids is None else checks.env_ids(env_ids, n)
    rows = n if ids is None else len(ids)
    out = []
    for g, (at, local) in enumerate(index.split_ids(np.arange(n) if ids is None else ids)):
        if not len(at):
            continue
        model = models[g]
        try:
            core = params.core_shape(model, path)
            # one row per selected world, unless it is the core shape (as for one runner)
            per_row = arr.ndim > 0 and arr.shape[0] == rows and arr.shape != core
            mine = arr[at] if per_row else arr
            size = index.sizes[g]
            out.append(
                (g, params.new_values(model, path, mine, None if ids is None else local, size))
            )
        except (ValueError, TypeError) as e:
            raise type(e)(f"group {g}: {e}") from None
    return out


def join_reports(index: WorldIndex, reports: Sequence[health.Report]) -> health.Report:
    """The groups' health reports as one over global ids (a guard some group lacks
    reads as never tripped there)."""

    def joined(field: str) -> dict[str, np.ndarray]:
        names = sorted({k for r in reports for k in getattr(r, field)})
        zeros = lambda r, k: np.zeros(r.reset_count.shape, bool if field == "tripped" else np.int32)  # noqa: E731
        return {
            k: index.join([getattr(r, field).get(k, zeros(r, k)) for r in reports]) for k in names
        }

    return health.Report(
        joined("tripped"),
        joined("counts"),
        index.join([r.overflow for r in reports]),
        index.join([r.reset_count for r in reports]),
    )


def padded(pieces: Sequence[np.ndarray], width: int) -> np.ndarray:
    """Per-group ``(n_g, k_g)`` arrays joined as ``(sum n_g, width)``, zero-padded."""
    rows = []
    for p in pieces:
        p = np.asarray(p)
        rows.append(np.pad(p, ((0, 0), (0, width - p.shape[1]))))
    return np.concatenate(rows, axis=0)


def group_spec(
    spec: Any, g: int, shared: tuple[str, ...] = ("impl", "devices", "device")
) -> tuple[Any, int, dict[str, Any]]:
    """``(model, num_envs, options)`` of one group's entry; the ``shared`` options
    belong to every group and are refused per group."""
    if not isinstance(spec, (tuple, list)) or len(spec) not in (2, 3):
        raise TypeError(
            f"group {g} must be (model, num_envs) or (model, num_envs, options), got {spec!r}"
        )
    options = dict(spec[2]) if len(spec) == 3 else {}
    for name in shared:
        if name in options:
            raise ValueError(f"group {g}: {name!r} is shared by every group; pass it once for all")
    return spec[0], checks.count(spec[1], f"num_envs of group {g}"), options
