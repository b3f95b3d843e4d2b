"""The export pass's work: the program captured from what the user has (a module, an
ExportedProgram, a `.pt2` file or a `torch.fx.GraphModule`), with Cuvil's dynamic-shape
policy, in-place ops kept (`functional.functionalize` replaces them).

`dynamic_shapes=None`: dim 0 of every tensor input (of the first input's size) is one
symbolic dim `batch`; torch specializes sizes 0 and 1, so a batch of 1 is traced as 2. Dim 1
of integer and bool inputs of rank 2 (token ids, attention masks) is `seq` when the model
lets it vary (`Dim.AUTO`: torch keeps it static where the code fixes it, and the report says
so). If torch.export cannot keep the batch dynamic, the model is exported static and the
report says so. `dynamic_shapes=False`: static. Anything else is torch.export's own spec,
passed through (refined once with torch's suggested fixes if it contradicts the model); its
`torch.export.Dim`s give the symbolic dims their names. A plain function is traced as the
`forward` of a module. A failed export is one line that says what to try next.
"""

from __future__ import annotations

import inspect
import operator
import os
from typing import Any

import torch
from torch import fx
from torch.export import Dim, ExportedProgram
from torch.utils import _pytree as pytree

from cuvil.errors import CuvilError
from cuvil.frontend.functional import leaves_of, refuse_mutation, size_dependent_alias
from cuvil.frontend.training import refuse_training
from cuvil.frontend.values import Exported, Traced, UserInput, Weight


def export(model, example_inputs, dynamic_shapes) -> Exported:
    """The captured program of `model`, in-place ops kept, by the cheapest route that
    works."""
    if isinstance(model, str | os.PathLike):
        return from_program(load_pt2(model), os.path.splitext(os.path.basename(model))[0])
    if isinstance(model, ExportedProgram):
        return from_program(model)
    if callable(model) and not isinstance(model, torch.nn.Module):
        model = Function(model)
    if not isinstance(model, torch.nn.Module):
        raise CuvilError(f"cannot import an object of type {type(model).__name__}: expected "
                         "a torch.nn.Module, a function, a torch.export.ExportedProgram or a "
                         ".pt2 file")
    refuse_training(model)
    args = tuple(example_inputs) if isinstance(example_inputs, tuple | list) else (
        example_inputs,)
    with export_settings(model):
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


class export_settings:
    """No grad, and torch's fused MHA fast path off (it hides ops from export); both are
    restored on exit. The model's training flags are its own: a model whose forward
    depends on them is refused in training mode (`training.py`), never switched to eval."""

    def __init__(self, model: torch.nn.Module):
        self.model = model

    def __enter__(self):
        self.fastpath = torch.backends.mha.get_fastpath_enabled()
        self.grad = torch.is_grad_enabled()
        torch.backends.mha.set_fastpath_enabled(False)
        torch.set_grad_enabled(False)

    def __exit__(self, *exc):
        torch.set_grad_enabled(self.grad)
        torch.backends.mha.set_fastpath_enabled(self.fastpath)


class Function(torch.nn.Module):
    """A plain function as a module (what torch.compile accepts, Cuvil accepts)."""

    def __init__(self, fn):
        super().__init__()
        self.forward = fn  # its signature names the inputs and keys a dynamic_shapes dict
        name = getattr(fn, "__name__", "")
        self.name = name if name.isidentifier() else "function"


def _name(model: torch.nn.Module) -> str:
    return model.name if isinstance(model, Function) else type(model).__name__


