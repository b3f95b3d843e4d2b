"""New weights into a compiled model: its constants computed again, its kernels kept.

    fast = cuvil.compile(model, inputs)
    fast.load_state_dict(new_state)     # as `cuvil.compile` of the model with new_state

A compiled model's constants are the model's tensors, and arrays computed from them: folds
at import (`w.T`) and by the optimizer (a Conv+BN weight, an int8 weight), and lowering's
arrangements (GEMM panels, a Winograd weight, int8 packing). Each was recorded with its
recipe (`ir.recipe` for the graph's, `LowerContext.prepare_from` and `derive` for
lowering's), so a swap replays them on copies of the new tensors: no export, optimizer,
lowering or Numba. The result is the arrays a fresh compile of the new weights makes, bit
for bit, because it is the same computation.

Where a recipe is missing (a program rebuilt from the program cache, a graph from the
optimizer's cache, an op that cannot be recorded) or the compile calibrated activations on
the old weights (int8 with `activations`), the swap compiles a copy of the model with the
new weights afresh, caches off; the program must be the same (same kernels, same call), and
later swaps replay its recipes. The swap is atomic for callers: calls in flight finish on
the old constants, the next call runs on the new ones.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch

from cuvil.errors import CuvilError
from cuvil.ir.recipe import resolve


@dataclass
class Weights:
    """What a swap needs of the compile: the model's tensors by state-dict path (those in
    force; `tensors()` reads the model's on the first swap, so that a compile pays nothing
    for it), the imported graph's constants (what no model tensor feeds) and, for where no
    recipe serves, `rebuild(tensors)`: the model compiled afresh with `tensors`."""

    tensors: Callable[[], dict[str, torch.Tensor]] | dict[str, torch.Tensor]
    base: Mapping[str, torch.Tensor]
    rebuild: Callable[[dict[str, torch.Tensor]], object]
    replay: bool = True  # False: every swap rebuilds (calibration read the weights)
    lock: threading.Lock = field(init=False, default_factory=threading.Lock)  # one swap at a time


def load_state(compiled, state: Mapping[str, torch.Tensor], strict: bool) -> None:
    """Swap `state` into `compiled` (see the module docstring)."""
    weights: Weights | None = compiled.weights
    if weights is None:
        raise CuvilError("load_state_dict: this model was not compiled from a torch module "
                         "for the CPU (an ONNX file, a graph, or another target): compile "
                         "it again with the new weights")
    with weights.lock:
        if callable(weights.tensors):
            weights.tensors = dict(weights.tensors())
        tensors = {**weights.tensors, **checked(weights.tensors, state, strict)}
        try:
            if not weights.replay:
                raise LookupError("calibrated on the old weights")
            program = replayed(compiled, weights, tensors)
        except LookupError:
            program = rebuilt(compiled, weights, tensors)
        compiled.swap_constants(*program)
        weights.tensors = tensors


def checked(current: Mapping[str, torch.Tensor], state: Mapping[str, torch.Tensor],
            strict: bool) -> dict[str, torch.Tensor]:
    """Copies of `state`'s tensors (the program owns its weights), each of the shape and
    dtype of the one it replaces; with `strict`, the same paths as the model's."""
    unknown = [k for k in state if k not in current]
    missing = [k for k in current if k not in state]
    if strict and (unknown or missing):
        said = [f"{what} {', '.join(keys[:3])}{' ...' if len(keys) > 3 else ''}"
                for what, keys in (("unexpected", unknown), ("missing", missing)) if keys]
        raise CuvilError(f"load_state_dict: keys do not match the compiled model's: "
                         f"{'; '.join(said)} (strict=False loads the others)")
    out = {}
    for path, new in state.items():
        if path not in current:
            continue
        old = current[path]
        if not isinstance(new, torch.Tensor) or new.shape != old.shape or \
                new.dtype != old.dtype:
            got = f"{list(new.shape)} {new.dtype}" if isinstance(new, torch.Tensor) else \
                type(new).__name__
            raise CuvilError(f"load_state_dict: {path} is {list(old.shape)} {old.dtype} in "
                             f"the compiled model, given {got}: a change of shape or dtype "
                             "needs a new compile (cuvil.compile)")
        out[path] = new.detach().to("cpu").clone(memory_format=torch.contiguous_format)
    return out


def replayed(compiled, weights: Weights, tensors: dict[str, torch.Tensor]):
    """(constants, graph, lowering, program) with the constants the recipes give for
    `tensors`; `LookupError` where a recipe is missing."""
    from cuvil.runtime.build import constants_of

    graph, lowering, program = compiled._graph, compiled._lowering, compiled._lowered
    if graph is None or lowering is None or graph.recipes is None:
        raise LookupError("no recipes")
    values = resolve(graph.recipes, tensors, list(graph.constants), weights.base)
    new = graph.copy()
    new.report, new.import_report = graph.report, graph.import_report
    new.constants = values
    try:
        lowering = lowering.refreshed(new)
    except ValueError as e:  # an arrangement of another shape: the program is not the same
        raise CuvilError(f"load_state_dict: {e}: compile again") from None
    return constants_of(program, lowering), new, lowering, program


def rebuilt(compiled, weights: Weights, tensors: dict[str, torch.Tensor]):
    """(constants, graph, lowering, program) of a fresh compile with `tensors`, which must
    be this program with other constants; its imported constants become `weights.base`."""
    fresh, weights.base = weights.rebuild(tensors)
    if fresh._spec != compiled._spec or \
            Path(fresh.report.module_path).name != Path(compiled.report.module_path).name:
        raise CuvilError("load_state_dict: the new weights compile to another program "
                         "(the optimizer chose differently): compile again with cuvil.compile")
    return fresh._consts, fresh._graph, fresh._lowering, fresh._lowered
