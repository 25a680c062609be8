"""The functional env over groups: one task on worlds of several scenes.

Build it with ``mjxrunner.env.make(task, num_envs, groups=[(model, n), ...])`` (the
sizes sum to ``num_envs``). Each group is an :class:`~mjxrunner.env.Env` of its own
(its model, start, restarts, parameters and randomization), and the functions of
:mod:`mjxrunner.env` (``reset``, ``step``, ``reset_worlds``, ...) take a
:class:`GroupEnv` as they take an ``Env``: they call each group's own function
inside one trace, so a step of every group is one compiled function, and they join
what a policy reads into ``(num_envs, ...)`` arrays over the global world index
(:class:`~mjxrunner.engine.groups.WorldIndex`). Every front door over those functions
(Gymnasium, PyTorch, rsl_rl, skrl) therefore takes groups too.

One policy acts on every group, so the groups must agree on what it sees and
does: the same observation size, action size and action bounds; a task whose
observation depends on the scene must pad it itself. :func:`make_groups` refuses
groups that disagree, naming them.

PRNG streams: world ``i`` (global) begins at ``jax.random.split(key, num_envs)[i]``
for the ``key`` of :func:`reset`, as in a homogeneous env; a group's worlds draw
exactly what a homogeneous env of that scene would draw from the same keys.

Observation normalization, when asked for, is done here over all groups together
(one set of statistics for the one policy); the groups' own envs run without it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from mjxrunner import engine
from mjxrunner.engine import archive, checks, core, params
from mjxrunner.engine.archive import fill, write
from mjxrunner.engine.groups import WorldIndex, group_spec, join_reports, route_values
from mjxrunner.engine.worlds import BATCHED, pytree_dataclass, static_field, world_field
from mjxrunner.kit import normalize
from mjxrunner.rl import env as env_
from mjxrunner.rl import env_io, episode, functional, restart


@pytree_dataclass
class GroupEnv:
    """A task on the worlds of several groups; build it with :func:`make_groups`.

    Attributes:
      envs: one :class:`~mjxrunner.env.Env` per group, in global order.
      index: the :class:`~mjxrunner.engine.groups.WorldIndex` (static).
      normalize: None, or how observations are normalized over all groups (static).
    """

    envs: tuple[env_.Env, ...]
    index: WorldIndex = static_field()
    normalize: normalize.Spec | None = static_field(default=None)

    num_envs = property(lambda self: self.index.num_envs)
    num_groups = property(lambda self: self.index.num_groups)
    world_start = property(lambda self: self.index.world_start)
    task = property(lambda self: self.envs[0].task)
    impl = property(lambda self: self.envs[0].impl)
    mesh = property(lambda self: self.envs[0].mesh)
    autoreset = property(lambda self: self.envs[0].autoreset)
    action_size = property(lambda self: self.envs[0].action_size)
    observation_size = property(lambda self: self.envs[0].observation_size)
    observation_spec = property(lambda self: self.envs[0].observation_spec)
    low = property(lambda self: self.envs[0].low, doc="``(nu,)`` bounds, equal in every group.")
    high = property(lambda self: self.envs[0].high)
    host = property(lambda self: self.envs[0].host, doc="Group 0's host model (its timestep).")

    @property
    def config(self) -> Any:
        """The configuration the groups share (backend, guards, mesh) with the total
        ``num_envs``; each group's own is ``envs[g].config``."""
        return self.envs[0].config.replace(num_envs=self.num_envs)

    def group_of(self, env_ids: Any) -> Any:
        """The group of a global world id, or of each of several."""
        return self.index.group_of(env_ids)

    def with_autoreset(self, autoreset: str) -> GroupEnv:
        return self.replace(envs=tuple(e.with_autoreset(autoreset) for e in self.envs))

    def with_param(self, path: str, values: Any, env_ids: Any = None) -> GroupEnv:
        """A copy with model field ``path`` set, as :meth:`Env.with_param` with global
        ``env_ids`` (see :meth:`GroupRunner.set_param` for the shapes)."""
        models = [e.model.tree for e in self.envs]
        envs = list(self.envs)
        for g, new in route_values(self.index, models, path, values, env_ids):
            envs[g] = envs[g].with_values({path: new})
        return self.replace(envs=tuple(envs))

    def with_randomization(
        self, terms: Any, *, on_reset: bool = True, every_n_steps: int = 0
    ) -> GroupEnv:
        """A copy whose every group redraws ``terms`` (see
        :meth:`Env.with_randomization`); checked for every group first."""
        for g, e in enumerate(self.envs):
            try:
                params.check_randomization(e.model.tree, terms, on_reset, every_n_steps)
            except (ValueError, TypeError) as err:
                raise type(err)(f"group {g}: {err}") from None
        return self.replace(
            envs=tuple(
                e.with_randomization(terms, on_reset=on_reset, every_n_steps=every_n_steps)
                for e in self.envs
            )
        )

    def with_obs_normalization(
        self, enabled: bool = True, *, clip: float | None = None, eps: float = 1e-8
    ) -> GroupEnv:
        """A copy that normalizes observations by statistics over all groups (see
        :meth:`Env.with_obs_normalization`)."""
        return self.replace(normalize=functional.normalization_spec(enabled, clip, eps))

    def shard(self, devices: Any) -> GroupEnv:
        """A copy with every group split over ``devices`` (each group's size a
        multiple of their number; checked for every group first)."""
        from mjxrunner.engine import sharding

        mesh = None if devices is None else sharding.make_mesh(devices)
        if mesh is not None:
            for g, e in enumerate(self.envs):
                try:
                    sharding.check_divisible(e.num_envs, mesh)
                except ValueError as err:
                    raise ValueError(f"group {g}: {err}") from None
        return self.replace(envs=tuple(e.shard(mesh) for e in self.envs))

    def reset(self, key: jax.Array) -> GroupState:
        return reset(self, key)

    def step(self, state: GroupState, action: jax.Array) -> GroupState:
        return step(self, state, action)

    def reset_worlds(self, state: GroupState, mask: jax.Array) -> GroupState:
        return reset_worlds(self, state, mask)