def export_module(model: torch.nn.Module, args: tuple, dynamic_shapes) -> Exported:
    notes = []
    if dynamic_shapes is None:
        spec, traced_args = batch_spec(args)
        if spec is not None:
            try:
                exported = _export_default(model, traced_args, spec)
            except CuvilError as e:
                notes.append(f"the batch dim could not stay dynamic, imported static: {e}")
            else:
                if exported.size_alias is None or all(map(operator.is_, traced_args, args)):
                    return exported
                notes.append(f"imported static: {exported.size_alias} at batch 1 alone (the "
                             "trace at batch 2 has a copy there)")
        else:
            notes.append("no tensor input with a batch dim >= 1, imported static")
        dynamic_shapes = False
    exported = _export(model, args, None if dynamic_shapes is False else dynamic_shapes)
    exported.notes += notes
    return exported


def _export_default(model: torch.nn.Module, args: tuple, spec) -> Exported:
    """The default policy's export; says which `seq` dims the model kept static."""
    exported = _export(model, args, spec, refine=False)  # a failure: static, with a note
    seq = {at: "seq" for at, dims in _flat_specs(args, spec) if 1 in dims}
    exported.dim_names.update(seq)
    fixed = _static_dims(exported.program, seq)
    if fixed:
        exported.notes.append(f"dim 1 of {', '.join(fixed)} stays static: the model fixes it")
    return exported


def _export(model: torch.nn.Module, args: tuple, spec, retry: bool = True,
            refine: bool = True) -> Exported:
    """Export; `retry` once after a fix (`refine`: with torch's suggested fixes)."""
    try:
        program = torch.export.export(model, args, dynamic_shapes=spec)
    except Exception as e:  # torch.export raises many error types; the first line says it
        again = _retry(model, spec, e, refine) if retry else None
        if again is not None:
            exported = _export(model, args, again[0], retry=False)
            exported.notes.append(again[1])
            return exported
        raise CuvilError(f"torch.export failed on {_name(model)}: {_first_line(e)}; "
                         f"{_hint(e, spec)}") from None
    exported = from_program(program, _name(model))
    if spec is not None:
        exported.dim_names = spec_names(spec, args, model)
    return exported


def _retry(model: torch.nn.Module, spec, error: Exception,
           refine: bool) -> tuple[Any, str] | None:
    """(spec, note) for a second export that may succeed: torch's suggested fixes applied to
    the spec, or transformers' cache classes registered as pytrees; else None."""
    text = str(error)
    if refine and "Suggested fixes" in text and spec is not None:
        from torch.export.dynamic_shapes import refine_dynamic_shapes_from_suggested_fixes

        tail = text.split("Suggested fixes:", 1)[1].strip().split("\n\n")[0]
        fixes = [line.strip() for line in tail.splitlines() if " = " in line]
        try:
            refined = refine_dynamic_shapes_from_suggested_fixes(
                "Suggested fixes:\n" + "\n".join(fixes), spec)
        except Exception:  # a fix torch cannot apply to this spec
            return None
        return refined, "torch.export refined the dynamic_shapes spec with its suggested fixes"
    if "not a known type" in text and _register_transformers_caches(model):
        return spec, "transformers' cache classes registered as pytrees (use_cache output)"
    return None


def _register_transformers_caches(model: torch.nn.Module) -> bool:
    """Register transformers' cache classes with torch's pytree, as transformers' own
    exporter does; False if `model` is not a transformers model."""
    if not type(model).__module__.startswith("transformers."):
        return False
    try:
        from transformers.integrations.executorch import register_dynamic_cache_export_support
    except ImportError:
        return False
    register_dynamic_cache_export_support()
    return True


def _hint(error: Exception, spec) -> str:
    """What to try next, in a few words."""
    text = str(error)
    if "Cache" in text or "not a known type" in text:
        return ("the model returns an object torch.export cannot trace: try use_cache=False "
                "(model.config.use_cache = False) or return plain tensors")
    if spec is not None:
        return "try dynamic_shapes=False (static shapes)"
    return "torch.export.export(model, inputs) shows torch's full error"


