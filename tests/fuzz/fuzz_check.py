"""One differential check: a program compiled by Cuvil against the same model in eager.

The compiled model must give eager's results (values within tolerance, the same NaN
places, shapes and dtypes) and leave the caller's tensors as eager leaves them, at the
example batch and at another one. Programs drawn for it are also called from 4 threads
at once, each call with its own inputs, or compiled a second time (the program cache's
stored program, rebuilt without export) and checked again. A `CuvilError` (a one-line
refusal) is allowed and counted by its reason; any other exception is a crash.
"""

from __future__ import annotations

import re
import threading
import traceback
from dataclasses import dataclass
from pathlib import Path

import torch
from fuzz_program import Program, load

import cuvil
from cuvil.errors import CuvilError

THREADS, CALLS = 4, 5


@dataclass(frozen=True)
class Outcome:
    """`kind`: passed, refused, miscompile or crash; `where`: what differed or raised
    (results, callers, threads, or the exception's type), `detail`: the message."""

    kind: str
    where: str = ""
    detail: str = ""

    @property
    def failed(self) -> bool:
        return self.kind in ("miscompile", "crash")

    @property
    def signature(self) -> tuple[str, str]:
        """What a shrunk program must still show to count as the same failure."""
        return self.kind, self.where

    def __str__(self) -> str:
        return f"{self.kind} ({self.where}): {self.detail}" if self.where else self.kind


PASSED = Outcome("passed")


def refusal(error: CuvilError) -> Outcome:
    """A refusal, its reason the message's first line with numbers and names masked."""
    line = (str(error).strip().splitlines() or [""])[0]
    reason = re.sub(r"\d+", "N", re.sub(r"\b[vx]\d+\b|'[^']*'", "_", line))[:120]
    return Outcome("refused", type(error).__name__, reason)


def crash(when: str, error: BaseException) -> Outcome:
    frames = traceback.extract_tb(error.__traceback__)
    at = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
    first = (str(error).strip().splitlines() or [""])[0][:300]
    return Outcome("crash", type(error).__name__, f"{when}: {first}{at}")


def check(program: Program, folder: Path) -> Outcome:
    """Compile `program`'s model (written under `folder`) and compare it with eager."""
    module = load(program, folder)
    eager = module.Model().eval()
    compiled = compile_(module, "compile")
    if isinstance(compiled, Outcome):
        return compiled
    outcome = calls(module, compiled, eager, program.batches, seed=0)
    if outcome is PASSED and program.warm:
        outcome = warm(module, eager, program.batches)
    if outcome is PASSED and program.threads:
        outcome = threaded(module, compiled, eager, program.batches)
    return outcome


def compile_(module, when: str):
    """A fresh instance of the model compiled, or the outcome of its refusal or crash."""
    try:
        return cuvil.compile(module.Model().eval(), module.inputs(module.BATCHES[0], seed=0))
    except CuvilError as error:
        return refusal(error)
    except Exception as error:
        return crash(when, error)


def calls(module, compiled, eager, batches, seed: int) -> Outcome:
    for batch in batches:
        outcome = call(module, compiled, eager, batch, seed=batch + seed)
        if outcome is not PASSED:
            return outcome
    return PASSED


def warm(module, eager, batches) -> Outcome:
    """The model compiled again (the program cache's entry), called at both batch sizes."""
    compiled = compile_(module, "warm compile")
    if isinstance(compiled, Outcome):
        return compiled
    outcome = calls(module, compiled, eager, batches, seed=7)
    return Outcome(outcome.kind, "warm", outcome.detail) if outcome.kind == "miscompile" \
        else outcome


def prepared(module, eager, batch: int, seed: int):
    """(eager's results, eager's inputs after its call, fresh inputs for the compiled one)."""
    xs = module.inputs(batch, seed=seed)
    mine, theirs = [x.clone() for x in xs], [x.clone() for x in xs]
    with torch.no_grad():
        want = eager(*mine)
    return want, mine, theirs


def compared(module, want, mine, got, theirs, where: str) -> Outcome:
    results, callers = module.compare(want, got), module.compare(mine, theirs, "input")
    if results:
        return Outcome("miscompile", "results", f"{where}: {results}")
    if callers:
        return Outcome("miscompile", "callers", f"{where}: caller's tensors: {callers}")
    return PASSED


def call(module, compiled, eager, batch: int, seed: int) -> Outcome:
    """One call of the compiled model at `batch`, compared with eager's."""
    want, mine, theirs = prepared(module, eager, batch, seed)
    try:
        got = compiled(*theirs)
    except CuvilError as error:
        return refusal(error)
    except Exception as error:
        return crash(f"call at batch {batch}", error)
    return compared(module, want, mine, got, theirs, f"batch {batch}")


def threaded(module, compiled, eager, batches) -> Outcome:
    """THREADS threads, CALLS calls each, every call with its own inputs (alternating
    batch sizes), started together; each result compared with eager's afterwards."""
    jobs = {(k, c): (batches[(k + c) % 2], 1000 + 10 * k + c)
            for k in range(THREADS) for c in range(CALLS)}
    cases = {job: prepared(module, eager, *jobs[job]) for job in jobs}
    got: dict = {}
    start = threading.Barrier(THREADS)

    def worker(k: int) -> None:
        start.wait()
        for c in range(CALLS):
            try:
                got[k, c] = compiled(*cases[k, c][2])
            except Exception as error:  # reported below, from the main thread
                got[k, c] = error

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for job, (want, mine, theirs) in cases.items():
        outcome = thread_outcome(module, want, mine, got[job], theirs, jobs[job][0])
        if outcome is not PASSED:
            return outcome
    return PASSED


def thread_outcome(module, want, mine, got, theirs, batch: int) -> Outcome:
    if isinstance(got, CuvilError):
        return refusal(got)
    if isinstance(got, Exception):
        return crash(f"threaded call at batch {batch}", got)
    outcome = compared(module, want, mine, got, theirs, f"threads, batch {batch}")
    return Outcome(outcome.kind, "threads", outcome.detail) if outcome.failed else outcome
