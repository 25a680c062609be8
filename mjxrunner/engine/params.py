"""Per-world model parameters and domain randomization, on the world axis.

A model leaf is shared (its core shape) or per world (``(num_envs, *core)``); giving
it a world axis promotes it and setting it back to its core shape demotes it. The
step derives its ``vmap`` axes from :func:`mjxrunner.world_mask`, so the same code
serves both.

Changing masses, inertias, armature, body or inertial-frame positions, or ``qpos0``
changes what ``mj_setConst`` computed at compile time. MJX reads these derived
fields: ``body_subtreemass``, ``body_invweight0`` (contact and weld/connect
softness), ``dof_invweight0`` (joint limits and friction loss) and the offsets of
cameras that track a body (``cam_pos0``, ``cam_poscom0``, ``cam_mat0``).
:func:`recompute_derived` rebuilds them per world, at the world's ``qpos0``, the way
MuJoCo does (impl "c" runs MuJoCo's own ``mj_setConst``). Parameters whose derived
quantities we do not rebuild (geometry that MJX caches, ``tendon_invweight0`` and
``tendon_length0`` of models with tendons, the offsets of lights that follow a
body) are refused, and so are new offsets of frames the compiler marked as
coinciding with another (``body_sameframe``, ``geom_sameframe``): MuJoCo C skips
those offsets (:func:`check_same_frames`).
"""

from __future__ import annotations

import dataclasses
import functools
import zlib
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from mujoco import mjx
from mujoco.mjx._src import support

from mjxrunner.engine import backends
from mjxrunner.engine.worlds import (
    core_ndims,
    pytree_dataclass,
    select_worlds,
    static_field,
    world_axes,
)

# Fields whose change alters the derived constants above.
MASS_FIELDS = frozenset({"body_mass", "body_inertia", "dof_armature"})
# The frames and the configuration the constants are derived at; they also move the
# offsets of lights that follow a body.
FRAME_FIELDS = frozenset({"body_pos", "body_ipos", "qpos0"})
# Every field whose change alters the derived constants.
CONST_INPUTS = MASS_FIELDS | FRAME_FIELDS

# Fields MJX caches derived data for (bounding spheres, same-frame flags, ...): a new
# value would be silently inconsistent, so they are refused.
REFUSED = {
    "geom_size": "it sets geom_rbound/geom_aabb, which MJX caches for collision",
    "geom_rbound": "it is derived from geom_size at compile time",
    "body_quat": "a quaternion drawn or set element by element leaves the unit sphere, "
    "and it sets body_sameframe flags at compile time",
    "body_iquat": "a quaternion drawn or set element by element leaves the unit sphere, "
    "and it sets body_sameframe flags at compile time",
    "geom_quat": "a quaternion drawn or set element by element leaves the unit sphere, "
    "and it sets geom_sameframe flags at compile time",
    "body_subtreemass": "it is derived; set body_mass instead",
    "body_invweight0": "it is derived; set body_mass/body_inertia instead",
    "dof_invweight0": "it is derived; set body_mass/body_inertia/dof_armature instead",
    "tendon_invweight0": "it is derived from masses and tendon geometry",
}

# Bounds checked on every value written (inclusive lower bound, strict when noted).
NONNEGATIVE = frozenset(
    {
        "body_mass",
        "body_inertia",
        "dof_armature",
        "dof_damping",
        "dof_frictionloss",
        "geom_friction",
        "jnt_stiffness",
    }
)
POSITIVE = frozenset({"opt.timestep"})
# Fields of ``[lo, hi]`` pairs (last axis): lo <= hi (an unlimited one is [0, 0]).
RANGES = frozenset(
    {
        "jnt_range",
        "jnt_actfrcrange",
        "tendon_range",
        "tendon_actfrcrange",
        "actuator_ctrlrange",
        "actuator_forcerange",
        "actuator_actrange",
        "actuator_lengthrange",
    }
)


