"""tests/test_layers.py: the packages form one-way layers; no module imports upward.

    ir <- ops <- dsl <- library <- verify <- egraph <- lower <- runtime <- quantize
       <- frontend <- onnx <- zoo <- cache <- options <- pipeline <- dump, dynamo, live <- cli, demo
       <- the `cuvil` package itself

with the utilities (`errors`, `atomic`, `aligned`, `paths`, `disk_store`, `trace`, `progress`,
`gc_pause`) below them all. Every import of every module counts, those inside functions
too: a lazy import is still a dependency. A module may import its own package and any
lower one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import cuvil

ROOT = Path(cuvil.__file__).parent

LAYERS = [
    {"errors", "atomic", "aligned", "paths", "trace", "progress", "gc_pause", "disk_store"},
    {"ir"}, {"ops"}, {"dsl"}, {"library"}, {"verify"}, {"egraph"}, {"lower"}, {"runtime"},
    {"quantize"},
    {"frontend"}, {"onnx"}, {"zoo"}, {"cache"}, {"options"}, {"pipeline"},
    {"dump", "dynamo", "live"},
    {"cli", "demo"}, {"cuvil"},
    {"__main__"},
]
RANK = {package: rank for rank, layer in enumerate(LAYERS) for package in layer}
BASE = LAYERS[0]


def package_of(parts: list[str]) -> str:
    """`cuvil.lower.templates.gemm` -> `lower`; the top package itself -> `cuvil`."""
    return parts[1] if len(parts) > 1 else "cuvil"


def modules() -> list[Path]:
    return sorted(p for p in ROOT.rglob("*.py") if "__pycache__" not in p.parts)


def module_package(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return package_of(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> list[tuple[int, list[str]]]:
    """(line, dotted name split) for every import of a cuvil module in `path`."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name.split(".")) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}:{node.lineno}: use absolute imports"
            base = (node.module or "").split(".")
            # `from cuvil import zoo` imports the package `cuvil.zoo`
            out += [(node.lineno, base + ([a.name] if base == ["cuvil"] else []))
                    for a in node.names]
    return [(line, parts) for line, parts in out if parts[0] == "cuvil"]


def upward_imports() -> list[str]:
    bad = []
    for path in modules():
        here = module_package(path)
        for line, parts in imported(path):
            there = package_of(parts)
            if there == here or there in ("__version__",):
                continue
            if RANK[there] >= RANK[here] and not (here in BASE and there in BASE):
                bad.append(f"{path.relative_to(ROOT.parent)}:{line}: {here} imports {there}")
    return bad


def test_every_package_has_a_layer():
    packages = {module_package(p) for p in modules()}
    assert packages - RANK.keys() == set(), "add the new package to LAYERS"


def test_no_upward_imports():
    bad = upward_imports()
    assert not bad, "upward imports:\n" + "\n".join(bad)


@pytest.mark.parametrize("source, found", [
    ("def f():\n    from cuvil.runtime import compile_graph\n", "runtime"),
    ("from cuvil import cache as c\n", "cache"),
    ("import cuvil.lower.target\n", "lower"),
])
def test_imports_inside_functions_and_from_the_package_count(tmp_path, source, found):
    path = tmp_path / "m.py"
    path.write_text(source)
    assert [package_of(parts) for _, parts in imported(path)] == [found]


# Modules that import a module named at run time that is not Cuvil's: the user's model
# (`cuvil import mymodel:make`) and the modules of a model's output containers.
IMPORTS_BY_NAME = {"cli/models.py", "ir/outputs.py"}
# Owned by the move of the kernel templates into `cuvil/targets/` (issue 47, another part).
IMPORTS_BY_NAME_PENDING = {"lower/target.py", "lower/cuda/target.py"}


def imports_by_name(path: Path) -> list[int]:
    """The lines of `path` that call `importlib.import_module` or `__import__`."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
            if name in ("import_module", "__import__"):
                lines.append(node.lineno)
    return lines


def test_every_cuvil_import_is_a_plain_import():
    """A reader, and this file's static walk, follows every import: none by a name built at
    run time (`importlib.import_module("cuvil." + name)`)."""
    bad = [f"{path.relative_to(ROOT.parent)}:{line}" for path in modules()
           if path.relative_to(ROOT).as_posix() not in IMPORTS_BY_NAME | IMPORTS_BY_NAME_PENDING
           for line in imports_by_name(path)]
    assert not bad, "imports by name (import the module plainly):\n" + "\n".join(bad)
