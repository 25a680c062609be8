"""The stateful shell under every stateful front door (Gymnasium, PyTorch, rsl_rl, skrl).

A :class:`Door` holds an :class:`~mjxrunner.env.Env` and its current
:class:`~mjxrunner.env.EnvState` packed into a few flat buffers (:class:`Layout`:
one per dtype and placement), and steps them with one compiled call that unpacks
them, runs :func:`mjxrunner.env.step` and packs the new state again; the slices
and concatenations compile into the step's own loops (why:
:mod:`mjxrunner.engine.packing`). A step takes ~3 env buffers, ~4 state buffers
and the action, and returns ~4 state buffers and what the door hands out
(``pack``), gathered into a few buffers too (:func:`outputs`).

The state's buffers belong to the door alone, so the step donates them (XLA
updates them in place), except with guards of policy ``"warn"`` or ``"raise"``,
which need the state of before the step. Every state the door hands out
(:attr:`Door.state`, :meth:`Door.get`) is unpacked into arrays of its own, and a
state given to it is packed into new buffers: no array a caller holds is ever
donated. The pytree is rebuilt only when asked for.

The compiled steps are shared by every door of the same layout, ``pack`` and
donation in the process (e.g. a Gymnasium and a torch door of one task and
size); :func:`mjxrunner.env.jit_step`, which takes pytrees, compiles its own.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from mjxrunner.engine import cpu_fusion, guards
from mjxrunner.engine.packing import Held, Layout, compiled, packer
from mjxrunner.rl import env as env_

FIELDS = tuple(env_.EnvState.OUTPUTS)
"""The fields a door reads: every kind of state says where they are (``OUTPUTS``)."""


def _leaf_index(template: Any) -> dict[str, tuple[int, int, Any]]:
    """Where each of :data:`FIELDS` lies among the leaves of a state (at the paths
    its class's ``OUTPUTS`` name): ``(first leaf, end, treedef)``; a field of several
    leaves (an observation of terms) is a run of consecutive leaves."""
    paths = [
        tuple(getattr(k, "name", getattr(k, "key", None)) for k in path)
        for path, _ in jax.tree_util.tree_flatten_with_path(template)[0]
    ]
    fields = type(template).OUTPUTS
    index = {}
    for name, path in fields.items():
        found = [i for i, p in enumerate(paths) if p[: len(path)] == path]
        subtree = template
        for part in path:
            subtree = getattr(subtree, part)
        index[name] = (found[0], found[-1] + 1, jax.tree.structure(subtree))
    return index


def packed_step(
    env_layout: Layout, state_layout: Layout, pack: Any, donate: bool, impl: str
) -> Callable:
    """``jit`` of :func:`mjxrunner.env.step` on packed buffers: ``(env buffers, state
    buffers, action) -> (new state buffers, pack(new state))``; with ``donate``, the
    state buffers are donated (updated in place). ``impl`` picks XLA's options
    (:func:`mjxrunner.engine.cpu_fusion.compiler_options`)."""

    def step(env_buffers, state_buffers, action):
        env = env_layout.unflatten(env_buffers)
        new = env_.step(env, state_layout.unflatten(state_buffers), action)
        leaves, new_def = jax.tree.flatten(new)
        if new_def != state_layout.treedef:  # at trace time: a step keeps the structure
            raise AssertionError(f"the step changed the state's structure: {new_def}")
        return state_layout.pack(leaves), None if pack is None else pack(new)

    options = cpu_fusion.compiler_options(impl)
    return compiled(
        ("step", env_layout, state_layout, pack, donate, impl),
        lambda: jax.jit(
            step, donate_argnames="state_buffers" if donate else (), compiler_options=options
        ),
    )


# --- what the doors hand out -----------------------------------------------------------


def groups_of(obs: Any) -> dict[str, Any]:
    """Observation groups as torch trainers name them: ``{"policy": obs}`` for one
    array, the terms themselves for an observation of terms."""
    return dict(obs) if isinstance(obs, dict) else {"policy": obs}


def packed_groups(obs: Any, float_dtype: Any) -> tuple[list[str], list[str]]:
    """``(groups in the float buffer, groups handed out on their own)``: terms of the
    env's float dtype share one buffer; others (uint8 images) go apart."""
    groups = groups_of(obs)
    floats = [k for k, x in groups.items() if x.dtype == float_dtype]
    return floats, [k for k in groups if k not in floats]


def outputs(state: env_.EnvState) -> tuple[jax.Array, jax.Array, tuple[jax.Array, ...]]:
    """What a step hands out, in few buffers (each output of a compiled call, and
    each export or transfer of one, costs host time): floats ``obs, final_obs`` of
    every float group, ``reward`` and the return and length of each world's last
    finished episode; bools ``terminated, truncated, final_mask``; and ``(obs,
    final_obs)`` of each other group. :class:`Outputs` splits them again."""
    dtype = state.reward.dtype
    obs, final = groups_of(state.obs), groups_of(state.final_obs)
    in_floats, apart = packed_groups(state.obs, dtype)
    stats = state.stats
    floats = jnp.concatenate(
        [obs[k].ravel() for k in in_floats]
        + [final[k].ravel() for k in in_floats]
        + [state.reward, stats.last_return.astype(dtype), stats.last_length.astype(dtype)]
    )
    flags = jnp.concatenate([state.terminated, state.truncated, state.final_mask])
    return floats, flags, tuple(x for k in apart for x in (obs[k], final[k]))


class Outputs:
    """Splits what :func:`outputs` packed into named views, for any array type that
    slices and reshapes (NumPy arrays after one transfer, torch tensors over DLPack).

    Args:
      spec: the env's ``observation_spec`` (one spec, or a dict of them for terms).
      num_envs: number of worlds.
      float_dtype: the env's float dtype.
    """

    def __init__(self, spec: Any, num_envs: int, float_dtype: Any):
        groups = groups_of(spec)
        self._floats, self._apart = packed_groups(groups, float_dtype)
        self._shapes = {k: tuple(s.shape) for k, s in groups.items()}
        self._n = num_envs

    def split(self, floats: Any, flags: Any, apart: tuple) -> dict[str, Any]:
        """``obs`` and ``final_obs`` (dicts of groups), ``reward``, ``last_return``,
        ``last_length`` (floats), ``terminated``, ``truncated`` and ``final_mask``, as
        views of the buffers."""
        n = self._n
        obs, final, at = {}, {}, 0
        for out in (obs, final):
            for k in self._floats:
                size = n * math.prod(self._shapes[k])
                out[k] = floats[at : at + size].reshape((n, *self._shapes[k]))
                at += size
        for i, k in enumerate(self._apart):
            obs[k], final[k] = apart[2 * i], apart[2 * i + 1]
        return {
            "obs": obs,
            "final_obs": final,
            "reward": floats[at : at + n],
            "last_return": floats[at + n : at + 2 * n],
            "last_length": floats[at + 2 * n :],
            "terminated": flags[:n],
            "truncated": flags[n : 2 * n],
            "final_mask": flags[2 * n :],
        }


# --- the door ------------------------------------------------------------------------


class Door:
    """An env and its current state, stepped as a few packed buffers.

    Args:
      env: the :class:`~mjxrunner.env.Env`.
      pack: None, or ``pack(state) -> arrays`` computed inside the compiled step
        and returned by :meth:`step`: e.g. :func:`outputs`, what a door hands out,
        gathered into a few buffers so that handing them out costs one transfer or
        export each.

    Attributes:
      env: the env; assigning one packs it anew (e.g. after ``with_param``).
    """

    def __init__(self, env: env_.Env, pack: Callable | None = None):
        self._pack = pack
        self.env = env
        self._held = Held()  # the current state (packed, and as a pytree when read)
        self._index: dict[str, tuple[int, int, Any]] = {}

    @property
    def env(self) -> env_.Env:
        return self._env

    @env.setter
    def env(self, env: env_.Env) -> None:
        if not isinstance(env, env_.AnyEnv):
            raise TypeError(
                f"env must be a mjxrunner.env.Env or GroupEnv, got {type(env).__name__}"
            )
        layout = Layout.of(env)
        self._env, self._env_layout = env, layout
        self._env_buffers = packer(layout)(jax.tree.leaves(env))
        self._host_guards = bool(guards.host_policies(env.config.guards))
        self._step = None  # looked up again on the next step

    @property
    def ready(self) -> bool:
        """True once a state has been set (by a reset)."""
        return self._held.buffers is not None

    @property
    def state(self) -> env_.EnvState:
        """The current state as a pytree (unpacked once per step, when asked for)."""
        if not self.ready:
            raise RuntimeError("call reset() before reading the state")
        return self._held.tree

    @state.setter
    def state(self, state: env_.EnvState) -> None:
        if not isinstance(state, env_.AnyState):
            raise TypeError(
                f"state must be a mjxrunner.env.EnvState or GroupState, got {type(state).__name__}"
            )
        layout, before = Layout.of(state), self._held.layout
        if before is None or layout.treedef != before.treedef:
            self._index = _leaf_index(state)
        if layout != before:
            self._step = None
        else:
            layout = before  # the compiled step's own
        self._held.set(state)
        self._held.pack(layout)  # new buffers: the caller's stay its own

    def get(self, name: str) -> Any:
        """A field of the current state by name (one of :data:`FIELDS`), without
        rebuilding the state: an array, or a dict of them for an observation of
        terms."""
        if not self.ready:
            raise RuntimeError("call reset() before reading the state")
        start, end, treedef = self._index[name]
        leaves = self._held.leaves(start, end)
        if treedef.num_leaves == 1 and treedef.num_nodes == 1:
            return leaves[0]
        return treedef.unflatten(leaves)

    def step(self, action: Any) -> Any:
        """Steps every world with a ``(num_envs, nu)`` array; returns ``pack(state)``
        of the new state (None without ``pack``).

        Guards with policy ``"warn"`` or ``"raise"`` are applied here (one host
        transfer of their flags); ``"raise"`` keeps the state of before the step
        and raises the guard's error.
        """
        if not self.ready:
            raise RuntimeError("call reset() before step()")
        keep = self._host_guards  # the state of before the step is needed: no donation
        held = self._held
        if self._step is None:  # found once per layout, not hashed on every step
            self._step = packed_step(
                self._env_layout, held.layout, self._pack, not keep, self._env.impl
            )
        before = held.layout, held.buffers, held.tree if keep else None  # not donated then
        buffers, packed = self._step(self._env_buffers, held.buffers, action)
        held.set_packed(held.layout, buffers)
        if keep:
            error = env_.guard_error(self._env, before[2], held.tree)
            if error is not None:
                held.set_packed(*before)  # back to the state of before the step
                raise error
        return packed
