"""Getting an FX graph out of what the user has: a module, an ExportedProgram, a `.pt2`
file or a `torch.fx.GraphModule`, with Cuvil's dynamic-shape policy.

`dynamic_shapes=None`: dim 0 of every tensor input (of the first input's size) is one
symbolic dim `batch`; torch specializes sizes 0 and 1, so a batch of 1 is traced as 2. If
torch.export cannot keep it dynamic, the model is exported static and the report says so.
`dynamic_shapes=False`: static. Anything else is torch.export's own spec, passed through;
its `torch.export.Dim`s give the symbolic dims their names.
"""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx
from torch.export import Dim, ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind
from torch.utils import _pytree as pytree

from cuvil.errors import CuvilError


@dataclass
class UserInput:
    name: str
    index: int  # position among the user's flattened inputs


@dataclass
class Weight:
    tensor: torch.Tensor
    ref: str  # state_dict key


@dataclass
class Traced:
    """An aten-level FX graph plus what its placeholders and outputs stand for."""

    name: str
    graph: fx.Graph
    leaves: dict[str, UserInput | Weight]  # placeholder / get_attr node name -> meaning
    outputs: list[fx.Node | Any]  # flat user outputs
    out_spec: pytree.TreeSpec
    dim_names: dict[tuple[int, int], str] = field(default_factory=dict)  # (input, dim) -> name
    notes: list[str] = field(default_factory=list)


def trace(model, example_inputs, dynamic_shapes) -> Traced:
    """The aten graph of `model`, by the cheapest route that works."""
    if isinstance(model, str | os.PathLike):
        return from_program(load_pt2(model), os.path.splitext(os.path.basename(model))[0])
    if isinstance(model, ExportedProgram):
        return from_program(model)
    if not isinstance(model, torch.nn.Module):
        raise CuvilError(f"cannot import an object of type {type(model).__name__}: expected "
                         "a torch.nn.Module, a torch.export.ExportedProgram or a .pt2 file")
    args = tuple(example_inputs) if isinstance(example_inputs, tuple | list) else (
        example_inputs,)
    with eval_mode(model):
        try:
            return export_module(model, args, dynamic_shapes)
        except CuvilError:
            if not isinstance(model, fx.GraphModule):
                raise
            return trace_graph_module(model, args)


def load_pt2(path) -> ExportedProgram:
    if not os.path.isfile(path):
        raise CuvilError(f"{path}: no such file")
    try:
        return torch.export.load(path)
    except Exception as e:  # torch raises many kinds for a bad archive
        raise CuvilError(f"{path}: not a torch.export .pt2 file ({_first_line(e)})") from None


class eval_mode:
    """Eval mode, no grad, and torch's fused MHA fast path off (it hides ops from export);
    every setting is restored on exit."""

    def __init__(self, model: torch.nn.Module):
        self.model = model

    def __enter__(self):
        self.training = self.model.training
        self.fastpath = torch.backends.mha.get_fastpath_enabled()
        self.grad = torch.is_grad_enabled()
        self.model.eval()
        torch.backends.mha.set_fastpath_enabled(False)
        torch.set_grad_enabled(False)

    def __exit__(self, *exc):
        torch.set_grad_enabled(self.grad)
        torch.backends.mha.set_fastpath_enabled(self.fastpath)
        self.model.train(self.training)


def export_module(model: torch.nn.Module, args: tuple, dynamic_shapes) -> Traced:
    notes = []
    if dynamic_shapes is None:
        spec, traced_args = batch_spec(args)
        if spec is not None:
            try:
                return _export(model, traced_args, spec)
            except CuvilError as e:
                notes.append(f"the batch dim could not stay dynamic, imported static: {e}")
        else:
            notes.append("no tensor input with a batch dim >= 1, imported static")
        dynamic_shapes = False
    traced = _export(model, args, None if dynamic_shapes is False else dynamic_shapes)
    traced.notes += notes
    return traced


def _export(model: torch.nn.Module, args: tuple, spec) -> Traced:
    try:
        program = torch.export.export(model, args, dynamic_shapes=spec)
    except Exception as e:  # torch.export raises many error types; the first line says it
        raise CuvilError(f"torch.export failed on {type(model).__name__}: "
                         f"{_first_line(e)}") from None
    traced = from_program(program, type(model).__name__)
    if spec is not None:
        traced.dim_names = spec_names(spec, args, model)
    return traced


