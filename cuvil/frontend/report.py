"""What an import did: dynamic dims, ops that fell back to torch, and notes for the user.

Also finds each FX node's place in the model's source: the innermost frame of the user's
code in the node's stack trace (`cnn.py:29`) and the text of that line.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

import torch

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in \S+\n(?P<code>[^\n]*)')
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep


@dataclass(frozen=True)
class Source:
    """A place in the model's code: `where` is `file:line`, `code` the line's text."""

    where: str = ""
    code: str = ""

    def __str__(self) -> str:
        if not self.where:
            return "an unknown place"
        return self.where + (f" ({self.code})" if self.code else "")


def source_of(node: torch.fx.Node) -> Source:
    """The innermost frame of user code that produced `node` (torch's own frames skipped)."""
    frames = [m.groupdict() for m in _FRAME.finditer(node.meta.get("stack_trace") or "")]
    if not frames:
        return Source()
    user = [f for f in frames if not f["file"].startswith(_TORCH_DIR)]
    frame = (user or frames)[-1]
    return Source(f"{_short_path(frame['file'])}:{frame['line']}", frame["code"].strip())


def _short_path(path: str) -> str:
    """torch's own files as `torch/...`; others relative to the current directory when
    under it, else as given."""
    if path.startswith(_TORCH_DIR):
        return "torch/" + path[len(_TORCH_DIR):]
    cwd = os.getcwd() + os.sep
    return path[len(cwd):] if path.startswith(cwd) else path


@dataclass
class ImportReport:
    """Attached to an imported graph as `graph.import_report`; `str()` reads well."""

    model: str
    dynamic_dims: dict[str, str] = field(default_factory=dict)  # name -> where it comes from
    fallbacks: list[tuple[str, Source]] = field(default_factory=list)  # aten op, its source
    notes: list[str] = field(default_factory=list)
    nodes: int = 0
    cache: str = ""  # what the import cache did (cuvil.compile): "hit (...)", "miss: ..."

    @property
    def dynamic(self) -> bool:
        return bool(self.dynamic_dims)

    def __str__(self) -> str:
        lines = [f"import of {self.model}: {self.nodes} nodes"]
        if self.dynamic_dims:
            dims = ", ".join(f"{k} ({v})" for k, v in self.dynamic_dims.items())
            lines.append(f"  symbolic dims: {dims}")
        else:
            lines.append("  static shapes (no symbolic dims)")
        if self.fallbacks:
            lines.append(f"  {len(self.fallbacks)} op(s) without a catalog entry run through "
                         "torch (opaque to rules):")
            lines += [f"    {op} at {src}" for op, src in self.fallbacks]
        else:
            lines.append("  every op maps to the Cuvil catalog")
        lines += [f"  note: {n}" for n in self.notes]
        if self.cache:
            lines.append(f"  import cache: {self.cache}")
        return "\n".join(lines)