def batch_spec(args: tuple) -> tuple[Any, tuple]:
    """The default spec (dim 0 of each top-level tensor of the first one's size is `batch`,
    dim 1 of rank-2 integer or bool tensors of the first one's length is `seq`) and the
    example inputs to trace with (a batch of 1 becomes 2: torch specializes 1)."""
    tensors = [a for a in args if isinstance(a, torch.Tensor) and a.dim() >= 1]
    if not tensors or tensors[0].shape[0] == 0:
        return None, args
    size = tensors[0].shape[0]
    tokens = [a for a in tensors if _is_tokens(a)]
    length = tokens[0].shape[1] if tokens and tokens[0].shape[1] >= 2 else None
    batch = Dim("batch")

    def per_arg(a):
        ok = isinstance(a, torch.Tensor) and a.dim() >= 1 and a.shape[0] == size
        dims = {0: batch} if ok else {}
        if length is not None and _is_tokens(a) and a.shape[1] == length:
            dims[1] = Dim.AUTO
        return (dims or None), (_double(a) if ok and size == 1 else a)

    specs, traced = zip(*(per_arg(a) for a in args), strict=True)
    return tuple(specs), tuple(traced)


def _is_tokens(a: Any) -> bool:
    """Token ids, positions or a mask: an integer or bool tensor of rank 2."""
    return (isinstance(a, torch.Tensor) and a.dim() == 2 and not a.dtype.is_floating_point
            and not a.dtype.is_complex)


def _flat_specs(args: tuple, spec) -> list[tuple[tuple[int, int], dict]]:
    """((flat input index, 1), dims) for each tensor leaf the spec maps."""
    return [((i, 1), dims) for i, (leaf, dims) in enumerate(_leaf_specs(args, spec))
            if isinstance(leaf, torch.Tensor) and isinstance(dims, dict)]


def _static_dims(program: ExportedProgram, wanted: dict[tuple[int, int], str]) -> list[str]:
    """The inputs whose dim in `wanted` torch kept static."""
    fixed, leaves = [], leaves_of(program)
    for node in program.graph.nodes:
        leaf = leaves.get(node.name)
        if node.op != "placeholder" or not isinstance(leaf, UserInput):
            continue
        fake = node.meta.get("val")
        for (index, d) in wanted:
            if index == leaf.index and isinstance(fake, torch.Tensor) and \
                    not _symbolic(fake.shape[d]):
                fixed.append(leaf.name)
    return fixed


def _symbolic(size: Any) -> bool:
    return isinstance(size, torch.SymInt) and not size.node.expr.is_Integer


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


def from_program(program: ExportedProgram, name: str = "") -> Exported:
    """`program` as captured, with where a write in place may alias at size 1
    (`functional.size_dependent_alias`): `functionalize` makes it functional."""
    return Exported(name, program, size_alias=size_dependent_alias(program.graph))


def trace_graph_module(gm: fx.GraphModule, args: tuple) -> Exported:
    """For a GraphModule torch.export rejects: retrace it to aten ops with the example
    inputs (static shapes), keeping its weights by reference."""
    from torch.fx.experimental.proxy_tensor import make_fx

    try:
        with export_settings(gm):
            traced = make_fx(gm, tracing_mode="real", pre_dispatch=True)(*args)
    except Exception as e:  # whatever the module raises while tracing
        raise CuvilError(f"cannot trace GraphModule: {_first_line(e)}") from None
    refuse_mutation(traced.graph, type(gm).__name__, "torch.export rejected the GraphModule "
                    "(its retrace is not made functional): write it without in-place ops")
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
    return Exported(type(gm).__name__, None, notes=notes,
                    retraced=Traced(type(gm).__name__, traced.graph, leaves, flat, out_spec))


def _first_line(e: BaseException) -> str:
    """The gist of a torch error on one line: its first paragraph, up to three lines."""
    text = str(e).strip()
    paragraph = text.split("\n\n")[0].splitlines() if text else [type(e).__name__]
    return " ".join(line.strip() for line in paragraph[:3])
