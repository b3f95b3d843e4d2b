"""Plain data (JSON) for what the import cache's key covers: the literals of a traced
graph, torch functions by name, a torch.nn module's whole configuration, and tensors.

Every form is tagged with its type (`["float", "0.1"]`, never a bare `0.1` that an int 0 and
a float 0.0 could share). A value without a faithful plain form raises `NotCacheable`: two
different things must never get one form, so what cannot be told apart is not cached.
"""

from __future__ import annotations

import enum
import hashlib
import json
import os
import sys
import types
from collections.abc import Callable
from typing import Any

import torch
from torch import fx
from torch.fx.immutable_collections import immutable_dict, immutable_list

# The modules a traced graph may call functions of: their code is torch's or Python's, in
# the key through the versions. A function of any other module (`torch.fx.wrap`) is the
# user's, and its code is not in the graph.
FUNCTION_MODULES = ("torch", "_operator", "operator", "math", "builtins")
# Module attributes that do not change what forward computes (hooks are checked apart).
IGNORED = frozenset({"_forward_hooks", "_forward_hooks_with_kwargs",
                     "_forward_hooks_always_called", "_forward_pre_hooks",
                     "_forward_pre_hooks_with_kwargs", "_backward_hooks",
                     "_backward_pre_hooks", "_is_full_backward_hook", "_state_dict_hooks",
                     "_state_dict_pre_hooks", "_load_state_dict_pre_hooks",
                     "_load_state_dict_post_hooks"})
HOOKS = ("_forward_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called",
         "_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_backward_hooks",
         "_backward_pre_hooks")
TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
# nn.Module's methods a call of a module runs (libraries add methods of their own to it,
# such as transformers' `smart_apply`, which no forward calls).
MODULE_CALL = ("__call__", "_wrapped_call_impl", "_call_impl", "__getattr__", "forward")
_TORCH_VALUES = (torch.dtype, torch.device, torch.layout, torch.memory_format)
_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)
_AS = {immutable_list: list, immutable_dict: dict}  # torch.fx's frozen forms of its args


class NotCacheable(Exception):
    """The import cache cannot vouch for this model; it is imported as usual."""


def literal(value: Any, node: Callable[[fx.Node], int] | None = None,
            tensor: Callable[[torch.Tensor], int] | None = None) -> Any:
    """`value` as tagged JSON; an `fx.Node` inside it as `["node", node(n)]`, and a tensor
    as `["node", tensor(t)]` where `tensor` is given (a dispatch-level trace's values)."""
    kind = _AS.get(type(value), type(value))
    if value is None or kind in (bool, int, str):
        return [kind.__name__, value]
    if kind in (float, complex):
        return [kind.__name__, repr(value)]
    if kind in (tuple, list, torch.Size):
        return [kind.__name__, [literal(v, node, tensor) for v in value]]
    if kind is dict:
        return ["dict", [[literal(k, node, tensor), literal(v, node, tensor)]
                         for k, v in value.items()]]
    if kind in (set, frozenset):
        return [kind.__name__, sorted(json.dumps(literal(v, node, tensor)) for v in value)]
    if kind in (slice, range):
        return [kind.__name__, [literal(getattr(value, a), node, tensor)
                                for a in ("start", "stop", "step")]]
    if value is Ellipsis:
        return ["ellipsis"]
    if isinstance(value, _TORCH_VALUES):
        return [kind.__name__, str(value)]
    if isinstance(value, fx.Node) and node is not None:
        return ["node", node(value)]
    if isinstance(value, torch.Tensor) and tensor is not None:
        return ["node", tensor(value)]
    if isinstance(value, enum.Enum):
        return ["enum", function_name(kind), value.name]
    if callable(value) and not isinstance(value, torch.nn.Module | torch.Tensor):
        return ["function", function_name(value)]
    raise NotCacheable(f"a {kind.__name__} value has no plain form")


def function_name(fn: Any) -> str:
    """`module:name` of a function (or class) of torch or Python, found again under that
    name; anything else is the user's code, which no key can cover."""
    if isinstance(fn, torch._ops.OpOverload | torch._ops.OpOverloadPacket):
        if str(fn).startswith(("aten.", "prim.")):  # torch's own namespaces
            return f"op:{fn}"
        raise NotCacheable(f"the custom op {fn} is the user's code")
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    name = getattr(fn, "__name__", None)
    if not isinstance(module, str) or module.split(".")[0] not in FUNCTION_MODULES:
        raise NotCacheable(f"{name if name else repr(fn)} is not torch's or Python's")
    owner = sys.modules.get(module)
    if name is not None and getattr(owner, name, None) is fn:
        return f"{module}:{name}"
    found = owner
    for part in (qualname or "").split("."):
        found = getattr(found, part, None)
    if found is not fn or not qualname:
        raise NotCacheable(f"{module}.{name} is not found again under its name")
    return f"{module}:{qualname}"


