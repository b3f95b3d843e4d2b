"""One training step through torch eager, torch.compile (inductor) and the cuvil backend.

    .venv/bin/python bench/training.py [--quick] [--models mlp,cnn,transformer,resnet18]
                                       [--batch 32] [--optimizer sgd|adam] [--skip inductor]
                                       [--zoo mlp,cnn,transformer] [--markdown]

A step is what a training loop does: zero the gradients, forward, the loss (cross-entropy
on fixed random labels for a classifier, mean squared error against a fixed random target
otherwise), backward, and the optimizer's step. Each system trains its own copy of the
model from the same weights, with its own optimizer: `torch.compile(model)` (inductor) and
`torch.compile(model, backend="cuvil")` compile the model, the loss and the optimizer
run as eager PyTorch in all three. Per model and system: the time per step (the best of
several block medians, `bench/models.py`'s `block_times`), its ratio to eager and to
inductor (lower is faster), the first step's time (it compiles), and the first step's loss
and largest relative parameter-gradient error against eager's ("grad err") and against
a float64 eager step's ("f64 err": eager's own row is float32 rounding's share). The
models, at batch 32 by default: the zoo's MLP (784-512-512-10), a small CNN with batch norm
(the zoo's), one
`nn.TransformerEncoderLayer(256, 4, 1024)` (dropout off, so losses compare) on 64 tokens,
torchvision's ResNet-18 (10 classes) on 64x64 images. All in train mode.

Then inference: the zoo models of `--zoo` under `torch.no_grad()` through the cuvil
backend (AOTAutograd's inference graph, compiled by Cuvil) against `cuvil.compile` of the
same model (each at the zoo's default sizes), and the ratio of the two latencies.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import cuvil  # noqa: E402
import cuvil.dynamo  # noqa: E402, F401  (registers the backend)
from bench.models import block_times, machine, table  # noqa: E402
from cuvil import zoo  # noqa: E402

MODELS = ("mlp", "cnn", "transformer", "resnet18")
SYSTEMS = ("eager", "inductor", "cuvil")


def build(name: str, batch: int) -> tuple[nn.Module, torch.Tensor]:
    """(model in train mode, input batch) of a training case, seeded."""
    torch.manual_seed(0)
    if name == "mlp":
        model, (x,) = zoo.get("mlp", batch=batch)
    elif name == "cnn":
        model, (x,) = zoo.get("cnn", batch=batch)
    elif name == "transformer":
        model = nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True)
        x = torch.randn(batch, 64, 256)
    elif name == "resnet18":
        import torchvision

        model, x = torchvision.models.resnet18(num_classes=10), torch.randn(batch, 3, 64, 64)
    else:
        raise SystemExit(f"bench/training.py: no training model {name!r}; known: "
                         f"{', '.join(MODELS)}")
    return model.train(), x


def loss_of(model: nn.Module, x: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    """The loss of the model's output: cross-entropy on fixed random labels for a [N, C]
    output, mean squared error against a fixed random target otherwise."""
    with torch.no_grad():
        shape = copy.deepcopy(model)(x).shape
    generator = torch.Generator().manual_seed(1)
    if len(shape) == 2:
        labels = torch.randint(0, shape[1], (shape[0],), generator=generator)
        return lambda out: nn.functional.cross_entropy(out, labels)
    target = torch.randn(shape, generator=generator)
    return lambda out: nn.functional.mse_loss(out, target)


def step_fn(system: str, model: nn.Module, x: torch.Tensor, loss: Callable,
            optimizer: str) -> Callable[[], float]:
    """One training step of `system` on its own copy of `model`; returns the loss."""
    net = copy.deepcopy(model)
    params = list(net.parameters())
    opt = (torch.optim.Adam(params, lr=1e-3) if optimizer == "adam"
           else torch.optim.SGD(params, lr=1e-2, momentum=0.9))
    forward = net if system == "eager" else \
        torch.compile(net, backend="cuvil" if system == "cuvil" else "inductor")

    def step() -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        value = loss(forward(x))
        value.backward()
        opt.step()
        return value.detach()

    step.params = params  # type: ignore[attr-defined]
    return step


def grad_error(params: list[nn.Parameter], reference: list[nn.Parameter]) -> float:
    """The largest relative error of any parameter's gradient: the norm of its difference
    to eager's over the norm of eager's, or over 1e-3 of the largest norm where eager's is
    less (rounding noise: the bias of a convolution a batch norm follows, whose gradient
    is zero in exact arithmetic)."""
    pairs = [(p.grad, q.grad) for p, q in zip(params, reference, strict=True)
             if q.grad is not None]
    floor = 1e-3 * max(q.norm().item() for _, q in pairs)
    return max((p - q).norm().item() / max(q.norm().item(), floor, 1e-30) for p, q in pairs)


def float64_step(model: nn.Module, x: torch.Tensor, loss: Callable) -> list[nn.Parameter]:
    """The parameters of a float64 copy of `model` after eager's first step's backward: the
    gradients each system's float32 ones are measured against ("f64 err"; eager's own row
    says how far float32 rounding alone goes)."""
    exact = copy.deepcopy(model).double()
    loss(exact(x.double()).float()).backward()
    return list(exact.parameters())


def train_case(name: str, args: argparse.Namespace) -> list[dict]:
    """One row per system for training model `name`."""
    model, x = build(name, args.batch)
    loss = loss_of(model, x)
    exact = float64_step(model, x, loss)
    steps, rows = {}, {}
    for system in SYSTEMS:
        if system in args.skip:
            continue
        try:
            steps[system] = step_fn(system, model, x, loss, args.optimizer)
            t0 = time.perf_counter()
            first = steps[system]().item()
            rows[system] = {"first_s": time.perf_counter() - t0, "loss": first}
            if "eager" in steps:  # the first step's gradients, at the same weights
                rows[system]["grad_err"] = grad_error(steps[system].params,
                                                      steps["eager"].params)
            rows[system]["f64_err"] = grad_error(steps[system].params, exact)
        except Exception as e:  # a system that fails is a row of "-", not an abort
            print(f"{name}: {system} failed: {type(e).__name__}: "
                  f"{(str(e).strip().splitlines() or [''])[0][:200]}", file=sys.stderr)
            steps.pop(system, None)
            rows[system] = {"failed": True}
    times = block_times(steps, args.seconds, args.rounds)
    eager_loss = rows.get("eager", {}).get("loss")
    return [{"case": name, "system": s, "ms": _ms(times.get(s)),
             "vs_eager": _ratio(times.get(s), times.get("eager")),
             "vs_inductor": _ratio(times.get(s), times.get("inductor")),
             "first_s": r.get("first_s"), "failed": r.get("failed", False),
             "loss_err": None if eager_loss is None or "loss" not in r
             else abs(r["loss"] - eager_loss), "grad_err": r.get("grad_err"),
             "f64_err": r.get("f64_err")}
            for s, r in rows.items()]


def inference_case(name: str, args: argparse.Namespace) -> list[dict]:
    """The cuvil backend's inference latency against `cuvil.compile`'s, zoo model `name`."""
    model, inputs = zoo.get(name)
    with torch.no_grad():
        expected = model(*inputs)
        backend = torch.compile(model, backend="cuvil")
        t0 = time.perf_counter()
        err_backend = (backend(*inputs) - expected).abs().max().item()
        backend_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        compiled = cuvil.compile(model, inputs)
        err_compile = (compiled(*inputs) - expected).abs().max().item()
        compile_s = time.perf_counter() - t0
        times = block_times({"cuvil.compile": lambda: compiled(*inputs),
                             "backend": lambda: backend(*inputs)}, args.seconds, args.rounds)
    ratio = _ratio(times["backend"], times["cuvil.compile"])
    return [{"case": name, "system": "cuvil.compile", "ms": _ms(times["cuvil.compile"]),
             "ratio": 1.0, "first_s": compile_s, "err": err_compile},
            {"case": name, "system": "backend", "ms": _ms(times["backend"]), "ratio": ratio,
             "first_s": backend_s, "err": err_backend}]


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a / b


def _fmt(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _sci(value: float | None) -> str:
    return "-" if value is None else f"{value:.1e}"


def render_training(rows: list[dict], markdown: bool) -> str:
    header = ["model", "system", "ms/step", "x eager", "x inductor", "first step s",
              "loss err", "grad err", "f64 err"]
    cells = [[r["case"], r["system"] + (" (failed)" if r["failed"] else ""),
              _fmt(r["ms"], 2), _fmt(r["vs_eager"], 2), _fmt(r["vs_inductor"], 2),
              _fmt(r["first_s"], 1),
              _sci(r["loss_err"]), _sci(r["grad_err"]), _sci(r["f64_err"])] for r in rows]
    return table(header, cells, markdown)


def render_inference(rows: list[dict], markdown: bool) -> str:
    header = ["zoo model", "system", "median ms", "x cuvil.compile", "first call s",
              "max abs err"]
    cells = [[r["case"], r["system"], _fmt(r["ms"], 3), _fmt(r["ratio"], 2),
              _fmt(r["first_s"], 1), f"{r['err']:.1e}"] for r in rows]
    return table(header, cells, markdown)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated")
    parser.add_argument("--zoo", default="mlp,cnn,transformer",
                        help="zoo models for the inference comparison ('' for none)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--optimizer", choices=("sgd", "adam"), default="sgd")
    parser.add_argument("--skip", nargs="*", default=[], choices=SYSTEMS[1:])
    parser.add_argument("--quick", action="store_true", help="shorter timings")
    parser.add_argument("--seconds", type=float, help="timing seconds per case")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    args.seconds = args.seconds or (3.0 if args.quick else 10.0)
    args.rounds = 3 if args.quick else 5
    warnings.filterwarnings("ignore", message=".*TF32.*")
    print(machine(), flush=True)
    rows, names = [], list(filter(None, args.models.split(",")))
    for name in names:
        case = train_case(name, args)
        rows += case
        print(render_training(case, args.markdown), flush=True)
    if len(names) > 1:
        print(render_training(rows, args.markdown), flush=True)
    inference = [r for name in filter(None, args.zoo.split(",")) for r in
                 inference_case(name, args)]
    if inference:
        print(render_inference(inference, args.markdown), flush=True)


if __name__ == "__main__":
    main()