def get_leaf(model: mjx.Model, path: str) -> Any:
    """The field of ``model`` at dotted ``path`` (``"opt.gravity"``, ``"body_mass"``)."""
    if not isinstance(path, str) or not path:
        raise TypeError(f"parameter path must be a non-empty str, got {path!r}")
    node = model
    for part in path.split("."):
        if part.startswith("_") or not hasattr(node, part):
            raise ValueError(f"mjx.Model has no field {path!r}")
        node = getattr(node, part)
    return node


def check_settable(model: mjx.Model, path: str) -> jax.Array:
    """The leaf at ``path`` if it is a per-world-capable array, else a clear error."""
    leaf = get_leaf(model, path)
    if path in REFUSED:
        raise ValueError(f"{path!r} cannot be changed per world: {REFUSED[path]}")
    if not isinstance(leaf, jax.Array):
        raise TypeError(
            f"{path!r} is a static {type(leaf).__name__} field of mjx.Model: it is "
            "structural (compiled into the step), so it cannot vary per world or change "
            "without building a new runner"
        )
    if not jnp.issubdtype(leaf.dtype, jnp.floating):
        raise TypeError(f"{path!r} has dtype {leaf.dtype}; only float fields can be set")
    if path in CONST_INPUTS and model.ntendon:
        raise ValueError(
            f"{path!r} changes tendon_invweight0 and tendon_length0, which are not "
            "recomputed for models with tendons"
        )
    fixed = mujoco.mjtCamLight.mjCAMLIGHT_FIXED
    if path in FRAME_FIELDS and np.any(np.asarray(model.light_mode) != fixed):
        raise ValueError(
            f"{path!r} changes the offsets of lights that follow a body (light_pos0, "
            "light_poscom0), which are not recomputed: make the lights fixed to change it"
        )
    return leaf


_FRAME = mujoco.mjtSameFrame
# Offsets MuJoCo C skips: field -> (its same-frame flags, the flag values that skip
# it, what the rows are, why).
SAME_FRAMES = {
    "body_ipos": (
        "body_sameframe",
        (_FRAME.mjSAMEFRAME_BODY,),
        "bodies",
        "their inertial frame was compiled as the body frame (body_sameframe)",
    ),
    "geom_pos": (
        "geom_sameframe",
        (_FRAME.mjSAMEFRAME_BODY, _FRAME.mjSAMEFRAME_INERTIA),
        "geoms",
        "their frame was compiled as their body's or its inertial frame (geom_sameframe)",
    ),
}


def check_same_frames(model: mjx.Model, path: str, *values: np.ndarray) -> None:
    """Refuses new frame offsets that MuJoCo C would skip, where MJX would not.

    The compiler marks a frame that coincides with another (``body_sameframe``,
    ``geom_sameframe``) and MuJoCo C then copies that frame, whatever the offset
    holds: the inertial frame of a body compiled at its body frame (``body_ipos``),
    and a geom compiled at its body's or inertial frame (``geom_pos``). ``values``:
    arrays of ``(..., n, 3)`` that may be written (shared or per world).
    """
    if path not in SAME_FRAMES:
        return
    flags, skipped, rows, why = SAME_FRAMES[path]
    same = np.isin(np.asarray(getattr(model, flags)), skipped)
    base = np.asarray(get_leaf(model, path))
    changed = np.zeros(base.shape[-2], bool)
    for v in values:
        differs = np.asarray(v) != base  # broadcast: shared or per world, either side
        changed |= differs.reshape(-1, *differs.shape[-2:]).any(axis=(0, 2))
    bad = np.flatnonzero(same & changed)
    if bad.size:
        raise ValueError(
            f"{path!r} of {rows} {bad.tolist()} cannot change: {why}, which "
            "MuJoCo keeps. Give them a nonzero offset in the model, or leave them out "
            "(index=)"
        )


