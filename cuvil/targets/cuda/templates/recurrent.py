"""CUDA LSTM and GRU layers (`lstm_layer`, `gru_layer`): one thread a batch row, walking the
time steps in order (grid-stride over the rows). A row's recurrence needs no other row, so
no step waits for another thread: each hidden unit's gates are its products with the step's
input and the previous step's hidden state (read back from the output row written the
step before, or `h0`), the cell state kept in its output row. A first kernel, exact for
every shape; the input projection is not a separate product here as it is on the CPU."""

from __future__ import annotations

from cuvil.lower.physical import np_name
from cuvil.lower.spec import KernelSpec, Unsupported
from cuvil.targets.cpu.templates.loops import indent
from cuvil.targets.cpu.templates.recurrent import PARAMS
from cuvil.targets.cuda.templates.elementwise import FLOATS


def generate(group, ctx) -> KernelSpec:
    nodes = group.node_list(ctx)
    node = nodes[-1]
    if len(nodes) != 1 or node.op not in PARAMS:
        raise Unsupported("a recurrent kernel computes one lstm_layer or gru_layer")
    if node.type.dtype not in FLOATS:
        raise Unsupported("CUDA recurrent kernels compute floats")
    lstm, rev = node.op == "lstm_layer", bool(node.attrs["reverse"])
    cast = np_name(node.type.dtype)
    first = 2 if lstm else 1  # the output row of time step 0
    step = (["t = steps - 1 - s", "tp = t + 1"] if rev else ["t = s", "tp = t - 1"])
    row = (_lstm_unit if lstm else _gru_unit)(first, cast)
    last = "0" if rev else "steps - 1"
    body = ["steps = x.shape[0]", "nin = x.shape[2]", "hid = h0.shape[1]",
            "n = cuda.grid(1)", "while n < x.shape[1]:"] + indent(
        (["for j in range(hid):", "    out[1, n, j] = c0[n, j]"] if lstm else [])
        + ["for s in range(steps):", *indent([*step, "for j in range(hid):",
                                              *indent(row, 1)], 1),
           "for j in range(hid):",
           f"    out[0, n, j] = out[{first} + {last}, n, j] if steps > 0 else h0[n, j]",
           "n += cuda.gridsize(1)"], 1)
    return KernelSpec("recurrent", [*PARAMS[node.op], "out"], [*node.inputs, node.name], body,
                      parallel=False, fastmath="rows",
                      note=f"{node.op}{' (reverse)' if rev else ''}, a thread a batch row")


def _products(gates: int, first: int, cast: str) -> list[str]:
    """a0..a{gates-1}: each gate's input product plus b_ih; u0..: its hidden product plus
    b_hh (`hp` the previous hidden state's unit k)."""
    lines = [f"a{q} = b_ih[{q} * hid + j]" for q in range(gates)]
    lines += [f"u{q} = b_hh[{q} * hid + j]" for q in range(gates)]
    lines += ["for k in range(nin):", "    xv = x[t, n, k]"]
    lines += [f"    a{q} += w_ih[{q} * hid + j, k] * xv" for q in range(gates)]
    lines += ["for k in range(hid):",
              f"    hp = h0[n, k] if s == 0 else out[{first} + tp, n, k]"]
    lines += [f"    u{q} += w_hh[{q} * hid + j, k] * hp" for q in range(gates)]
    return lines


def _sigmoid(v: str, cast: str) -> str:
    return f"{cast}(1) / ({cast}(1) + math.exp(-({v})))"


def _lstm_unit(first: int, cast: str) -> list[str]:
    return [*_products(4, first, cast),
            f"ig = {_sigmoid('a0 + u0', cast)}", f"fg = {_sigmoid('a1 + u1', cast)}",
            "gg = math.tanh(a2 + u2)", f"og = {_sigmoid('a3 + u3', cast)}",
            "cn = fg * out[1, n, j] + ig * gg", "out[1, n, j] = cn",
            f"out[{first} + t, n, j] = og * math.tanh(cn)"]


def _gru_unit(first: int, cast: str) -> list[str]:
    return [*_products(3, first, cast),
            f"rg = {_sigmoid('a0 + u0', cast)}", f"zg = {_sigmoid('a1 + u1', cast)}",
            "ng = math.tanh(a2 + rg * u2)",
            f"hj = h0[n, j] if s == 0 else out[{first} + tp, n, j]",
            f"out[{first} + t, n, j] = ({cast}(1) - zg) * ng + zg * hj"]
