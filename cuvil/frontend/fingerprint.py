"""What a model is, read from a cheap trace: the key of the import cache.

    fp = fingerprint(model, inputs, dynamic_shapes)   # or NotCacheable(reason)
    fp.parts      # program, modules, tensors, inputs, state, path: plain-data hashes

`torch.fx`'s symbolic tracer (torch.nn's own modules are leaves, buffers are graph values)
records the model's forward as a graph in a hundredth of export's time, without importing
torch._dynamo. The key covers everything that graph stands on:

- **program**: every node with its target by module and name and its literal arguments
  (Python attributes read in forward are literals in the graph);
- **modules**: every leaf module's class and whole configuration, children included (a
  Conv2d's padding, a LeakyReLU's slope, `training`); only torch's own classes;
- **tensors**: every parameter, buffer and tensor the graph reads, by path: dtype, shape,
  strides, device, grad flag, bytes, and which paths name one tensor;
- **inputs**: each example input's dtype, shape, strides and device, and `dynamic_shapes`;
- **state**: the modules' training flags, the default dtype and device, autocast,
  inference mode, the MHA fast path;
- **path**: the way the model's own Python code went (`codepath`), so that code which
  tells a proxy from a tensor cannot hide a branch.

A model torch.fx cannot trace is keyed by a fake-tensor trace instead, which vouches for
its example shapes alone (`fake_fingerprint.py`). Anything the key cannot cover refuses
(`NotCacheable`): a hook, a call of the user's own function the graph does not show
(`torch.fx.wrap`), a value or module attribute without a plain form, tensors that share
memory, inputs that are not plain tensors. The trace runs as export's does: no grad, no
fast path, each module in its own training mode.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import threading
from dataclasses import dataclass
from types import CodeType, FunctionType
from typing import Any

import torch
from torch import fx

from cuvil.frontend.canonical import (
    NotCacheable,
    digest,
    function_name,
    hooks_of,
    literal,
    module_config,
    patched_functional,
    tensor_form,
)
from cuvil.frontend.codepath import CodePath, Unavailable, library, own_code


@dataclass
class Fingerprint:
    name: str  # the graph's name, as export would give it
    parts: dict[str, str]
    root: torch.nn.Module  # what was traced: the model, or a wrapper around a torch module
    graph: fx.Graph | None  # None for a fake run's key (`fake_fingerprint.py`)
    path: CodePath
    tensors: dict[str, torch.Tensor]  # the model's tensors the key covers, by path
    stowed: dict[str, Any]  # constants the graph reads under no path of the model's
    leaf_root: bool  # the model is one of torch's own modules (traced as a leaf)
    # the inputs' (shape, dtype) the key vouches for; None: every shape (a symbolic trace)
    shapes: list[tuple[tuple[int, ...], torch.dtype]] | None = None

    def module(self) -> fx.GraphModule:
        """The traced graph as a module (for the check that export agrees with it)."""
        owners = {n.target: self.stowed[n.target] if n.target in self.stowed else
                  _attr(self.root, n.target)
                  for n in self.graph.nodes if n.op in ("get_attr", "call_module")}
        return fx.GraphModule(owners, self.graph, class_name=self.name)


class Untraceable(NotCacheable):
    """torch.fx cannot trace the model: a fake-tensor trace keys it instead
    (`fake_fingerprint.py`)."""


class _Tracer(fx.Tracer):
    """torch.fx's tracer, with buffers as graph values (not baked-in tensors). torch.fx
    patches `nn.Module.__call__` and `__getattr__` for the whole process while it traces:
    other threads' modules run as if it did not."""

    proxy_buffer_attributes = True

    def __init__(self):
        super().__init__()
        self.thread = threading.get_ident()

    def call_module(self, m, forward, args, kwargs):
        if threading.get_ident() != self.thread:
            return forward(*args, **kwargs)
        return super().call_module(m, forward, args, kwargs)

    def getattr(self, attr, attr_val, parameter_proxy_cache):
        if threading.get_ident() != self.thread:
            return attr_val
        return super().getattr(attr, attr_val, parameter_proxy_cache)