def check_values(path: str, values: np.ndarray, upper: np.ndarray | None = None) -> None:
    """Refuses non-finite values and values out of a field's physical range.

    With ``upper``, ``values`` and ``upper`` bound each element of what can be
    written (an element anywhere in its ``[values, upper]``, independently of the
    others, as randomization draws it), and the rules must hold for every such array.
    """
    low, high = values, values if upper is None else upper
    if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
        raise ValueError(f"values for {path!r} must be finite")
    if path in NONNEGATIVE and np.any(low < 0):
        raise ValueError(f"values for {path!r} must be >= 0, got min {low.min()}")
    if path in POSITIVE and np.any(low <= 0):
        raise ValueError(f"values for {path!r} must be > 0, got min {low.min()}")
    if path in RANGES:
        # Worst case of independent elements: the lower end at its highest, the
        # upper end at its lowest.
        bad = np.argwhere(high[..., 0] > low[..., 1])
        if bad.size:
            at = tuple(bad[0])
            raise ValueError(
                f"values for {path!r} must be ranges [lo, hi] with lo <= hi, got "
                f"lo {high[..., 0][at]} > hi {low[..., 1][at]} at index {[int(i) for i in at]}"
            )


# --- derived constants --------------------------------------------------------------


def _derived_one_world(m: mjx.Model, d: mjx.Data, mj: mujoco.MjModel) -> dict[str, jax.Array]:
    """The :data:`DERIVED` constants of one world, as ``mj_setConst`` computes them."""
    d = d.replace(qpos=m.qpos0)
    d = mjx.kinematics(m, d)
    d = mjx.com_pos(m, d)
    d = mjx.crb(m, d)
    minv = jnp.linalg.inv(mjx.full_m(m, d))
    minval = mujoco.mjMINVAL

    subtree = m.body_mass
    for b in range(mj.nbody - 1, 0, -1):  # children come after parents
        subtree = subtree.at[mj.body_parentid[b]].add(subtree[b])

    body_w = [jnp.zeros(2, minv.dtype)]
    for b in range(1, mj.nbody):
        if mj.body_weldid[b] == 0:
            body_w.append(jnp.zeros(2, minv.dtype))
        elif mj.body_simple[b] == 2:
            body_w.append(jnp.stack([1 / jnp.maximum(minval, m.body_mass[b]), 0.0]))
        else:
            jacp, jacr = mjx.jac(m, d, d.xipos[b], b)
            trans = jnp.trace(jacp.T @ minv @ jacp) / 3
            rot = jnp.trace(jacr.T @ minv @ jacr) / 3
            body_w.append(jnp.stack([trans, rot]))

    dof_w = jnp.zeros(mj.nv, minv.dtype)
    for j in range(mj.njnt):
        adr, body = mj.jnt_dofadr[j], mj.jnt_bodyid[j]
        if mj.body_simple[body] == 2:
            dof_w = dof_w.at[adr].set(1 / jnp.maximum(minval, m.body_mass[body]))
            continue
        kind = mj.jnt_type[j]
        if kind == mujoco.mjtJoint.mjJNT_FREE:
            block = jnp.diagonal(minv[adr : adr + 6, adr : adr + 6])
            w = jnp.repeat(jnp.stack([block[:3].mean(), block[3:].mean()]), 3)
        elif kind == mujoco.mjtJoint.mjJNT_BALL:
            w = jnp.repeat(jnp.diagonal(minv[adr : adr + 3, adr : adr + 3]).mean(), 3)
        else:
            w = minv[adr, adr][None]
        dof_w = dof_w.at[adr : adr + w.shape[0]].set(w)

    # Cameras as mj_setConst places them: their own frame on their body at qpos0,
    # offset from the body and from the target's (else the body's) subtree com.
    body = np.asarray(mj.cam_bodyid)
    target = np.where(mj.cam_targetbodyid >= 0, mj.cam_targetbodyid, body)
    cam_xpos, cam_xmat = jax.vmap(support.local_to_global)(
        d.xpos[body], d.xquat[body], m.cam_pos, m.cam_quat
    )  # what MJX's camlight does for a fixed camera

    return {
        "body_subtreemass": subtree,
        "body_invweight0": jnp.stack(body_w),
        "dof_invweight0": dof_w,
        "cam_pos0": cam_xpos - d.xpos[body],
        "cam_poscom0": cam_xpos - d.subtree_com[target],
        "cam_mat0": cam_xmat,
    }


