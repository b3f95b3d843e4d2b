"""The import cache's key: every change to what a model computes changes a part of its
fingerprint, rebuilding the same model does not, and what the key cannot cover refuses.
A fingerprint leaves the model as it was."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from cuvil.frontend.canonical import NotCacheable
from cuvil.frontend.fingerprint import fingerprint


class Scaled(nn.Module):
    """A linear layer, an activation and a Python attribute read in forward."""

    def __init__(self, k: float = 2.0, act: nn.Module | None = None, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.lin = nn.Linear(8, 8)
        self.act = act if act is not None else nn.LeakyReLU(0.1)
        self.k = k

    def forward(self, x):
        return self.act(self.lin(x)) * self.k


class Conv(nn.Module):
    def __init__(self, padding: int):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3, padding=padding)
        self.bn = nn.BatchNorm2d(4)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.bn(self.conv(x)))


def parts(model, *inputs, dynamic_shapes=None):
    return fingerprint(model, inputs, dynamic_shapes).parts


def changed(a: dict, b: dict) -> set[str]:
    return {k for k in a if a[k] != b[k]}


X = torch.randn(4, 8)
IMAGES = torch.randn(2, 3, 8, 8)


def test_the_same_model_built_twice_has_one_fingerprint():
    assert parts(Scaled(), X) == parts(Scaled(), X)
    assert parts(Conv(1), IMAGES) == parts(Conv(1), IMAGES)


@pytest.mark.parametrize(("other", "part"), [
    (lambda: Scaled(k=3.0), "program"),  # a Python attribute read in forward
    (lambda: Scaled(act=nn.LeakyReLU(0.2)), "modules"),  # a leaf's constructor argument
    (lambda: Scaled(act=nn.GELU()), "modules"),
    (lambda: Scaled(seed=1), "tensors"),  # other weights
])
def test_what_the_model_computes_is_in_its_part(other, part):
    assert changed(parts(Scaled(), X), parts(other(), X)) == {part}


def test_a_weight_changed_in_place_changes_the_tensors():
    model = Scaled()
    before = parts(model, X)
    with torch.no_grad():
        model.lin.weight[0, 0] += 1
    assert changed(before, parts(model, X)) == {"tensors"}


def test_leaf_configuration_training_and_inputs_are_covered():
    assert "modules" in changed(parts(Conv(0), IMAGES), parts(Conv(1), IMAGES))
    assert changed(parts(Conv(1).eval(), IMAGES), parts(Conv(1).train(), IMAGES)) >= {"state"}
    assert changed(parts(Scaled(), X), parts(Scaled(), X.double())) == {"inputs"}
    assert changed(parts(Scaled(), X), parts(Scaled(), torch.randn(6, 8))) == {"inputs"}
    assert changed(parts(Scaled(), X), parts(Scaled(), X, dynamic_shapes=False)) == {"inputs"}


def test_the_default_dtype_is_covered():
    before = parts(Scaled(), X)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        after = parts(Scaled(), X)
    finally:
        torch.set_default_dtype(old)
    assert "state" in changed(before, after)


def test_a_torch_module_as_the_model_is_keyed_by_its_configuration():
    lin = nn.Linear(8, 4)
    assert parts(nn.LeakyReLU(0.1), X) != parts(nn.LeakyReLU(0.2), X)
    assert changed(parts(lin, X), parts(lin, X)) == set()
    fp = fingerprint(nn.TransformerEncoderLayer(8, 2, 16, batch_first=True),
                     (torch.randn(2, 3, 8),), None)
    assert fp.leaf_root


@torch.fx.wrap
def user_function(x):
    return x + 1


class Wrapped(nn.Module):
    def forward(self, x):
        return user_function(x)


class ValueBranch(nn.Module):
    """Branches on a value: neither torch.fx nor a fake-tensor trace can (a branch on a
    shape gets a fake-tensor key: `test_fake_fingerprint.py`)."""

    def forward(self, x):
        return x * 2 if x.sum() > 4 else x


class Shared(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 8))
        self.register_buffer("top", self.w.detach()[:4])

    def forward(self, x):
        return x @ self.w


def hooked():
    model = Scaled()
    model.act.register_forward_hook(lambda m, i, o: o * 2)
    return model


def pre_hooked():
    model = Scaled()
    model.register_forward_pre_hook(lambda m, i: (i[0] + 1,))
    return model


def parametrized():
    model = Scaled()
    torch.nn.utils.parametrize.register_parametrization(model.lin, "weight", Square())
    return model


class Square(nn.Module):
    def forward(self, w):
        return w * w


@pytest.mark.parametrize(("build", "inputs", "reason"), [
    (hooked, (X,), "hook"),
    (pre_hooked, (X,), "hook"),
    (Wrapped, (X,), "user_function is not torch's or Python's"),
    (ValueBranch, (X,), "torch.fx cannot trace it.*nor can a fake-tensor trace"),
    (Shared, (X,), "shares memory"),
    (parametrized, (X,), "Parametrized"),
    (Scaled, (X, 3), "input 1"),
    (lambda: (lambda x: x + 1), (X,), "not a torch.nn.Module"),
])
def test_what_the_key_cannot_cover_refuses(build, inputs, reason):
    with pytest.raises(NotCacheable, match=reason):
        fingerprint(build(), inputs, None)


def test_a_global_hook_refuses():
    handle = torch.nn.modules.module.register_module_forward_hook(lambda m, i, o: o)
    try:
        with pytest.raises(NotCacheable, match="global"):
            fingerprint(Scaled(), (X,), None)
    finally:
        handle.remove()


def test_torch_code_patched_by_the_user_refuses(monkeypatch):
    """A leaf's forward runs under export, not under the trace: it must be torch's."""
    with monkeypatch.context() as patch:
        patch.setattr(nn.LeakyReLU, "forward", lambda self, x: x * 2)
        with pytest.raises(NotCacheable, match="LeakyReLU.forward is not torch's code"):
            fingerprint(Scaled(), (X,), None)
    with monkeypatch.context() as patch:
        patch.setattr(torch.nn.functional, "leaky_relu", lambda x, *args, **kwargs: x)
        with pytest.raises(NotCacheable, match="functional.leaky_relu is not torch's code"):
            fingerprint(Scaled(), (X,), None)
    with monkeypatch.context() as patch:  # a method a library adds, which no forward calls
        patch.setattr(nn.Module, "smart_apply", lambda self, fn: None, raising=False)
        fingerprint(Scaled(), (X,), None)


class Constant(nn.Module):
    def forward(self, x):
        return x + torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])


def test_the_model_is_left_as_it_was():
    model = Constant()
    fp = fingerprint(model, (X,), None)
    assert list(fp.stowed) == ["_tensor_constant0"]  # the tracer stowed it on the model...
    assert not hasattr(model, "_tensor_constant0")  # ...and it was taken off again
    conv = Conv(1).train()
    conv.bn.eval()
    fingerprint(conv, (IMAGES,), None)
    assert conv.training and conv.conv.training and not conv.bn.training
    assert torch.is_grad_enabled()


class Waits(nn.Module):
    """Holds its trace open until another thread has run a model of its own."""

    def __init__(self, started, done):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.started, self.done = started, done

    def forward(self, x):
        self.started.set()
        self.done.wait(timeout=30)
        return self.lin(x)


def test_another_thread_runs_its_modules_as_usual_during_a_trace():
    import threading

    started, done = threading.Event(), threading.Event()
    other, got = Scaled(), {}

    def serve():
        started.wait(timeout=30)
        with torch.no_grad():
            got["y"] = other(X)  # torch.fx patches nn.Module.__call__ meanwhile
        done.set()

    thread = threading.Thread(target=serve)
    thread.start()
    model = Waits(started, done)
    fp = fingerprint(model, (X,), None)
    thread.join()
    with torch.no_grad():
        torch.testing.assert_close(got["y"], other(X))
    assert [n.op for n in fp.graph.nodes] == ["placeholder", "call_module", "output"]
