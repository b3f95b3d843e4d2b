"""The in-place part of the op menu: writes to a value directly, through a chain of views of
it (`y[:, :2] += 1`, `y.view(-1).sigmoid_()`, `y.transpose(0, 1)[1:].mul_(2)`), and
item assignments. Targets are values the forward made (clones of the inputs,
intermediates, views of them); one write in ten may land in a caller's tensor.
"""

from __future__ import annotations

from fuzz_ops import IN_PLACE, broadcasts, subscript
from fuzz_program import Step

INPUT_WRITES = 0.1


def target(rng, env):
    """A value to write: one that aliases no caller's tensor, but for one draw in ten."""
    inputs = rng.random() < INPUT_WRITES
    return env.pick(lambda v: inputs or not v.aliases_input)


def view_chain(rng, v) -> str:
    """One or two views of `v`, as text after its name (a shape is tracked with None for
    dims that follow the batch)."""
    shape = [v.size(d) if v.fixed(d) else None for d in range(v.rank)]
    text = ""
    for _ in range(rng.randint(1, 2)):
        link, shape = chain_link(rng, shape)
        text += link
    return text


def chain_link(rng, shape):
    """A view's text and the shape it leaves."""
    sliceable = [d for d, n in enumerate(shape) if n and n >= 2]
    kind = rng.choice(["slice", "slice", "transpose", "flat", "select", "unsqueeze"])
    if kind == "slice" and sliceable:
        d = rng.choice(sliceable)
        k = rng.randint(1, shape[d] - 1)
        text = rng.choice([f":{k}", f"{k}:", f"{k - 1}:{k + 1}"])
        start, stop = slice(*map(lambda s: int(s) if s else None, text.split(":"))).indices(
            shape[d])[:2]
        return subscript(d, text), shape[:d] + [stop - start] + shape[d + 1:]
    if kind == "transpose" and len(shape) >= 2:
        a, b = sorted(rng.sample(range(len(shape)), 2))
        shape = list(shape)
        shape[a], shape[b] = shape[b], shape[a]
        return f".transpose({a}, {b})", shape
    if kind == "select" and sliceable:
        d = rng.choice(sliceable)
        return f".select({d}, {rng.randrange(shape[d])})", shape[:d] + shape[d + 1:]
    if kind == "unsqueeze":
        return ".unsqueeze(0)", [1, *shape]
    return ".view(-1)", [None]


def in_place(rng, env):
    """`v.relu_()`, `v.add_(w)`, `v += w`: a direct write, sometimes of another value."""
    v = target(rng, env)
    if v is None:
        return None
    partners = [w for w in env.values() if broadcasts(v, w) and not v.shares(w)]
    if rng.random() < 0.4 and partners:
        w = rng.choice(partners).name
        form = rng.choice(["{v}.add_({w})", "{v}.mul_({w})", "{v} += {w}", "{v} *= {w}",
                           "{v}.sub_({w})", "{v}.copy_({w})", "{v}.add_({w}, alpha=0.5)"])
        return Step(form.format(v=v.name, w=w))
    if rng.random() < 0.3:
        return Step(f"{v.name} {rng.choice(['+=', '*=', '-='])} {rng.choice(['1.0', '0.5'])}")
    return Step(f"{v.name}.{rng.choice(IN_PLACE)}")


def in_place_view(rng, env):
    """A write through views of a value: a method on a chain, or an augmented item."""
    v = target(rng, env)
    if v is None or v.rank == 0:
        return None
    chain = view_chain(rng, v)
    if rng.random() < 0.4:
        sliceable = [d for d in v.fixed_dims() if v.size(d) >= 2]
        if not sliceable:
            return None
        d = rng.choice(sliceable)
        item = subscript(d, rng.choice([f":{v.size(d) // 2}", "0", "-1", "1:"]))
        op = rng.choice(["+= 1.0", "*= 0.5", "-= 2.0", "= 0.0", "= 1.5"])
        return Step(f"{v.name}{item} {op}")
    return Step(f"{v.name}{chain}.{rng.choice(IN_PLACE)}")
