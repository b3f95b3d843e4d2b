"""What a model is when torch.fx cannot trace it: a run on fake tensors at the example
inputs' shapes, the program cache's second key.

    fp = fake_fingerprint(model, args, dynamic_shapes, why_not_fx)    # or NotCacheable
    fp.shapes     # [(shape, dtype), ...] of the inputs: the only ones the key vouches for

torch.fx's symbolic trace fails on code that branches on sizes, which HuggingFace models
do everywhere (and transformers 5 dropped its own tracer). Here the model's Python code
runs the way torch.export's non-strict mode runs it: on fake tensors (torch's
`FakeTensorMode`: shapes, no data), its parameters swapped for fake ones, the same
"compiling" and "exporting" flags set. A `TorchDispatchMode` records every aten op it
dispatches, with its literal arguments (each size a number) and its tensors by number:
0.06-0.08 s for the zoo's 4-layer GPT-2 and BERT, where export takes 1.0-1.7 s (make_fx,
which builds an FX graph of the same ops, took twice as long). Code that reads a tensor's
value (`.item()`, a branch on data) cannot run on fake tensors: refused.

The key covers the recorded ops (every op and literal argument, the parameters and
buffers by path, the output's structure), every tensor's dtype, shape, strides and bytes
(constants made in forward too), the inputs, the global state and the path of the model's
own code (`codepath`, compared with export's before the program is stored). But the run
went once, at the example shapes: a branch on a size, or on a number the ops do not show
(a threshold in a config), went one way there. So the key vouches for the program at
those shapes only. A program-cache hit runs them, and the first call at any other shape
compiles the model the usual way (export, then the optimizer and kernel caches) and
becomes that program (`runtime.compiled.CompiledGraph`'s `shapes`).
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import TorchDispatchMode

from cuvil.frontend.canonical import NotCacheable, digest, function_name, literal


def fake_fingerprint(model: torch.nn.Module, args: tuple, dynamic_shapes: Any, why_not_fx: str):
    """The key parts of importing `model` with `args`, from a fake-tensor trace, or
    NotCacheable (saying why torch.fx could not trace it either: `why_not_fx`)."""
    from cuvil.frontend.codepath import CodePath, Unavailable
    from cuvil.frontend.fingerprint import (
        Fingerprint,
        export_mode,
        first_line,
        global_state,
        input_forms,
        model_code,
        named_tensors,
        spec_form,
        tensor_forms,
    )

    inputs = [input_forms(args), spec_form(dynamic_shapes)]
    state = global_state(model)
    tensors = dict(named_tensors(model))
    try:
        with export_mode(model), _unchanged(model), CodePath(model_code(model)) as path:
            program, read = _fake_run(model, args)
    except (NotCacheable, Unavailable):
        raise
    except Exception as e:  # anything the model's code raises on fake tensors
        raise NotCacheable(f"{why_not_fx}; nor can a fake-tensor trace: "
                           f"{first_line(e)}") from None
    forms = tensor_forms({**tensors, **read})
    cls = type(model)
    parts = {"model": f"{cls.__module__}:{cls.__qualname__}", "trace": "fake, example shapes",
             "program": digest(program), "tensors": digest(forms), "inputs": digest(inputs),
             "state": digest(state), "path": digest(path.signature())}
    shapes = [(tuple(a.shape), a.dtype) for a in args]
    return Fingerprint(cls.__name__, parts, model, None, path, tensors, read, False, shapes)


def _fake_run(model: torch.nn.Module, args: tuple) -> tuple[list[Any], dict[str, Any]]:
    """(the ops the model ran on fake tensors, as plain data; the real tensors they read,
    which the model made in forward, by name). Tensors are numbered: first the parameters
    and buffers (in `named_parameters` order, their names leading the program), then the
    inputs, then each op's results. The output is flattened inside the run, as export does:
    code that rebuilt the model's own containers (a `ModelOutput`) would run their code, a
    path export does not take."""
    from torch._export.utils import _compiling_state_context  # export's flags
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.func import functional_call
    from torch.utils import _pytree as pytree

    fake = FakeTensorMode()
    params = {k: fake.from_tensor(t) for k, t in model.named_parameters()}
    buffers = {k: fake.from_tensor(t) for k, t in model.named_buffers()}
    xs = [fake.from_tensor(x) for x in args]
    recorder = _Recorder([*params.values(), *buffers.values(), *xs])
    with _compiling_state_context(), fake, recorder:
        leaves, spec = pytree.tree_flatten(functional_call(model, (params, buffers), tuple(xs)))
    program = [[*params, *buffers], *recorder.ops, ["output", recorder.refs(leaves), str(spec)]]
    return program, recorder.constants


class _Recorder(TorchDispatchMode):
    """Records each aten op as `[op, arguments, results]`, a tensor as `["node", number]`
    (numbered at first sight: a result of an in-place op is its input's number); a real
    tensor among the arguments (a constant made in forward) is kept, by name, for the key
    to hash its bytes."""

    def __init__(self, tensors: list[torch.Tensor]):
        super().__init__()
        self.numbers: dict[int, int] = {}
        self.alive: list[torch.Tensor] = []  # keeps each numbered tensor's id its own
        self.constants: dict[str, torch.Tensor] = {}
        self.ops: list[Any] = []
        self.refs(tensors)

    def number(self, t: torch.Tensor) -> int:
        n = self.numbers.get(id(t))
        if n is None:
            n = self.numbers[id(t)] = len(self.alive)
            self.alive.append(t)
            if not isinstance(t, FakeTensor):
                self.constants[f"constant {n}"] = t
        return n

    def refs(self, values: Any) -> Any:
        return literal(values, tensor=self.number)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        form = self.refs((args, kwargs))
        result = func(*args, **kwargs)
        self.ops.append([function_name(func), form, self.refs(result)])
        return result


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

