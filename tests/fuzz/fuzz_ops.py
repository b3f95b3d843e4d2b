"""The op menu: what users write in a forward, one statement each.

Each entry takes the generator's random source and `Env` (fuzz_generate.py) and returns a
`Step` over live values whose shapes fit, or None where no value fits. The generator runs
the step at once and drops it where eager raises, so an entry may propose statements
that turn out invalid (a `.view` of a value that is not contiguous).
"""

from __future__ import annotations

import math

import torch
from fuzz_program import Step

F32 = torch.float32
ACTIVATIONS = ["F.relu({})", "F.gelu({})", "F.silu({})", "torch.sigmoid({})",
               "torch.tanh({})", "F.hardswish({})", "F.leaky_relu({}, 0.1)", "{}.relu()",
               "{}.sigmoid()", "F.gelu({}, approximate='tanh')"]
ACT_MODULES = ["nn.ReLU()", "nn.GELU()", "nn.SiLU()", "nn.Sigmoid()", "nn.Tanh()",
               "nn.Hardswish()", "nn.LeakyReLU(0.2)"]
IN_PLACE = ["relu_()", "sigmoid_()", "tanh_()", "clamp_(min=-0.5, max=0.5)", "clamp_(min=0)",
            "mul_(0.5)", "mul_(-2.0)", "add_(1.0)", "sub_(0.25)", "zero_()", "fill_(0.75)"]


def subscript(dim: int, text: str) -> str:
    """`[:, :, text]`: `text` indexes `dim`."""
    return "[" + ":, " * dim + text + "]"


def float32(v) -> bool:
    return v.dtype == F32


def first_step(rng, env) -> Step:
    """The program's first statement: a clone of an input, or a step of the menu."""
    if rng.random() < 0.5:
        return Step(f"{env.new_name()} = x0.clone()")
    return rng.choice([linear, activation, transpose, clone])(rng, env) or \
        Step(f"{env.new_name()} = x0.clone()")


# -- layers


def linear(rng, env):
    v = env.pick(lambda v: float32(v) and v.rank >= 1 and v.fixed(-1))
    if v is None:
        return None
    bias = "" if rng.random() < 0.8 else ", bias=False"
    out = rng.choice([3, 4, 6, 8, 12, 16])
    m = env.module(f"nn.Linear({v.size(-1)}, {out}{bias})")
    return Step(f"{env.new_name()} = self.{m[0]}({v.name})", m)


