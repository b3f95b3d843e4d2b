"""`to_device` between the host and the device: a copy into the planned array
(`cuvil.targets.cuda.runtime.transfer`), host to device or device to host."""

from __future__ import annotations

from cuvil.lower.physical import physical_shape
from cuvil.lower.spec import KernelSpec, Unsupported


def generate(group, ctx) -> KernelSpec:
    node = ctx.graph[group.output]
    src = ctx.type(node.inputs[0])
    if physical_shape(src) != physical_shape(node.type) or src.dtype != node.type.dtype:
        raise Unsupported("a transfer that changes layout or dtype")
    return KernelSpec("transfer", ["x0", "out"], [node.inputs[0], node.name],
                      ["transfer(x0, out)"], parallel=False, python=True)