@pytree_dataclass
class GroupState:
    """State of the worlds of every group.

    Attributes:
      groups: one :class:`~mjxrunner.env.EnvState` per group (observations as the
        group's env returns them, before any normalization).
      obs: ``(num_envs, obs_dim)`` what the policy acts on next, over global ids
        (a dict of ``(num_envs, *term)`` for a task with observation terms).
      reward: ``(num_envs,)`` reward of the last step.
      final_obs: the observation at the end of the last step, shaped like ``obs``.
      final_mask: ``(num_envs,)`` bool, worlds restarted in the same step.
      terminated: ``(num_envs,)`` bool.
      truncated: ``(num_envs,)`` bool.
      episode_length: ``(num_envs,)`` int32.
      obs_norm: statistics over all groups when the env normalizes, else None.
    """

    groups: tuple[env_.EnvState, ...]
    obs: Any = world_field(BATCHED)
    reward: jax.Array = world_field(0)
    final_obs: Any = world_field(BATCHED)
    final_mask: jax.Array = world_field(0)
    terminated: jax.Array = world_field(0)
    truncated: jax.Array = world_field(0)
    episode_length: jax.Array = world_field(0)
    obs_norm: normalize.ObsNorm | None = None

    # where the stateful doors (mjxrunner.doors.door) find what they hand out
    OUTPUTS: ClassVar[dict[str, tuple[str, ...]]] = {  # as EnvState.OUTPUTS, joined
        name: (name,)
        for name in (
            "obs",
            "reward",
            "terminated",
            "truncated",
            "final_obs",
            "final_mask",
            "episode_length",
        )
    }

    @property
    def done(self) -> jax.Array:
        return self.terminated | self.truncated

    @property
    def nonfinite(self) -> jax.Array:
        return jnp.concatenate([s.nonfinite for s in self.groups])

    @property
    def stats(self) -> env_.EpisodeStats:
        """The groups' episode statistics joined over global ids."""
        return jax.tree.map(lambda *x: jnp.concatenate(x), *[s.stats for s in self.groups])

    @property
    def num_envs(self) -> int:
        return self.reward.shape[0]


def make_groups(task: Any, groups: Sequence[Any], **options: Any) -> GroupEnv:
    """A :class:`GroupEnv` of ``task`` over ``groups``.

    Args:
      task: a :class:`~mjxrunner.tasks.Task` or a registered name.
      groups: a sequence of ``(model, num_envs)`` or ``(model, num_envs, options)``;
        ``model`` as ``make``'s ``model=`` (a scene name, an ``MjModel``, a path),
        ``options`` per-group keyword arguments of :func:`mjxrunner.env.make`
        (``restart_slots``, Warp capacities, ...).
      **options: keyword arguments of :func:`mjxrunner.env.make` for every group;
        ``normalize_obs``/``obs_clip`` normalize over all groups, ``devices``
        splits every group.

    Raises:
      TypeError, ValueError: a bad group, or groups that disagree in observation
        size, action size or action bounds (the message names them).
    """
    if isinstance(groups, (str, bytes)) or not isinstance(groups, Sequence):
        raise TypeError("groups must be a sequence of (model, num_envs[, options])")
    specs = [
        group_spec(spec, g, shared=("devices", "impl", "model")) for g, spec in enumerate(groups)
    ]
    index = WorldIndex.of([n for _, n, _ in specs])
    normalize_obs = options.pop("normalize_obs", False)
    obs_clip = options.pop("obs_clip", None)
    devices = options.pop("devices", None)
    if "model" in options:
        raise ValueError("with groups, give each group its model: groups=[(model, num_envs), ...]")
    envs = tuple(env_.make(task, n, model=model, **{**options, **own}) for model, n, own in specs)
    first = envs[0]
    for g, e in enumerate(envs[1:], start=1):
        for what in ("observation_spec", "action_size"):
            if getattr(e, what) != getattr(first, what):
                raise ValueError(
                    f"groups 0 and {g} differ in {what} ({getattr(first, what)} vs "
                    f"{getattr(e, what)}); one policy needs the same sizes in every group "
                    "(pad the observation in the task)"
                )
        if not (np.array_equal(e.low, first.low) and np.array_equal(e.high, first.high)):
            raise ValueError(f"groups 0 and {g} differ in their actuators' ctrlrange")
    genv = GroupEnv(envs, index)
    if normalize_obs or obs_clip is not None:
        genv = genv.with_obs_normalization(normalize_obs, clip=obs_clip)
    return genv if devices is None else genv.shard(devices)


