"""``MultiEnvRunner``: a thin stateful shell over the pure functions in ``core``.

It holds the compiled functions, two state buffers and the default snapshot. A step
writes into the scratch buffer by donation and then swaps, so the previous state
stays readable (``next_data``) until the next step, and stepping keeps two copies of
the batch, not three.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import os
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from jax.sharding import Mesh, PartitionSpec
from mujoco import mjx

from mjxrunner import backend, checkpoint, checks, core, health, params, sharding
from mjxrunner.models import load_any
from mjxrunner.sharding import AXIS, host_copy, on_worlds, specs
from mjxrunner.state import RunnerState
from mjxrunner.worlds import core_ndims, select_worlds, world_mask


def _structure(model: mjx.Model) -> tuple[Any, list[tuple[int, ...]]]:
    """What a compiled step depends on: the treedef (static fields) and leaf shapes."""
    return jax.tree.structure(model), [x.shape for x in jax.tree.leaves(model)]


def _copy(tree: Any) -> Any:
    return jax.tree.map(jnp.copy, tree)


def _cleared(state: RunnerState) -> RunnerState:
    """A copy of ``state`` with counters and flags cleared: a default snapshot."""
    return _copy(state).replace(
        episode_length=jnp.zeros_like(state.episode_length),
        terminated=jnp.zeros_like(state.terminated),
        truncated=jnp.zeros_like(state.truncated),
        unstable=jnp.zeros_like(state.unstable),
    )


@dataclasses.dataclass(frozen=True, eq=False)
class _Treedef:
    """A treedef as a static jit argument that hashes and compares by identity.

    Flattening an ``mjx.Model`` runs MJX's Python flattener over ~100 NumPy static
    fields, and a jit cache lookup compares them: about half a millisecond per
    call, as much as a step of hundreds of cartpoles. So the runner keeps its
    models flat (:class:`_FlatModel`) and passes leaves plus this holder, interned
    by :func:`_interned` so runners of equal models share compiled functions.
    """

    value: Any


# A static node: inside a jit argument it is treedef, not a leaf.
jax.tree_util.register_static(_Treedef)


@functools.lru_cache(maxsize=64)
def _interned(treedef: Any) -> _Treedef:
    return _Treedef(treedef)


class _FlatModel:
    """An ``mjx.Model`` held as leaves for jit calls; the tree is rebuilt on demand."""

    def __init__(self, treedef: _Treedef, leaves: list, tree: mjx.Model | None = None):
        self.treedef, self.leaves, self._tree = treedef, leaves, tree

    @classmethod
    def of(cls, model: mjx.Model) -> _FlatModel:
        leaves, treedef = jax.tree.flatten(model)
        return cls(_interned(treedef), leaves, model)

    @property
    def pair(self) -> tuple[_Treedef, list]:
        """``(treedef, leaves)``: a jit argument whose treedef part is static."""
        return self.treedef, self.leaves

    @property
    def tree(self) -> mjx.Model:
        if self._tree is None:
            self._tree = _unflat(self.pair)
        return self._tree


def _unflat(pair: tuple[_Treedef, list]) -> mjx.Model:
    """The model of a ``(treedef, leaves)`` pair (inside jit: at trace time only)."""
    return jax.tree.unflatten(pair[0].value, pair[1])


def _step_into(model, state, scratch, dt, substeps, truncate, mesh, check):
    del scratch  # donated: its buffers receive the new state
    model = _unflat(model)
    step = functools.partial(
        core.step, substeps=substeps, truncate_on_overflow=truncate, check=check
    )
    return on_worlds(step, mesh, model, state, dt)


def _split_rng(state: RunnerState) -> tuple[RunnerState, jax.Array]:
    """Advances every world's key; returns the state and one fresh key per world."""
    keys = jax.vmap(jax.random.split)(state.rng)
    return state.replace(rng=keys[:, 0]), keys[:, 1]


def _randomize_worlds(rand, model, default_model, state, mask, mesh=None):
    def draw(model, default_model, state, mask):
        state, keys = _split_rng(state)
        model = params.randomize(model, default_model, keys, mask, rand.terms, rand.ref)
        return model, state

    return on_worlds(draw, mesh, model, default_model, state, mask, per_world=(3,))


def _step_randomized(
    rand, model, state, scratch, default_model, dt, substeps, truncate, mesh, check
):
    """A step that redraws the parameters of worlds every ``rand.every_n_steps``."""
    del scratch

    def step(model, state, default_model, dt):
        state = core.step(model, state, dt, substeps, truncate, check)
        due = state.episode_length % rand.every_n_steps == 0
        return _randomize_worlds(rand, model, default_model, state, due)

    return on_worlds(step, mesh, model, state, default_model, dt)


