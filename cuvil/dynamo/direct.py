"""A training graph's compiled forward and backward, called as one `torch.autograd.Function`.

AOTAutograd splits a graph that needs gradients in two: a forward graph that returns the
graph's outputs and then what the backward needs (saved tensors), and a backward graph that
takes the saved tensors and the outputs' gradients (tangents) and returns each input's
gradient. Its runtime wraps the pair in layers for what a graph may do: mutate its inputs
outside the graph, return aliases of its inputs or of each other, save sizes, thread random
state or effect tokens. Those layers cost ~0.35 ms a training step on the 2-core bench
machine, more than the zoo MLP's whole forward. A graph that does none of that (`plain`
says so, from the graphs themselves) is called through `DirectCall`: its two compiled
graphs in one autograd.Function, nothing between. Any other graph keeps AOTAutograd's
runtime, and so does a graph with symbolic sizes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx
from torch.autograd.function import once_differentiable
from torch.multiprocessing.reductions import StorageWeakRef

from cuvil.dynamo.graphs import COUNTS


@dataclass
class Split:
    """What AOTAutograd made of one graph: the partitioner's forward and backward graphs and
    the compiled forward (recorded by `partition` and `forward_compiler`)."""

    forward: fx.GraphModule | None = None
    backward: fx.GraphModule | None = None
    compiled_forward: Callable | None = None

    def partition(self, partition_fn: Callable) -> Callable:
        def recorded(*args: Any, **kwargs: Any) -> tuple:
            self.forward, self.backward = partition_fn(*args, **kwargs)
            return self.forward, self.backward
        return recorded

    def forward_compiler(self, compiler: Callable) -> Callable:
        def recorded(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Callable:
            self.compiled_forward = compiler(gm, example_inputs)
            return self.compiled_forward
        return recorded


def direct_call(gm: fx.GraphModule, example_inputs: Sequence[Any], split: Split,
                backward_compiler: Callable) -> Callable | None:
    """Dynamo's graph `gm` as a `DirectCall` of the split's compiled forward and of its
    backward, compiled at the first `backward()` (as AOTAutograd would); None where `plain`
    finds the split is not plain."""
    layout = plain(gm, example_inputs, split)
    if layout is None:
        return None
    backward = split.backward
    metas = [n.meta.get("val") for n in backward.graph.find_nodes(op="placeholder")]
    call = DirectCall(split.compiled_forward, lambda: backward_compiler(backward, metas),
                      *layout)
    COUNTS["direct"] += 1
    return call


def plain(gm: fx.GraphModule, example_inputs: Sequence[Any],
          split: Split) -> tuple[int, list[bool]] | None:
    """(the number of outputs, whether each is differentiable) when AOTAutograd's runtime
    would add nothing to the split: static tensor inputs and outputs, no output aliasing an
    input or another output, a forward that returns the outputs then the saved tensors and
    nothing else (no mutation outside the graph, no sizes, random state or tokens), a
    backward that takes those tensors then one tangent per differentiable output. Else
    None."""
    if split.forward is None or split.backward is None or split.compiled_forward is None:
        return None
    outputs = [_val(v) for v in _outputs(gm)]
    inputs = list(example_inputs)
    if not all(_static(t) for t in inputs + outputs) or _aliased(inputs, outputs):
        return None
    differentiable = [t.requires_grad and t.dtype.is_floating_point for t in outputs]
    fw_inputs = split.forward.graph.find_nodes(op="placeholder")
    fw_outputs = _outputs(split.forward)
    bw_inputs = split.backward.graph.find_nodes(op="placeholder")
    saved = [n for n in bw_inputs if not n.name.startswith("tangents")]
    tangents = bw_inputs[len(saved):]
    if (len(fw_inputs) != len(inputs) or len(fw_outputs) != len(outputs) + len(saved)
            or len(tangents) != sum(differentiable)
            or not all(n.name.startswith("tangents") for n in tangents)
            or not all(_static(n.meta.get("val")) for n in saved)
            or len(_outputs(split.backward)) != len(inputs)):
        return None
    return len(outputs), differentiable


def _outputs(gm: fx.GraphModule) -> list[Any]:
    values = gm.graph.find_nodes(op="output")[0].args[0]
    return list(values) if isinstance(values, tuple | list) else [values]


def _val(node: Any) -> Any:
    return node.meta.get("val", node.meta.get("example_value")) \
        if isinstance(node, fx.Node) else node


def _static(value: Any) -> bool:
    """Whether `value` is a tensor of static sizes."""
    return isinstance(value, torch.Tensor) and \
        not any(isinstance(s, torch.SymInt) for s in value.shape)


def _aliased(inputs: list[torch.Tensor], outputs: list[torch.Tensor]) -> bool:
    """Whether an output shares memory with an input or with another output."""
    seen = {StorageWeakRef(t.untyped_storage()) for t in inputs}
    for t in outputs:
        ref = StorageWeakRef(t.untyped_storage())
        if ref in seen:
            return True
        seen.add(ref)
    return False


class DirectCall:
    """The callable Dynamo runs for a training graph: its compiled forward and backward
    (boxed: called with one list; `compile_backward` makes the backward), through
    `_Function`."""

    def __init__(self, forward: Callable, compile_backward: Callable[[], Callable],
                 count: int, differentiable: list[bool]):
        self.forward, self.compile_backward = forward, compile_backward
        self.count, self.differentiable = count, differentiable
        self._backward: Callable | None = None

    def __call__(self, *args: Any) -> tuple:
        return _Function.apply(self, *args)

    def backward(self, args: list) -> list:
        if self._backward is None:
            self._backward = self.compile_backward()
        return self._backward(args)


class _Function(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, call: DirectCall, *args: Any) -> tuple:
        outs = call.forward(list(args))
        ctx.call = call
        ctx.save_for_backward(*outs[call.count:])
        results = tuple(outs[:call.count])
        ctx.mark_non_differentiable(*(t for t, d in zip(results, call.differentiable,
                                                         strict=True) if not d))
        return results

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, *grads: Any) -> tuple:
        call = ctx.call
        tangents = [g.contiguous() for g, d in zip(grads, call.differentiable, strict=True)
                    if d]
        return (None, *call.backward([*ctx.saved_tensors, *tangents]))
