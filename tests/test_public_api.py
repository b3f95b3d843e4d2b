"""tests/test_public_api.py: the names `import cuvil` offers work in a fresh process, where
no other import has loaded what they need (the test session's conftest has: the op catalog)."""

from __future__ import annotations

import subprocess
import sys

BUILD_AND_RUN = """
import torch, cuvil
g = cuvil.Graph("g")
x = g.input("x", cuvil.TensorType((2, 3), "f32"))
g.set_outputs(g.add("relu", [x]))
x = torch.randn(2, 3)
torch.testing.assert_close(cuvil.run(g.verify(), x), torch.relu(x))
print("ok")
"""


def test_a_graph_built_through_cuvil_graph_runs_in_a_fresh_process():
    done = subprocess.run([sys.executable, "-c", BUILD_AND_RUN], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ok"
