"""A JAX function as an ONNX graph, written with ``onnx``'s own helpers.

:func:`to_onnx` traces the function to a jaxpr and writes one ONNX node (or a few)
per equation; closed-over arrays (a policy's weights, a model's constants) become
initializers, and nested calls (``jit``, custom derivatives) are inlined. It covers
the primitives of MLP policies, observation normalization and the observation
functions of the project's tasks (arithmetic, elementwise maths, comparisons and
selects, slices, reshapes, broadcasts, concatenation, transposes, reductions,
``dot_general`` as ``Einsum``). Anything else is refused by name, so an export never
silently computes something else.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
import onnx
from jax.extend import core as jcore
from onnx import helper

OPSET = 18
IR_VERSION = 10  # what onnxruntime 1.20 and newer read


class Unsupported(TypeError):
    """The function uses a JAX primitive this writer has no ONNX rule for."""


class _Graph:
    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._count = 0

    def name(self, hint: str) -> str:
        self._count += 1
        return f"{hint}_{self._count}"

    def const(self, value: Any, dtype: Any = None) -> str:
        array = np.asarray(value, dtype=dtype)
        if array.dtype == np.float64:
            array = array.astype(np.float32)  # the graph computes in float32
        name = self.name("const")
        self.initializers.append(onnx.numpy_helper.from_array(array, name))
        return name

    def node(self, op: str, inputs: Sequence[str], outputs: int = 1, **attrs: Any) -> list[str]:
        names = [self.name(op.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op, list(inputs), names, **attrs))
        return names

    def one(self, op: str, inputs: Sequence[str], **attrs: Any) -> str:
        return self.node(op, inputs, **attrs)[0]


def tensor_type(dtype: Any) -> int:
    """ONNX element type of a NumPy/JAX dtype (float64 is computed as float32)."""
    dtype = np.dtype(dtype)
    if dtype == np.float64:
        dtype = np.dtype(np.float32)
    return helper.np_dtype_to_tensor_dtype(dtype)


# --- rules: (graph, equation, input names) -> output names ----------------------------

_UNARY = {
    "neg": "Neg", "exp": "Exp", "log": "Log", "tanh": "Tanh", "sin": "Sin", "cos": "Cos",
    "tan": "Tan", "sqrt": "Sqrt", "abs": "Abs", "sign": "Sign", "floor": "Floor",
    "ceil": "Ceil", "logistic": "Sigmoid", "erf": "Erf", "asin": "Asin", "acos": "Acos",
    "atan": "Atan", "sinh": "Sinh", "cosh": "Cosh", "copy": "Identity", "copy_p": "Identity",
}  # fmt: skip
_BINARY = {
    "add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "max": "Max", "min": "Min",
    "pow": "Pow", "gt": "Greater", "lt": "Less", "ge": "GreaterOrEqual",
    "le": "LessOrEqual", "eq": "Equal",
}  # fmt: skip
_LOGICAL = {"and": ("And", "BitwiseAnd"), "or": ("Or", "BitwiseOr"), "xor": ("Xor", "BitwiseXor")}
_REDUCE = {"reduce_sum": "ReduceSum", "reduce_max": "ReduceMax", "reduce_min": "ReduceMin",
           "reduce_prod": "ReduceProd"}  # fmt: skip
_CALLS = ("pjit", "jit", "closed_call", "core_call", "custom_jvp_call", "custom_vjp_call",
          "remat", "checkpoint")  # fmt: skip


def _is_bool(var: Any) -> bool:
    return np.dtype(var.aval.dtype) == np.bool_


def _rule(g: _Graph, eqn: Any, ins: list[str]) -> list[str]:
    p, params = eqn.primitive.name, eqn.params
    if p in _UNARY:
        return [g.one(_UNARY[p], ins)]
    if p in _BINARY:
        return [g.one(_BINARY[p], ins)]
    if p == "rem":  # C's fmod: the sign of the dividend, as lax.rem
        return [g.one("Mod", ins, fmod=1)]
    if p == "ne":
        return [g.one("Not", [g.one("Equal", ins)])]
    if p in _LOGICAL:
        return [g.one(_LOGICAL[p][0] if _is_bool(eqn.invars[0]) else _LOGICAL[p][1], ins)]
    if p == "not":
        return [g.one("Not" if _is_bool(eqn.invars[0]) else "BitwiseNot", ins)]
    if p == "rsqrt":
        return [g.one("Reciprocal", [g.one("Sqrt", ins)])]
    if p == "square":
        return [g.one("Mul", [ins[0], ins[0]])]
    if p == "integer_pow":
        return [g.one("Pow", [ins[0], g.const(params["y"], eqn.invars[0].aval.dtype)])]
    if p == "log1p":
        return [g.one("Log", [g.one("Add", [ins[0], g.const(1.0, eqn.invars[0].aval.dtype)])])]
    if p == "expm1":
        return [g.one("Sub", [g.one("Exp", ins), g.const(1.0, eqn.invars[0].aval.dtype)])]
    if p == "is_finite":
        return [g.one("Not", [g.one("Or", [g.one("IsNaN", ins), g.one("IsInf", ins)])])]
    if p == "convert_element_type":
        return [g.one("Cast", ins, to=tensor_type(params["new_dtype"]))]
    if p == "clamp":  # clamp(low, x, high)
        return [g.one("Min", [g.one("Max", [ins[1], ins[0]]), ins[2]])]
    if p == "select_n":
        if len(ins) != 3:
            raise Unsupported("select_n over more than two cases")
        pred = (
            ins[0] if _is_bool(eqn.invars[0]) else g.one("Cast", ins[:1], to=onnx.TensorProto.BOOL)
        )
        return [g.one("Where", [pred, ins[2], ins[1]])]
    if p == "dot_general":
        return [_einsum(g, eqn, ins)]
    if p == "slice":
        starts, limits = params["start_indices"], params["limit_indices"]
        steps = params["strides"] or (1,) * len(starts)
        axes = list(range(len(starts)))
        inputs = [ins[0], *(g.const(v, np.int64) for v in (starts, limits, axes, steps))]
        return [g.one("Slice", inputs)]
    if p == "squeeze":
        return [g.one("Squeeze", [ins[0], g.const(params["dimensions"], np.int64)])]
    if p == "reshape":
        return [g.one("Reshape", [ins[0], g.const(params["new_sizes"], np.int64)])]
    if p == "broadcast_in_dim":
        shape, dims = params["shape"], params["broadcast_dimensions"]
        ranked = [1] * len(shape)
        for src, dst in enumerate(dims):
            ranked[dst] = eqn.invars[0].aval.shape[src]
        x = g.one("Reshape", [ins[0], g.const(ranked, np.int64)])
        return [g.one("Expand", [x, g.const(shape, np.int64)])]
    if p == "concatenate":
        return [g.one("Concat", ins, axis=params["dimension"])]
    if p == "stack":
        axis = g.const([params["axis"]], np.int64)
        return [g.one("Concat", [g.one("Unsqueeze", [x, axis]) for x in ins], axis=params["axis"])]
    if p == "transpose":
        return [g.one("Transpose", ins, perm=list(params["permutation"]))]
    if p in _REDUCE:
        axes = g.const(params["axes"], np.int64)
        return [g.one(_REDUCE[p], [ins[0], axes], keepdims=0)]
    if p in ("argmax", "argmin"):
        (axis,) = params["axes"]
        index = g.one("ArgMax" if p == "argmax" else "ArgMin", ins, axis=axis, keepdims=0)
        return [g.one("Cast", [index], to=tensor_type(params["index_dtype"]))]
    if p == "iota":
        shape, dim = params["shape"], params["dimension"]
        values = np.arange(shape[dim], dtype=params["dtype"]).reshape(
            [-1 if i == dim else 1 for i in range(len(shape))]
        )
        return [g.const(np.broadcast_to(values, shape))]
    if p == "cumsum":
        axis = g.const(params["axis"], np.int64)
        return [g.one("CumSum", [ins[0], axis], reverse=int(params["reverse"]))]
    if p == "split":
        sizes = g.const(params["sizes"], np.int64)
        return g.node("Split", [ins[0], sizes], outputs=len(params["sizes"]), axis=params["axis"])
    if p in _CALLS:
        closed = next(params[k] for k in ("jaxpr", "call_jaxpr", "fun_jaxpr") if k in params)
        if isinstance(closed, jcore.ClosedJaxpr):
            return _convert(g, closed.jaxpr, closed.consts, ins)
        return _convert(g, closed, [], ins)
    raise Unsupported(f"JAX primitive {p!r} has no ONNX rule here")


def _einsum(g: _Graph, eqn: Any, ins: list[str]) -> str:
    """``dot_general`` as ``Einsum``: contracting, batch and free axes by letter."""
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    lhs_rank, rhs_rank = (len(v.aval.shape) for v in eqn.invars)
    letters = iter(string.ascii_lowercase)
    lhs = [next(letters) for _ in range(lhs_rank)]
    rhs = [None] * rhs_rank
    for a, b in zip(lc, rc, strict=True):
        rhs[b] = lhs[a]
    for a, b in zip(lb, rb, strict=True):
        rhs[b] = lhs[a]
    rhs = [x or next(letters) for x in rhs]
    batch = [lhs[a] for a in lb]
    out = batch + [x for i, x in enumerate(lhs) if i not in lc and i not in lb]
    out += [x for i, x in enumerate(rhs) if i not in rc and i not in rb]
    equation = f"{''.join(lhs)},{''.join(rhs)}->{''.join(out)}"
    result = g.one("Einsum", ins, equation=equation)
    want = eqn.outvars[0].aval.dtype
    if np.dtype(want) != np.dtype(eqn.invars[0].aval.dtype):
        result = g.one("Cast", [result], to=tensor_type(want))
    return result


def _convert(g: _Graph, jaxpr: Any, consts: Sequence[Any], in_names: Sequence[str]) -> list[str]:
    env: dict[Any, str] = {}

    def read(atom: Any) -> str:
        if isinstance(atom, jcore.Literal):
            return g.const(np.asarray(atom.val, dtype=atom.aval.dtype))
        return env[atom]

    for var, value in zip(jaxpr.constvars, consts, strict=True):
        env[var] = g.const(np.asarray(value))
    for var, name in zip(jaxpr.invars, in_names, strict=True):
        env[var] = name
    for eqn in jaxpr.eqns:
        outs = _rule(g, eqn, [read(x) for x in eqn.invars])
        for var, name in zip(eqn.outvars, outs, strict=True):
            env[var] = name
    return [read(v) for v in jaxpr.outvars]


def used_inputs(fn: Callable, args: Sequence[Any]) -> list[bool]:
    """For each of ``args`` (arrays or ``ShapeDtypeStruct``), whether ``fn`` reads it."""
    closed = jax.make_jaxpr(fn)(*args)
    used: set = set()

    def visit(jaxpr: Any) -> None:
        for eqn in jaxpr.eqns:
            used.update(v for v in eqn.invars if not isinstance(v, jcore.Literal))
        used.update(v for v in jaxpr.outvars if not isinstance(v, jcore.Literal))

    visit(closed.jaxpr)
    return [v in used for v in closed.jaxpr.invars]


def to_onnx(
    fn: Callable,
    args: Sequence[Any],
    input_names: Sequence[str | None],
    output_names: Sequence[str],
    graph_name: str,
    metadata: dict[str, str] | None = None,
) -> onnx.ModelProto:
    """``fn(*args)`` as an ONNX model with inputs ``input_names`` (None: an argument the
    function does not read, left out of the graph) and outputs ``output_names``.

    Raises:
      Unsupported: ``fn`` uses a primitive without a rule (named in the message).
    """
    closed = jax.make_jaxpr(fn)(*args)
    g = _Graph()
    names = [n if n is not None else g.name("unused") for n in input_names]
    outs = _convert(g, closed.jaxpr, closed.consts, names)
    out_avals = [v.aval for v in closed.jaxpr.outvars]
    for name, out in zip(output_names, outs, strict=True):
        g.nodes.append(helper.make_node("Identity", [out], [name]))
    inputs = [
        helper.make_tensor_value_info(n, tensor_type(v.aval.dtype), list(v.aval.shape))
        for n, v in zip(input_names, closed.jaxpr.invars, strict=True)
        if n is not None
    ]
    outputs = [
        helper.make_tensor_value_info(n, tensor_type(a.dtype), list(a.shape))
        for n, a in zip(output_names, out_avals, strict=True)
    ]
    graph = helper.make_graph(g.nodes, graph_name, inputs, outputs, g.initializers)
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        ir_version=IR_VERSION,
        producer_name="mjxrunner",
    )
    if metadata:
        helper.set_model_props(model, metadata)
    onnx.checker.check_model(model)
    return model