def conv2d(rng, env):
    v = env.pick(lambda v: float32(v) and v.rank == 4 and v.fixed_dims() == [1, 2, 3])
    if v is None:
        return None
    c, h, w = v.shapes[0][1:]
    k = rng.choice([1, 3]) if min(h, w) >= 3 else 1
    out = c if rng.random() < 0.25 else rng.choice([2, 4, 8])
    groups = f", groups={c}" if out == c and rng.random() < 0.5 else ""
    pad, stride = rng.choice([0, k // 2]), rng.choice([1, 1, 2])
    m = env.module(f"nn.Conv2d({c}, {out}, {k}, stride={stride}, padding={pad}{groups})")
    return Step(f"{env.new_name()} = self.{m[0]}({v.name})", m)


def batchnorm(rng, env):
    v = env.pick(lambda v: float32(v) and v.rank in (2, 3, 4) and v.fixed(1) and not v.fixed(0))
    if v is None:
        return None
    kind = "BatchNorm2d" if v.rank == 4 else "BatchNorm1d"
    m = env.module(f"_randomized(nn.{kind}({v.size(1)}))")
    return Step(f"{env.new_name()} = self.{m[0]}({v.name})", m)


def layernorm(rng, env):
    v = env.pick(lambda v: float32(v) and v.rank >= 2 and v.fixed(-1))
    if v is None:
        return None
    dims = [v.size(-1)]
    if v.rank >= 3 and v.fixed(-2) and rng.random() < 0.3:
        dims = [v.size(-2), v.size(-1)]
    m = env.module(f"_randomized(nn.LayerNorm({dims[0] if len(dims) == 1 else dims}))")
    return Step(f"{env.new_name()} = self.{m[0]}({v.name})", m)


def activation(rng, env):
    v = env.pick()
    if rng.random() < 0.3 and float32(v):
        m = env.module(rng.choice(ACT_MODULES))
        return Step(f"{env.new_name()} = self.{m[0]}({v.name})", m)
    return Step(f"{env.new_name()} = {rng.choice(ACTIVATIONS).format(v.name)}")


def softmax(rng, env):
    v = env.pick(lambda v: v.rank >= 1)
    if v is None:
        return None
    dims = v.fixed_dims() if rng.random() < 0.9 else list(range(v.rank))
    if not dims:
        return None
    form = rng.choice(["torch.softmax({}, dim={})", "F.softmax({}, dim={})", "{}.softmax({})"])
    return Step(f"{env.new_name()} = {form.format(v.name, rng.choice(dims))}")


# -- arithmetic


def broadcasts(v, w) -> bool:
    """Whether `w` broadcasts to `v`'s shape at both batch sizes."""
    try:
        pairs = zip(v.shapes, w.shapes, strict=True)
        return all(torch.broadcast_shapes(a, b) == a for a, b in pairs)
    except RuntimeError:
        return False


def binary(rng, env):
    v = env.pick()
    partners = [w for w in env.values() if broadcasts(v, w)]
    op = rng.choice(["+", "-", "*", "+", "*"])
    if rng.random() < 0.25:
        return Step(f"{env.new_name()} = {v.name} {op} {rng.choice(['0.5', '2.0', '-1.0'])}")
    w = rng.choice(partners)
    a, b = (v.name, w.name) if rng.random() < 0.5 else (w.name, v.name)
    return Step(f"{env.new_name()} = {a} {op} {b}")


def reduce(rng, env):
    v = env.pick(lambda v: v.rank >= 2 and v.fixed_dims())
    if v is None:
        return None
    how = rng.choice(["mean", "sum", "amax"])
    keep = rng.choice([", keepdim=True", ""])
    return Step(f"{env.new_name()} = {v.name}.{how}({rng.choice(v.fixed_dims())}{keep})")


def cat(rng, env):
    v = env.pick(lambda v: v.fixed_dims())
    if v is None:
        return None
    d = rng.choice(v.fixed_dims())

    def fits(w):
        if w.rank != v.rank:
            return False
        pairs = zip(v.shapes, w.shapes, strict=True)
        return all(i == d or a[i] == b[i] for a, b in pairs for i in range(v.rank))
    w = rng.choice([w for w in env.values() if fits(w)])
    return Step(f"{env.new_name()} = torch.cat([{v.name}, {w.name}], dim={d})")


# -- views and copies


def transpose(rng, env):
    v = env.pick(lambda v: v.rank >= 2)
    if v is None:
        return None
    a, b = sorted(rng.sample(range(v.rank), 2))
    return Step(f"{env.new_name()} = {v.name}.transpose({a}, {b})")


def permute(rng, env):
    v = env.pick(lambda v: v.rank >= 3)
    if v is None:
        return None
    order = list(range(v.rank))
    rng.shuffle(order)
    return Step(f"{env.new_name()} = {v.name}.permute({', '.join(map(str, order))})")


def reshape(rng, env):
    v = env.pick(lambda v: v.rank >= 2 and not v.fixed(0) and v.fixed_dims() == list(
        range(1, v.rank)))
    if v is None:
        return None
    size = math.prod(v.shapes[0][1:])
    if rng.random() < 0.3:
        form = rng.choice([".flatten(1)", f".view({v.name}.size(0), -1)",
                           f".reshape({v.name}.shape[0], -1)"])
        return Step(f"{env.new_name()} = {v.name}{form}")
    dims = split(rng, size)
    how = "view" if rng.random() < 0.5 else "reshape"
    return Step(f"{env.new_name()} = {v.name}.{how}(-1, {', '.join(map(str, dims))})")


def split(rng, size: int) -> list[int]:
    """`size` as a product of one to three factors."""
    dims = []
    for _ in range(rng.randint(0, 2)):
        factors = [f for f in range(2, size) if size % f == 0]
        if not factors:
            break
        f = rng.choice(factors)
        dims.append(f)
        size //= f
    return [*dims, size]


def slice_(rng, env):
    v = env.pick(lambda v: any(v.size(d) >= 2 for d in v.fixed_dims()))
    if v is None:
        return None
    d = rng.choice([d for d in v.fixed_dims() if v.size(d) >= 2])
    start = rng.randint(0, v.size(d) - 1)
    stop = rng.randint(start + 1, v.size(d))
    text = rng.choice([f"{start}:{stop}", f":{stop}", f"{start}:"])
    return Step(f"{env.new_name()} = {v.name}{subscript(d, text)}")


def expand(rng, env):
    v = env.pick(lambda v: v.rank <= 3)
    if v is None:
        return None
    d = rng.randint(0, v.rank)
    sizes = ["-1"] * (v.rank + 1)
    sizes[d] = str(rng.choice([2, 3]))
    return Step(f"{env.new_name()} = {v.name}.unsqueeze({d}).expand({', '.join(sizes)})")


def unsqueeze(rng, env):
    v = env.pick(lambda v: v.rank <= 4)
    if v is None:
        return None
    return Step(f"{env.new_name()} = {v.name}.unsqueeze({rng.randint(-v.rank - 1, v.rank)})")


def squeeze(rng, env):
    v = env.pick(lambda v: any(v.size(d) == 1 for d in v.fixed_dims()))
    if v is None:
        return None
    d = rng.choice([d for d in v.fixed_dims() if v.size(d) == 1])
    return Step(f"{env.new_name()} = {v.name}.squeeze({d})")


def clone(rng, env):
    how = rng.choice([".clone()", ".clone()", ".detach()", ".contiguous()"])
    return Step(f"{env.new_name()} = {env.pick().name}{how}")


def cast(rng, env):
    v = env.pick()
    if v.dtype != F32:
        how = rng.choice([".float()", ".to(torch.float32)"])
    else:
        how = rng.choice([".double()", ".to(torch.float64)", ".half()", ".float()"])
    return Step(f"{env.new_name()} = {v.name}{how}")