@pytree_dataclass
class Reference:
    """What :func:`recompute_derived` needs: MJX's JAX-impl functions (kinematics,
    composite inertia) on one world, whatever impl the runner steps with.

    Attributes:
      model: impl "jax" ``mjx.Model`` of the same host model, unbatched.
      data: impl "jax" unbatched ``mjx.Data`` (a work buffer).
      mj_model: the host model, for the static tree structure.
    """

    model: mjx.Model
    data: mjx.Data
    mj_model: mujoco.MjModel = static_field()

    @classmethod
    def build(cls, mj_model: mujoco.MjModel, device: jax.Device) -> Reference:
        model = mjx.put_model(mj_model, impl="jax", device=device)
        return cls(model, mjx.make_data(mj_model, impl="jax", device=device), mj_model)


def recompute_derived(model: mjx.Model, ref: Reference) -> mjx.Model:
    """Rebuilds the constants MJX reads that depend on masses, inertias, frames and
    ``qpos0`` (:data:`CONST_INPUTS`).

    World-indexed inputs give world-indexed derived fields; a model whose inputs are
    all shared gets shared derived fields. Works for either impl: the
    constants are computed with MJX's JAX functions on ``ref``.
    """
    if backends.of(model).derives_constants:
        return model  # MuJoCo's own mj_setConst runs per world on the host (see native)
    axes = world_axes(model)
    inputs = {f: getattr(model, f) for f in CONST_INPUTS}
    input_axes = {f: getattr(axes, f) for f in CONST_INPUTS}

    def one(inputs):
        m = ref.model.replace(
            **{k: v.astype(getattr(ref.model, k).dtype) for k, v in inputs.items()}
        )
        return _derived_one_world(m, ref.data, ref.mj_model)

    if any(a == 0 for a in input_axes.values()):
        derived = jax.vmap(one, in_axes=(input_axes,))(inputs)
    else:
        derived = one(inputs)
    return model.replace(**{k: v.astype(getattr(model, k).dtype) for k, v in derived.items()})


# --- randomization ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Term:
    """One randomized parameter.

    Attributes:
      path: model field, e.g. ``"body_mass"``, ``"geom_friction"``, ``"opt.gravity"``.
      low: lower end of the sampled factor (scale) or offset (add) or value (set).
      high: upper end.
      distribution: ``"uniform"`` or ``"loguniform"`` (needs ``0 < low``).
      operation: ``"scale"`` (default value times the draw), ``"add"`` (default plus
        the draw) or ``"set"`` (the draw itself).
      index: None for the whole field, or an index into its core shape (e.g. a body
        id, or ``(geom_id, 0)`` for one friction coefficient).
      link: None, or a name shared by terms that must draw the same numbers (the same
        bounds, distribution, operation and number of elements): one quantity kept in
        several fields, e.g. a position servo's stiffness, which is its gain and, with
        the opposite sign, a bias term.

    Where terms are attached (:func:`check_terms`), every value a term can draw must
    pass the rules ``set_param`` enforces (finite, masses and damping >= 0, timestep
    > 0, ranges ordered), checked at the bounds of its draws.
    """

    path: str
    low: float
    high: float
    distribution: str = "uniform"
    operation: str = "scale"
    index: Any = None
    link: str | None = None

    def __post_init__(self):
        if self.distribution not in ("uniform", "loguniform"):
            raise ValueError(
                f"distribution must be 'uniform' or 'loguniform', got {self.distribution!r}"
            )
        if self.operation not in ("scale", "add", "set"):
            raise ValueError(f"operation must be 'scale', 'add' or 'set', got {self.operation!r}")
        for name in ("low", "high"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v):
                raise TypeError(f"Term {name} must be a finite number, got {v!r}")
        if self.low > self.high:
            raise ValueError(f"Term low ({self.low}) must be <= high ({self.high})")
        if self.distribution == "loguniform" and self.low <= 0:
            raise ValueError("a loguniform term needs 0 < low")
        if self.link is not None and not (isinstance(self.link, str) and self.link):
            raise TypeError(f"Term link must be None or a non-empty str, got {self.link!r}")