class _Root(torch.nn.Module):
    """One of torch's own modules as the model: traced as a leaf of this root."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model


def fingerprint(model: Any, example_inputs: Any, dynamic_shapes: Any) -> Fingerprint:
    """The key parts of importing `model` with `example_inputs`, or NotCacheable."""
    if not isinstance(model, torch.nn.Module):
        raise NotCacheable(f"a {type(model).__name__} is not a torch.nn.Module")
    args = tuple(example_inputs) if isinstance(example_inputs, tuple | list) else (
        example_inputs,)
    hook = hooks_of(model) or patched_functional()
    if hook is not None:
        raise NotCacheable(hook)
    inputs = [input_forms(args), spec_form(dynamic_shapes)]
    state = global_state(model)
    tensors = dict(named_tensors(model))
    leaf_root = _Tracer().is_leaf_module(model, "")
    try:
        root, graph, path, stowed = _trace(model, len(args), leaf_root)
    except Untraceable as e:
        from cuvil.frontend.fake_fingerprint import fake_fingerprint

        return fake_fingerprint(model, args, dynamic_shapes, str(e))
    program, modules, read = _program(graph, root, stowed)
    forms = tensor_forms({**tensors, **{p: t for p, t in read.items() if p not in tensors}})
    tensors.update((p, t) for p, t in read.items() if p not in stowed)
    cls = type(model)
    parts = {"model": f"{cls.__module__}:{cls.__qualname__}", "program": digest(program),
             "modules": digest(modules), "tensors": digest(forms),
             "inputs": digest(inputs),
             "state": digest(state), "path": digest(path.signature())}
    return Fingerprint(cls.__name__, parts, root, graph, path, tensors, stowed, leaf_root)


def global_state(model: torch.nn.Module) -> list[Any]:
    """What forward may read besides the model: training flags, defaults, modes."""
    return [[name, m.training] for name, m in model.named_modules(remove_duplicate=False)] + [
        str(torch.get_default_dtype()), str(torch.get_default_device()),
        torch.is_autocast_enabled("cpu"), torch.is_autocast_enabled("cuda"),
        torch.is_inference_mode_enabled(), torch.backends.mha.get_fastpath_enabled()]


def named_tensors(model: torch.nn.Module):
    """Every parameter and buffer by path, tied ones under each of their paths."""
    yield from model.named_parameters(remove_duplicate=False)
    yield from model.named_buffers(remove_duplicate=False)


@contextlib.contextmanager
def export_mode(model: torch.nn.Module):
    """What `frontend.export.export_settings` sets for export (no grad, no MHA fast path);
    the modules' training flags stay theirs, as under export."""
    fastpath, grad = torch.backends.mha.get_fastpath_enabled(), torch.is_grad_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    torch.set_grad_enabled(False)
    try:
        yield
    finally:
        torch.set_grad_enabled(grad)
        torch.backends.mha.set_fastpath_enabled(fastpath)


def _trace(model: torch.nn.Module, n_args: int, leaf_root: bool):
    """(root, graph, code path, stowed) of a symbolic trace of `model` as export sees it;
    `stowed` holds the tensor constants the tracer found under no name of the model's."""
    if leaf_root:
        return _leaf_trace(model, n_args)
    before = set(vars(model))
    stowed: dict[str, Any] = {}
    try:
        with export_mode(model), CodePath(model_code(model)) as path:
            graph = _Tracer().trace(model)
    except (NotCacheable, Unavailable):
        raise
    except Exception as e:  # anything the model's code raises under a symbolic trace
        raise Untraceable(f"torch.fx cannot trace it: {first_line(e)}") from None
    finally:
        for key in set(vars(model)) - before:  # the tracer stows them on the root: undo
            stowed[key] = vars(model)[key]
            delattr(model, key)
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    if len(placeholders) != n_args or any(str(n.target).startswith("*") for n in placeholders):
        raise NotCacheable(f"forward takes {len(placeholders)} inputs, {n_args} given")
    return model, graph, path, stowed


