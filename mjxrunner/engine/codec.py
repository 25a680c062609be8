"""The engine's part of a checkpoint: its configuration as header fields, and the
checks a loading process makes against them (:mod:`.archive` holds the format)."""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import jax
import mujoco
import numpy as np

from mjxrunner.engine import backend, batch, params
from mjxrunner.engine.archive import CheckpointError, CheckpointWarning, describe
from mjxrunner.engine.models import from_mjb
from mjxrunner.engine.options import Options


def _encode_term(term: params.Term) -> dict[str, Any]:
    fields = dataclasses.asdict(term)
    fields["index"] = _encode_index(term.index)
    return fields


def _encode_index(index: Any) -> Any:
    if index is None:
        return None
    if isinstance(index, (int, np.integer)) and not isinstance(index, bool):
        return {"int": int(index)}
    if isinstance(index, slice):
        return {"slice": [index.start, index.stop, index.step]}
    if isinstance(index, (tuple, list)):
        return {type(index).__name__: [_encode_index(i) for i in index]}
    raise TypeError(f"cannot save randomization index {index!r}: use ints, slices, tuples or lists")


def _decode_index(code: Any) -> Any:
    if code is None:
        return None
    (kind, value), *_ = code.items()
    if kind == "int":
        return value
    if kind == "slice":
        return slice(*value)
    return {"list": list, "tuple": tuple}[kind](_decode_index(v) for v in value)


def encode_randomization(rand: params.Randomization | None) -> dict[str, Any] | None:
    if rand is None:
        return None
    return {
        "terms": [_encode_term(t) for t in rand.terms],
        "on_reset": rand.on_reset,
        "every_n_steps": rand.every_n_steps,
    }


def decode_terms(rand: dict[str, Any]) -> list[params.Term]:
    return [params.Term(**{**t, "index": _decode_index(t["index"])}) for t in rand["terms"]]


def engine_fields(
    config: batch.Config, model: Any, user: Any, ref: Any, options: Options | None = None
) -> dict[str, Any]:
    """The header fields every kind records about its engine: its options
    (``config.options`` unless given) and what the configuration adds to them."""
    return {
        "num_envs": config.num_envs,
        **(config.options if options is None else options).to_header(),
        "guards": [[g.name, g.policy] for g in config.guards],
        "randomization": encode_randomization(config.randomization),
        "user": describe(user),
        "backend": config.backend.info(),
        # MuJoCo's binary model format drops the compiler's signature, a static
        # field of the device model: kept here so the loaded model's is the same.
        "signature": int(getattr(model, "signature", 0)),
        "ref": ref is not None,
    }


def signed(model: Any, signature: int) -> Any:
    return model.replace(signature=signature) if hasattr(model, "signature") else model


def host_model(arrays: dict[str, np.ndarray], where: str) -> mujoco.MjModel:
    try:
        return from_mjb(arrays["mj_model"])
    except (KeyError, ValueError) as e:
        raise CheckpointError(f"checkpoint {where}: the model bytes do not load: {e}") from None


def check_process(header: dict[str, Any], where: str) -> None:
    """Refuses what this process cannot continue; warns about other versions."""
    saved = header["backend"]
    x64 = saved.get("jax_enable_x64")
    if x64 is not None and x64 != bool(jax.config.jax_enable_x64):
        raise CheckpointError(
            f"checkpoint {where} was saved with jax_enable_x64={x64}, this process runs "
            f"with jax_enable_x64={not x64}: set jax.config.update('jax_enable_x64', "
            f"{x64}) before anything compiles, then load it"
        )
    now = backend.versions()
    diff = {k: (v, now.get(k)) for k, v in saved.get("versions", {}).items() if now.get(k) != v}
    if diff:
        shown = ", ".join(f"{k} {a} -> {b}" for k, (a, b) in diff.items())
        warnings.warn(
            f"checkpoint {where} was saved with other versions ({shown}); the run "
            "continues, but not necessarily bit for bit",
            CheckpointWarning,
            stacklevel=4,
        )


def check_guards(header: dict[str, Any], config: batch.Config, kind: str, where: str) -> None:
    saved = [tuple(g) for g in header["guards"]]
    built = [(g.name, g.policy) for g in config.guards]
    if saved != built:
        raise CheckpointError(
            f"checkpoint {where} was saved with the guards {saved} (name, policy), this "
            f"{kind} has {built}: pass guards= with the same extra guards"
        )


def _structure(m: mujoco.MjModel, impl: str) -> tuple[Any, list[tuple[int, ...]]]:
    """Treedef (static fields) and leaf shapes of the device model, signature aside:
    a model loaded from binary bytes has none."""
    b = backend.Backend.make(m, 1, Options(impl=impl, device=jax.devices("cpu")[0]))
    mx = signed(b.put_model(m), 0)
    return batch.structure(mx)


def check_same_structure(expected: mujoco.MjModel, saved: mujoco.MjModel, impl, where) -> None:
    sizes = ("nq", "nv", "nu", "na", "nbody", "njnt", "ngeom", "nsite", "neq", "ntendon")
    diff = [
        f"{s} {getattr(saved, s)} != {getattr(expected, s)}"
        for s in sizes
        if getattr(saved, s) != getattr(expected, s)
    ]
    if diff or _structure(expected, impl) != _structure(saved, impl):
        detail = "; ".join(diff) if diff else "static fields (joint, geom or actuator types...)"
        raise CheckpointError(
            f"checkpoint {where} holds a structurally different model than expected "
            f"(saved vs expected: {detail})"
        )
