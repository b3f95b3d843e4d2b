"""The generated code: kernels, and one `entry` function that runs the whole graph.

Each group becomes a call of a kernel (identical kernels are emitted once), a torch
fallback call, or nothing (a view). `entry` is straight-line code, one line per call, so a
call of the compiled graph is one Python call plus one dispatch per kernel (~0.7 us each).
A single `@njit` function around all kernels would save those dispatches, but Numba then
re-optimizes every kernel inside it: the transformer's compile grew by 5 s for a 10 us gain
(and it would be compiled anew for every graph, which per-kernel modules avoid).

Arrays are passed as parameters: inputs `in*`, constants `c*`, planned buffers `v*`, planned
scratch `s*`, outputs `o*` (fresh every call), sizes of symbolic dims `n_*`, `n_threads`.
A move that only torch fallbacks read reaches them as a strided numpy view of its source, not
a copy (`fallback_views`). A torch fallback whose result is laid out as planned hands back
torch's own memory, which takes the place of its buffer or output array
(`runtime/calling.settle`): no copy. Where it takes an output's place, `entry` returns the
output arrays (`Program.returns`); else None.

Three texts come out. Each kernel is a module of its own (`Kernel.module`): imports and the
kernel as `kernel`, with nothing of the graph in it (no node names, no provenance), so two
identical layers, or an unchanged layer of a changed model, give the same text and share
one compiled kernel. The entry module (`entry_module`) is per graph: each kernel's
provenance comment, the import of its module under the graph's name for it (`k0_gemm`),
then `entry`. The listing (`Program.text`, `compiled.source`, `lower_to_source`) is the
same code as one readable module: every kernel inline under its graph name after its
provenance comment, then `entry`.

The text depends only on the graph's structure (never on weights), and is deterministic.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from cuvil.ir.devices import HOST
from cuvil.ir.graph import Node
from cuvil.ir.types import Dim, DType, TensorType, is_static
from cuvil.lower.dim_code import dim_code
from cuvil.lower.fallback_views import array_roots, fallback_views, view_code
from cuvil.lower.output_roots import output_roots
from cuvil.lower.physical import physical_shape
from cuvil.lower.provenance import kernel_header
from cuvil.lower.spec import FASTMATH, ONE_THREAD, THREADS, KernelSpec, Scratch

KERNEL = "kernel"  # the name of the kernel in its own module


@dataclass
class Kernel:
    name: str  # in this graph's entry and listing
    spec: KernelSpec
    groups: list = field(default_factory=list)
    text: str = ""  # in the listing: the provenance comment, then the kernel as `name`
    module: str = ""  # its own module's text: nothing of the graph, the kernel as `kernel`
    header: list[str] = field(default_factory=list)  # the provenance comment's lines


@dataclass
class Step:
    kind: str  # "kernel", "fallback" or "copy"
    group: object | None
    args: list[str]  # value names (the output last)
    kernel: str = ""


@dataclass
class Array:
    """An array parameter of the entry function."""

    code: str
    kind: str  # input, const, buffer, scratch, output
    dtype: DType
    shape: tuple  # physical dims (`"threads"` allowed in scratch)
    device: str = HOST  # where its memory is (another device: that device's array)


@dataclass
class Program:
    text: str
    kernels: list[Kernel]
    steps: list[Step]
    arrays: dict[str, Array]  # value name -> array parameter
    entry_params: list[str]  # array values in entry order (then symbols, then fallbacks)
    symbols: list[str]
    fallbacks: list[Node]
    results: dict[str, str]  # graph output -> the value whose output array returns it
    aliases: dict[str, str]  # view value -> the value whose array it views
    calls: list[str] = field(default_factory=list)  # the body of `entry`, one line per step
    entry_args: list[str] = field(default_factory=list)  # the parameters of `entry`
    entry: str = ""  # the text of `entry`
    graph: str = ""  # the graph's name
    uploads: dict[str, str] = field(default_factory=dict)  # device constant -> host constant
    returns: str = ""  # `entry`'s last line where a fallback's result replaces an output

    def code_of(self, value: str) -> str:
        return self.arrays[value].code


class ModuleBuilder:
    def __init__(self, ctx, target, groups, specs: dict[int, KernelSpec], outputs: list[str]):
        self.ctx, self.target = ctx, target
        self.groups, self.specs, self.outputs = groups, specs, outputs
        self.arrays: dict[str, Array] = {}
        self.aliases: dict[str, tuple[str, TensorType]] = {}
        self.strided: dict[str, tuple] = {}  # see `fallback_views`
        self.kernels: dict[tuple, Kernel] = {}
        self.steps: list[Step] = []
        self.fallbacks: list[Node] = []
        self.symbols: set[str] = set()
        self.results: dict[str, str] = {}
        self.uploads: dict[str, str] = {}
        self._owned_outputs = False  # a fallback's result is returned in place of an output
        self._returns = ""  # `entry`'s return line, if it has one

    # -- values ------------------------------------------------------------------------------
    def _array(self, value: str, kind: str, t: TensorType | None = None, shape=None) -> Array:
        if value not in self.arrays:
            t = t or self.ctx.type(value)
            prefix = {"input": "in", "const": "c", "buffer": "v", "scratch": "s",
                      "output": "o"}[kind]
            count = sum(1 for a in self.arrays.values() if a.kind == kind)
            shape = physical_shape(t) if shape is None else shape
            self.arrays[value] = Array(f"{prefix}{count}", kind, t.dtype, tuple(shape),
                                       t.device)
        return self.arrays[value]

    def expr(self, value: str) -> str:
        """Code for the array of `value` (a view expression for aliases)."""
        if value == THREADS:
            return "n_threads"
        if value == ONE_THREAD:
            return "1"
        if value.startswith("#sym:"):
            self.symbols.add(value[5:])
            return f"n_{value[5:]}"
        if value in self.strided:
            source, view, sizes = self.strided[value]
            for size in sizes:
                self.expr(size)  # the symbols the view's reshapes read: entry parameters
            return view_code(view, self.expr(source))
        if value in self.aliases or value in self.ctx.views:
            root, t = self.aliases[value] if value in self.aliases else self.ctx.views[value]
            root = self._root(root)
            base = self.expr(root)
            shape = physical_shape(t)
            if physical_shape(self.ctx.type(root)) == shape:
                return base
            return f"{base}.reshape(({''.join(self.dim(d) + ', ' for d in shape).rstrip()}))"
        if value not in self.arrays:
            array = self._array(value, "const")  # a constant or scalar first used here
            if array.device != HOST:  # a constant that lives on a device: copied there once
                self.uploads[value] = value
        return self.arrays[value].code

    def dim(self, d: Dim) -> str:
        if not is_static(d):
            self.symbols.update(str(s) for s in d.free_symbols)
        return dim_code(d, {s: f"n_{s}" for s in _symbols(d)})

    def _root(self, value: str) -> str:
        return self.aliases[value][0] if value in self.aliases else value

    # -- build -------------------------------------------------------------------------------
    def build(self) -> Program:
        graph = self.ctx.graph
        for name in graph.inputs:
            self._array(name, "input")
        outputs = set(self.outputs)
        self.strided = fallback_views(self.ctx, self.groups, self.specs, outputs)
        written_as = output_roots(self.ctx, self.groups, self.outputs)
        for group in self.groups:
            if group.output in self.strided or group.output in written_as.values():
                continue  # a strided view, or an output its root's kernel writes
            if group.template == "alias":
                node = graph[group.output]
                self.aliases[node.name] = (self._root(node.inputs[0]), node.type)
                continue
            if self._uploaded_once(group, outputs):
                continue
            if group.output in written_as:  # the output array, seen in this value's shape
                self._array(written_as[group.output], "output")
                self.aliases[group.output] = (written_as[group.output], graph[group.output].type)
            else:
                self._array(group.output, "output" if group.output in outputs else "buffer")
            if group.template == "fallback":
                self.steps.append(Step("fallback", group, [*graph[group.output].inputs,
                                                           group.output]))
                self.fallbacks.append(graph[group.output])
                continue
            self._kernel_step(group, self.specs[id(group)])
        self._output_copies(outputs)
        return self._program()

    def _uploaded_once(self, group, outputs: set[str]) -> bool:
        """A constant moved to a device is a constant there: copied once, when the graph is
        built, never per call."""
        node = self.ctx.graph[group.output]
        if group.template != "transfer" or node.type.device == HOST or node.name in outputs \
                or not self.ctx.is_const(node.inputs[0]):
            return False
        self._array(node.name, "const")
        self.uploads[node.name] = node.inputs[0]
        return True

    def _kernel_step(self, group, spec: KernelSpec) -> None:
        for name, scratch in spec.scratch.items():
            self._scratch(name, scratch)
        key = (spec.template, tuple(spec.params), tuple(spec.body), spec.parallel,
               spec.fastmath, spec.python, spec.target, spec.library)
        if key not in self.kernels:
            self.kernels[key] = Kernel(f"k{len(self.kernels)}_{spec.template}", spec)
        kernel = self.kernels[key]
        kernel.groups.append(group)
        self.steps.append(Step("kernel", group, list(spec.args), kernel.name))

    def _scratch(self, name: str, scratch: Scratch) -> None:
        t = TensorType(tuple(1 if d == "threads" else d for d in scratch.shape), scratch.dtype)
        self._array(name, "scratch", t, scratch.shape)

    def _output_copies(self, outputs: set[str]) -> None:
        """Outputs that are inputs, constants or views get a fresh array and a copy."""
        for name in self.outputs:
            if name in self.results:
                continue
            if name in self.arrays and self.arrays[name].kind == "output":
                self.results[name] = name
                continue
            copy = f"{name}__out"
            self._array(copy, "output", self.ctx.type(name))
            self.steps.append(Step("copy", None, [name, copy], "np.copyto"))
            self.results[name] = copy

    # -- text --------------------------------------------------------------------------------
    def _program(self) -> Program:
        kernels = list(self.kernels.values())
        for k in kernels:
            tgt = target_of(k.spec, self.target)
            k.header = kernel_header(k, self.ctx)
            k.text = "\n".join(k.header) + "\n" + kernel_def(k.spec, tgt, k.name)
            k.module = kernel_module(k.spec, tgt)
        entry = self._entry()
        title = f"# Generated by cuvil for graph {self.ctx.graph.name!r}. Do not edit."
        text = module_text(title, self._listing_imports(kernels), [k.spec for k in kernels],
                           [k.text for k in kernels] + [entry])
        values = sorted(self.arrays, key=lambda v: _param_order(self.arrays[v]))
        aliases = {v: root for v, (root, _) in self.aliases.items()}
        aliases.update({v: self._root(root) for v, (root, _) in self.ctx.views.items()})
        aliases.update({v: view[0] for v, view in self.strided.items()})
        aliases = array_roots(aliases)
        for a in self.arrays.values():
            for d in a.shape:
                if d != "threads":
                    self.symbols.update(_symbols(d))
        return Program(text, kernels, self.steps, self.arrays, values, sorted(self.symbols),
                       self.fallbacks, self.results, aliases, self._calls, self._entry_args,
                       entry, self.ctx.graph.name, self.uploads, self._returns)

    def _listing_imports(self, kernels: list[Kernel]):
        """The listing's target, or with kernels of several targets the imports each of
        them needs for its own kernels (two targets may spell a helper alike)."""
        by_target: dict[str, tuple] = {}
        for k in kernels:
            tgt = target_of(k.spec, self.target)
            by_target.setdefault(tgt.name, (tgt, []))[1].append(k.text)
        if len(by_target) <= 1:
            return next(iter(by_target.values()))[0] if by_target else self.target
        lines = [ln for tgt, texts in by_target.values()
                 for ln in tgt.imports("\n".join(texts)).splitlines() if ln]
        return "\n".join(dict.fromkeys(lines)) + "\n"

    def _call(self, step: Step) -> str:
        if step.kind == "copy":
            return f"np.copyto({self.expr(step.args[1])}, {self.expr(step.args[0])})"
        args = ", ".join(self.expr(a) for a in step.args)
        if step.kind == "fallback":
            call = f"fallbacks[{self.fallbacks.index(self.ctx.graph[step.group.output])}]"
            dest = self.expr(step.args[-1])
            planned = self.arrays.get(step.args[-1])
            if planned is not None and planned.kind in ("buffer", "output") \
                    and dest.isidentifier():
                self._owned_outputs |= planned.kind == "output"
                return f"{dest} = {call}({args}, own=True)"  # torch's result itself: no copy
            return f"{call}({args})"
        return f"{step.kernel}({args})"

    def _entry(self) -> str:
        """`entry`: one line per step, straight-line code (no interpreter loop)."""
        body = [self._call(step) for step in self.steps]
        params = [a.code for a in sorted(self.arrays.values(), key=_param_order)]
        for a in self.arrays.values():
            for d in a.shape:
                if d != "threads":
                    self.symbols.update(_symbols(d))
        params += [f"n_{s}" for s in sorted(self.symbols)] + ["n_threads", "fallbacks"]
        self._calls, self._entry_args = body, params
        self._returns = returned_outputs(self.arrays) if self._owned_outputs else ""
        lines = [b for b in [*body, self._returns] if b] or ["pass"]
        return "\n".join([f"def entry({', '.join(params)}):"] + ["    " + b for b in lines]) \
            + "\n"


def returned_outputs(arrays: dict[str, Array]) -> str:
    """`return (o0, o1, ...)`: the output arrays in the entry's order, for an entry in which
    a fallback's result (torch's own memory) replaces a planned output array."""
    outputs = [a.code for a in sorted(arrays.values(), key=_param_order) if a.kind == "output"]
    return f"return ({''.join(o + ', ' for o in outputs).rstrip()})"


def target_of(spec: KernelSpec, default):
    """The target that generated `spec` (`default`: the graph's first)."""
    if not spec.target or spec.target == default.name:
        return default
    from cuvil.lower.target import get_target

    return get_target(spec.target)


def kernel_def(spec: KernelSpec, target, name: str) -> str:
    """The kernel's decorator and function, named `name`."""
    if spec.library:
        return f"{name} = {spec.library}  # ({', '.join(spec.params)})\n"
    deco = target.parallel_decorator if spec.parallel else target.kernel_decorator
    lines = [] if spec.python else [deco.format(fastmath=spec.fastmath.upper(),
                                                   launch=spec.launch)]
    lines.append(f"def {name}({', '.join(spec.params)}):")
    lines += ["    " + ln for ln in spec.body]
    return "\n".join(lines) + "\n"


def kernel_module(spec: KernelSpec, target) -> str:
    """The text of the kernel's own module: a function of the spec alone, so every graph
    that generates this kernel shares the module and Numba's compiled code for it."""
    note = f" ({spec.note})" if spec.note else ""
    return module_text("# Generated by cuvil: one kernel, shared by every graph that "
                       "generates it. Do not edit.", target, [spec],
                       [f"# template {spec.template}{note}\n" + kernel_def(spec, target,
                                                                           KERNEL)])


def module_text(title: str, target, specs: list[KernelSpec], body: list[str]) -> str:
    """Title, imports (`target`'s for `body`, or given as text), the fastmath flag sets the
    kernels use, then `body`."""
    flags = [f"{name.upper()} = {FASTMATH[name]}" for name in sorted(FASTMATH)
             if any(s.fastmath == name and not (s.python or s.library) for s in specs)]
    imports = target if isinstance(target, str) else target.imports("\n".join(body))
    parts = [f"{title}\n# ruff: noqa\n", imports]
    parts += [("\n".join(flags) + "\n") if flags else ""] + body
    return "\n".join(p.rstrip("\n") + "\n" for p in parts)


def entry_module(program: Program, modules: dict[str, str]) -> str:
    """The graph's entry module: for each kernel its provenance comment and the import of
    its module (`modules`: kernel name -> module name) under its graph name; then `entry`."""
    lines = [f"# Generated by cuvil for graph {program.graph!r}: its entry. Each kernel is",
             "# a module of its own, shared by every graph that generates it. Do not edit.",
             "# ruff: noqa", "", "import numpy as np", ""]
    for k in program.kernels:
        lines += [*k.header, f"from {modules[k.name]} import {KERNEL} as {k.name}", ""]
    return "\n".join(lines) + "\n" + program.entry


def instrumented_entry(program: Program) -> str:
    """`entry_profiled`: `entry` with `lap(i)` after step i (`lap(-1)` starts the clock),
    generated only when profiling is asked for, so that `entry` itself stays untimed."""
    lines = [f"def entry_profiled({', '.join([*program.entry_args, 'lap'])}):", "    lap(-1)"]
    for i, call in enumerate(program.calls):
        lines += [f"    {call}", f"    lap({i})"]
    if program.returns:
        lines.append(f"    {program.returns}")
    return "\n".join(lines) + "\n"


def _param_order(a: Array):
    return ({"input": 0, "const": 1, "buffer": 2, "scratch": 3, "output": 4}[a.kind],
            int(re.sub(r"\D", "", a.code)))


def _symbols(d: Dim) -> list[str]:
    return [] if is_static(d) else sorted(str(s) for s in d.free_symbols)
