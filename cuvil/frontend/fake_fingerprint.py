"""What a model is when torch.fx cannot trace it: a trace with fake tensors at the example
inputs' shapes, the program cache's second key.

    fp = fake_fingerprint(model, args, dynamic_shapes)    # or NotCacheable
    fp.shapes     # [(shape, dtype), ...] of the inputs: the only ones the key vouches for

torch.fx's symbolic trace fails on code that branches on sizes, which HuggingFace models
do everywhere (and transformers 5 dropped its own tracer). `make_fx` with fake tensors runs
the model's Python code the way torch.export's non-strict mode does (its parameters swapped
for fake ones, the same "compiling" and "exporting" flags set), and records every aten op
with each size a literal: 0.1 s for a 4-layer GPT-2, where export takes 1.2 s. Code that
reads a tensor's value (`.item()`, a branch on data) cannot run on fake tensors: refused.

The key covers the recorded graph (every op and literal argument, the parameters and
buffers by path), every tensor's dtype, shape, strides and bytes, the inputs, the global
state and the path of the model's own code (`codepath`, compared with export's before the
program is stored). But the trace ran once, at the example shapes: a branch on a size, or
on a number the graph does not show (a threshold in a config), went one way there. So the
key vouches for the program at those shapes only. A program-cache hit runs them, and the
first call at any other shape compiles the model the usual way (export, then the optimizer
and kernel caches) and becomes that program (`runtime.compiled.CompiledGraph`'s `shapes`).
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from cuvil.frontend.canonical import NotCacheable, digest, function_name, literal


def fake_fingerprint(model: torch.nn.Module, args: tuple, dynamic_shapes: Any, why_not_fx: str):
    """The key parts of importing `model` with `args`, from a fake-tensor trace, or
    NotCacheable (saying why torch.fx could not trace it either: `why_not_fx`)."""
    from cuvil.frontend.codepath import CodePath, Unavailable
    from cuvil.frontend.fingerprint import (
        Fingerprint,
        _input_forms,
        _named_tensors,
        _own_code,
        _spec_form,
        _state,
        _tensor_forms,
        export_mode,
    )

    inputs = [_input_forms(args), _spec_form(dynamic_shapes)]
    state = _state(model)
    tensors = dict(_named_tensors(model))
    try:
        with export_mode(model), _unchanged(model), CodePath(_own_code(model)) as path:
            gm, names = _fake_trace(model, args)
    except (NotCacheable, Unavailable):
        raise
    except Exception as e:  # anything the model's code raises on fake tensors
        raise NotCacheable(f"{why_not_fx}; nor can a fake-tensor trace: "
                           f"{_first_line(e)}") from None
    program, read = _program(gm, names)
    forms = _tensor_forms({**tensors, **read})
    cls = type(model)
    parts = {"model": f"{cls.__module__}:{cls.__qualname__}", "trace": "fake, example shapes",
             "program": digest(program), "tensors": digest(forms), "inputs": digest(inputs),
             "state": digest(state), "path": digest(path.signature())}
    shapes = [(tuple(a.shape), a.dtype) for a in args]
    return Fingerprint(cls.__name__, parts, model, gm.graph, path, tensors, read, False,
                       shapes)


def _fake_trace(model: torch.nn.Module, args: tuple):
    """(the aten graph module, the names of its parameter and buffer inputs in order, then
    the output's structure). The output is flattened inside the trace, as export does: a
    tracer that rebuilt the model's own containers (a `ModelOutput`) would run their code,
    a path export does not take."""
    from torch._export.utils import _compiling_state_context  # export's flags
    from torch.func import functional_call
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.utils import _pytree as pytree

    params = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    structure = []

    def run(p, b, *xs):
        leaves, spec = pytree.tree_flatten(functional_call(model, (p, b), xs))
        structure.append(str(spec))
        return leaves

    with _compiling_state_context():
        gm = make_fx(run, tracing_mode="fake")(params, buffers, *args)
    return gm, [*params, *buffers, *structure]


def _program(gm: torch.fx.GraphModule, names: list[str]):
    """(the graph's nodes as plain data, the constants it reads by target)."""
    index = {n: i for i, n in enumerate(gm.graph.nodes)}
    nodes, read = [names], {}
    for n in gm.graph.nodes:
        try:
            args = literal((n.args, n.kwargs), index.__getitem__)
        except NotCacheable as e:
            raise NotCacheable(f"{n.op} {n.target}: {e}") from None
        target = function_name(n.target) if n.op == "call_function" else str(n.target)
        if n.op == "get_attr":
            read[target] = getattr(gm, target)  # tensor_form refuses a fake one
        elif n.op not in ("placeholder", "call_function", "output"):
            raise NotCacheable(f"the fake trace holds a {n.op} node")
        nodes.append([n.op, target, args])
    return nodes, read


@contextlib.contextmanager
def _unchanged(model: torch.nn.Module):
    """Refuse a model whose forward sets attributes of its modules (a cache of its own,
    which a fake run would fill with fake tensors); each is put back as it was."""
    before = [(m, dict(vars(m))) for m in model.modules()]
    changed: list[str] = []
    try:
        yield
    finally:
        for m, attrs in before:
            changed += _restore(m, attrs)
    if changed:
        raise NotCacheable(f"forward sets {changed[0]}")


def _restore(module: torch.nn.Module, attrs: dict[str, Any]) -> list[str]:
    """Put back `module`'s attributes as `attrs` has them; the names of those changed."""
    now = vars(module)
    changed = [k for k in now if k not in attrs or now[k] is not attrs[k]]
    for key in changed:
        if key in attrs:
            now[key] = attrs[key]
        else:
            del now[key]
    return [f"{type(module).__name__}.{k}" for k in changed]


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:200] if text else type(e).__name__
