"""What the import passes hand on (`frontend/__init__.py`): an `Importing` (the model, how to
import it, and what each pass made of it), an `Exported` (the captured program, in-place
ops kept) and a `Traced` (the functional FX graph the importer walks).

    Importing(model, inputs).exported -> .traced -> .graph    # export, functionalize, convert
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch import fx
    from torch.export import ExportedProgram
    from torch.utils import _pytree as pytree

    from cuvil.ir.graph import Graph


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
    ranges: dict[Any, Any] = field(default_factory=dict)  # torch's symbol -> its ValueRanges
    notes: list[str] = field(default_factory=list)
    # input placeholder name -> the node whose value the model writes into it, in place
    writes: dict[str, fx.Node] = field(default_factory=dict)
    # where a write in place meets a view-or-copy op (`functional.size_dependent_alias`):
    # its dynamic dims hold for sizes of 2 and up alone
    size_alias: str | None = None


@dataclass
class Exported:
    """A captured program, in-place ops kept, and what capturing it learned: the symbolic
    dims' names, the notes for the report, where a write in place may alias at size 1.
    A GraphModule torch.export rejected is `retraced` (by make_fx, with no in-place op)."""

    name: str  # the program's name; "" where it has none
    program: ExportedProgram | None
    dim_names: dict[tuple[int, int], str] = field(default_factory=dict)  # (input, dim) -> name
    notes: list[str] = field(default_factory=list)
    size_alias: str | None = None
    retraced: Traced | None = None


@dataclass(frozen=True)
class Importing:
    """A torch model to import, how (`from_torch`'s arguments), and what the passes made of
    it so far. `retry_note` says why this is the static run of a failed import."""

    model: Any
    example_inputs: Any = ()
    dynamic_shapes: Any = None
    strict: bool = False
    retry_note: str | None = None
    exported: Exported | None = None  # export
    traced: Traced | None = None  # functionalize
    graph: Graph | None = None  # convert