def _rollout_into(model, state, scratch, actions_or_policy, n_steps, dt, substeps, mesh, check):
    del scratch  # donated, as in _step_into
    # Actions and the trajectory are (n_steps, num_envs, ...): time-major, so their
    # world axis is the second one.
    time_major = lambda shapes: (  # noqa: E731
        specs(shapes[0]),
        jax.tree.map(lambda _: PartitionSpec(None, AXIS), shapes[1]),
    )
    if callable(actions_or_policy):

        def run(m, s, dt):
            return core.rollout(m, s, actions_or_policy, n_steps, dt, substeps, check=check)

        return on_worlds(run, mesh, model, state, dt, out_specs=time_major)

    def run_actions(m, s, actions, dt):
        actions = jnp.swapaxes(actions, 0, 1)
        return core.rollout(m, s, actions, n_steps, dt, substeps, check=check)

    actions = jnp.swapaxes(actions_or_policy, 0, 1)  # world-major to split it
    return on_worlds(
        run_actions, mesh, model, state, actions, dt, per_world=(2,), out_specs=time_major
    )


def _reset_flat(rand, model, state, default_model, default_state, mask, mesh):
    """:func:`_reset` over ``(treedef, leaves)`` models (see :class:`_Treedef`);
    returns the model's leaves."""
    model, state = _reset(
        rand, _unflat(model), state, _unflat(default_model), default_state, mask, mesh
    )
    return jax.tree.leaves(model), state


def _reset(rand, model, state, default_model, default_state, mask, mesh):
    if mask is None:
        model, state = default_model, _copy(core.kept_by_reset(state, default_state))
        done = jnp.ones((state.num_envs,), bool)
    else:
        done, shared = core.parse_mask(mask, state.num_envs)
        model, state = on_worlds(
            _restore, mesh, model, state, default_model, default_state, done, shared, per_world=(4,)
        )
    state = state.replace(health=health.count_resets(state.health, done))
    if rand is not None and rand.on_reset:
        model, state = _randomize_worlds(rand, model, default_model, state, done, mesh)
    return model, state


def _restore(model, state, default_model, default_state, done, shared):
    model = select_worlds(done, default_model, model, shared)
    return model, core.reset_selected(state, default_state, done, shared)


_reset_plain = functools.partial(_reset_flat, None)


@dataclasses.dataclass(frozen=True, eq=False)
class _Randomization:
    """What the compiled step and reset need to redraw parameters (closed over)."""

    terms: tuple[params.Term, ...]
    on_reset: bool
    every_n_steps: int
    ref: params.Reference


def _set_ctrl(ctrl, mask, values):
    # Only ctrl goes in and out: passing the whole state costs ~0.4 ms of per-leaf
    # dispatch per call, as much as a step of hundreds of cartpoles.
    return jnp.where(mask[:, None], values, ctrl)


def _set_flags(state, terminated, truncated):
    return state.replace(terminated=terminated, truncated=truncated)


OVERFLOW_POLICIES = ("raise", "warn", "truncate")


