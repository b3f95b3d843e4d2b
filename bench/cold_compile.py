"""Where a cold compile's time goes: each Numba function compiled, with its LLVM share.

    .venv/bin/python bench/cold_compile.py [cnn|mlp] [--workers 1] [--top 25]

Compiles the tiny zoo model (`cnn(batch=1, size=8, channels=4)`, `mlp(batch=2, width=16)`)
with `cache=False` in a fresh cache directory (so every runtime driver is compiled too),
checks it against eager, and lists the compiled overloads by Numba's own timers: the
whole compile (`compiler_lock`) and its LLVM part (`llvm_lock`). Both include the
functions compiled inside it, so a driver's figure holds its callees': a caller links
each callee's module into its own and optimizes and emits the whole again. `--workers`
sets `CUVIL_COMPILE_WORKERS` (1, the default: every kernel in this process, all listed).
`--full` compiles the zoo model at its own size; `--phases` lists each phase's time
exclusively and the LLVM instructions linked in from callees (`llvm_phases`), and
`--own-only` adds what the module passes and emission cost on each library's own code.
"""

from __future__ import annotations

import argparse
import gc
import os
import tempfile
import time


def overload_rows() -> list[tuple[float, float, str, str]]:
    """(compile s, LLVM s, module.function, signature) of every overload in this process."""
    from numba.core.dispatcher import Dispatcher

    rows = []
    for obj in gc.get_objects():
        if isinstance(obj, Dispatcher):
            name = f"{obj.py_func.__module__.rsplit('.', 1)[-1]}.{obj.py_func.__name__}"
            for sig, cres in obj.overloads.items():
                timers = (cres.metadata or {}).get("timers", {})
                if timers:
                    rows.append((timers.get("compiler_lock", 0.0),
                                 timers.get("llvm_lock", 0.0), name, str(sig)))
    return sorted(rows, reverse=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default="cnn", choices=("cnn", "mlp"))
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--full", action="store_true", help="the zoo model's own size")
    parser.add_argument("--phases", action="store_true", help="time each compile phase")
    parser.add_argument("--own-only", action="store_true",
                        help="with --phases: time each library's own module alone too")
    args = parser.parse_args()
    os.environ["CUVIL_CACHE_DIR"] = tempfile.mkdtemp(prefix="cuvil-cold-")
    os.environ["CUVIL_COMPILE_WORKERS"] = str(args.workers)
    import torch

    import cuvil
    from cuvil.zoo import cnn, mlp

    phases = None
    if args.phases:
        from llvm_phases import instrument, report

        phases = instrument(own_only=args.own_only)
    if args.full:
        model, inputs = cuvil.zoo.get(args.model)
    else:
        model, inputs = (cnn.cnn(batch=1, size=8, channels=4) if args.model == "cnn"
                         else mlp.mlp(batch=2, width=16))
    t0 = time.perf_counter()
    fast = cuvil.compile(model, inputs, cache=False)
    wall = time.perf_counter() - t0
    same = torch.allclose(fast(*inputs), model(*inputs), atol=1e-4, rtol=1e-4)
    print(f"{args.model}: cold compile {wall:.1f} s, matches eager: {same}")
    print(f"{'compile s':>9} {'LLVM s':>7}  function (signature)")
    for total, llvm, name, sig in overload_rows()[:args.top]:
        print(f"{total:9.2f} {llvm:7.2f}  {name} {sig[:90]}")
    if phases is not None:
        print(report(phases, args.top))


if __name__ == "__main__":
    main()
