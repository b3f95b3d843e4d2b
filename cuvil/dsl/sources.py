"""Reading `.cvr` sources: the files (or text) a `rules=` argument names, in load order.

A source is `None` or `"stock"` (the stock library: the top-level `rules/`, shipped inside
the package as `cuvil/stock_rules`), a string containing a newline (`.cvr` text, shown as
`<string>`), any other string or a `Path` (a file, or a directory whose `*.cvr` files load
sorted and recursively; it must exist), or a list/tuple of sources loaded together:
`["stock", "my.cvr"]` extends the stock library. A file's `include "PATH"` lines (PATH
relative to the file, or `"stock"`) load PATH before the file; every file loads once.
Nothing is parsed here: the compile caches hash these texts without loading the rules.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from cuvil.dsl.diagnostics import Reporter
from cuvil.dsl.pos import Pos
from cuvil.ir.devices import rule_files
from cuvil.paths import PACKAGE

Source = str | Path | None | list | tuple

STRING_PATH = "<string>"
STOCK = "stock"  # a source that names the stock library (like None), in a list with others
_INCLUDE = re.compile(r"^include[ \t]+(\"[^\"\n]*\"|'[^'\n]*')", re.M)


def stock_rules_dir() -> Path:
    return PACKAGE / "stock_rules"


def _shown(path: Path) -> str:
    """A target's rule file as the library shows it: `targets/cuda/placement.cvr`."""
    resolved = path.resolve()
    return resolved.relative_to(PACKAGE.resolve()).as_posix() \
        if resolved.is_relative_to(PACKAGE.resolve()) else str(path)


def read_sources(source: Source, reporter: Reporter) -> list[tuple[str, str]]:
    """`(path, text)` of every file `source` names, in load order, each once; a file's
    `include "PATH"` lines put PATH's files before it. Problems go to `reporter`."""
    return _read(source, reporter, set())


def _read(source: Source, reporter: Reporter, seen: set[str]) -> list[tuple[str, str]]:
    if source is None or source == STOCK:  # shown as `rules/...`, wherever it is installed
        if STOCK in seen:
            return []
        seen.add(STOCK)
        root = stock_rules_dir()
        files = sorted(root.rglob("*.cvr"), key=lambda p: p.relative_to(root).as_posix())
        shown = [(f, f"rules/{f.relative_to(root).as_posix()}") for f in files]
        shown += [(f, _shown(f)) for f in rule_files()]  # each target's placement rules
        return [pair for f, name in shown if (pair := read_file(f, name, reporter))]
    if isinstance(source, list | tuple):
        return [pair for s in source for pair in _read(s, reporter, seen)]
    if isinstance(source, str) and "\n" in source:
        count = sum(1 for path in reporter.lines if path.startswith("<string"))
        name = STRING_PATH if count == 0 else f"<string {count + 1}>"
        reporter.add_source(name, source)
        return [*_includes((name, source), Path(), reporter, seen), (name, source)]
    if not isinstance(source, str | Path):
        raise TypeError(f"rules must be a path, .cvr text, \"stock\", a list of them or None, "
                        f"not {type(source).__name__}")
    path = Path(source)
    if path.is_dir():
        files = sorted(path.rglob("*.cvr"), key=lambda p: p.relative_to(path).as_posix())
        return [pair for f in files for pair in _file(f, str(f), reporter, seen)]
    return _file(path, str(source), reporter, seen)


def _file(path: Path, shown: str, reporter: Reporter, seen: set[str]) -> list[tuple[str, str]]:
    """The files `path` includes, then `path`; nothing if it was read already."""
    key = os.path.realpath(path)
    if key in seen:
        return []
    seen.add(key)
    pair = read_file(path, shown, reporter)
    return [*_includes(pair, path.parent, reporter, seen), pair] if pair else []


def _includes(pair: tuple[str, str], folder: Path, reporter: Reporter,
              seen: set[str]) -> list[tuple[str, str]]:
    """The files of each `include "PATH"` line of `pair` (PATH relative to `folder`, or
    `"stock"`), in order."""
    shown, text = pair
    out = []
    for match in _INCLUDE.finditer(text):
        target = match.group(1)[1:-1]
        if target == STOCK:
            out += _read(None, reporter, seen)
            continue
        path = Path(os.path.normpath(folder / target))
        if not path.exists():
            line = text.count("\n", 0, match.start()) + 1
            col = match.start(1) - match.start() + 1
            reporter.error(Pos(shown, line, col), f"cannot include '{target}': no such file or "
                                                  f"directory (a path is relative to this file)")
            continue
        out += _read(path, reporter, seen)
    return out


def read_file(path: Path, shown: str, reporter: Reporter) -> tuple[str, str] | None:
    """The text of a `.cvr` file (UTF-8; a byte-order mark is dropped), or None if unreadable."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        reporter.error(Pos(shown, 0, 0), "no such file or directory")
        return None
    except (OSError, ValueError) as e:  # ValueError: a NUL byte in the path
        reporter.error(Pos(shown, 0, 0), f"cannot read: {getattr(e, 'strerror', None) or e}")
        return None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        before = data[: e.start].decode("utf-8", errors="replace")
        line = before.count("\n") + 1
        col = len(before) - (before.rfind("\n") + 1) + 1
        reporter.add_source(shown, data.decode("utf-8", errors="replace"))
        reporter.error(Pos(shown, line, col), f"the file is not UTF-8 text (byte "
                                              f"0x{data[e.start]:02x} cannot be decoded)")
        return None
    reporter.add_source(shown, text)
    return shown, text


def sources_hash(source: Source) -> str:
    """A hash of the rule sources' paths and text, without parsing them."""
    h = hashlib.sha256()
    for path, text in read_sources(source, Reporter()):
        h.update(f"{path}\x00{text}\x00".encode())
    return h.hexdigest()