# --- the functions of mjxrunner.env, over groups --------------------------------------


def _joined(genv: GroupEnv, states: Sequence[env_.EnvState], norm: Any, count: bool) -> GroupState:
    """The group state of per-group states; ``count``: the returned observations
    update the statistics (a step or a full reset), else they are only scaled."""
    join = lambda name: jax.tree.map(  # noqa: E731
        lambda *x: jnp.concatenate(x), *[getattr(s, name) for s in states]
    )
    obs, final_obs = join("obs"), join("final_obs")
    if genv.normalize is not None:
        if count:
            norm = normalize.update(norm, obs)
        obs, final_obs = (normalize.apply(genv.normalize, norm, o) for o in (obs, final_obs))
    return GroupState(
        groups=tuple(states),
        obs=obs,
        reward=join("reward"),
        final_obs=final_obs,
        final_mask=join("final_mask"),
        terminated=join("terminated"),
        truncated=join("truncated"),
        episode_length=join("episode_length"),
        obs_norm=norm,
    )


def _split(genv: GroupEnv, x: jax.Array) -> list[jax.Array]:
    return [x[genv.index.slice(g)] for g in range(genv.num_groups)]


def reset_from_keys(genv: GroupEnv, keys: jax.Array, obs_norm: Any = None) -> GroupState:
    keys = core.raw_keys(keys)
    if keys.shape != (genv.num_envs, 2):
        raise ValueError(f"keys must be ({genv.num_envs}, 2) raw keys, got {keys.shape}")
    if genv.normalize is None:
        obs_norm = None
    elif obs_norm is None:
        obs_norm = normalize.init(genv.observation_spec, genv.low.dtype)
    states = [
        env_.reset_from_keys(e, k) for e, k in zip(genv.envs, _split(genv, keys), strict=True)
    ]
    return _joined(genv, states, obs_norm, count=True)


def reset(genv: GroupEnv, key: jax.Array, obs_norm: Any = None) -> GroupState:
    return reset_from_keys(genv, core.init_keys(key, genv.num_envs), obs_norm)


def step(genv: GroupEnv, state: GroupState, action: jax.Array) -> GroupState:
    action = jnp.asarray(action)
    if action.shape != (genv.num_envs, genv.action_size):
        raise ValueError(
            f"action must have shape (num_envs, nu) = {(genv.num_envs, genv.action_size)}, "
            f"got {action.shape}"
        )
    states = [
        env_.step(e, s, a)
        for e, s, a in zip(genv.envs, state.groups, _split(genv, action), strict=True)
    ]
    return _joined(genv, states, state.obs_norm, count=True)


def reset_worlds(genv: GroupEnv, state: GroupState, mask: jax.Array) -> GroupState:
    mask = jnp.asarray(mask)
    if mask.dtype != bool or mask.shape != (genv.num_envs,):
        raise ValueError(
            f"mask must be bool of shape ({genv.num_envs},), got {mask.dtype} {mask.shape}"
        )
    states = [
        env_.reset_worlds(e, s, m)
        for e, s, m in zip(genv.envs, state.groups, _split(genv, mask), strict=True)
    ]
    new = _joined(genv, states, state.obs_norm, count=False)
    keep = lambda a, b: restart.pick(mask, a, b)  # noqa: E731 - scaled alike
    return new.replace(obs=keep(new.obs, state.obs), final_obs=keep(new.final_obs, state.final_obs))


def reseed(state: GroupState, mask: np.ndarray, key: jax.Array) -> GroupState:
    """The worlds in ``mask`` given the streams that ``reset(key)`` would give them."""
    fresh = np.asarray(core.init_keys(key, mask.shape[0]))  # global: as reset(key) draws
    index = WorldIndex.of([s.num_envs for s in state.groups])
    groups = tuple(
        env_.with_streams(s, mask[index.slice(g)], fresh[index.slice(g)])
        for g, s in enumerate(state.groups)
    )
    return state.replace(groups=groups)


