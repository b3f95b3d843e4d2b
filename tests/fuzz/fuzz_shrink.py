"""Shrinking a failing program to a minimal one, and writing it as a reproducer.

Delta debugging over the forward's statements: drop a chunk of them (and whatever reads
what they define) while the program still runs in eager and still fails the same way
(`Outcome.signature`: a miscompile of the results stays one, a crash keeps its exception
type); halve the chunks when no chunk can go. Then drop outputs one at a time, and the
threads where the failure is not theirs. Every try is a compile, so a budget caps them.
"""

from __future__ import annotations

import warnings
from dataclasses import replace
from pathlib import Path

import torch
from fuzz_check import Outcome, check
from fuzz_program import Program, load, source


def runs_in_eager(program: Program, folder: Path) -> bool:
    """Whether the program's model runs in eager at both batch sizes."""
    try:
        module = load(program, folder)
        model = module.Model().eval()
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for batch in program.batches:
                model(*module.inputs(batch, seed=batch))
    except Exception:
        return False
    return True


class Shrinker:
    """Shrinks programs that fail like `outcome`, each try a compile, at most `budget`."""

    def __init__(self, outcome: Outcome, folder: Path, budget: int = 40):
        self.outcome, self.folder, self.budget = outcome, folder, budget

    def fails(self, program: Program | None) -> bool:
        if program is None or self.budget <= 0 or not runs_in_eager(program, self.folder):
            return False
        self.budget -= 1
        found = check(program, self.folder)
        if found.signature != self.outcome.signature:
            return False
        self.last = found
        return True

    def shrink(self, program: Program) -> tuple[Program, Outcome]:
        """The smallest program found that fails the same way, and its outcome."""
        self.last = self.outcome
        if program.threads and self.outcome.where != "threads":
            program = self._smaller(program, replace(program, threads=False))
        program = self._drop_steps(program)
        for name in program.outputs:
            if len(program.outputs) > 1:
                outputs = tuple(o for o in program.outputs if o != name)
                program = self._smaller(program, replace(program, outputs=outputs))
        return self._drop_steps(program), self.last

    def _smaller(self, program: Program, candidate: Program | None) -> Program:
        return candidate if self.fails(candidate) else program

    def _drop_steps(self, program: Program) -> Program:
        chunks = 2
        while len(program.steps) > 1 and self.budget > 0:
            size = max(1, len(program.steps) // chunks)
            for start in range(0, len(program.steps), size):
                candidate = program.without(set(range(start, start + size)))
                if self.fails(candidate):
                    program, chunks = candidate, max(chunks - 1, 2)
                    break
            else:
                if size == 1:
                    break
                chunks = min(chunks * 2, len(program.steps))
        return program


def reproducer(program: Program, outcome: Outcome) -> str:
    """The program as a runnable file whose docstring says what failed."""
    header = (f"{outcome}\n\nFound by Cuvil's differential fuzzer (tests/fuzz). Run it with "
              f"`python {file_name(program, outcome)}`.")
    return source(program, header)


def file_name(program: Program, outcome: Outcome) -> str:
    return f"fuzz_seed{program.seed}_{outcome.kind}_{outcome.where.lower()}.py"
