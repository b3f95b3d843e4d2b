"""The reference executor: inputs as torch tensors or numpy arrays, symbolic dims bound
from the inputs, the model's output structure returned, clear errors on bad inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cuvil.errors import CuvilError
from cuvil.ir import Graph, TensorType, sym
from cuvil.ops.execute import run


def mlp_graph(outputs="bare") -> Graph:
    g = Graph("mlp")
    x = g.input("x", TensorType((sym("batch"), 4), "f32"))
    w = g.const(torch.randn(4, 3), ref="w")
    y = g.add("relu", [g.add("matmul", [x, w])])
    s = g.add("sum", [y], {"dim": (1,)})
    g.set_outputs({"bare": y, "tuple": (y, s), "dict": {"y": y, "parts": [s, y]}}[outputs])
    return g.verify()


def test_one_output_is_a_bare_tensor_and_matches_torch():
    g = mlp_graph()
    x = torch.randn(5, 4)
    torch.testing.assert_close(run(g, x), torch.relu(x @ g.constants["w"]))


def test_numpy_inputs_give_torch_outputs():
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    g = mlp_graph()
    out = run(g, x)
    assert isinstance(out, torch.Tensor)
    torch.testing.assert_close(out, torch.relu(torch.from_numpy(x) @ g.constants["w"]))


def test_output_structures_are_rebuilt():
    x = torch.randn(3, 4)
    y, s = run(mlp_graph("tuple"), x)
    assert y.shape == (3, 3) and s.shape == (3,)
    out = run(mlp_graph("dict"), x)
    assert set(out) == {"y", "parts"} and isinstance(out["parts"], list)
    torch.testing.assert_close(out["parts"][0], out["y"].sum(1))


def test_one_graph_serves_every_batch_size():
    g = mlp_graph()
    for batch in (1, 2, 9):
        assert run(g, torch.randn(batch, 4)).shape == (batch, 3)


@pytest.mark.parametrize("inputs, message", [
    ((), r"expected 1 input\(s\) \(x\), got 0"),
    ((torch.randn(2, 5),), r"input 'x': expected shape \[batch, 4\]"),
    ((torch.randn(2, 4, 1),), r"input 'x': expected shape \[batch, 4\], got \[2, 4, 1\]"),
    ((torch.randn(2, 4, dtype=torch.float64),), "expected dtype f32, got f64"),
    (([1.0, 2.0],), "expected a torch tensor or numpy array, got list"),
])
def test_bad_inputs_are_one_clear_error(inputs, message):
    with pytest.raises(CuvilError, match=message):
        run(mlp_graph(), *inputs)