@dataclasses.dataclass(frozen=True, eq=False)
class Randomization:
    """Declared randomized parameters and when they are redrawn.

    Compared by identity (a term's index may be a list, which does not hash): each
    declaration compiles the step once.

    Attributes:
      terms: the :class:`Term` s.
      on_reset: redraw the parameters of the worlds a reset (or restart) selects.
      every_n_steps: if > 0, redraw a world's parameters every that many steps of
        its episode, inside the compiled step.
    """

    terms: tuple[Term, ...]
    on_reset: bool = True
    every_n_steps: int = 0


def check_randomization(
    model: mjx.Model, terms: Sequence[Term], on_reset: Any, every_n_steps: Any
) -> Randomization | None:
    """A validated :class:`Randomization`, or None for no terms."""
    from mjxrunner.engine import checks

    terms = check_terms(model, terms)
    every_n_steps = checks.count(every_n_steps, "every_n_steps", minimum=0)
    if not isinstance(on_reset, bool):
        raise TypeError("on_reset and at_startup must be bools")
    return Randomization(terms, on_reset, every_n_steps) if terms else None


def touches_constants(rand: Randomization | None) -> bool:
    """Whether a redraw changes what ``mj_setConst`` derives from (and so needs a
    :class:`Reference`)."""
    return rand is not None and bool({t.path for t in rand.terms} & CONST_INPUTS)


def promote(model: mjx.Model, rand: Randomization | None, num_envs: int) -> mjx.Model:
    """``model`` with every field a redraw writes given its world axis (the drawn
    fields, and the derived constants when their inputs are drawn)."""
    if rand is None:
        return model
    paths = {t.path for t in rand.terms} | (set(DERIVED) if touches_constants(rand) else set())
    return model.tree_replace({p: per_world(model, p, num_envs) for p in paths})


def check_terms(model: mjx.Model, terms: Sequence[Term]) -> tuple[Term, ...]:
    """Validates terms against the model before anything is compiled.

    Each field a term draws must obey the rules of :func:`check_values` (what
    ``set_param`` enforces) over the whole range of its draws: the term's ``low`` and
    ``high`` applied to ``model``'s values give each element's extremes. A later term
    on the same element replaces an earlier one, as :func:`randomize` does.
    """
    terms = tuple(terms)
    bounds: dict[str, list] = {}  # path -> [lowest, highest, term numbers]
    links: dict[str, tuple] = {}  # link -> (first term number, what its draw is)
    for i, t in enumerate(terms):
        if not isinstance(t, Term):
            raise TypeError(f"randomization terms must be Term, got {type(t).__name__}")
        leaf = check_settable(model, t.path)
        core = core_shape(model, t.path)
        if t.index is not None:
            try:
                np.empty(core)[t.index]
            except (IndexError, TypeError) as e:
                raise ValueError(
                    f"index {t.index!r} does not fit {t.path!r} of shape {core}"
                ) from e
        base = np.asarray(leaf)
        lo, hi, which = bounds.setdefault(t.path, [base.copy(), base.copy(), []])
        where = (Ellipsis,) if t.index is None else np.index_exp[t.index]
        where = (slice(None),) * (base.ndim - len(core)) + where
        target = base[where].astype(np.float64)
        if t.link is not None:
            draw = (t.low, t.high, t.distribution, t.operation, target.size)
            first, known = links.setdefault(t.link, (i, draw))
            if known != draw:
                raise ValueError(
                    f"randomization terms {first} {terms[first]!r} and {i} {t!r} share link "
                    f"{t.link!r} but not their draws: (low, high, distribution, operation, "
                    f"elements) {known} against {draw}"
                )
        ends = {
            "scale": (target * t.low, target * t.high),
            "add": (target + t.low, target + t.high),
            "set": (np.full_like(target, t.low), np.full_like(target, t.high)),
        }[t.operation]
        with np.errstate(over="ignore", invalid="ignore"):  # reported as non-finite
            a, b = (e.astype(base.dtype) for e in ends)
        lo[where], hi[where] = np.minimum(a, b), np.maximum(a, b)
        which.append(i)
    for path, (lo, hi, which) in bounds.items():
        try:
            check_values(path, lo, hi)
            check_same_frames(model, path, lo, hi)
        except ValueError as e:
            named = ", ".join(f"{i} {terms[i]!r}" for i in which)
            raise ValueError(
                f"randomization term {named} can draw values set_param refuses (checked "
                f"at the bounds of its draws, low and high applied to the model's "
                f"values): {e}"
            ) from None
    return terms