class MultiEnvRunner:
    """``num_envs`` MuJoCo worlds stepped together on MJX.

    Args:
      model: an ``MjModel``, a name from ``models/`` (see ``mjxrunner.models.list()``),
        a path to an MJCF/MJB file, or MJCF text.
      num_envs: number of worlds.
      impl: MJX implementation, ``"jax"`` or ``"warp"``; always passed to MJX.
      seed: seeds the per-world RNG keys.
      device: None (JAX's default device), a ``jax.Device`` or a platform name.
      keyframe: name or index of a keyframe to start from (None: ``qpos0``).
      graph_mode: Warp's CUDA-graph mode (``"none"``, ``"jax"``, ``"warp"``,
        ``"warp_staged"``, ``"warp_staged_ex"``); None picks ``"warp"`` on CUDA and
        ``"jax"`` on CPU. Ignored by impl "jax".
      naconmax: Warp contact pool for all worlds together (default: 4 per
        collidable geom plus 8, times ``num_envs``; see ``backend.capacities``).
      njmax: Warp constraint rows per world (default: from the model's equality,
        friction-loss, limit and contact rows).
      naccdmax: Warp convex-collision contact pool (default ``naconmax``).
      nvmax: Warp active DOFs per world (default ``nv``).
      overflow_policy: what a Warp capacity overflow does: ``"raise"`` (roll back
        the step and raise ``CapacityOverflowError``), ``"warn"`` (a
        ``CapacityWarning`` per step that overflows) or ``"truncate"`` (mark those
        worlds truncated, on device, so the next reset replaces them). Overflow is
        never dropped: ``runner.overflow`` always holds the last step's bits.
      devices: None (one device), or devices to split the worlds across; see
        :meth:`shard`.
      instability_policy: what a world whose state turns NaN/Inf or whose
        ``|qvel|`` exceeds ``max_qvel`` does (checked inside the compiled step, see
        :mod:`mjxrunner.health`): ``"reset"`` (default: mark it truncated and count
        it, on device, so the next reset of truncated worlds replaces it),
        ``"warn"`` (an ``InstabilityWarning`` when a world becomes unstable) or
        ``"raise"`` (roll back the step and raise ``InstabilityError``). ``"warn"``
        and ``"raise"`` read flags back after every step.
      max_qvel: bound on ``|qvel|`` (default MuJoCo's ``mjMAXVAL``, 1e10).

    The state after construction (and after :meth:`build_default`) is the default
    snapshot that resets restore.
    """

    def __init__(
        self,
        model: mujoco.MjModel | str | os.PathLike,
        num_envs: int,
        *,
        impl: str = "jax",
        seed: int = 0,
        device: Any = None,
        keyframe: int | str | None = None,
        graph_mode: str | None = None,
        naconmax: int | None = None,
        njmax: int | None = None,
        naccdmax: int | None = None,
        nvmax: int | None = None,
        overflow_policy: str = "raise",
        devices: Any = None,
        instability_policy: str = "reset",
        max_qvel: float = health.MAX_QVEL,
    ):
        num_envs = checks.count(num_envs, "num_envs")
        impl = backend.check_impl(impl)
        seed = checks.count(seed, "seed", minimum=0)
        if overflow_policy not in OVERFLOW_POLICIES:
            raise ValueError(
                f"overflow_policy must be one of {OVERFLOW_POLICIES}, got {overflow_policy!r}"
            )
        if instability_policy not in health.POLICIES:
            raise ValueError(
                f"instability_policy must be one of {health.POLICIES}, got {instability_policy!r}"
            )
        check = health.Check(max_qvel, truncate=instability_policy == "reset")
        device = backend.resolve_device(device)
        mj_model = copy.copy(load_any(model))  # later edits of the caller's model stay there
        backend.check_supported(mj_model, impl)
        graph_mode = backend.check_graph_mode(graph_mode, device) if impl == "warp" else None
        caps = (
            backend.capacities(mj_model, num_envs, naconmax, njmax, naccdmax, nvmax)
            if impl == "warp"
            else None
        )
        mj_data = mujoco.MjData(mj_model)
        if keyframe is not None:
            mujoco.mj_resetDataKeyframe(mj_model, mj_data, self._keyframe_id(mj_model, keyframe))
        mujoco.mj_forward(mj_model, mj_data)

        self._mj_model = mj_model
        self._impl = impl
        self._device = device
        self._num_envs = num_envs
        self._graph_mode = graph_mode
        self._caps = caps
        self._overflow_policy = overflow_policy
        self._instability_policy = instability_policy
        self._check = check
        self._model = backend.put_model(mj_model, impl, device, graph_mode)
        template = backend.put_data(mj_model, mj_data, impl, device, caps)

        self._ref: params.Reference | None = None  # built when masses first change
        self._randomization: _Randomization | None = None
        self._recompute_fn = None
        self._copy = jax.jit(_copy)
        self._cleared = jax.jit(_cleared)
        self._build_step_and_reset()
        # Actions are traced; a policy is a function, so it is static (one compile each).
        self._rollout_actions_fn = jax.jit(
            _rollout_into, static_argnums=(4, 6, 7, 8), donate_argnums=(2,), keep_unused=True
        )
        self._rollout_policy_fn = jax.jit(
            _rollout_into, static_argnums=(3, 4, 6, 7, 8), donate_argnums=(2,), keep_unused=True
        )
        self._set_ctrl_fn = jax.jit(_set_ctrl, donate_argnums=(0,))
        self._set_flags_fn = jax.jit(_set_flags, donate_argnums=(0,))
        self._contact_count_fn = jax.jit(
            lambda data, mesh: on_worlds(
                core.contact_count, mesh, data, out_specs=lambda _: PartitionSpec(AXIS)
            ),
            static_argnums=(1,),
        )

        with jax.default_device(device):
            init = jax.jit(core.init, static_argnums=(1, 3))
            self._state = init(template, num_envs, jax.random.key(seed), mj_model.nu)
        self._scratch = self._copy(self._state)
        self._default_model = self._model
        self._structure = _structure(self._model)
        self._default = self._cleared(self._state)
        self._layout = "linear"
        self._origins = np.zeros((num_envs, 3))
        self.set_linear_layout(0.0)
        self._mesh: Mesh | None = None
        if devices is not None:
            self.shard(devices)

    # --- devices --------------------------------------------------------------------

    @property
    def mesh(self) -> Mesh | None:
        """The ``"worlds"`` mesh the runner is sharded over (None: one device)."""
        return self._mesh

    def shard(self, devices: Any) -> None:
        """Splits the worlds across devices (of one or several processes).

        Args:
          devices: a ``jax.sharding.Mesh`` with the single axis ``"worlds"``, an int
            (the first n devices), a list of devices, or ``"all"``.

        World-indexed leaves are partitioned along ``"worlds"`` and shared leaves
        replicated (both from the world-axis rule); every compiled function then
        runs under ``shard_map``, each device stepping its own worlds without
        communication. ``num_envs`` must be divisible by the number of devices.
        With impl "warp" each device keeps its own contact pool of ``naconmax``.
        """
        mesh = sharding.make_mesh(devices)
        sharding.check_divisible(self._num_envs, mesh)
        self._mesh = mesh
        self._model = self._put(self._model)
        self._default_model = self._put(self._default_model)
        self._state = self._put(self._state)
        self._scratch = self._put(self._scratch)
        self._default = self._put(self._default)

    def _put(self, tree: Any) -> Any:
        """Places a tree like the runner's buffers (one device, or the mesh)."""
        if self._mesh is None:
            return jax.device_put(tree, self._device)
        return sharding.place(tree, self._mesh)

    def _build_step_and_reset(self) -> None:
        """Assembles the compiled step and reset for the current randomization."""
        rand = self._randomization
        if rand is not None and rand.every_n_steps:
            step = functools.partial(_step_randomized, rand)
            self._step_fn = jax.jit(
                step, static_argnums=(5, 6, 7, 8), donate_argnums=(2,), keep_unused=True
            )
        else:
            self._step_fn = jax.jit(
                _step_into, static_argnums=(4, 5, 6, 7), donate_argnums=(2,), keep_unused=True
            )
        # Without randomization the module-level function is used, so runners of the
        # same model share one compiled reset.
        reset = _reset_plain if rand is None else functools.partial(_reset_flat, rand)
        self._reset_fn = jax.jit(reset, donate_argnums=(1,), static_argnums=(5,))
        self._randomize_fn = (
            None
            if rand is None
            else jax.jit(functools.partial(_randomize_worlds, rand), static_argnums=(4,))
        )

    @staticmethod
    def _keyframe_id(m: mujoco.MjModel, keyframe: int | str) -> int:
        if isinstance(keyframe, str):
            i = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_KEY, keyframe)
            if i < 0:
                names = [m.key(k).name for k in range(m.nkey)]
                raise ValueError(f"no keyframe named {keyframe!r}; keyframes: {names}")
            return i
        i = checks.count(keyframe, "keyframe", minimum=0)
        if i >= m.nkey:
            raise ValueError(f"keyframe index {i} out of range: the model has {m.nkey}")
        return i

    # --- properties -------------------------------------------------------------

    @property
    def model(self) -> mjx.Model:
        """The device ``mjx.Model`` (it does not follow later edits of ``mj_model``)."""
        return self._model

    # The model and the default model live flat (see _Treedef); every assignment
    # passes through these setters, so the leaves the compiled calls get never lag.

    @property
    def _model(self) -> mjx.Model:
        return self._flat_model.tree

    @_model.setter
    def _model(self, model: mjx.Model) -> None:
        self._flat_model = _FlatModel.of(model)

    @property
    def _default_model(self) -> mjx.Model:
        return self._flat_default.tree

    @_default_model.setter
    def _default_model(self, model: mjx.Model) -> None:
        self._flat_default = _FlatModel.of(model)

    @property
    def mj_model(self) -> mujoco.MjModel:
        """The host ``MjModel`` the runner was built from."""
        return self._mj_model

    @property
    def state(self) -> RunnerState:
        """The current :class:`RunnerState` (valid until the next step or reset)."""
        return self._state

    @property
    def data(self) -> mjx.Data:
        """Current batched ``mjx.Data``; its buffers are reused two steps later."""
        return self._state.data

    @property
    def next_data(self) -> mjx.Data:
        """The scratch buffer: after a step, the state before that step."""
        return self._scratch.data

    @property
    def control(self) -> jax.Array:
        """``(num_envs, nu)`` controls applied at the next step."""
        return self._state.ctrl

    @property
    def num_envs(self) -> int:
        return self._num_envs

    @property
    def impl(self) -> str:
        return self._impl

    @property
    def device(self) -> jax.Device:
        return self._device

    @property
    def layout(self) -> str:
        """How ``env_origins`` were laid out: ``"linear"``, ``"grid"`` or ``"custom"``."""
        return self._layout

    @property
    def episode_length(self) -> np.ndarray:
        """``(num_envs,)`` int32 NumPy copy of the steps since each world's reset."""
        return host_copy(self._state.episode_length)

    @property
    def terminated(self) -> np.ndarray:
        """``(num_envs,)`` bool NumPy copy."""
        return host_copy(self._state.terminated)

    @property
    def truncated(self) -> np.ndarray:
        """``(num_envs,)`` bool NumPy copy."""
        return host_copy(self._state.truncated)

    @property
    def env_origins(self) -> np.ndarray:
        """``(num_envs, 3)`` NumPy copy of the display origins of the worlds."""
        return self._origins.copy()

    @property
    def backend_info(self) -> dict[str, Any]:
        """Versions, impl, device and dtypes: record it with every result."""
        return backend.backend_info(self._impl, self._device, self._graph_mode, self._caps)

    @property
    def capacities(self) -> backend.Capacities | None:
        """Warp buffer sizes (None for impl "jax")."""
        return self._caps

    @property
    def overflow_policy(self) -> str:
        return self._overflow_policy

    @property
    def overflow(self) -> np.ndarray:
        """``(num_envs,)`` int32 NumPy copy: Warp capacity-overflow bits of the last
        step per world (``backend.overflow_names`` decodes them; 0 for impl "jax")."""
        return host_copy(self._state.overflow)

    @property
    def instability_policy(self) -> str:
        return self._instability_policy

    @property
    def max_qvel(self) -> float:
        """The ``|qvel|`` above which a world counts as unstable."""
        return self._check.max_qvel

    @property
    def health(self) -> health.Report:
        """NumPy snapshot of the flags and counters of every world: unstable worlds
        (last step and counts), Warp overflow (last step and counts) and resets."""
        return health.Report.from_state(self._state)

    def contact_count(self) -> np.ndarray:
        """``(num_envs,)`` NumPy count of active contacts per world (both impls)."""
        return host_copy(self._contact_count_fn(self._state.data, self._mesh))

    def to_numpy(self, tree: Any) -> Any:
        """NumPy copies of a tree of the runner's arrays, whole even when they are
        sharded over devices or processes (every process must call it together)."""
        return jax.tree.map(host_copy, tree)

    def action_dim(self) -> int:
        """Number of controls per world (``nu``)."""
        return self._mj_model.nu

    # --- controls and flags -----------------------------------------------------

    def set_actions(self, actions: Any, env_ids: Any = None) -> None:
        """Sets the controls of all worlds, or of ``env_ids`` only.

        Args:
          actions: ``(num_envs, nu)``, or ``(len(env_ids), nu)`` with ``env_ids``;
            finite real numbers. MuJoCo clamps them to ``ctrlrange`` when limited.
          env_ids: None or unique world indices.
        """
        ids = (
            np.arange(self._num_envs)
            if env_ids is None
            else checks.env_ids(env_ids, self._num_envs)
        )
        values = checks.finite_array(
            actions, "actions", (len(ids), self.action_dim()), backend.float_dtype()
        )
        full = np.zeros((self._num_envs, self.action_dim()), values.dtype)
        full[ids] = values  # row k of actions belongs to world ids[k]
        mask = np.zeros((self._num_envs,), bool)
        mask[ids] = True
        self._state = self._state.replace(ctrl=self._set_ctrl_fn(self._state.ctrl, mask, full))

    def clear_actions(self, env_ids: Any = None) -> None:
        """Zeroes the controls of all worlds, or of ``env_ids`` only."""
        mask = checks.ids_mask(env_ids, self._num_envs)
        full = np.zeros((self._num_envs, self.action_dim()), backend.float_dtype())
        self._state = self._state.replace(ctrl=self._set_ctrl_fn(self._state.ctrl, mask, full))

    def set_done_flags(self, terminated: Any, truncated: Any) -> None:
        """Replaces the ``(num_envs,)`` bool ``terminated`` and ``truncated`` flags."""
        n = (self._num_envs,)
        terminated = checks.bool_vector(terminated, "terminated", n)
        truncated = checks.bool_vector(truncated, "truncated", n)
        self._state = self._set_flags_fn(self._state, terminated, truncated)

    # --- stepping -----------------------------------------------------------------

    def step(self, dt: float | None = None, substeps: int = 1) -> None:
        """Advances every world by ``dt`` in ``substeps`` solver calls.

        Args:
          dt: step length in seconds; None means ``substeps * timestep``.
          substeps: solver calls per step, each of ``dt / substeps`` seconds. Each
            distinct value compiles once.
        """
        substeps = checks.count(substeps, "substeps")
        if dt is not None:
            dt = checks.positive_scalar(dt, "dt", backend.float_dtype())
        truncate = self._overflow_policy == "truncate"
        if self._randomization is not None and self._randomization.every_n_steps:
            self._model, new = self._step_fn(
                self._model,
                self._state,
                self._scratch,
                self._default_model,
                dt,
                substeps,
                truncate,
                self._mesh,
                self._check,
            )
        else:
            new = self._step_fn(
                self._flat_model.pair,
                self._state,
                self._scratch,
                dt,
                substeps,
                truncate,
                self._mesh,
                self._check,
            )
        self._scratch, self._state = self._state, new
        self._check_overflow()
        self._check_health()

    def _check_overflow(self) -> None:
        """Applies the overflow policy ``"raise"`` or ``"warn"`` (impl "warp" only).

        It reads ``(num_envs,)`` ints back every step, which waits for the step to
        finish; ``"truncate"`` stays on device.
        """
        if self._impl != "warp" or self._overflow_policy == "truncate":
            return
        bits = host_copy(self._state.overflow)
        if not bits.any():
            return
        message = backend.describe_overflow(bits, self._caps)
        if self._overflow_policy == "warn":
            warnings.warn(message, backend.CapacityWarning, stacklevel=3)
            return
        # Roll back to the state before the step: the scratch buffer still holds it.
        # The failed step's bits stay readable in ``overflow``.
        self._scratch, self._state = self._state, self._scratch
        self._state = self._put(self._state.replace(overflow=bits))
        raise backend.CapacityOverflowError(message)

    def _check_health(self) -> None:
        """Applies the instability policy ``"raise"`` or ``"warn"``.

        ``"reset"`` stays on device. The others read the flags and counters back
        (one small transfer, which waits for the step); the scratch buffer still
        holds the state before the step, so ``"raise"`` can roll back to it.
        """
        if self._instability_policy == "reset":
            return
        state, previous = self._state, self._scratch
        flags, after, before = (
            host_copy(x) for x in (state.unstable, state.health.unstable, previous.health.unstable)
        )
        # A rollout may have passed through instability and left it: the count tells.
        bad = np.flatnonzero(flags | (after > before))
        if not bad.size:
            return
        message = health.describe(bad, self._check)
        if self._instability_policy == "warn":
            if (after > before).any():  # only new events: a NaN world stays NaN
                warnings.warn(message, health.InstabilityWarning, stacklevel=3)
            return
        # Roll back; the failed step's flags and counts stay readable in ``health``.
        failed = self._state
        self._scratch, self._state = failed, self._scratch
        self._state = self._state.replace(
            unstable=self._copy(failed.unstable), health=self._copy(failed.health)
        )
        raise health.InstabilityError(message)

    def rollout(
        self, actions_or_policy: Any, n_steps: int, dt: float | None = None, substeps: int = 1
    ) -> Any:
        """Runs ``n_steps`` steps in one compiled ``lax.scan`` (see :func:`core.rollout`).

        Args:
          actions_or_policy: ``(n_steps, num_envs, nu)`` finite controls, or a
            function ``policy(state, keys) -> (num_envs, nu)`` (compiled once per
            function object).
          n_steps: number of steps.
          dt: as in :meth:`step`.
          substeps: as in :meth:`step`.

        Returns:
          The trajectory ``(qpos (n_steps, num_envs, nq), qvel (n_steps, num_envs, nv))``
          as device arrays. The runner ends in the final state, ``next_data`` holds
          the state before the rollout.
        """
        n_steps = checks.count(n_steps, "n_steps")
        substeps = checks.count(substeps, "substeps")
        if dt is not None:
            dt = checks.positive_scalar(dt, "dt", backend.float_dtype())
        if callable(actions_or_policy):
            fn = self._rollout_policy_fn
        else:
            fn = self._rollout_actions_fn
            shape = (n_steps, self._num_envs, self.action_dim())
            actions_or_policy = checks.finite_array(
                actions_or_policy, "actions", shape, backend.float_dtype()
            )
        new, trajectory = fn(
            self._model,
            self._state,
            self._scratch,
            actions_or_policy,
            n_steps,
            dt,
            substeps,
            self._mesh,
            self._check,
        )
        self._scratch, self._state = self._state, new
        self._check_overflow()
        self._check_health()
        return trajectory

    # --- resets -------------------------------------------------------------------

    def reset(self, mask: Any = None) -> None:
        """Restores worlds from the default snapshot (see DESIGN's reset rules).

        Args:
          mask: None restores everything (RNG excepted). A ``(num_envs,)`` bool mask
            restores the world-indexed leaves of the selected worlds and leaves
            shared leaves alone; with shape ``(num_envs + 1,)`` the last entry also
            restores the shared leaves whole.
        """
        if mask is not None:
            mask = checks.bool_vector(mask, "mask", (self._num_envs, self._num_envs + 1))
        model, default = self._flat_model, self._flat_default
        leaves, self._state = self._reset_fn(
            model.pair, self._state, default.pair, self._default, mask, self._mesh
        )
        # A full reset returns the default model, whose shapes may differ.
        self._flat_model = _FlatModel((model if mask is not None else default).treedef, leaves)

    def reset_all(self) -> None:
        """Restores every world and every shared leaf; the RNG keeps advancing."""
        self.reset(None)

    def reset_envs(self, env_ids: Any) -> None:
        """Restores the world-indexed leaves of ``env_ids``; shared leaves untouched."""
        self.reset(checks.ids_mask(env_ids, self._num_envs))

    def build_default(self) -> None:
        """Makes the current state and model the snapshot that resets restore."""
        self._default = self._cleared(self._state)
        self._default_model = self._model

    # --- checkpoints (see mjxrunner.checkpoint) --------------------------------------

    def save(self, path: str | os.PathLike) -> None:
        """Writes the whole runner to ``path`` atomically: state, controls, flags,
        counters, RNG keys, per-world parameters, defaults, randomization, layout,
        user state, the model (binary, exact) and the backend identity."""
        checkpoint.save(self, path)

    @classmethod
    def load(
        cls,
        path: str | os.PathLike,
        *,
        num_envs: int | None = None,
        model: Any = None,
        device: Any = None,
        devices: Any = None,
        user_template: Any = None,
    ) -> MultiEnvRunner:
        """A runner rebuilt from a checkpoint; it continues the saved run bit for bit.

        ``num_envs`` and ``model``, when given, are what the caller expects: a
        checkpoint with another number of worlds or a structurally different
        model raises ``CheckpointError`` (a ``ValueError``). See
        :func:`mjxrunner.checkpoint.load`.
        """
        return checkpoint.load(
            path,
            num_envs=num_envs,
            model=model,
            device=device,
            devices=devices,
            user_template=user_template,
        )

    def restore(self, path: str | os.PathLike, *, user_template: Any = None) -> None:
        """Replaces this runner's whole state by a checkpoint's, in place.

        The checkpoint must hold the same ``num_envs`` and a model of the same
        structure; otherwise ``CheckpointError`` is raised and nothing changes.
        """
        new = checkpoint.load(
            path,
            num_envs=self._num_envs,
            model=self._mj_model,
            device=self._device,
            devices=self._mesh,
            user_template=user_template,
        )
        if new.impl != self._impl:
            raise checkpoint.CheckpointError(
                f"checkpoint holds an impl {new.impl!r} runner, this one is {self._impl!r}"
            )
        self.__dict__.update(new.__dict__)

    # --- per-world parameters and randomization ------------------------------------

    def param(self, path: str) -> np.ndarray:
        """NumPy copy of model field ``path``: core shape, or ``(num_envs, *core)``."""
        return host_copy(params.get_leaf(self._model, path))

    def set_param(self, path: str, values: Any, env_ids: Any = None) -> None:
        """Sets a model field for all worlds, or per world.

        Args:
          path: an ``mjx.Model`` array field, e.g. ``"opt.gravity"``, ``"body_mass"``,
            ``"geom_friction"``, ``"dof_damping"``, ``"actuator_gainprm"``,
            ``"opt.timestep"``. Static (structural) fields are refused.
          values: with ``env_ids=None``, the field's core shape (shared by all worlds:
            demotes a per-world field) or ``(num_envs, *core)`` (one value per world:
            promotes it). With ``env_ids``, ``(len(env_ids), *core)`` or the core shape
            (the same value for each of those worlds); the other worlds keep theirs.
          env_ids: None or unique world indices.

        Changing the shape signature (promotion, demotion) recompiles the step once;
        changing values never recompiles. Mass, inertia and armature changes also
        rebuild the constants MuJoCo derives from them (see ``mjxrunner.params``).
        """
        leaf = params.check_settable(self._model, path)
        core_ndim = params.get_leaf(core_ndims(self._model), path)
        core = leaf.shape[leaf.ndim - core_ndim :]
        per_world_now = leaf.ndim > core_ndim
        dtype = leaf.dtype
        if env_ids is None:
            arr = np.asarray(values) if not isinstance(values, jax.Array) else np.array(values)
            if arr.shape not in (core, (self._num_envs, *core)):
                raise ValueError(
                    f"values for {path!r} must have shape {core} (all worlds) or "
                    f"{(self._num_envs, *core)} (per world), got {arr.shape}"
                )
            new = checks.finite_array(arr, f"values for {path!r}", arr.shape, dtype)
        else:
            ids = checks.env_ids(env_ids, self._num_envs)
            arr = np.asarray(values)
            shape = (len(ids), *core)
            if arr.shape == core:
                arr = np.broadcast_to(arr, shape)
            vals = checks.finite_array(arr, f"values for {path!r}", shape, dtype)
            current = np.array(leaf)
            new = current if per_world_now else np.broadcast_to(current, (self._num_envs, *core))
            new = new.copy()
            new[ids] = vals
        params.check_values(path, new)
        model = self._put(self._model.tree_replace({path: new}))
        if path in params.MASS_FIELDS:
            model = self._recompute(model)
        self._model = model

    def update_model(self, source: mujoco.MjModel | None = None, *, fields: Any = None) -> None:
        """Copies new parameter values to the device model: the one way host edits
        reach it.

        Args:
          source: a host ``MjModel`` of the same structure (e.g. ``runner.mj_model``
            after editing it). Its derived constants are recomputed
            (``mj_setConst``) on a copy first; every device field becomes shared
            again, per-world values included.
          fields: or a mapping ``{path: value}`` of core-shaped values for all worlds,
            applied together (``"opt.gravity"``, ``"body_mass"``, ...).

        A structural change (sizes, static fields such as joint types or geom types)
        raises ``ValueError``: build a new runner. The default snapshot is not
        changed: call :meth:`build_default` to make the update survive resets.
        """
        if (source is None) == (fields is None):
            raise TypeError("update_model takes either a host MjModel or fields={path: value}")
        if source is not None:
            if not isinstance(source, mujoco.MjModel):
                raise TypeError(f"source must be a mujoco.MjModel, got {type(source).__name__}")
            host = copy.copy(source)
            mujoco.mj_setConst(host, mujoco.MjData(host))
            try:
                backend.check_supported(host, self._impl)
                new = backend.put_model(host, self._impl, self._device, self._graph_mode)
            except ValueError as e:
                raise ValueError(f"update_model: {e}") from e
            if _structure(new) != self._structure:
                raise ValueError(
                    "update_model: the host model differs in structure (sizes or static "
                    "fields such as joint, geom or actuator types), which is compiled into "
                    "the step; build a new MultiEnvRunner for it"
                )
            self._mj_model = host
            self._model = new
            self._ref = None  # the constants' reference follows the new host model
            if self._randomization is not None:
                self._randomization = dataclasses.replace(
                    self._randomization, ref=self._reference()
                )
                self._build_step_and_reset()
            return
        if not isinstance(fields, dict) or not fields:
            raise TypeError("fields must be a non-empty dict {path: value}")
        updates = {}
        for path, value in fields.items():
            leaf = params.check_settable(self._model, path)
            core = leaf.shape[leaf.ndim - params.get_leaf(core_ndims(self._model), path) :]
            arr = checks.finite_array(value, f"value for {path!r}", core, leaf.dtype)
            params.check_values(path, arr)
            updates[path] = arr
        model = self._put(self._model.tree_replace(updates))
        if set(updates) & params.MASS_FIELDS:
            model = self._recompute(model)
        self._model = model

    def _reference(self) -> params.Reference:
        if self._ref is None:
            self._ref = params.Reference.build(self._mj_model, self._device)
        return self._ref

    def _recompute(self, model: mjx.Model) -> mjx.Model:
        if self._recompute_fn is None:
            self._recompute_fn = jax.jit(params.recompute_derived)
        return self._recompute_fn(model, self._reference())

    def set_gravity(self, gravity: Any, world: int | None = None) -> None:
        """Sets gravity ``(3,)`` for every world (shared) or for world ``world`` only.

        Setting one world promotes gravity to per-world; setting all demotes it.
        """
        g = checks.finite_array(gravity, "gravity", (3,), backend.float_dtype())
        if np.linalg.norm(g) > 1e3:
            raise ValueError(f"gravity must have norm <= 1000 m/s^2, got {np.linalg.norm(g):.3g}")
        if world is None:
            self.set_param("opt.gravity", g)
        else:
            world = checks.env_id(world, self._num_envs, "world (env_ids)")
            self.set_param("opt.gravity", g[None], env_ids=[world])

    def set_randomization(
        self,
        terms: Any,
        *,
        on_reset: bool = True,
        every_n_steps: int = 0,
        at_startup: bool = True,
    ) -> None:
        """Declares randomized parameters (``mjxrunner.params.Term``).

        Args:
          terms: a sequence of ``Term``; empty clears randomization.
          on_reset: redraw the parameters of the worlds a reset selects.
          every_n_steps: if > 0, redraw a world's parameters every that many steps
            of its episode, inside the compiled step.
          at_startup: redraw every world now.

        Each draw starts from the default model (``build_default`` moves it), so
        values never drift. Recompiles the step and reset once.
        """
        terms = params.check_terms(self._default_model, terms)
        every_n_steps = checks.count(every_n_steps, "every_n_steps", minimum=0)
        if not isinstance(on_reset, bool) or not isinstance(at_startup, bool):
            raise TypeError("on_reset and at_startup must be bools")
        self._randomization = (
            _Randomization(terms, on_reset, every_n_steps, self._reference()) if terms else None
        )
        self._build_step_and_reset()
        if terms and at_startup:
            self.randomize()

    def randomize(self, env_ids: Any = None) -> None:
        """Redraws the declared randomized parameters of all worlds or of ``env_ids``."""
        if self._randomization is None:
            raise ValueError("no randomization declared: call set_randomization(terms) first")
        mask = checks.ids_mask(env_ids, self._num_envs)
        self._model, self._state = self._randomize_fn(
            self._model, self._default_model, self._state, mask, self._mesh
        )

    # --- user state -----------------------------------------------------------------

    @property
    def user_state(self) -> Any:
        """The user's pytree attached with :meth:`set_user_state` (None if none)."""
        return self._state.user

    def set_user_state(self, tree: Any) -> None:
        """Attaches a pytree of the user's own to every world's state.

        Leaves of dataclasses declared with ``world_field(core_ndim)`` are per world
        when they carry the extra leading ``num_envs`` axis; undeclared leaves (plain
        dicts of arrays) are shared. It follows resets by the world-axis rule and
        becomes part of the default snapshot now.
        """
        tree = self._put(tree)
        for leaf, is_world in zip(
            jax.tree.leaves(tree), jax.tree.leaves(world_mask(tree)), strict=True
        ):
            if is_world and leaf.shape[0] != self._num_envs:
                raise ValueError(
                    f"a per-world user leaf must lead with num_envs={self._num_envs}, "
                    f"got shape {leaf.shape}"
                )
        self._state = self._state.replace(user=tree)
        self._scratch = self._copy(self._state)
        self._default = self._default.replace(user=self._copy(tree))

    # --- layout (display metadata; never moves bodies in the physics) ---------------

    def env_origin(self, i: int) -> np.ndarray:
        """``(3,)`` display origin of world ``i``."""
        return self._origins[checks.env_id(i, self._num_envs)].copy()

    def set_env_origins(self, origins: Any) -> None:
        """Sets custom ``(num_envs, 3)`` display origins."""
        self._origins = checks.finite_array(
            origins, "origins", (self._num_envs, 3), np.float64
        ).copy()
        self._layout = "custom"

    def set_linear_layout(self, spacing: float) -> None:
        """Places world ``i`` at ``(i * spacing, 0, 0)``."""
        spacing = checks.spacing(spacing, self._num_envs)
        self._origins = np.zeros((self._num_envs, 3))
        self._origins[:, 0] = np.arange(self._num_envs) * spacing
        self._layout = "linear"

    def set_grid_layout(self, spacing: float, columns: int = 0) -> None:
        """Places worlds row by row on a grid, ``columns`` per row (0: near square)."""
        spacing = checks.spacing(spacing, self._num_envs)
        columns = checks.count(columns, "columns", minimum=0)
        # more columns than worlds is one row: clamping keeps huge ints out of NumPy
        columns = min(columns or math.ceil(math.sqrt(self._num_envs)), self._num_envs)
        i = np.arange(self._num_envs)
        self._origins = np.zeros((self._num_envs, 3))
        self._origins[:, 0] = (i % columns) * spacing
        self._origins[:, 1] = (i // columns) * spacing
        self._layout = "grid"

    # --- rendering (mjxrunner.render; copies one world to the host, never the batch) ---

    def render(
        self, world: int = 0, camera: Any = None, width: int = 320, height: int = 240
    ) -> np.ndarray:
        """``(height, width, 3)`` uint8 picture of one world; see :func:`render.render`."""
        from mjxrunner import render

        return render.render(self, world, camera, width, height)

    def render_video(self, worlds: Any = (0,), n_steps: int = 100, **kwargs: Any) -> np.ndarray:
        """Steps and films worlds side by side; see :func:`render.render_video`."""
        from mjxrunner import render

        return render.render_video(self, worlds, n_steps, **kwargs)

    def __repr__(self) -> str:
        return (
            f"MultiEnvRunner({self._mj_model.nq} dof model, num_envs={self._num_envs}, "
            f"impl={self._impl!r}, device={self._device})"
        )
