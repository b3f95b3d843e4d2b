"""How Cuvil terms look in egglog: constructor names, argument sorts, literal encoding.

Every op becomes a constructor of the sort `T`, named in CamelCase (`to_layout` ->
`ToLayout`; ops with a variable number of tensor inputs get one constructor per arity:
`Cat_3`). Tensor inputs come first, then every attribute in signature order: `int` attrs
are `i64`, `float`/`number` attrs `f64` (an `optfloat`'s None is NaN), `bool` attrs
`bool`, everything else (strings, tuples, shapes with symbolic dims, None) a `String`
holding the attribute's canonical text.
Graph inputs are `(Input "name")`.
"""

from __future__ import annotations

import json
import math
from typing import Any

from cuvil.errors import CuvilError
from cuvil.ir.text import format_value
from cuvil.ops.registry import OpDef

SORT = "T"
I64, F64, BOOL, STRING = "i64", "f64", "bool", "String"


def camel(op: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in op.split("_"))


def has_arity_suffix(opdef: OpDef) -> bool:
    return opdef.variadic or opdef.min_inputs != len(opdef.inputs)


def ctor(opdef: OpDef, n_inputs: int) -> str:
    """The egglog constructor of `opdef` applied to `n_inputs` tensors."""
    if opdef.name == "input":
        return "Input"
    base = camel(opdef.name)
    return f"{base}_{n_inputs}" if has_arity_suffix(opdef) else base


def attr_sort(kind: str) -> str:
    if kind == "int":
        return I64
    if kind in ("float", "optfloat", "number"):
        return F64
    if kind == "bool":
        return BOOL
    return STRING


def signature(opdef: OpDef, n_inputs: int) -> list[str]:
    """Argument sorts of the constructor for `n_inputs` tensor inputs."""
    if opdef.name == "input":
        return [STRING]
    return [SORT] * n_inputs + [attr_sort(a.kind) for a in opdef.attrs]


def arities(opdef: OpDef) -> list[int]:
    """The input counts to declare up front (variadic ops get more on demand)."""
    if opdef.variadic:
        return list(range(max(opdef.min_inputs, 1), 5))
    return list(range(opdef.min_inputs, len(opdef.inputs) + 1))


# -- literals ---------------------------------------------------------------------------------
def encode_attr(value: Any, kind: str) -> str:
    """The egglog literal of an attribute value."""
    sort = attr_sort(kind)
    if sort == I64:
        if not isinstance(value, int) or isinstance(value, bool):
            raise CuvilError(f"attribute value {value!r} is not an int")
        return str(value)
    if sort == F64:
        return "NaN" if value is None else encode_f64(value)  # optfloat: None is NaN
    if sort == BOOL:
        return "true" if value else "false"
    return encode_string(canonical_text(value, kind))


STRING_KINDS = ("str", "dtype", "layout", "device")


def canonical_text(value: Any, kind: str) -> str:
    """One text per attribute value (so equal values are equal egglog strings)."""
    if kind in STRING_KINDS:
        return str(value)
    return format_value(value)


def encode_f64(value: Any) -> str:
    x = float(value)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    text = repr(x)
    return text if any(c in text for c in ".e") else text + ".0"


def encode_string(text: str) -> str:
    return json.dumps(text)


def decode_attr(text: str, kind: str) -> Any:
    """The attribute value of a serialized egglog primitive (`op` text of its node)."""
    sort = attr_sort(kind)
    if sort == I64:
        return int(text)
    if sort == F64:
        x = float(text)
        return None if kind == "optfloat" and math.isnan(x) else x
    if sort == BOOL:
        return text == "true"
    raw = json.loads(text)
    if kind in STRING_KINDS:
        return raw
    return parse_canonical(raw)


def parse_canonical(raw: str) -> Any:
    """Invert `canonical_text` for tuple / None / number / dim-valued attributes."""
    import ast

    from cuvil.ir.text import _attr_value

    try:
        return _attr_value(ast.parse(raw, mode="eval").body)
    except (SyntaxError, CuvilError, ValueError):
        return raw