def batch_spec(args: tuple) -> tuple[Any, tuple]:
    """The default spec (dim 0 of each top-level tensor of the first one's size is `batch`)
    and the example inputs to trace with (a batch of 1 becomes 2: torch specializes 1)."""
    tensors = [a for a in args if isinstance(a, torch.Tensor) and a.dim() >= 1]
    if not tensors or tensors[0].shape[0] == 0:
        return None, args
    size = tensors[0].shape[0]
    batch = Dim("batch")

    def per_arg(a):
        ok = isinstance(a, torch.Tensor) and a.dim() >= 1 and a.shape[0] == size
        return ({0: batch} if ok else None), (_double(a) if ok and size == 1 else a)

    specs, traced = zip(*(per_arg(a) for a in args), strict=True)
    return tuple(specs), tuple(traced)


def _double(t: torch.Tensor) -> torch.Tensor:
    return t.expand(2, *t.shape[1:]).contiguous()


def spec_names(spec, args: tuple, model: torch.nn.Module) -> dict[tuple[int, int], str]:
    """(flat input index, dim) -> the name of the `torch.export.Dim` the spec puts there."""
    if isinstance(spec, dict):
        params = list(inspect.signature(model.forward).parameters)
        spec = [spec.get(p) for p in params[:len(args)]]
    names: dict[tuple[int, int], str] = {}
    for index, (leaf, dims) in enumerate(_leaf_specs(args, spec)):
        if isinstance(leaf, torch.Tensor) and dims is not None:
            for d, obj in dims.items() if isinstance(dims, dict) else enumerate(dims):
                name = getattr(obj, "__name__", None)
                if isinstance(name, str):
                    names[(index, d)] = name
    return names


def _leaf_specs(arg, spec):
    """(leaf, its spec) for each leaf of `arg` in pytree order (a tensor's spec maps dims)."""
    if isinstance(arg, tuple | list):
        specs = spec if isinstance(spec, tuple | list) else [None] * len(arg)
        for a, s in zip(arg, specs, strict=False):
            yield from _leaf_specs(a, s)
    elif isinstance(arg, dict):
        for k, a in arg.items():
            yield from _leaf_specs(a, spec.get(k) if isinstance(spec, dict) else None)
    else:
        yield arg, spec


def from_program(program: ExportedProgram, name: str = "") -> Traced:
    leaves: dict[str, UserInput | Weight] = {}
    index = 0
    for spec in program.graph_signature.input_specs:
        arg = spec.arg.name
        if spec.kind is InputKind.USER_INPUT:
            leaves[arg] = UserInput(arg, index)
            index += 1
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            table = program.state_dict if spec.target in program.state_dict else (
                program.constants)
            leaves[arg] = Weight(table[spec.target], spec.target)
        else:
            raise CuvilError(f"cannot import an input of kind {spec.kind.name} ({arg})")
    output = next(n for n in program.graph.nodes if n.op == "output")
    flat = [v for v, s in zip(output.args[0], program.graph_signature.output_specs, strict=True)
            if s.kind is OutputKind.USER_OUTPUT]
    return Traced(name or "exported", program.graph, leaves, flat, program.call_spec.out_spec)


def trace_graph_module(gm: fx.GraphModule, args: tuple) -> Traced:
    """For a GraphModule torch.export rejects: retrace it to aten ops with the example
    inputs (static shapes), keeping its weights by reference."""
    from torch.fx.experimental.proxy_tensor import make_fx

    try:
        with eval_mode(gm):
            traced = make_fx(gm, tracing_mode="real", pre_dispatch=True)(*args)
    except Exception as e:  # whatever the module raises while tracing
        raise CuvilError(f"cannot trace GraphModule: {_first_line(e)}") from None
    keys = {id(t): k for k, t in gm.state_dict(keep_vars=True).items()}
    names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    leaves: dict[str, UserInput | Weight] = {}
    placeholders = [n for n in traced.graph.nodes if n.op == "placeholder"]
    for i, node in enumerate(placeholders):
        leaves[node.name] = UserInput(names[i] if i < len(names) else node.name, i)
    for node in traced.graph.nodes:
        if node.op == "get_attr":
            tensor = getattr(traced, node.target)
            leaves[node.name] = Weight(tensor, keys.get(id(tensor), node.target))
    output = next(n for n in traced.graph.nodes if n.op == "output")
    flat, out_spec = pytree.tree_flatten(output.args[0])
    notes = ["torch.export rejected the GraphModule; retraced it with static shapes"]
    return Traced(type(gm).__name__, traced.graph, leaves, flat, out_spec, notes=notes)


def _first_line(e: BaseException) -> str:
    """The gist of a torch error on one line: its first paragraph, up to three lines."""
    text = str(e).strip()
    paragraph = text.split("\n\n")[0].splitlines() if text else [type(e).__name__]
    return " ".join(line.strip() for line in paragraph[:3])
