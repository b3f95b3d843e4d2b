"""Diagnostics of `.cvr` files: `path:line:col: error: message`, the source line, a caret.

Every stage (file reading, parsing, checking) reports through `Diagnostic`; a `CvrError`
carries all of them, so a rule author sees every problem of a file at once.
"""

from __future__ import annotations

from dataclasses import dataclass

from cuvil.dsl.pos import Pos
from cuvil.errors import CuvilError

ERROR, WARNING, NOTE = "error", "warning", "note"


@dataclass(frozen=True)
class Diagnostic:
    """One message about a place in a `.cvr` source (or about a whole file: `line` 0)."""

    pos: Pos
    message: str
    severity: str = ERROR
    source_line: str | None = None  # the text of line `pos.line`, for the caret
    notes: tuple[Diagnostic, ...] = ()  # e.g. "first defined here" for a duplicate

    @property
    def is_error(self) -> bool:
        return self.severity == ERROR

    def render(self) -> str:
        where = str(self.pos) if self.pos.line else self.pos.path
        message = "".join(c if c.isprintable() else "\ufffd" for c in self.message)
        lines = [f"{where}: {self.severity}: {message}"]
        if self.source_line is not None and self.pos.line:
            lines += caret_lines(self.source_line, self.pos.col)
        lines += [note.render() for note in self.notes]
        return "\n".join(lines)

    def sort_key(self, file_order: dict[str, int]) -> tuple:
        return (file_order.get(self.pos.path, len(file_order)), self.pos.path, self.pos.line,
                self.pos.col, self.message)


def caret_lines(text: str, col: int, width: int = 100) -> list[str]:
    """The source line and a caret under column `col` (1-based). Tabs are kept for the
    alignment, other unprintable characters shown as U+FFFD, and a long line is cut to
    `width` characters around the column."""
    text = "".join(c if c.isprintable() or c == "\t" else "\ufffd" for c in text.rstrip("\r\n"))
    col = max(col - 1, 0)
    start = max(0, min(col - width // 2, len(text) - width))
    shown = ("..." if start else "") + text[start:start + width]
    shown += "..." if start + width < len(text) else ""
    pad = ("   " if start else "") + "".join(c if c == "\t" else " " for c in text[start:col])
    return [f"    {shown}", f"    {pad}^"]


class CvrError(CuvilError):
    """Bad `.cvr` input. Carries every diagnostic; `str()` renders them, one block each."""

    def __init__(self, diagnostics: list[Diagnostic] | tuple[Diagnostic, ...]):
        self.diagnostics = tuple(diagnostics)
        super().__init__("\n".join(d.render() for d in self.diagnostics))

    @property
    def errors(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.is_error)


class Reporter:
    """Collects diagnostics, attaching the source line of each from the known texts."""

    def __init__(self, sources: dict[str, str] | None = None):
        self.lines = {path: text.split("\n") for path, text in (sources or {}).items()}
        self.diagnostics: list[Diagnostic] = []

    def add_source(self, path: str, text: str) -> None:
        self.lines[path] = text.split("\n")

    def make(self, pos: Pos, message: str, severity: str = ERROR,
             notes: tuple[Diagnostic, ...] = ()) -> Diagnostic:
        lines = self.lines.get(pos.path)
        text = lines[pos.line - 1] if lines and 0 < pos.line <= len(lines) else None
        return Diagnostic(pos, message, severity, text, notes)

    def error(self, pos: Pos, message: str, notes: tuple[Diagnostic, ...] = ()) -> None:
        self.diagnostics.append(self.make(pos, message, ERROR, notes))

    def warning(self, pos: Pos, message: str) -> None:
        self.diagnostics.append(self.make(pos, message, WARNING))

    def extend(self, diagnostics) -> None:
        self.diagnostics.extend(diagnostics)

    @property
    def has_errors(self) -> bool:
        return any(d.is_error for d in self.diagnostics)

    def sorted(self, files: list[str] | tuple[str, ...] = ()) -> list[Diagnostic]:
        order = {path: i for i, path in enumerate(files)}
        return sorted(self.diagnostics, key=lambda d: d.sort_key(order))