def check_torch_class(cls: type) -> None:
    """`cls` must be torch's own, found again under its name (not a subclass made on the
    fly, such as parametrize's `ParametrizedLinear`), and so must the code of every method
    of it and its bases (not a `forward` patched onto torch's class)."""
    if not cls.__module__.startswith("torch."):
        raise NotCacheable(f"{cls.__qualname__} is not a torch class")
    function_name(cls)
    for base in cls.__mro__:
        members = vars(base).items() if base not in (torch.nn.Module, object) else [
            (name, vars(base)[name]) for name in MODULE_CALL if name in vars(base)]
        for name, member in members:
            if not _torch_code(member):
                raise NotCacheable(f"{base.__qualname__}.{name} is not torch's code")


def patched_functional() -> str | None:
    """The first of torch.nn.functional's functions that is not torch's code (the leaves'
    forwards call them), if any."""
    for name, member in vars(torch.nn.functional).items():
        if not _torch_code(member):
            return f"torch.nn.functional.{name} is not torch's code"
    return None


def _torch_code(member: Any) -> bool:
    for fn in (getattr(member, "__func__", member), getattr(member, "fget", None)):
        code = getattr(fn, "__code__", None) if isinstance(fn, types.FunctionType) else None
        if code is not None and not code.co_filename.startswith(TORCH_DIR):
            return False
    return True


def module_config(module: torch.nn.Module) -> list[Any]:
    """The whole configuration of a torch.nn module, children included: its class and
    every attribute but hooks. Parameters and buffers appear by name (their tensors are
    keyed by path, with the model's others)."""
    check_torch_class(type(module))
    items = []
    for key, value in sorted(vars(module).items()):
        if key in IGNORED:
            continue
        if key == "_modules":
            form = [[name, None if child is None else module_config(child)]
                    for name, child in value.items()]
        elif key in ("_parameters", "_buffers"):
            form = [[name, t is None] for name, t in value.items()]
        elif isinstance(value, torch.Tensor):
            form = tensor_form(value, key)
        else:
            try:
                form = literal(value)
            except NotCacheable as e:
                raise NotCacheable(f"{type(module).__name__}.{key}: {e}") from None
        items.append([key, form])
    return [function_name(type(module)), items]


def hooks_of(model: torch.nn.Module) -> str | None:
    """Where a forward or backward hook is registered (on a module or globally), if any:
    export runs hooks, a symbolic trace does not."""
    from torch.nn.modules import module as nn_module

    for name in ("_global_forward_hooks", "_global_forward_pre_hooks",
                 "_global_forward_hooks_with_kwargs", "_global_forward_hooks_always_called",
                 "_global_backward_hooks", "_global_backward_pre_hooks"):
        if getattr(nn_module, name, None):
            return f"a global module hook ({name})"
    for path, module in model.named_modules(remove_duplicate=False):
        for name in HOOKS:
            if getattr(module, name, None):
                return f"a hook on {path or 'the model'} ({name})"
    return None


def tensor_form(t: torch.Tensor, where: str) -> list[Any]:
    """dtype, shape, strides, device, grad flag and a hash of the bytes of `t`."""
    if type(t) not in _PLAIN_TENSORS:
        raise NotCacheable(f"{where} is a {type(t).__name__}")
    if t.layout != torch.strided or t.is_quantized or t.is_meta or t.is_nested:
        raise NotCacheable(f"{where} is not a dense tensor with data")
    return [str(t.dtype), list(t.shape), list(t.stride()), t.storage_offset(), str(t.device),
            t.requires_grad, isinstance(t, torch.nn.Parameter), tensor_digest(t)]


def tensor_digest(t: torch.Tensor) -> str:
    flat = t.detach().cpu().contiguous().reshape(-1)
    return hashlib.sha256(flat.view(torch.uint8).numpy()).hexdigest()


def digest(data: Any) -> str:
    """SHA-256 of the JSON of `data`."""
    return hashlib.sha256(json.dumps(data, separators=(",", ":")).encode()).hexdigest()