def with_episode_length(state: GroupState, lengths: np.ndarray) -> GroupState:
    """``state`` with each world's running episode length set (global order)."""
    index = WorldIndex.of([s.num_envs for s in state.groups])
    groups = tuple(
        env_.with_episode_length(s, lengths[index.slice(g)]) for g, s in enumerate(state.groups)
    )
    joined = jnp.concatenate([s.episode_length for s in groups])
    return state.replace(groups=groups, episode_length=joined)


def guard_error(genv: GroupEnv, before: GroupState, after: GroupState) -> Exception | None:
    """The first group's ``"warn"``/``"raise"`` guard error of one step, naming
    global world ids (None if no guard with those policies tripped)."""
    for g, (e, b, a) in enumerate(zip(genv.envs, before.groups, after.groups, strict=True)):
        found = env_.check_guards(e, b, a)
        if found is not None:
            guard, worlds = found
            return guard.error(guard.message(np.asarray(worlds) + genv.index.starts[g], a.runner))
    return None


def health_report(state: GroupState) -> Any:
    index = WorldIndex.of([s.num_envs for s in state.groups])
    return join_reports(index, [env_.health_report(s) for s in state.groups])


def world_scene(genv: GroupEnv, state: GroupState, world: int) -> tuple[Any, Any, Any, int]:
    """``(host model, device model, batched data, id within the group)`` of global
    ``world``: what drawing it needs."""
    g, local = genv.index.local(checks.env_id(world, genv.num_envs, "world"))
    return env_.world_scene(genv.envs[g], state.groups[g], local)


# --- checkpoints: each group's env file as bytes inside one file ---------------------

_JOINED = ("obs", "reward", "final_obs", "final_mask", "terminated", "truncated", "episode_length")


def save_groups(path: str | os.PathLike, genv: Any, state: Any) -> Path:
    """Writes a :class:`~mjxrunner.rl.GroupEnv` and one of its states: each
    group's env checkpoint (:func:`save_env`) as bytes, with the joined fields and
    the observation statistics over all groups."""
    writers = [
        lambda file, e=e, s=s: env_io.save_env(file, e, s)
        for e, s in zip(genv.envs, state.groups, strict=True)
    ]
    arrays = archive.pack_members(writers)
    parts = {"joined": {k: getattr(state, k) for k in _JOINED}}
    if state.obs_norm is not None:
        parts["obs_norm"] = state.obs_norm
    spec = genv.normalize
    fields = {
        "of": "env",
        "num_envs": genv.num_envs,
        "world_start": [int(x) for x in genv.world_start],
        "layout": None,
        "obs_normalization": None if spec is None else {"clip": spec.clip, "eps": spec.eps},
    }
    return write(path, "groups", parts, genv.host.mj_model, fields, arrays=arrays)


def load_groups(header: dict, arrays: dict, where: str, **options: Any) -> tuple[Any, Any]:

    def load(file: Path, g: int, n: int) -> Any:
        return env_io.load_env(file, **options)

    members = archive.unpack_members(header, arrays, where, "env", load)
    envs, states = zip(*members, strict=True)
    genv = GroupEnv(tuple(envs), WorldIndex.of([e.num_envs for e in envs]))
    norm = header["obs_normalization"]
    if norm is not None:
        genv = genv.with_obs_normalization(True, **norm)
    n = genv.num_envs
    template = jax.eval_shape(reset, genv, jax.random.key(0))
    joined = fill("joined", {k: getattr(template, k) for k in _JOINED}, arrays, n, where, "env")
    obs_norm = None
    if norm is not None:
        obs_norm = fill("obs_norm", template.obs_norm, arrays, n, where, "env")
    state = GroupState(groups=tuple(states), obs_norm=obs_norm, **joined)
    return genv, engine.put(state.replace(groups=()), genv.config).replace(groups=tuple(states))


# --- what every function of the env takes, registered for groups ----------------------

functional.AnyEnv.register(GroupEnv)
episode.AnyState.register(GroupState)
functional.register_groups(make_groups)
for _name, _fn in {
    "reset_from_keys": reset_from_keys,
    "step": step,
    "reset_worlds": reset_worlds,
    "guard_error": guard_error,
    "world_scene": world_scene,
}.items():
    getattr(functional, _name).register(GroupEnv, _fn)
for _name, _fn in {
    "health_report": health_report,
    "reseed": reseed,
    "with_episode_length": with_episode_length,
}.items():
    getattr(episode, _name).register(GroupState, _fn)
env_io.writer.register(GroupEnv, lambda genv: save_groups)
env_io.READERS["groups"] = load_groups
