"""The readable text form of a Cuvil graph, and its parser (print -> parse -> same graph).

    graph mlp(x: f32[batch,784]) {
      fc1_w = const(ref="fc1.weight") : f32[784,512]
      v1 = matmul(x, fc1_w) : f32[batch,512]  # src: mlp.py:12 | origin: matmul_add
      return v1
    }

A graph that writes into an input, as a model that changes it in place does, says so on a
line before `return`: `write x <- v2`.

Inputs are positional value names, attributes are keywords; a line's comment keeps the
node's source line and the rules it came from. Constants travel by reference: parse with the
graph's `constants` to get them back.
"""

from __future__ import annotations

import ast
import json
import math
from dataclasses import replace
from typing import Any

import sympy
import torch

from cuvil.errors import IRError
from cuvil.ir.graph import Graph, Node
from cuvil.ir.types import TensorType, _dim_expr, dim, format_dim


def format_value(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, float):
        return repr(value)  # inf, -inf and nan read back as floats
    if isinstance(value, int):
        return str(value)
    if isinstance(value, sympy.Basic):
        return format_dim(dim(value))
    if isinstance(value, tuple | list):
        inner = ", ".join(format_value(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    raise IRError(f"attribute value {value!r} has no text form")


def format_attrs(attrs: dict[str, Any]) -> str:
    return ", ".join(f"{k}={format_value(v)}" for k, v in attrs.items())


def format_node(node: Node) -> str:
    args = list(node.inputs) + ([format_attrs(node.attrs)] if node.attrs else [])
    line = f"{node.name} = {node.op}({', '.join(args)}) : {node.type}"
    notes = []
    if node.source:
        notes.append(f"src: {node.source}")
    if node.origin:
        notes.append(f"origin: {' <- '.join(node.origin)}")
    return line + (f"  # {' | '.join(notes)}" if notes else "")


def format_structure(structure: Any) -> str:
    if isinstance(structure, str):
        return structure
    if isinstance(structure, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {format_structure(v)}"
                               for k, v in structure.items()) + "}"
    inner = ", ".join(format_structure(v) for v in structure)
    if isinstance(structure, list):
        return f"[{inner}]"
    return f"({inner},)" if len(structure) == 1 else f"({inner})"


def print_graph(graph: Graph) -> str:
    params = ", ".join(f"{n}: {graph[n].type}" for n in graph.inputs)
    lines = [f"graph {graph.name}({params}) {{"]
    lines += [f"  {format_node(n)}" for n in graph if n.op != "input"]
    lines += [f"  write {name} <- {value}" for name, value in graph.mutations.items()]
    lines.append(f"  return {format_structure(graph.output_structure)}")
    lines.append("}")
    return "\n".join(lines) + "\n"


# -- parsing ---------------------------------------------------------------------------------
def parse_graph(text: str, constants: dict[str, torch.Tensor] | None = None) -> Graph:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    if len(lines) < 2 or not lines[0].startswith("graph ") or lines[-1].strip() != "}":
        raise IRError("graph text must start with 'graph NAME(...) {' and end with '}'")
    header = lines[0][len("graph "):].rstrip(" {")
    name, params = header.split("(", 1)
    graph = Graph(name.strip())
    for param in _split_top(params.rstrip(")")):
        pname, ptype = param.split(":", 1)
        graph.input(pname.strip(), TensorType.parse(ptype))
    for lineno, line in enumerate(lines[1:-1], start=2):
        try:
            _parse_line(graph, line.strip(), constants or {})
        except (IRError, SyntaxError, ValueError) as e:
            raise IRError(f"line {lineno}: {e}: {line.strip()}") from None
    return graph


def _parse_line(graph: Graph, line: str, constants: dict[str, torch.Tensor]) -> None:
    if line.startswith("return "):
        graph.set_outputs(_structure(ast.parse(line[7:], mode="eval").body))
        return
    if line.startswith("write ") and not line[6:].lstrip().startswith("="):  # not a value
        name, arrow, value = line[6:].partition(" <- ")
        if not arrow:
            raise IRError("expected write INPUT <- VALUE")
        graph.set_mutations({**graph.mutations, name.strip(): value.strip()})
        return
    code, comment = _split_comment(line)
    lhs, rhs = code.split("=", 1)
    call_text, type_text = rhs.rsplit(" : ", 1)
    call = ast.parse(call_text.strip(), mode="eval").body
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name):
        raise IRError("expected NAME = OP(args) : TYPE")
    inputs = []
    for arg in call.args:
        if not isinstance(arg, ast.Name):
            raise IRError("inputs are value names; attributes are keywords")
        inputs.append(arg.id)
    attrs = {kw.arg: _attr_value(kw.value) for kw in call.keywords}
    notes = dict(part.split(": ", 1) for part in comment.split(" | ") if ": " in part)
    origin = tuple(notes["origin"].split(" <- ")) if "origin" in notes else ()
    type_ = TensorType.parse(type_text)
    if call.func.id == "scalar":
        type_ = replace(type_, weak=True)
    node = Node(lhs.strip(), call.func.id, tuple(inputs), attrs, type_,
                notes.get("src", ""), origin)
    if node.op == "const" and node.attrs.get("ref") in constants:
        graph.constants[node.attrs["ref"]] = constants[node.attrs["ref"]]
    for i in node.inputs:
        if i not in graph.nodes:
            raise IRError(f"input {i!r} is not defined")
    graph._put(node)


def _split_comment(line: str) -> tuple[str, str]:
    in_str = False
    for i, ch in enumerate(line):
        if ch == '"' and (i == 0 or line[i - 1] != "\\"):
            in_str = not in_str
        elif ch == "#" and not in_str:
            return line[:i].rstrip(), line[i + 1:].strip()
    return line, ""


def _split_top(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += {"[": 1, "(": 1, "]": -1, ")": -1}.get(ch, 0)
        cur += ch
    return [p for p in [*parts, cur] if p.strip()]


_NON_FINITE = {"inf": math.inf, "nan": math.nan}


def _attr_value(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name) and node.id in _NON_FINITE:
        return _NON_FINITE[node.id]
    if isinstance(node, ast.Tuple | ast.List):
        return tuple(_attr_value(e) for e in node.elts)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and (
            isinstance(node.operand, ast.Constant) or (
                isinstance(node.operand, ast.Name) and node.operand.id in _NON_FINITE)):
        return -_attr_value(node.operand)
    return dim(_dim_expr(node, ast.unparse(node)))


def _structure(node: ast.AST) -> Any:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Tuple):
        return tuple(_structure(e) for e in node.elts)
    if isinstance(node, ast.List):
        return [_structure(e) for e in node.elts]
    if isinstance(node, ast.Dict):
        return {ast.literal_eval(k): _structure(v) for k, v in zip(node.keys, node.values,
                                                                      strict=True)}
    raise IRError("return takes value names in tuples, lists or dicts")
