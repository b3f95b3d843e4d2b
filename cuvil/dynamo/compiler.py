"""`compile_graph`: the compiler AOTAutograd calls for each forward, backward and inference
graph: a callable with the graph's results, computed by Cuvil, or by the graph itself,
with one warning, where Cuvil refuses it.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import fx

from cuvil.dynamo.graphs import (
    COUNTS,
    Expr,
    GraphForward,
    Passed,
    Size,
    Tensor,
    dynamic_spec,
    outputs_of,
    placeholder_metas,
    plain,
    sources_of,
)
from cuvil.dynamo.layouts import dense_order, laid_out, rebuilt, reshapes
from cuvil.errors import CuvilError


def compile_graph(gm: fx.GraphModule, example_inputs: Sequence[Any],
                  options: dict | None = None, kind: str = "aten", source: str = "",
                  ) -> Callable:
    """`gm` compiled by Cuvil with `cuvil.compile`'s keyword arguments `options` (boxed:
    called with one list of inputs): a compiler for `aot_autograd(fw_compiler=...,
    bw_compiler=...)`. `kind` says which graph it is in the warnings ("forward",
    "backward", "inference"), `source` where it comes from (`where` of Dynamo's graph)."""
    from torch._functorch.aot_autograd import make_boxed_func
    from torch._guards import tracing
    from torch.utils._python_dispatch import _disable_current_modes

    try:  # AOTAutograd calls compilers under its fake mode and Dynamo's tracing context:
        with _disable_current_modes(), tracing(None):  # Cuvil's export has its own
            program: Callable = Program(gm, example_inputs, options or {},
                                         f"{kind} graph{source}")
    except Exception as e:  # Cuvil's refusal, or torch.export's: the graph runs as given
        program = eager(gm, f"{kind} graph{source}", e)
    return make_boxed_func(program)


def eager(gm: fx.GraphModule, what: str, error: BaseException) -> Callable:
    """`gm` itself, with one warning that says why."""
    COUNTS["eager"] += 1
    warnings.warn(f"cuvil backend: the {what} runs in eager PyTorch: "
                  f"{_first_line(error)}", UserWarning, stacklevel=2)
    return gm


def dynamo_acts_on(error: BaseException) -> bool:
    """Whether Dynamo acts on `error` from a backend itself: its own signals (restart the
    analysis, skip the frame), a graph break (a fake tensor's refusal), an IndexError it
    hands to the user. Those pass through the backend as they are."""
    from torch._dynamo import exc

    return isinstance(error, (exc.TorchDynamoException, IndexError,
                              *exc.exceptions_allowed_to_be_fallback))


def untraced(gm: fx.GraphModule, error: BaseException) -> Callable:
    """Dynamo's graph `gm`, which AOTAutograd could not trace, as it is, with one warning
    naming the op the error names (an op with no derivative) and its source line."""
    text = _first_line(error)
    for node in gm.graph.nodes:
        name = _op_name(node.target) if node.op == "call_function" else ""
        if name and re.search(rf"\b{re.escape(name)}\b", text):
            called = f" (called{where(gm, node).replace(' of ', ' at ')})" \
                if where(gm, node) else ""
            return eager(gm, f"graph{where(gm)}",
                         CuvilError(f"AOTAutograd cannot trace {name}{called}: {text}"))
    return eager(gm, f"graph{where(gm)}", CuvilError(f"AOTAutograd cannot trace it: {text}"))


def _op_name(target: Any) -> str:
    """`h48.square.default` for an op overload, the name of any other callable."""
    if isinstance(target, torch._ops.OpOverload | torch._ops.OpOverloadPacket):
        return str(target)
    return getattr(target, "__name__", str(target))


def where(gm: fx.GraphModule, op: fx.Node | None = None) -> str:
    """" of FILE:LINE": the model's source line that node `op`, else the first op, of
    Dynamo's graph `gm` comes from (AOTAutograd's graphs keep no stack traces)."""
    for node in [op] if op is not None else gm.graph.nodes:
        found = re.findall(r'File "([^"]+)", line (\d+)', node.meta.get("stack_trace") or "")
        if found:
            return f" of {found[-1][0]}:{found[-1][1]}"
    return ""


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


class Program:
    """One graph compiled by Cuvil for symbolic dims (or static, per set of shapes); `what`
    names it in warnings ("forward graph of model.py:12")."""

    def __init__(self, gm: fx.GraphModule, example_inputs: Sequence[Any], options: dict,
                 what: str):
        metas = placeholder_metas(gm, example_inputs)
        sources, dims = sources_of(metas)
        keep, rest = outputs_of(gm, dims)
        if not keep:
            raise CuvilError("the graph computes no tensor")
        self.gm, self.what, self.options = gm, what, dict(options)
        self.count = len(rest)
        computed, self.keep, self.rest, self.strided = laid_out(
            gm, keep, rest, lambda size, what: plain(size, dims, what), Passed)
        self.tensors = [i for i, s in enumerate(sources) if isinstance(s, Tensor)]
        self.orders = [dense_order(metas[i]) for i in self.tensors]
        self.module = GraphForward(computed, sources, self.keep, self.orders).eval()
        self.static: dict[tuple, Callable] = {}
        self.dynamic = None
        examples = self._physical([real(metas[i]) for i in self.tensors])
        self.dynamic = self._compile_dynamic(examples, metas)  # permuted ones are static
        if self.dynamic is None:
            self.static[_shapes(examples)] = self._compile(examples, False)
        # the one program of a graph Dynamo gave static sizes (its guards keep them)
        self.fixed = self.dynamic or (next(iter(self.static.values()))
                                      if not dims and len(self.static) == 1 else None)
        self.permuted = any(o is not None for o in self.orders)
        self.passed = [(i, r.position) for i, r in enumerate(self.rest)
                       if isinstance(r, Passed)]
        self.reshaped = reshapes(computed, self.rest)
        self.plain = not self.strided and all(  # computed, an input or all of a result
            r is None or isinstance(r, Passed) or i in self.reshaped
            for i, r in enumerate(self.rest[:self.count]))

    def _compile_dynamic(self, examples: list[torch.Tensor], metas: list[Any]) -> Any:
        """Compiled for Dynamo's symbolic dims, named after its symbols, else for dims
        torch.export infers (`Dim.AUTO`, where a named dim's range is too wide for the
        graph); None if every dim is static or export keeps none symbolic."""
        error = None
        for auto in (False, True):
            spec = dynamic_spec(metas, auto)
            if spec is None:
                return None
            try:
                return self._compile(examples, spec)
            except CuvilError as e:
                error = e
        warnings.warn(f"cuvil backend: the {self.what} is compiled static, for each "
                      f"new shape: {_first_line(error)}", UserWarning, stacklevel=3)
        return None

    def _compile(self, examples: list[torch.Tensor], spec: Any) -> Callable:
        from cuvil.pipeline import compile as cuvil_compile

        compiled = cuvil_compile(self.module, tuple(examples), dynamic_shapes=spec,
                                 **self.options)
        COUNTS["compiles"] += 1
        return compiled

    def _physical(self, tensors: list[Any]) -> list[Any]:
        """The tensor inputs as Cuvil reads them: each with an order (`dense_order`) as its
        memory in row-major order."""
        return [t if o is None else t.permute(o) for t, o in zip(tensors, self.orders,
                                                                  strict=True)]

    def _program(self, tensors: list[torch.Tensor]) -> Callable:
        if self.dynamic is not None:
            return self.dynamic
        key = _shapes(tensors)
        if key not in self.static:
            self.static[key] = self._compile(tensors, False)
        return self.static[key]

    def __call__(self, *args: Any) -> list[Any]:
        if self.plain and self.fixed is not None and not self.permuted:
            return self._call_plain(args)
        tensors = [args[i].detach() for i in self.tensors]
        try:
            physical = self._physical(tensors)
            results = self._with_outputs(self._program(physical)(*physical))

            def size(s: Any) -> Any:
                return s.of(tensors) if isinstance(s, Size | Expr) else s

            return rebuilt([size(r) if not isinstance(r, Passed) else args[r.position]
                            for r in results], args, self.strided, self.count, size)
        except CuvilError as e:
            eager(self.gm, self.what, e)
            return list(self.gm(*args))

    def _call_plain(self, args: tuple) -> list[Any]:
        """`__call__` where the program is fixed, no input permuted and each output is a
        computed tensor, an input or all of a computed one (`reshaped`)."""
        try:
            outs = self.fixed(*[args[i].detach() for i in self.tensors])
        except CuvilError as e:
            eager(self.gm, self.what, e)
            return list(self.gm(*args))
        results = self._with_outputs(outs)
        for i, position in self.passed:
            results[i] = args[position]
        for i, (root, shape) in self.reshaped.items():
            results[i] = results[root].view(shape)
        return results[:self.count]

    def _with_outputs(self, outs: Any) -> list[Any]:
        """`rest` with the program's outputs (`outs`, or one tensor) at the kept places."""
        results = list(self.rest)
        for i, out in zip(self.keep, (outs,) if isinstance(outs, torch.Tensor) else outs,
                          strict=True):
            results[i] = out
        return results


def real(meta: Any) -> torch.Tensor:
    """A real tensor like `meta` (a fake one has its sizes' hints), laid out as it is (its
    strides, its offset into memory): values at random."""
    from torch._subclasses.fake_tensor import is_fake_tensor
    from torch.fx.experimental.symbolic_shapes import optimization_hint

    if not is_fake_tensor(meta):
        return meta.detach()
    shape = [optimization_hint(s) for s in meta.shape]
    stride = [optimization_hint(s) for s in meta.stride()]
    offset = optimization_hint(meta.storage_offset())
    extent = offset + 1 + sum((n - 1) * s for n, s in zip(shape, stride, strict=True)) \
        if all(shape) else offset
    memory = torch.empty(extent, dtype=meta.dtype)
    memory.normal_() if meta.dtype.is_floating_point else memory.zero_()
    return memory.as_strided(shape, stride, offset)


def _shapes(tensors: Sequence[torch.Tensor]) -> tuple:
    return tuple((tuple(t.shape), t.dtype) for t in tensors)