def link_stream(link: str) -> int:
    """The key stream of linked terms: from the link's name, apart from the term
    numbers that unlinked terms use."""
    return (1 << 30) | (zlib.crc32(link.encode()) & ((1 << 30) - 1))


def _draw(term: Term, shape: tuple[int, ...], dtype: Any, key: jax.Array) -> jax.Array:
    if term.distribution == "uniform":
        return jax.random.uniform(key, shape, dtype, term.low, term.high)
    log = jax.random.uniform(key, shape, dtype, np.log(term.low), np.log(term.high))
    return jnp.exp(log)


def per_world(model: mjx.Model, path: str, num_envs: int) -> jax.Array:
    """The leaf at ``path`` with a world axis, broadcasting it if it is shared."""
    leaf = get_leaf(model, path)
    if leaf.ndim == get_leaf(core_ndims(model), path):
        leaf = jnp.broadcast_to(leaf, (num_envs, *leaf.shape))
    return leaf


DERIVED = (
    "body_subtreemass",
    "body_invweight0",
    "dof_invweight0",
    "cam_pos0",
    "cam_poscom0",
    "cam_mat0",
)


def randomize(
    model: mjx.Model,
    default_model: mjx.Model,
    keys: jax.Array,
    mask: jax.Array,
    terms: Sequence[Term],
    ref: Reference | None = None,
) -> mjx.Model:
    """Draws new parameters for the worlds in ``mask``, each from its default value.

    Every randomized field becomes world-indexed. Draws start from ``default_model``,
    never from the current value, so values never drift over repeated resets.

    Args:
      model: the current ``mjx.Model``.
      default_model: the model to draw around (shared or per world).
      keys: ``(num_envs, 2)`` uint32 raw keys, one per world.
      mask: ``(num_envs,)`` bool, the worlds that get new draws.
      terms: the randomized parameters (validate with :func:`check_terms`).
      ref: needed when a term touches :data:`CONST_INPUTS`, to rebuild derived constants.

    Returns:
      The model with the selected worlds' fields redrawn.
    """
    num_envs = mask.shape[0]
    drawn: dict[str, jax.Array] = {}
    for i, term in enumerate(terms):
        base = per_world(default_model, term.path, num_envs)
        where = (slice(None),) + (() if term.index is None else np.index_exp[term.index])
        target = base[where]
        stream = i if term.link is None else link_stream(term.link)
        term_keys = jax.vmap(lambda k, s=stream: jax.random.fold_in(k, s))(keys)
        draw = jax.vmap(functools.partial(_draw, term, target.shape[1:], base.dtype))(term_keys)
        value = {"scale": target * draw, "add": target + draw, "set": draw}[term.operation]
        drawn[term.path] = drawn.get(term.path, base).at[where].set(value)
    fresh = model.tree_replace(drawn)
    changed = set(drawn)
    if changed & CONST_INPUTS and not backends.of(fresh).derives_constants:
        if ref is None:
            raise ValueError(
                "terms on mj_setConst inputs need ref (a params.Reference) to rebuild constants"
            )
        fresh = recompute_derived(fresh, ref)
        changed |= set(DERIVED)
    # Give the current model the same world axes, so only masked worlds change.
    current = model.tree_replace({p: per_world(model, p, num_envs) for p in changed})
    fresh = fresh.tree_replace({p: per_world(fresh, p, num_envs) for p in changed})
    return select_worlds(mask, fresh, current)