def _leaf_trace(model: torch.nn.Module, n_args: int):
    """One of torch's own modules as the model: a graph that calls it as a leaf (its
    configuration is in the key like any leaf's; no code of the user's runs)."""
    graph = fx.Graph()
    inputs = [graph.placeholder(f"input_{i}") for i in range(n_args)]
    graph.output(graph.call_module("model", tuple(inputs)))
    with CodePath(set()) as path:
        pass
    return _Root(model), graph, path, {}


def model_code(model: torch.nn.Module) -> set[CodeType]:
    """The code of the modules (files) that define `model`'s forwards, torch's aside."""
    forwards = []
    for module in model.modules():
        fn = inspect.unwrap(getattr(module, "forward", None))
        fn = getattr(fn, "__func__", fn)
        if isinstance(fn, FunctionType) and not library(fn.__code__.co_filename):
            forwards.append(fn)
    return own_code(forwards)


def _program(graph: fx.Graph, root: torch.nn.Module, stowed: dict[str, Any]):
    """(the graph's nodes, the leaf modules' configurations, the tensors it reads by
    target) as plain data."""
    index = {n: i for i, n in enumerate(graph.nodes)}
    nodes, modules, read = [], {}, {}
    for n in graph.nodes:
        try:
            args = literal((n.args, n.kwargs), index.__getitem__)
        except NotCacheable as e:
            raise NotCacheable(f"{n.op} {n.target}: {e}") from None
        target = str(n.target)
        if n.op == "call_function":
            target = function_name(n.target)
        elif n.op == "call_module" and n.target not in modules:
            modules[n.target] = module_config(_attr(root, n.target))
        elif n.op == "get_attr":
            value = stowed[target] if target in stowed else _attr(root, target)
            if not isinstance(value, torch.Tensor):
                raise NotCacheable(f"get_attr {target} is a {type(value).__name__}")
            read[target] = value
        nodes.append([n.op, target, args])
    return nodes, sorted(modules.items()), read


def _attr(root: torch.nn.Module, target: str) -> Any:
    value: Any = root
    for part in target.split("."):
        value = getattr(value, part)
    return value


def tensor_forms(tensors: dict[str, torch.Tensor]) -> list[Any]:
    """Each tensor's form, a repeat of an earlier tensor as a reference to its path;
    distinct tensors sharing memory refuse (the key could not tell views apart)."""
    seen: dict[int, str] = {}
    storages: dict[tuple[int, str], str] = {}
    forms = []
    for path, t in tensors.items():
        if id(t) in seen:
            forms.append([path, "same as", seen[id(t)]])
            continue
        seen[id(t)] = path
        forms.append([path, tensor_form(t, path)])
        storage = t.untyped_storage()
        if storage.nbytes():
            where = (storage.data_ptr(), str(t.device))
            if where in storages:
                raise NotCacheable(f"{path} shares memory with {storages[where]}")
            storages[where] = path
    return forms


def input_forms(args: tuple) -> list[Any]:
    """Each input's dtype, shape, strides, device, grad flag and layout; plain tensors only."""
    forms = []
    for i, a in enumerate(args):
        if type(a) is not torch.Tensor:
            raise NotCacheable(f"input {i} is a {type(a).__name__}, not a plain tensor")
        forms.append([str(a.dtype), list(a.shape), list(a.stride()), str(a.device),
                      a.requires_grad, str(a.layout)])
    return forms


def spec_form(spec: Any) -> Any:
    """`dynamic_shapes` as plain data: None, False, or containers of dims and hints."""
    from torch.export import Dim

    if spec is None or spec is False:
        return [str(spec)]
    if isinstance(spec, tuple | list):
        return [type(spec).__name__, [spec_form(s) for s in spec]]
    if isinstance(spec, dict):
        return ["dict", [[json.dumps(literal(k)), spec_form(v)] for k, v in spec.items()]]
    if type(spec) is Dim:
        return ["Dim", spec.__name__, spec.min, spec.max]
    if type(spec).__name__ == "_DimHint" or type(spec) is int:
        return [type(spec).__name__, repr(spec)]
    raise NotCacheable(f"dynamic_shapes holds a {type(spec).__name__}")


def first_line(e: BaseException) -> str:
    """The first line of an error's message (200 characters at most), else its type."""
    text = str(e).strip()
    return text.splitlines()[0][:200] if text else type(e).__name__
