"""Random programs: each statement picked from the op menu and run at once, at both batch
sizes, on real tensors, so that every program the generator returns runs in eager.

The generator tracks the live values by running them: a value's shapes at the two batch
sizes say which dims follow the batch, `is_contiguous` says whether `.view` applies, and
its storage says whether it aliases a caller's tensor. A statement that raises in eager
(a view of a non-contiguous value, an in-place write to an expanded one) is dropped and
another one is drawn.
"""

from __future__ import annotations

import random
import warnings
from dataclasses import dataclass

import fuzz_ops as ops
import torch
from fuzz_inplace import in_place, in_place_view
from fuzz_program import NAME, PRELUDE, Program, Step

MAX_TRIES = 300

# The menu and each entry's weight: layers and activations, arithmetic, views, copies and
# casts, and in-place writes (a quarter of the draws).
MENU = {
    ops.linear: 3, ops.conv2d: 2, ops.batchnorm: 1.5, ops.layernorm: 1.5,
    ops.activation: 4, ops.softmax: 1,
    ops.binary: 2.5, ops.reduce: 0.7, ops.cat: 1,
    ops.transpose: 1.5, ops.permute: 1, ops.reshape: 1.5, ops.slice_: 1.5, ops.expand: 0.6,
    ops.unsqueeze: 0.6, ops.squeeze: 0.5, ops.clone: 1.5, ops.cast: 1,
    in_place: 4, in_place_view: 4,
}


@dataclass(frozen=True)
class Value:
    """A live value: its shapes at the two batch sizes, dtype and aliasing."""

    name: str
    shapes: tuple[tuple[int, ...], tuple[int, ...]]
    dtype: torch.dtype
    contiguous: bool
    aliases_input: bool
    storage: int  # the address of its storage at the first batch size

    def shares(self, other: Value) -> bool:
        """Whether the two are views of one storage (an in-place op that reads one while
        writing the other reads elements it may have written: eager's result depends on
        the order it visits them, which no compiler is bound to)."""
        return self.storage == other.storage

    @property
    def rank(self) -> int:
        return len(self.shapes[0])

    def fixed(self, dim: int) -> bool:
        """Whether `dim` has the same size at both batch sizes (not the batch)."""
        return self.shapes[0][dim] == self.shapes[1][dim]

    def size(self, dim: int) -> int:
        return self.shapes[0][dim]

    def fixed_dims(self) -> list[int]:
        return [d for d in range(self.rank) if self.fixed(d)]


class Env:
    """The values a program defined so far, run at both batch sizes."""

    def __init__(self, rng: random.Random, seed: int, inputs, batches):
        self.rng, self.seed, self.inputs, self.batches = rng, seed, inputs, batches
        self.steps: list[Step] = []
        self.written: list[str] = []  # values written in place, in order
        self.count = 0
        self.replay()

    def replay(self) -> None:
        """Namespaces at each batch size with the inputs and the steps so far run."""
        self.holder = torch.nn.Module()
        self.spaces = [self._space(batch) for batch in self.batches]
        for step in self.steps:
            self._run(step)

    def _space(self, batch: int) -> dict:
        space: dict = {}
        exec(PRELUDE, space)
        g = torch.Generator().manual_seed(batch)
        for i, dims in enumerate(self.inputs):
            space[f"x{i}"] = torch.randn((batch, *dims), generator=g)
        space["self"] = self.holder
        return space

    def _run(self, step: Step) -> None:
        if step.module and not hasattr(self.holder, step.module[0]):
            attr, ctor, seed = step.module
            torch.manual_seed(seed)
            setattr(self.holder, attr, eval(ctor, self.spaces[0]).eval())
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for space in self.spaces:
                exec(step.line, space)

    def add(self, step: Step) -> bool:
        """Run `step`; keep it where it runs at both batch sizes and leaves finite-or-not
        tensors (any values), else forget it."""
        try:
            self._run(step)
        except Exception:
            self.replay()
            return False
        self.steps.append(step)
        if not step.defines:
            self.written.append(NAME.search(step.line).group(1))
        return True

    # -- what the menu asks

    def values(self, *, inputs: bool = True) -> list[Value]:
        names = [f"x{i}" for i in range(len(self.inputs))] if inputs else []
        names += [s.defines for s in self.steps if s.defines]
        return [self.value(n) for n in names]

    def value(self, name: str) -> Value:
        t0, t1 = (space[name] for space in self.spaces)
        inputs = [self.spaces[0][f"x{i}"] for i in range(len(self.inputs))]
        ptr = t0.untyped_storage().data_ptr()
        aliases = any(x.untyped_storage().data_ptr() == ptr for x in inputs)
        return Value(name, (tuple(t0.shape), tuple(t1.shape)), t0.dtype,
                     t0.is_contiguous() and t1.is_contiguous(), aliases, ptr)

    def pick(self, ok=lambda v: True, *, inputs: bool = True) -> Value | None:
        """A value for which `ok` holds; values nothing reads yet are four times as likely,
        so that programs are chains rather than dead ends."""
        choices = [v for v in self.values(inputs=inputs) if ok(v)]
        if not choices:
            return None
        read = set().union(*(s.uses for s in self.steps))
        weights = [1 if v.name in read else 4 for v in choices]
        return self.rng.choices(choices, weights)[0]

    def new_name(self) -> str:
        self.count += 1
        return f"v{self.count}"

    def module(self, ctor: str) -> tuple[str, str, int]:
        self.count += 1
        return (f"m{self.count}", ctor, self.seed * 100 + self.count)


def random_inputs(rng: random.Random) -> tuple[tuple[int, ...], ...]:
    """One input (sometimes two) of rank 2 to 4, batch first, small dims."""
    def dims():
        rank = rng.choice([2, 3, 3, 4, 4])
        return tuple(rng.choice([2, 3, 4, 5, 6, 8]) for _ in range(rank - 1))
    return tuple(dims() for _ in range(2 if rng.random() < 0.15 else 1))


def generate(seed: int, *, min_ops: int = 3, max_ops: int = 10,
             threads_share: float = 0.1, warm_share: float = 0.2) -> Program:
    """The program of `seed`: `min_ops` to `max_ops` statements drawn from the menu."""
    rng = random.Random(seed)
    batches = (rng.choice([2, 3, 4]), rng.choice([1, 5, 6]))
    env = Env(rng, seed, random_inputs(rng), batches)
    target = rng.randint(min_ops, max_ops)
    while not env.add(ops.first_step(rng, env)):
        pass  # a clone, or a module that fits the input: runs within a few draws
    names, weights = zip(*MENU.items(), strict=True)
    for _ in range(MAX_TRIES):
        if len(env.steps) >= target:
            break
        step = rng.choices(names, weights)[0](rng, env)
        if step is not None:
            env.add(step)
    return Program(seed, env.inputs, tuple(env.steps), pick_outputs(rng, env), batches,
                   threads=rng.random() < threads_share, warm=rng.random() < warm_share)


def pick_outputs(rng: random.Random, env: Env) -> tuple[str, ...]:
    """The values nothing reads (the last three), and a value written in place."""
    read = set().union(*(s.uses for s in env.steps))
    defined = [s.defines for s in env.steps if s.defines]
    sinks = [n for n in defined if n not in read][-3:] or defined[-1:]
    written = [n for n in env.written if n in defined and n not in sinks]
    return tuple(sinks + written[-1:])
