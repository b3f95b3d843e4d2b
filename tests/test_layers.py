"""tests/test_layers.py: the packages form one-way layers; no module imports upward.

    ir <- ops <- dsl <- library <- verify <- egraph <- lower <- runtime <- targets
       <- quantize <- frontend <- onnx <- zoo <- cache <- pipeline
       <- dump, dynamo, live <- cli, demo
       <- the `cuvil` package itself

with the utilities (`errors`, `atomic`, `aligned`, `paths`, `disk_store`, `trace`, `passes`,
`progress`, `gc_pause`) and the options of a compile (`options`: plain data, read by every
stage from the optimizer up) below them all. Every import of every module counts, those
inside functions too: a lazy import is still a dependency. A module may import its own
package and any lower one. So that a static walk sees every dependency, no module imports a
Cuvil module by a name in a string (`importlib.import_module("cuvil....")`).

Targets (`cuvil/targets/<name>/`) hold everything about one machine; the layers below find
them through the device registry (`cuvil/ir/devices.py`), which imports the target folders
by walking `cuvil/targets/`. Outside `cuvil/targets/` no module tests a device's name
(`device == "cpu"`, `"cuda" in ...`): it asks the registry about the device instead.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import cuvil

ROOT = Path(cuvil.__file__).parent

LAYERS = [
    {"errors", "atomic", "aligned", "paths", "trace", "progress", "gc_pause", "disk_store",
     "passes", "options"},
    {"ir"}, {"ops"}, {"dsl"}, {"library"}, {"verify"}, {"egraph"}, {"lower"}, {"runtime"},
    {"targets"}, {"quantize"},
    {"frontend"}, {"onnx"}, {"zoo"}, {"cache"}, {"pipeline"},
    {"dump", "dynamo", "live"},
    {"cli", "demo"}, {"cuvil"},
    {"__main__"},
]
RANK = {package: rank for rank, layer in enumerate(LAYERS) for package in layer}
BASE = LAYERS[0]


def package_of(parts: list[str]) -> str:
    """`cuvil.targets.cpu.templates.gemm` -> `lower`; the top package itself -> `cuvil`."""
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


DEVICE_NAMES = {"cpu", "cuda"}
# Modules that import a module named at run time: the user's model (`cuvil import
# mymodel:make`), the modules of a model's output containers, and the device registry, which
# imports each folder it finds under `cuvil/targets/` (a new target is a new folder).
IMPORTS_BY_NAME = {"cli/models.py", "ir/outputs.py", "ir/devices.py"}


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


def _names_a_device(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in DEVICE_NAMES
    if isinstance(node, ast.Set | ast.Tuple | ast.List):
        return any(_names_a_device(e) for e in node.elts)
    return False


def _tests_a_device_name(node: ast.AST) -> bool:
    if isinstance(node, ast.Compare):
        return any(_names_a_device(e) for e in [node.left, *node.comparators])
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("startswith", "endswith")
            and any(_names_a_device(a) for a in node.args))


def device_name_tests(path: Path) -> list[int]:
    """Lines of `path` that compare a value with a device's name, look for one in it, or
    test whether a text starts or ends with one."""
    return [node.lineno for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if _tests_a_device_name(node)]


def test_only_targets_test_device_names():
    targets = ROOT / "targets"
    bad = [f"{path.relative_to(ROOT.parent)}:{line}" for path in modules()
           if targets not in path.parents for line in device_name_tests(path)]
    assert not bad, "device-name tests outside cuvil/targets/ (ask cuvil.ir.devices):\n" \
        + "\n".join(bad)


@pytest.mark.parametrize("source, found", [
    ('ok = device == "cpu"\n', True),
    ('ok = "cuda" in devices\n', True),
    ('ok = x.device.type != "cuda"\n', True),
    ('ok = set(names) == {"cpu"}\n', True),
    ('ok = name.startswith("cuda")\n', True),
    ('ok = device == HOST\n', False),
    ('x = to(device="cuda")\n', False),
])
def test_device_name_tests_are_found(tmp_path, source, found):
    path = tmp_path / "m.py"
    path.write_text(source)
    assert bool(device_name_tests(path)) is found


def test_every_cuvil_import_is_a_plain_import():
    """A reader, and this file's static walk, follows every import: none by a name built at
    run time (`importlib.import_module("cuvil." + name)`)."""
    bad = [f"{path.relative_to(ROOT.parent)}:{line}" for path in modules()
           if path.relative_to(ROOT).as_posix() not in IMPORTS_BY_NAME
           for line in imports_by_name(path)]
    assert not bad, "imports by name (import the module plainly):\n" + "\n".join(bad)
