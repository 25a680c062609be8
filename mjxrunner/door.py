"""The stateful shell under every stateful front door (Gymnasium, PyTorch, rsl_rl, skrl).

A :class:`Door` holds an :class:`~mjxrunner.env.Env` and its current
:class:`~mjxrunner.env.EnvState` as flat lists of leaves, and steps them with one
compiled call whose arguments are those lists. The pure functions of
:mod:`mjxrunner.env` take pytrees; flattening an ``EnvState`` (and the env's
``mjx.Data`` start) runs MJX's Python flatteners on every call, which cost more
host time per step than a small batch's physics. Here the env is flattened once
per change and the state never: the step returns leaves, and a field is read by
its index (:meth:`Door.get`). The pytree is rebuilt only when asked for
(:attr:`Door.state`).

The compiled step (:func:`mjxrunner.env.flat_step`) is shared by every door of the
same structure and ``pack`` in the process; doors without ``pack`` (Gymnasium)
share it with :func:`mjxrunner.env.jit_step` too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

from mjxrunner import env as env_
from mjxrunner import guards

# Fields a door reads after a step, by name -> path in ``EnvState``.
FIELDS = {
    "obs": ("obs",),
    "reward": ("reward",),
    "terminated": ("runner", "terminated"),
    "truncated": ("runner", "truncated"),
    "final_obs": ("final_obs",),
    "final_mask": ("final_mask",),
    "episode_length": ("runner", "episode_length"),
}


def _leaf_index(template: Any) -> dict[str, tuple[int, int, Any]]:
    """Where each of :data:`FIELDS` lies among the leaves of a state (an
    ``EnvState``, or a state that says where they are in ``DOOR_FIELDS``, e.g. a
    ``GroupState``): ``(first leaf, end, treedef)``; a field of several leaves (an
    observation of terms) is a run of consecutive leaves."""
    paths = [
        tuple(getattr(k, "name", getattr(k, "key", None)) for k in path)
        for path, _ in jax.tree_util.tree_flatten_with_path(template)[0]
    ]
    fields = getattr(type(template), "DOOR_FIELDS", FIELDS)
    index = {}
    for name, path in fields.items():
        found = [i for i, p in enumerate(paths) if p[: len(path)] == path]
        subtree = template
        for part in path:
            subtree = getattr(subtree, part)
        index[name] = (found[0], found[-1] + 1, jax.tree.structure(subtree))
    return index


def _kinds() -> tuple[tuple[type, ...], tuple[type, ...]]:
    """The envs and states a door takes: homogeneous and over groups."""
    from mjxrunner import group_env

    return (env_.Env, group_env.GroupEnv), (env_.EnvState, group_env.GroupState)


class Door:
    """An env and its current state, stepped with flat arguments.

    Args:
      env: the :class:`~mjxrunner.env.Env`.
      pack: None, or ``pack(state) -> arrays`` computed inside the compiled step
        and returned by :meth:`step`: e.g. the outputs a door hands out, gathered
        into a few buffers so that handing them out costs one export each.

    Attributes:
      env: the env; assigning one re-flattens it (e.g. after ``with_param``).
    """

    def __init__(self, env: env_.Env, pack: Callable | None = None):
        self._pack = pack
        self.env = env
        self._leaves: list[jax.Array] | None = None
        self._state_def: Any = None
        self._state: env_.EnvState | None = None
        self._index: dict[str, tuple[int, int, Any]] = {}

    @property
    def env(self) -> env_.Env:
        return self._env

    @env.setter
    def env(self, env: env_.Env) -> None:
        if not isinstance(env, _kinds()[0]):
            raise TypeError(
                f"env must be a mjxrunner.env.Env or GroupEnv, got {type(env).__name__}"
            )
        self._env = env
        self._env_leaves, self._env_def = jax.tree.flatten(env)
        self._host_guards = bool(guards.host_policies(env.config.guards))

    @property
    def ready(self) -> bool:
        """True once a state has been set (by a reset)."""
        return self._leaves is not None

    @property
    def state(self) -> env_.EnvState:
        """The current state as a pytree (rebuilt from the leaves once per step)."""
        if self._leaves is None:
            raise RuntimeError("call reset() before reading the state")
        if self._state is None:
            self._state = jax.tree.unflatten(self._state_def, self._leaves)
        return self._state

    @state.setter
    def state(self, state: env_.EnvState) -> None:
        if not isinstance(state, _kinds()[1]):
            raise TypeError(
                f"state must be a mjxrunner.env.EnvState or GroupState, got {type(state).__name__}"
            )
        leaves, state_def = jax.tree.flatten(state)
        if self._state_def is None or state_def != self._state_def:
            self._index = _leaf_index(state)
            self._state_def = state_def
        self._leaves, self._state = leaves, state

    def get(self, name: str) -> Any:
        """A field of the current state by name (one of :data:`FIELDS`), no rebuild:
        an array, or a dict of them for an observation of terms."""
        if self._leaves is None:
            raise RuntimeError("call reset() before reading the state")
        start, end, treedef = self._index[name]
        if treedef.num_leaves == 1 and treedef.num_nodes == 1:
            return self._leaves[start]
        return treedef.unflatten(self._leaves[start:end])

    def step(self, action: jax.Array) -> Any:
        """Steps every world with a ``(num_envs, nu)`` array; returns ``pack(state)``
        of the new state (None without ``pack``).

        Guards with policy ``"warn"`` or ``"raise"`` are applied here (one host
        transfer of their flags); ``"raise"`` keeps the state of before the step
        and raises the guard's error.
        """
        if self._leaves is None:
            raise RuntimeError("call reset() before step()")
        step = env_.flat_step(self._env_def, self._state_def, self._pack)
        before, before_state = self._leaves, self._state
        self._leaves, packed = step(self._env_leaves, self._leaves, action)
        self._state = None
        if self._host_guards:
            prev = before_state
            if prev is None:  # not rebuilt since the last step
                prev = jax.tree.unflatten(self._state_def, before)
            error = env_.guard_error(self._env, prev, self.state)
            if error is not None:
                self._leaves, self._state = before, before_state
                raise error
        return packed
