"""Quantized inference on real data: accuracy, latency and model size of the digits models
(`cuvil.zoo.digits`) in fp32 and int8, across systems, in one process.

    .venv/bin/python bench/quantize.py [--model cnn|mlp|both|wide] [--batch 32]
                                       [--method minmax|entropy|percentile] [--quick]
    .venv/bin/python bench/quantize.py --layers    # what `int8_gops` is tuned on
    .venv/bin/python bench/quantize.py --model wide --batch 256   # GEMM-dominated

`wide` is `digits.digits_wide_mlp()`: 64 - 1024 - 1024 - 10, where the 1024 x 1024 product
dominates at batch 256 (the case the issue's "<= 0.7x fp32 latency where GEMMs dominate"
is about; the digits models are too small for their GEMMs to dominate).

Systems (each skipped with a one-line reason when it cannot run here):

* torch fp32       eager
* torch.compile    `torch.compile(model)` (Inductor, fp32), warmed up once
* ort fp32         the model exported with `torch.onnx.export(dynamo=True)`
* ort int8         `onnxruntime.quantization.quantize_static`: QDQ, per-channel s8
                   weights, u8 activations, calibrated on the same batches as the others
* pt2e int8        PT2E with `X86InductorQuantizer` (torchao's: torch 2.14 no longer has
                   torch.ao.quantization's PT2E), lowered with `lower_pt2e_quantized_to_x86`
* cuvil fp32       `cuvil.compile(model, inputs)`
* cuvil int8       `cuvil.compile(model, inputs, quantize=cuvil.Quantize(...))`: int8
                   where the cost model picks it, one int8 kernel per int8 layer
* cuvil int8 (every layer)  the same with every int8 op's cost near 0: int8 wherever a
                   rule fires (what forcing int8 would give)

Accuracy is on the 450 test images, in batches of `--batch` (the last padded); latency is
one batch, alternating systems in rounds (`models.block_times`); size is the bytes of the
weights a system keeps (torch: parameters, buffers and constants; ORT: the model file;
Cuvil int8: the constants its graph reads).

`--layers`: for each layer an int8 rule can rewrite, at batch 1 and `--batch`, the cost
model's estimates of both precisions and its choice, against each layer's kernel time
measured in fp32 and in int8 (a second compile with every int8 op's cost near 0; median
of 300 profiled calls): the choice is right where it picks the faster one.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from models import block_times  # noqa: E402

import cuvil  # noqa: E402
from cuvil.zoo import digits  # noqa: E402


@dataclass
class System:
    """A runnable system: `run(x)` gives logits for a batch of exactly `batch` inputs."""

    name: str
    run: Callable[[torch.Tensor], object]
    size_kb: float | None
    build_s: float


def predict_accuracy(run: Callable, x: torch.Tensor, y: torch.Tensor, batch: int) -> float:
    """Accuracy with every call on a full batch (the last one padded with zeros)."""
    correct = 0
    for i in range(0, len(x), batch):
        chunk = x[i:i + batch]
        if len(chunk) < batch:
            chunk = torch.cat([chunk, chunk.new_zeros((batch - len(chunk), *chunk.shape[1:]))])
        out = run(chunk)
        out = torch.as_tensor(out[0] if isinstance(out, tuple | list) else out)
        n = min(batch, len(x) - i)
        correct += int((out[:n].argmax(dim=1) == y[i:i + n]).sum())
    return correct / len(x)


def torch_kb(module: torch.nn.Module) -> float:
    """Parameters and buffers; for a GraphModule, the tensors its graph reads (`get_attr`:
    PT2E's folded int8 weights, not the fp32 ones left unused beside them)."""
    if isinstance(module, torch.fx.GraphModule):
        names = {n.target for n in module.graph.nodes if n.op == "get_attr"}
        tensors = {id(t): t for t in (_attr(module, name) for name in names)
                   if isinstance(t, torch.Tensor)}
    else:
        tensors = {id(t): t for t in [*module.parameters(), *module.buffers()]}
    return sum(t.numel() * t.element_size() for t in tensors.values()) / 1024


def _attr(module: torch.nn.Module, dotted: str):
    for part in dotted.split("."):
        module = getattr(module, part)
    return module


def timed(build: Callable[[], tuple[Callable, float | None]], name: str) -> System:
    t0 = time.perf_counter()
    run, size = build()
    return System(name, run, size, time.perf_counter() - t0)


def torch_fp32(d: digits.Digits, inputs, method: str) -> System:
    def build():
        return (lambda x: d.model(x)), torch_kb(d.model)

    return timed(build, "torch fp32")


def torch_compile(d: digits.Digits, inputs, method: str) -> System:
    def build():
        compiled = torch.compile(d.model)
        with torch.inference_mode():
            compiled(*inputs)
        return (lambda x: compiled(x)), torch_kb(d.model)

    return timed(build, "torch.compile")


def _onnx(model, inputs, path: str) -> str:
    """The model exported (dynamo) to one file, weights inside (`save` puts them apart)."""
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(model, inputs, dynamo=True, verbose=False)
    Path(path).write_bytes(program.model_proto.SerializeToString())
    return path


def _ort_run(path: str) -> Callable:
    import onnxruntime as ort

    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return lambda x: session.run(None, {name: x.numpy()})[0]


def ort_fp32(d: digits.Digits, inputs, method: str) -> System:
    def build():
        path = _onnx(d.model, inputs, os.path.join(TMP, f"fp32-{id(d)}.onnx"))
        return _ort_run(path), os.path.getsize(path) / 1024

    return timed(build, "ort fp32")


def ort_int8(d: digits.Digits, inputs, method: str) -> System:
    from onnxruntime import quantization as q

    class Reader(q.CalibrationDataReader):
        def __init__(self, name: str):
            self.batches = iter([{name: b[0].numpy()} for b in d.calibration()])

        def get_next(self):
            return next(self.batches, None)

    def build():
        import onnx

        src = _onnx(d.model, inputs, os.path.join(TMP, f"src-{id(d)}.onnx"))
        dst = os.path.join(TMP, f"int8-{id(d)}.onnx")
        name = onnx.load(src).graph.input[0].name
        methods = {"minmax": q.CalibrationMethod.MinMax, "entropy": q.CalibrationMethod.Entropy,
                   "percentile": q.CalibrationMethod.Percentile}
        q.quantize_static(src, dst, Reader(name), quant_format=q.QuantFormat.QDQ,
                          activation_type=q.QuantType.QUInt8, weight_type=q.QuantType.QInt8,
                          per_channel=True, calibrate_method=methods[method])
        return _ort_run(dst), os.path.getsize(dst) / 1024

    return timed(build, "ort int8")


def pt2e_int8(d: digits.Digits, inputs, method: str) -> System:
    try:
        from torchao.quantization.pt2e.lowering import lower_pt2e_quantized_to_x86
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
        from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as xiq
    except ImportError as err:
        raise RuntimeError("needs torchao (pip install torchao): torch 2.14 removed "
                           f"torch.ao.quantization's PT2E ({err})") from None

    def build():
        quantizer = xiq.X86InductorQuantizer()
        quantizer.set_global(xiq.get_default_x86_inductor_quantization_config())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prepared = prepare_pt2e(torch.export.export(d.model, inputs).module(), quantizer)
            with torch.no_grad():
                for batch in d.calibration():
                    prepared(*batch)
            converted = convert_pt2e(prepared)
            size = torch_kb(converted)
            with torch.no_grad():
                lowered = lower_pt2e_quantized_to_x86(converted, inputs)
        for node in lowered.graph.nodes:  # flatten after onednn's channels-last output: a
            if node.target == torch.ops.aten.view.default:  # view fails there, reshape copies
                node.target = torch.ops.aten.reshape.default
        lowered.recompile()
        return (lambda x: lowered(x)), size

    return timed(build, "pt2e int8")


def cuvil_fp32(d: digits.Digits, inputs, method: str) -> System:
    def build():
        fast = cuvil.compile(d.model, inputs)
        return (lambda x: fast(x)), torch_kb(d.model)  # the same fp32 weights

    return timed(build, "cuvil fp32")


def cuvil_kb(fast) -> float:
    """The constants the compiled graph reads (int8 weights where a layer is int8)."""
    graph = fast.graph
    refs = {n.attrs["ref"] for n in graph if n.op == "const"}
    return sum(graph.constants[r].numel() * graph.constants[r].element_size()
               for r in refs) / 1024


def cuvil_int8(d: digits.Digits, inputs, method: str, every_layer: bool = False) -> System:
    """Extraction picks int8 per layer where the cost model says it is cheaper (or, with
    `every_layer`, wherever a rule fires); each int8 layer is one `qgemm`/`qconv` kernel."""
    name = "cuvil int8 (every layer)" if every_layer else "cuvil int8"

    def build():
        options = cuvil.Quantize(calibration=d.calibration(), method=method, per_channel=True,
                                 weights="int8", activations="int8")
        rules = {"rules": all_int8_rules()} if every_layer else {}
        fast = cuvil.compile(d.model, inputs, quantize=options, **rules)
        chosen = [f"{c.node}: {c.chosen}" for c in fast.report.optimizer.precision]
        kernels = [s.template for s in fast.report.steps if s.kind == "kernel"]
        print(f"{name} {type(d.model).__name__}: {', '.join(chosen)}; kernels "
              f"{' '.join(kernels)}; fallbacks {len(fast.report.fallbacks)}")
        return (lambda x: fast(x)), cuvil_kb(fast)

    return timed(build, name)


def cuvil_int8_every_layer(d: digits.Digits, inputs, method: str) -> System:
    return cuvil_int8(d, inputs, method, every_layer=True)


SYSTEMS = (torch_fp32, torch_compile, ort_fp32, ort_int8, pt2e_int8, cuvil_fp32, cuvil_int8,
           cuvil_int8_every_layer)
TMP = tempfile.mkdtemp(prefix="cuvil-quantize-bench-")


def run_model(label: str, d: digits.Digits, batch: int, method: str, seconds: float) -> list:
    """Build every system for one model, then measure accuracy and latency side by side."""
    inputs = d.inputs(batch)
    built: list[System] = []
    for make in SYSTEMS:
        name = make.__name__.replace("_", " ")
        try:
            with torch.inference_mode(make is not pt2e_int8):
                built.append(make(d, inputs, method))
        except Exception as err:  # a system that cannot run here is reported, not fatal
            reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            print(f"{label} {name}: skipped: {reason[:200]}")
    rows = []
    with torch.inference_mode():
        times = block_times({s.name: (lambda s=s: s.run(inputs[0])) for s in built}, seconds)
        for s in built:
            acc = predict_accuracy(s.run, d.x_test, d.y_test, batch)
            rows.append((label, s, acc, times[s.name]))
    return rows


HEAVY = ("gemm", "conv", "qgemm", "qconv")


def all_int8_rules() -> Path:
    """The stock rules with every int8 op's cost near 0: int8 wherever a rule fires."""
    from cuvil.library.loader import stock_rules_dir

    rules = Path(TMP) / "rules-all-int8"
    if not rules.exists():
        shutil.copytree(stock_rules_dir(), rules)
        f = rules / "quantize" / "int8.cvr"
        f.write_text(re.sub(r"^(cost q\w+\([^)]*\)) = .*$", r"\1 = 0.001", f.read_text(),
                            flags=re.M))
    return rules


def layer_us(fast, inputs, runs: int) -> list[tuple[str, float]]:
    """(template, median us) of each kernel step that computes a layer, in order."""
    prof = fast.profile(inputs, runs=runs)
    out = []
    for i, step in enumerate(prof.steps):
        if step.template in HEAVY:
            spans = [e - s for call in prof.calls for k, s, e in call.spans if k == i]
            out.append((step.template, statistics.median(spans) / 1e3))
    return out


def layers(label: str, d: digits.Digits, batch: int, runs: int) -> list[str]:
    """Per int8-able layer: the cost model's estimates and choice, and the measured kernel
    times in fp32 and in int8 (every layer forced to int8 in a second compile)."""
    inputs = d.inputs(batch)
    q = cuvil.Quantize(calibration=d.calibration())
    chosen = cuvil.compile(d.model, inputs, quantize=q)
    forced = cuvil.compile(d.model, inputs, quantize=q, rules=all_int8_rules())
    fp32 = cuvil.compile(d.model, inputs)
    est = sorted(chosen.report.optimizer.precision,
                 key=lambda c: int(re.sub(r"\D", "", c.node) or 0))
    t32, t8 = layer_us(fp32, inputs, runs), layer_us(forced, inputs, runs)
    if not len(est) == len(t32) == len(t8):
        return [f"{label} b{batch}: layers do not line up ({len(est)}, {len(t32)}, {len(t8)})"]
    rows = []
    for c, (k32, us32), (k8, us8) in zip(est, t32, t8, strict=True):
        verdict = "yes" if (c.chosen == "int8") == (us8 < us32) else \
            "missed (int8 faster)" if c.chosen == "fp32" else "NO: int8 slower"
        rows.append(f"| {label} | {batch} | {c.node} | {c.fp32.cost:.1f} | {c.int8.cost:.1f} "
                    f"| {c.chosen} | {k32} {us32:.1f} | {k8} {us8:.1f} | {us8 / us32:.2f} "
                    f"| {verdict} |")
    return rows


def table(rows: list) -> str:
    head = ["model", "system", "accuracy %", "Δ pt", "ms", "x fp32", "size KB", "x fp32",
            "build s"]
    base = {label: (acc, t, s.size_kb) for label, s, acc, t in rows if s.name == "torch fp32"}
    lines = []
    for label, s, acc, t in rows:
        acc0, t0, kb0 = base.get(label, (acc, t, s.size_kb))
        size = f"{s.size_kb:.1f}" if s.size_kb is not None else "-"
        ratio = f"{s.size_kb / kb0:.2f}" if s.size_kb is not None and kb0 else "-"
        lines.append([label, s.name, f"{acc * 100:.2f}", f"{(acc - acc0) * 100:+.2f}",
                      f"{t * 1e3:.4f}", f"{t / t0:.2f}", size, ratio, f"{s.build_s:.1f}"])
    widths = [max(len(h), *(len(c[i]) for c in lines)) for i, h in enumerate(head)]
    fmt = "  ".join(f"{{:>{w}}}" for w in widths)
    return "\n".join([fmt.format(*head)] + [fmt.format(*c) for c in lines])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=("cnn", "mlp", "both", "wide"), default="both")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--method", choices=("minmax", "entropy", "percentile"), default="minmax")
    ap.add_argument("--quick", action="store_true", help="short timing blocks")
    ap.add_argument("--layers", action="store_true",
                    help="per layer: cost estimates vs measured fp32 and int8 kernel times")
    args = ap.parse_args()
    logging.getLogger().setLevel(logging.ERROR)  # the exporters' and quantizers' advice
    logging.getLogger("torch").setLevel(logging.ERROR)
    warnings.simplefilter("ignore")
    models = {"cnn": digits.digits_cnn, "mlp": digits.digits_mlp,
              "wide": digits.digits_wide_mlp}
    chosen = ["cnn", "mlp"] if args.model == "both" else [args.model]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch {args.batch}, "
          f"calibration {args.method} on 8 x 32 training images, load average "
          f"{' '.join(f'{v:.1f}' for v in os.getloadavg())}")
    if args.layers:
        print("| model | batch | layer | est fp32 us | est int8 us | chosen | fp32 us | "
              "int8 us | int8 / fp32 | choice right |\n" + "|---" * 10 + "|")
        for label in chosen:
            for batch in (1, args.batch):
                print("\n".join(layers(label, models[label](), batch, 300)))
        return
    rows = []
    for label in chosen:
        rows += run_model(label, models[label](), args.batch, args.method,
                          1.0 if args.quick else 3.0)
    print(table(rows))


if __name__ == "__main__":
    np.set_printoptions(precision=4)
    main()
