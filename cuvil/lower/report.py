"""What a compile did: kernels (template, nodes, rules, compile time), fallbacks, fusion
decisions and the memory plan; printed as a short readable summary."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cuvil.ir.devices import HOST, device_target


@dataclass
class KernelReport:
    name: str
    template: str
    nodes: list[str]  # "v3 = linear(x, w, b) at mlp.py:12; rules: matmul_add", one per node
    compile_s: float
    cached: bool  # not compiled: loaded from Numba's on-disk cache, or compiled already in
    # this process (by another graph or layer that shares the kernel's module)
    parallel: bool
    jit: bool = True  # False: plain numpy code, nothing to compile
    module: str = ""  # the path of the kernel's own module (shared by identical kernels)
    note: str = ""  # what its template says of it (the CUDA GEMM's tile, ...)


@dataclass
class StepReport:
    """One call in `entry`, in order: what a runtime trace times and names."""

    kind: str  # "kernel", "fallback" or "copy"
    name: str  # the kernel's name (`k0_gemm`), `fallback` or `copy`
    template: str  # the kernel template, or the step's kind
    op: str  # the op it computes: the composite op, or its output node's op
    value: str  # the value it writes (in the lowered graph)
    node: str  # the optimized graph's node its time counts for ("" if none)
    nodes: tuple[str, ...] = ()  # every optimized graph node it computes


@dataclass
class FallbackReport:
    node: str
    op: str
    shape: str
    source: str
    reason: str
    placed: str = ""  # the device it was placed on, where it runs on the host instead

    def __str__(self) -> str:
        where = f" at {self.source}" if self.source else ""
        return f"{self.node} = {self.op} : {self.shape}{where} ({self.reason})"


@dataclass
class CompileReport:
    target: str
    kernels: list[KernelReport] = field(default_factory=list)
    fallbacks: list[FallbackReport] = field(default_factory=list)
    fused: list[str] = field(default_factory=list)  # elementwise fusion decisions
    composed: list[str] = field(default_factory=list)  # composite ops lowered part by part
    memory_slots: int = 0
    memory_bytes: int = 0  # planned bytes at `memory_env`
    naive_bytes: int = 0  # bytes if every intermediate had its own buffer
    memory_env: dict[str, int] = field(default_factory=dict)  # the example inputs' sizes
    memory_assumed: list[str] = field(default_factory=list)  # dims no example input sized
    threads: int = 1
    threading_layer: str = ""
    lower_s: float = 0.0  # partitioning and code generation
    compile_s: float = 0.0  # the whole compile_graph call
    module_path: str = ""  # the graph's entry module
    optimizer: Any = None  # the optimizer's report, when the pipeline has one
    steps: list[StepReport] = field(default_factory=list)  # the calls of `entry`, in order
    graph: Any = field(default=None, repr=False)  # the optimized graph that was lowered
    placement: dict[str, str] = field(default_factory=dict)  # kernel name -> its target
    uploads: int = 0  # constants copied to a device once, when the graph was built
    program_cache: str = ""  # a hit of the program cache (`cuvil/cache/programs.py`), said
    rule_check: str = ""  # the user rules' verification (`cuvil/verify/gate.py`), said
    writes: list[str] = field(default_factory=list)  # the inputs a call writes, in place

    @property
    def cache_hit(self) -> bool:
        """Whether every kernel came from the on-disk cache (nothing was compiled)."""
        jitted = [k for k in self.kernels if k.jit]
        return bool(jitted) and all(k.cached for k in jitted)

    @property
    def kernel_compile_s(self) -> float:
        return sum(k.compile_s for k in self.kernels)

    def placement_summary(self) -> str:
        """`kernel(s) 3 on cuda, 1 on cpu; 2 transfer(s) per call (1 input copied to cuda,
        1 result copied back), 4 constant(s) uploaded once`: where the kernels run, what
        crosses the link."""
        counts: dict[str, int] = {}
        for k in self.kernels:
            if k.template != "transfer":
                where = self.placement.get(k.name, self.target)
                counts[where] = counts.get(where, 0) + 1
        moves = sum(1 for s in self.steps if s.template == "transfer")
        parts = [f"{n} on {t}" for t, n in counts.items()]
        return (f"kernel(s) {', '.join(parts) or 'none'}; {moves} transfer(s) per call"
                + self._boundary_copies()
                + (f", {self.uploads} constant(s) uploaded once" if self.uploads else "")
                + (f"; {len(self.fallbacks)} node(s) on the CPU instead" if self.fallbacks
                   else ""))

    def _boundary_copies(self) -> str:
        """` (2 input(s) copied to cuda, 1 result(s) copied back)`: the host tensors a
        call copies to a device, and the results it copies back to the host."""
        if self.graph is None:
            return ""
        moved = [self.graph[s.value] for s in self.steps
                 if s.template == "transfer" and s.value in self.graph.nodes]
        into = [n for n in moved if self.graph[n.inputs[0]].op == "input"]
        back = [n for n in moved if n.name in self.graph.outputs]
        parts = ([f"{len(into)} input(s) copied to "
                  + ", ".join(sorted({n.type.device for n in into}))] if into else []) \
            + ([f"{len(back)} result(s) copied back"] if back else [])
        return f" ({', '.join(parts)})" if parts else ""

    @property
    def shows_placement(self) -> bool:
        """Whether any kernel or node runs off the host's own target."""
        return ("," in self.target or any(f.placed for f in self.fallbacks)
                or set(self.placement.values()) - {device_target()[HOST]} != set())

    def header(self) -> str:
        """`lowered for cuda (and the CPU: 1 node(s) without a kernel on their device): 3
        kernel(s) ...`: the targets the kernels run on (of those allowed, where fewer)."""
        named = self.target.split(",")
        used = [t for t in named if t in self.placement.values()] or named
        where = ",".join(used) + (f" (of targets {self.target})" if used != named else "")
        moved = sum(1 for f in self.fallbacks if f.placed)
        where += (f" (and the CPU: {moved} node(s) without a kernel on their device)"
                  if moved else "")
        source = "loaded from cache" if self.cache_hit else "compiled"
        return (f"lowered for {where}: {len(self.kernels)} kernel(s) {source} in "
                f"{self.compile_s:.2f} s ({self.threads} thread(s), {self.threading_layer} "
                "layer)")

    def __str__(self) -> str:
        lines = []
        if self.optimizer is not None:
            lines += [str(self.optimizer).rstrip(), ""]
        if self.rule_check:
            lines.append(f"rules: {self.rule_check}")
        if self.program_cache:
            lines.append(f"program cache: {self.program_cache}")
        lines.append(self.header())
        for k in self.kernels:
            how = "numpy" if not k.jit else (
                "cached" if k.cached else f"{k.compile_s * 1e3:.0f} ms")
            where = self.placement.get(k.name, "")
            where = f" on {where}" if where and self.shows_placement else ""
            lines.append(f"  {k.name} [{k.template}{', parallel' if k.parallel else ''}] "
                         f"{how}{where}")
            lines += [f"      {n}" for n in k.nodes]
        if self.shows_placement:
            lines.append(f"  placement: {self.placement_summary()}")
        for f in self.fallbacks:
            lines.append(f"  fallback to torch: {f}")
        lines += [f"  {w}" for w in self.writes]
        lines += [f"  fused: {d}" for d in self.fused]
        lines += [f"  composed of its parts' kernels: {c}" for c in self.composed]
        lines.append(f"  memory plan: {self.memory_slots} buffer(s), "
                     f"{_mb(self.memory_bytes)} (unshared {_mb(self.naive_bytes)})"
                     + self._memory_sizes())
        return "\n".join(lines)

    def _memory_sizes(self) -> str:
        """` at batch=4` (the example inputs' sizes), with the dims no example sized."""
        if not self.memory_env:
            return ""
        env = ", ".join(f"{k}={v}" for k, v in self.memory_env.items())
        assumed = ", ".join(self.memory_assumed)
        return f" at {env}" + (f" ({assumed} assumed: no example input)" if assumed else "")


def _mb(n: int) -> str:
    return f"{n / 1e6:.2f} MB" if n >= 10_000 else f"{n} B"