# --- setting values (shared by every front door) -----------------------------------------


def core_shape(model: mjx.Model, path: str) -> tuple[int, ...]:
    """The shape of field ``path`` in one world."""
    leaf = get_leaf(model, path)
    return leaf.shape[leaf.ndim - get_leaf(core_ndims(model), path) :]


def new_values(model: mjx.Model, path: str, values: Any, env_ids: Any, num_envs: int) -> np.ndarray:
    """The validated host array that :func:`set_values` writes to field ``path``.

    With ``env_ids=None``, ``values`` is the core shape (shared: demotes a per-world
    field) or ``(num_envs, *core)`` (promotes it). With ``env_ids``, it is
    ``(len(env_ids), *core)`` or the core shape (the same value for each), and the
    other worlds keep theirs.

    Raises:
      TypeError, ValueError: the field cannot be set, or ``values`` is of the wrong
        shape, not finite, or out of the field's physical range.
    """
    from mjxrunner.engine import checks

    leaf = check_settable(model, path)
    core = core_shape(model, path)
    if env_ids is None:
        arr = np.asarray(values) if not isinstance(values, jax.Array) else np.array(values)
        if arr.shape not in (core, (num_envs, *core)):
            raise ValueError(
                f"values for {path!r} must have shape {core} (all worlds) or "
                f"{(num_envs, *core)} (per world), got {arr.shape}"
            )
        new = checks.finite_array(arr, f"values for {path!r}", arr.shape, leaf.dtype)
    else:
        ids = checks.env_ids(env_ids, num_envs)
        arr = np.asarray(values)
        shape = (len(ids), *core)
        if arr.shape == core:
            arr = np.broadcast_to(arr, shape)
        vals = checks.finite_array(arr, f"values for {path!r}", shape, leaf.dtype)
        current = np.array(leaf)
        new = current if leaf.ndim > len(core) else np.broadcast_to(current, (num_envs, *core))
        new = new.copy()
        new[ids] = vals
    check_values(path, new)
    check_same_frames(model, path, new)
    return new


def field_values(model: mjx.Model, fields: Any) -> dict[str, np.ndarray]:
    """Validated core-shaped values ``{path: value}`` for every world."""
    from mjxrunner.engine import checks

    if not isinstance(fields, dict) or not fields:
        raise TypeError("fields must be a non-empty dict {path: value}")
    updates = {}
    for path, value in fields.items():
        leaf = check_settable(model, path)
        arr = checks.finite_array(value, f"value for {path!r}", core_shape(model, path), leaf.dtype)
        check_values(path, arr)
        check_same_frames(model, path, arr)
        updates[path] = arr
    return updates


_recompute_jit = jax.jit(recompute_derived)


def set_values(model: mjx.Model, updates: dict[str, Any], ref: Reference | None) -> mjx.Model:
    """``model`` with validated ``updates`` written; changes of :data:`CONST_INPUTS`
    rebuild the derived constants (``ref`` needed then)."""
    model = model.tree_replace(updates)
    if set(updates) & CONST_INPUTS:
        model = _recompute_jit(model, ref)
    return model
