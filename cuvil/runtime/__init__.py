"""The compiled runtime: memory plan, kernel-module cache, thread policy, `CompiledGraph`."""

from cuvil.runtime.compiled import CompiledGraph
from cuvil.runtime.report import CompileReport, FallbackReport, KernelReport

__all__ = ["CompileReport", "CompiledGraph", "FallbackReport", "KernelReport"]
