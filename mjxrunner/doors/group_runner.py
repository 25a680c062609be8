"""``GroupRunner``: worlds of several scenes, stepped together behind one world index.

Build it with :meth:`MultiEnvRunner.from_groups`. Each group is a batch of worlds
of one structure, held by a :class:`~mjxrunner.MultiEnvRunner` of its own (its
engine, default snapshot, scratch buffer, parameters and randomization), so the
world-axis rule decides everything inside a group exactly as for one runner. The
group runner adds the global numbering (:class:`~mjxrunner.engine.groups.WorldIndex`) and
compiled functions over the tuple of all groups' engines: a step of every group is
one dispatch, as are resets, redraws and control writes.

Every per-world call takes and returns global world ids and ``(num_envs, ...)``
arrays. What differs in size between groups stays per group: ``data`` is the tuple
of the groups' batched ``mjx.Data``, ``data_of(g)`` one of them, and a model field
whose core shape differs between groups (``body_mass`` with other body counts) is
set per group through global ids that all fall in it.

Actions: ``action_dim()`` is the largest ``nu`` of the groups. ``set_actions``
takes ``(n, action_dim())`` rows; a group with fewer actuators uses the first
``nu`` columns of its rows and ignores the rest (``action_mask`` marks the used
ones), so one padded policy output drives every group.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from mjxrunner import engine
from mjxrunner.doors import controls, layout, runner_io
from mjxrunner.doors import runner as runner_
from mjxrunner.engine import backend, checks, health, params
from mjxrunner.engine.groups import WorldIndex, group_spec, join_reports, padded, route_values
from mjxrunner.engine.sharding import host_copy


def _advance_all(engs, scratches, dt, substeps, collides):
    return tuple(
        runner_._stepped(*args, dt, substeps, collide)
        for *args, collide in zip(engs, scratches, collides, strict=True)
    )


def _restore_all(engs, states, masks):
    return tuple(
        runner_._parts(engine.reset(eng.replace(state=state), mask))
        for eng, state, mask in zip(engs, states, masks, strict=True)
    )


def _redraw_all(engs, masks):
    return tuple(runner_._randomized(*args) for args in zip(engs, masks, strict=True))


def _set_ctrl_all(ctrls, masks, values):
    return tuple(runner_._set_ctrl(*args) for args in zip(ctrls, masks, values, strict=True))


_advance = jax.jit(
    _advance_all, static_argnames="substeps", donate_argnames="scratches", keep_unused=True
)
_restore = jax.jit(_restore_all, donate_argnames="states")
_redraw = jax.jit(_redraw_all)
_set_ctrl = jax.jit(_set_ctrl_all, donate_argnames="ctrls")


class GroupRunner(layout.Layout, controls.Controls):  # layouts over global ids
    """Worlds of several scenes behind one world index; see the module docstring.

    Args:
      groups: a sequence of ``(model, num_envs)`` or ``(model, num_envs, options)``;
        ``model`` is anything :class:`~mjxrunner.MultiEnvRunner` accepts, and
        ``options`` its per-group keyword arguments (``keyframe``, ``naconmax``,
        ``njmax``, ``seed``, policies, ...).
      seed: group ``g`` is seeded with ``seed + g`` unless its options say
        otherwise, so it starts exactly as ``MultiEnvRunner(model, n, seed=seed + g)``.
      devices: None, or devices to split every group over (see :meth:`shard`).
      **options: keyword arguments for every group (``impl``, which all groups
        share, ``device``, guards, ...).
    """

    def __init__(
        self,
        groups: Sequence[Any],
        *,
        seed: int = 0,
        devices: Any = None,
        **options: Any,
    ):
        if isinstance(groups, (str, bytes)) or not isinstance(groups, Sequence):
            raise TypeError("groups must be a sequence of (model, num_envs[, options])")
        seed = checks.seed(seed)
        specs = [group_spec(spec, g) for g, spec in enumerate(groups)]
        self._index = WorldIndex.of([n for _, n, _ in specs])
        self._members = tuple(
            runner_.MultiEnvRunner(model, n, **{"seed": seed + g, **options, **own})
            for g, (model, n, own) in enumerate(specs)
        )
        self._origins, self._layout = layout.linear(self.num_envs, 0.0), "linear"
        if devices is not None:
            self.shard(devices)

    # --- the index and the groups -----------------------------------------------------

    index = property(lambda self: self._index, doc="The :class:`WorldIndex`.")
    world_start = property(
        lambda self: self._index.world_start,
        doc="``(num_groups + 1,)``: first global id of each group, then ``num_envs``.",
    )
    num_envs = property(lambda self: self._index.num_envs)
    num_groups = property(lambda self: self._index.num_groups)
    groups = property(
        lambda self: self._members,
        doc="The groups' :class:`~mjxrunner.MultiEnvRunner` s. Stepping one of them "
        "on its own advances that group only.",
    )
    impl = property(lambda self: self._members[0].impl)
    device = property(lambda self: self._members[0].device)
    mesh = property(lambda self: self._members[0].mesh)
    mj_models = property(lambda self: tuple(m.mj_model for m in self._members))

    def group_of(self, env_ids: Any) -> Any:
        """The group of a global world id (an int), or of each of several (an array)."""
        return self._index.group_of(env_ids)

    def data_of(self, group: int) -> Any:
        """The batched ``mjx.Data`` of ``group`` (its worlds in global order)."""
        return self._members[self._group(group)].data

    def model_of(self, group: int) -> Any:
        """The device ``mjx.Model`` of ``group``."""
        return self._members[self._group(group)].model

    @property
    def data(self) -> tuple:
        """The tuple of every group's batched ``mjx.Data`` (shapes differ between
        groups, so there is no single batch); ``data[g]`` is ``data_of(g)``."""
        return tuple(m.data for m in self._members)

    @property
    def next_data(self) -> tuple:
        """The tuple of every group's state before the last step."""
        return tuple(m.next_data for m in self._members)

    def _group(self, group: Any) -> int:
        return checks.env_id(group, self.num_groups, "group")

    def _join(self, name: str) -> np.ndarray:
        return self._index.join([getattr(m, name) for m in self._members])

    episode_length = property(lambda self: self._join("episode_length"))
    terminated = property(lambda self: self._join("terminated"))
    truncated = property(lambda self: self._join("truncated"))
    overflow = property(lambda self: self._join("overflow"))

    def contact_count(self) -> np.ndarray:
        """``(num_envs,)`` active contacts per world."""
        return self._index.join([m.contact_count() for m in self._members])

    @property
    def health(self) -> health.Report:
        """Every group's :class:`~mjxrunner.engine.health.Report`, joined over global ids."""
        return join_reports(self._index, [m.health for m in self._members])

    @property
    def backend_info(self) -> dict[str, Any]:
        """Versions, impl, device and dtypes, plus each group's model sizes."""
        info = dict(self._members[0].backend_info)
        info["groups"] = [
            {"num_envs": m.num_envs, "nq": m.mj_model.nq, "nu": m.mj_model.nu}
            for m in self._members
        ]
        return info

    # --- controls and flags -----------------------------------------------------------

    def action_dim(self) -> int:
        """Columns of an action row: the largest ``nu`` of the groups."""
        return max(m.action_dim() for m in self._members)

    @property
    def action_mask(self) -> np.ndarray:
        """``(num_envs, action_dim())`` bool: the columns each world's group uses."""
        used = [np.ones((m.num_envs, m.action_dim()), bool) for m in self._members]
        return padded(used, self.action_dim())

    @property
    def control(self) -> np.ndarray:
        """``(num_envs, action_dim())`` NumPy copy of the controls, zero-padded."""
        return padded([host_copy(m.control) for m in self._members], self.action_dim())

    def _write_ctrl(self, mask: np.ndarray, full: np.ndarray) -> None:
        members, index = self._members, self._index
        values = [v[:, : m.action_dim()] for v, m in zip(index.split(full), members, strict=True)]
        ctrls = _set_ctrl(tuple(m.state.ctrl for m in members), index.split(mask), values)
        for m, ctrl in zip(members, ctrls, strict=True):
            m.engine = m.engine.replace(state=m.state.replace(ctrl=ctrl))

    def set_done_flags(self, terminated: Any, truncated: Any) -> None:
        """Replaces the ``(num_envs,)`` bool ``terminated`` and ``truncated`` flags."""
        n = (self.num_envs,)
        terminated = checks.bool_vector(terminated, "terminated", n)
        truncated = checks.bool_vector(truncated, "truncated", n)
        for m, te, tr in zip(
            self._members,
            self._index.split(terminated),
            self._index.split(truncated),
            strict=True,
        ):
            m.set_done_flags(te, tr)

    # --- stepping -----------------------------------------------------------------------

    def block_until_ready(self) -> GroupRunner:
        """Waits until every group's steps are done; as
        :meth:`MultiEnvRunner.block_until_ready`."""
        for m in self._members:
            m.block_until_ready()
        return self

    def step(self, dt: float | None = None, substeps: int = 1) -> None:
        """Advances every world of every group in one compiled call; as
        :meth:`MultiEnvRunner.step`. A ``"raise"`` guard in any group rolls back
        every group and names global world ids."""
        substeps = checks.count(substeps, "substeps")
        if dt is not None:
            dt = checks.positive_scalar(dt, "dt", backend.float_dtype())
        engs = [m.engine for m in self._members]
        out = _advance(
            tuple(runner_._for_step(e) for e in engs),
            tuple(m._scratch for m in self._members),
            dt,
            substeps,
            tuple(m._collide(None) for m in self._members),  # each group's contact switch
        )
        befores = []
        for m, e, (model, state) in zip(self._members, engs, out, strict=True):
            new = e.replace(model=e.model if model is None else model, state=state)
            befores.append(m._install(new))
        found = [m._found(b) for m, b in zip(self._members, befores, strict=True)]
        failed = [(g, f) for g, f in enumerate(found) if f is not None]
        if failed:
            states = [m._roll_back(b) for m, b in zip(self._members, befores, strict=True)]
            g, (guard, worlds) = failed[0]
            raise guard.error(guard.message(np.asarray(worlds) + self._index.starts[g], states[g]))

    # --- resets ---------------------------------------------------------------------------

    def reset(self, mask: Any = None) -> None:
        """Restores worlds from each group's default snapshot (DESIGN's reset rules).

        Args:
          mask: None restores everything. ``(num_envs,)`` bool restores the
            world-indexed leaves of the selected worlds; ``(num_envs + 1,)`` bool
            with the last entry True also restores the shared leaves of every group.
        """
        n = self.num_envs
        masks: list[Any] = [None] * self.num_groups
        if mask is not None:
            mask = checks.bool_vector(mask, "mask", (n, n + 1))
            masks = self._index.split_mask(mask)
        engs = [m.engine for m in self._members]  # each read once: it may unpack the state
        states = tuple(e.state for e in engs)
        self._take(_restore(tuple(e.replace(state=None) for e in engs), states, tuple(masks)))

    def reset_all(self) -> None:
        """Restores every world and every shared leaf; the RNGs keep advancing."""
        self.reset(None)

    def reset_envs(self, env_ids: Any) -> None:
        """Restores the world-indexed leaves of global ``env_ids``."""
        self.reset(checks.ids_mask(env_ids, self.num_envs))

    def build_default(self) -> None:
        """Makes every group's current state and model its reset snapshot."""
        for m in self._members:
            m.build_default()

    # --- parameters and randomization ----------------------------------------------------

    def param(self, path: str) -> tuple[np.ndarray, ...]:
        """Per group, the NumPy copy of model field ``path`` (core shape or
        ``(n_g, *core)``)."""
        return tuple(m.param(path) for m in self._members)

    def set_param(self, path: str, values: Any, env_ids: Any = None) -> None:
        """Sets a model field for all worlds or per world, with global ids.

        ``values`` as :meth:`MultiEnvRunner.set_param`: with ``env_ids=None`` the
        core shape (every group, shared) or ``(num_envs, *core)``; with ``env_ids``
        ``(len(env_ids), *core)`` or the core shape. The core shape must fit every
        group touched; a field whose shape differs between groups is set through ids
        of one group. Every group is checked before any changes.
        """
        models = [m.model for m in self._members]
        for g, new in route_values(self._index, models, path, values, env_ids):
            self._members[g]._write_params({path: new})

    def set_gravity(self, gravity: Any, world: int | None = None) -> None:
        """Gravity ``(3,)`` for every world or for global ``world`` only."""
        if world is None:
            for m in self._members:
                m.set_gravity(gravity)  # validates before the first write
            return
        g, local = self._index.local(checks.env_id(world, self.num_envs, "world (env_ids)"))
        self._members[g].set_gravity(gravity, world=local)

    def set_randomization(
        self, terms: Any, *, on_reset: bool = True, every_n_steps: int = 0, at_startup: bool = True
    ) -> None:
        """Declares the same randomized parameters for every group (see
        :meth:`MultiEnvRunner.set_randomization`); each world draws from its own
        stream. A term that does not fit some group's model is refused before any
        group changes."""
        for g, m in enumerate(self._members):
            try:
                params.check_randomization(
                    m.engine.default_model.tree, terms, on_reset, every_n_steps
                )
            except (ValueError, TypeError) as e:
                raise type(e)(f"group {g}: {e}") from None
        for m in self._members:
            m.set_randomization(
                terms, on_reset=on_reset, every_n_steps=every_n_steps, at_startup=False
            )
        if terms and at_startup:
            self.randomize()

    def randomize(self, env_ids: Any = None) -> None:
        """Redraws the randomized parameters of all worlds or of global ``env_ids``,
        in one compiled call."""
        if any(m.engine.config.randomization is None for m in self._members):
            raise ValueError("no randomization declared: call set_randomization(terms) first")
        masks = self._index.split_mask(checks.ids_mask(env_ids, self.num_envs))
        self._take(
            _redraw(tuple(m.engine.replace(default=None) for m in self._members), tuple(masks))
        )

    def _take(self, out: Sequence[tuple[Any, Any]]) -> None:
        """Every group's new ``(model, state)``."""
        for m, (model, state) in zip(self._members, out, strict=True):
            m.engine = m.engine.replace(model=model, state=state)

    # --- devices ----------------------------------------------------------------------------

    def shard(self, devices: Any) -> None:
        """Splits every group over ``devices`` (each group's size a multiple of
        their number); see :meth:`MultiEnvRunner.shard`. Checked for every group
        before any moves."""
        from mjxrunner.engine import sharding

        mesh = sharding.make_mesh(devices)
        for g, m in enumerate(self._members):
            try:
                sharding.check_divisible(m.num_envs, mesh)
            except ValueError as e:
                raise ValueError(f"group {g}: {e}") from None
        for m in self._members:
            m.shard(mesh)

    # --- checkpoints --------------------------------------------------------------------------

    def save(self, path: str | os.PathLike) -> None:
        """Writes every group and the layout to one file, atomically."""
        runner_io.save_groups(self, path)

    @classmethod
    def load(
        cls, path: str | os.PathLike, *, devices: Any = None, device: Any = None
    ) -> GroupRunner:
        """A group runner rebuilt from :meth:`save`'s file; it continues bit for bit."""
        load = lambda file, n: runner_.MultiEnvRunner.load(  # noqa: E731
            file, num_envs=n, devices=devices, device=device
        )
        return cls._of(*runner_io.load_groups(path, load))

    @classmethod
    def _of(cls, members: Sequence[Any], origins: np.ndarray, layout_name: str) -> GroupRunner:
        new = cls.__new__(cls)
        new._members = tuple(members)
        new._index = WorldIndex.of([m.num_envs for m in members])
        new._origins, new._layout = origins, layout_name
        return new

    # --- rendering -------------------------------------------------------------------

    def render(
        self, world: int = 0, camera: Any = None, width: int = 320, height: int = 240
    ) -> np.ndarray:
        """``(height, width, 3)`` uint8 picture of global world ``world``, drawn with
        its group's model."""
        g, local = self._index.local(checks.env_id(world, self.num_envs, "world"))
        return self._members[g].render(local, camera, width, height)

    def render_worlds(
        self, worlds: Any, camera: Any = None, width: int = 320, height: int = 240
    ) -> np.ndarray:
        """``(height, len(worlds) * width, 3)``: global ``worlds`` side by side, each
        drawn with its own group's model."""
        ids = checks.env_ids(worlds, self.num_envs, "worlds")
        return np.concatenate([self.render(int(i), camera, width, height) for i in ids], axis=1)

    def __repr__(self) -> str:
        sizes = ", ".join(f"{m.mj_model.nq} dof x {m.num_envs}" for m in self._members)
        return f"GroupRunner([{sizes}], impl={self.impl!r}, device={self.device})"


runner_.register_groups(GroupRunner)
