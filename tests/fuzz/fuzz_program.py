"""A fuzzed model as data: its forward's statements, its inputs, and its Python source.

A `Program` is a straight-line forward (one `Step` per statement) over inputs whose first
dim is the batch. Its source is a self-contained, runnable Python file (`source`): the
model class, an input maker, and a `__main__` block that compiles the model with Cuvil and
compares it with eager. The fuzzer imports that very file (`load`), so a reproducer is
exactly what was tested.
"""

from __future__ import annotations

import importlib.util
import itertools
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path

NAME = re.compile(r"\b([xv]\d+)\b")

# Module helpers the forward's modules use; the generator evaluates modules with them too.
PRELUDE = '''\
import torch
import torch.nn.functional as F
from torch import nn


def _randomized(norm):
    """A BatchNorm or LayerNorm with non-trivial affine weights and running statistics."""
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
        norm.bias.normal_()
        if getattr(norm, "running_mean", None) is not None:
            norm.running_mean.normal_()
            norm.running_var.uniform_(0.5, 2.0)
    return norm
'''

MAIN = '''

def compare(want, got, what="result"):
    """'' where `got` matches `want` (values, NaN pattern, shapes, dtypes), else what differs."""
    want = want if isinstance(want, (tuple, list)) else (want,)
    got = got if isinstance(got, (tuple, list)) else (got,)
    if len(want) != len(got):
        return f"{len(got)} {what}s, expected {len(want)}"
    for i, (w, g) in enumerate(zip(want, got)):
        if not isinstance(g, torch.Tensor) or g.shape != w.shape or g.dtype != w.dtype:
            return f"{what} {i}: {getattr(g, 'shape', g)} {getattr(g, 'dtype', '')}, " \\
                   f"expected {tuple(w.shape)} {w.dtype}"
        if not torch.equal(w.isnan(), g.isnan()):
            return f"{what} {i}: NaN at other places"
        loose = 10.0 if w.dtype in (torch.float16, torch.bfloat16) else 1.0
        w, g = w.double().nan_to_num(nan=0.0), g.double().nan_to_num(nan=0.0)
        scale = max(1.0, w[w.isfinite()].abs().max().item() if w.isfinite().any() else 1.0)
        if not torch.allclose(g, w, rtol=RTOL * loose, atol=ATOL * loose * scale):
            return f"{what} {i}: max abs diff {(g - w).abs().max().item():.3g} (scale {scale:.3g})"
    return ""


def check(compiled, eager, batch, seed=None):
    """(how the results differ, how the caller's tensors differ) after one call each."""
    xs = inputs(batch, seed=batch if seed is None else seed)
    mine, theirs = [x.clone() for x in xs], [x.clone() for x in xs]
    with torch.no_grad():
        want = eager(*mine)
    got = compiled(*theirs)
    return compare(want, got), compare(mine, theirs, "input")


if __name__ == "__main__":
    import cuvil

    eager, model = Model().eval(), Model().eval()
    compiled = cuvil.compile(model, inputs(BATCHES[0], seed=0))
    for batch in BATCHES:
        results, callers = check(compiled, eager, batch)
        print(f"batch {batch}: results: {results or 'ok'}; caller's tensors: {callers or 'ok'}")
'''

WARM = '''
    warm = cuvil.compile(Model().eval(), inputs(BATCHES[0], seed=0))  # the stored program
    print(f"warm compile: {warm.report.program_cache or 'not from the program cache'}")
    for batch in BATCHES:
        results, callers = check(warm, eager, batch, seed=batch + 7)
        print(f"warm, batch {batch}: results: {results or 'ok'}; "
              f"caller's tensors: {callers or 'ok'}")
'''

THREADS = '''
    import threading

    bad = []

    def worker(k):
        for call in range(5):
            batch = BATCHES[(k + call) % 2]
            results, callers = check(compiled, eager, batch, seed=1000 + 10 * k + call)
            bad.extend(m for m in (results, callers) if m)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"4 threads x 5 calls: {len(bad)} wrong: {bad[:3]}")
'''

RTOL, ATOL = 1e-3, 1e-4


@dataclass(frozen=True)
class Step:
    """One statement of forward; `module` is (attribute, constructor source, seed) or None."""

    line: str
    module: tuple[str, str, int] | None = None

    @property
    def defines(self) -> str | None:
        match = re.match(r"(v\d+) = ", self.line)
        return match.group(1) if match else None

    @property
    def uses(self) -> set[str]:
        text = self.line.split(" = ", 1)[1] if self.defines else self.line
        return set(NAME.findall(text))


@dataclass(frozen=True)
class Program:
    """A model: `inputs` are the non-batch dims of each input (x0, x1, ...)."""

    seed: int
    inputs: tuple[tuple[int, ...], ...]
    steps: tuple[Step, ...]
    outputs: tuple[str, ...]
    batches: tuple[int, int]
    threads: bool = False
    warm: bool = False  # compiled a second time (the program cache's entry) and checked

    def without(self, dropped: set[int]) -> Program | None:
        """This program less the steps at `dropped` and those that read their values, or
        None where no output is left."""
        gone: set[str] = set()
        kept = []
        for i, step in enumerate(self.steps):
            if i in dropped or step.uses & gone:
                gone |= {step.defines} - {None}
            else:
                kept.append(step)
        outputs = tuple(o for o in self.outputs if o not in gone)
        return replace(self, steps=tuple(kept), outputs=outputs) if outputs else None


def model_source(program: Program) -> str:
    """The `Model` class: modules made in `__init__` (each after its own seed), `forward`."""
    args = ", ".join(f"x{i}" for i in range(len(program.inputs)))
    lines = ["class Model(nn.Module):", "    def __init__(self):", "        super().__init__()"]
    for step in program.steps:
        if step.module:
            attr, ctor, seed = step.module
            lines.append(f"        torch.manual_seed({seed})")
            lines.append(f"        self.{attr} = {ctor}")
    lines += ["", f"    def forward(self, {args}):"]
    lines += [f"        {step.line}" for step in program.steps]
    outputs = program.outputs
    lines.append(f"        return {outputs[0] if len(outputs) == 1 else ', '.join(outputs)}")
    return "\n".join(lines) + "\n"


def inputs_source(program: Program) -> str:
    shapes = ", ".join(f"(batch, {', '.join(map(str, dims))})" for dims in program.inputs)
    return ("def inputs(batch, seed):\n"
            "    g = torch.Generator().manual_seed(seed)\n"
            f"    return tuple(torch.randn(shape, generator=g) for shape in [{shapes}])\n")


def source(program: Program, header: str = "") -> str:
    """The program as a runnable reproducer (`python file.py` compiles and compares)."""
    doc = f'"""Cuvil fuzz case, seed {program.seed}.{header and chr(10) + chr(10) + header}\n"""\n'
    main = MAIN + (WARM if program.warm else "") + (THREADS if program.threads else "")
    return "\n".join([doc, PRELUDE, "", f"RTOL, ATOL = {RTOL}, {ATOL}",
                      f"BATCHES = {program.batches}", "", "", model_source(program), "",
                      inputs_source(program), main])


_counter = itertools.count()


def load(program: Program, folder: Path):
    """The program's file written under `folder` and imported: its module."""
    folder.mkdir(parents=True, exist_ok=True)
    name = f"cuvil_fuzz_{program.seed}_{next(_counter)}"
    path = folder / f"{name}.py"
    path.write_text(source(program))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
