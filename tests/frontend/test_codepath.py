"""The code path recorder: which way the model's own code went, branch by branch, and
nothing of torch's; a helper in another file is followed; `repeats` compares runs."""

from __future__ import annotations

import collections.abc

import pytest
import torch

from cuvil.frontend.codepath import CodePath, own_code, repeats

HELPER = """
def pick(x, flag):
    if flag:
        return x + 1
    return x - 1
"""


def load_helper(tmp_path):
    """`pick`, defined in a file of its own (a helper outside the model's module)."""
    path = tmp_path / "helper.py"
    path.write_text(HELPER)
    namespace: dict = {}
    exec(compile(HELPER, str(path), "exec"), namespace)
    return namespace["pick"]


def branchy(x, flag: bool):
    if flag:
        x = torch.relu(x)
    return [v for v in (x, x) if v is not None][0]


def record(fn, *args) -> CodePath:
    with CodePath(own_code([fn])) as path:
        fn(*args)
    return path


def test_the_same_run_gives_the_same_path_and_a_branch_changes_it():
    x = torch.randn(3)
    taken = record(branchy, x, True)
    assert taken.signature() == record(branchy, x, True).signature()
    assert taken.signature() != record(branchy, x, False).signature()
    assert [c.co_qualname for c in taken.codes] == ["branchy"]  # torch.relu's code is not


def test_a_helper_in_another_file_is_followed(tmp_path):
    pick = load_helper(tmp_path)

    def model(x, flag):
        return pick(x, flag)

    once = record(model, torch.ones(2), True)
    assert "pick" in [c.co_qualname for c in once.codes]
    assert once.signature() != record(model, torch.ones(2), False).signature()


class Table(collections.abc.Mapping):
    """`get` is `Mapping.get`, of a frozen standard-library module (`<frozen ...>`)."""

    def __init__(self):
        self.data = {"a": 1}

    def __getitem__(self, key):
        return self.data[key]

    def __iter__(self):
        return iter(self.data)

    def __len__(self):
        return len(self.data)


def looks_up(x, table):
    return x * table.get("a", 2)


def test_frozen_standard_library_code_is_not_the_models():
    """Once watched, `Mapping.get` would record every caller's calls, torch's included."""
    path = record(looks_up, torch.ones(2), Table())
    assert collections.abc.Mapping.get.__code__.co_filename.startswith("<frozen ")
    assert "Mapping.get" not in [c.co_qualname for c in path.codes]
    assert "Table.__getitem__" in [c.co_qualname for c in path.codes]


def test_repeats_accepts_the_same_path_taken_again_only():
    x = torch.randn(3)
    once = record(branchy, x, True)
    with CodePath(own_code([branchy])) as twice:
        branchy(x, True)
        branchy(x, True)
    assert repeats(twice, once) and repeats(once, once)
    with CodePath(own_code([branchy])) as other:
        branchy(x, True)
        branchy(x, False)
    assert not repeats(other, once)


def test_a_caught_exception_is_on_the_path():
    def guarded(x, fail):
        try:
            if fail:
                raise ValueError
        except ValueError:
            return x
        return x + 1

    assert "caught" in {e[1] for e in record(guarded, torch.ones(1), True).events}
    assert "caught" not in {e[1] for e in record(guarded, torch.ones(1), False).events}


def test_nothing_is_recorded_after_the_block():
    x = torch.randn(3)
    path = record(branchy, x, True)
    n = len(path.events)
    branchy(x, False)
    assert len(path.events) == n


def test_the_tool_id_is_claimed_for_a_recording_only():
    import sys

    from cuvil.frontend.codepath import TOOLS, Unavailable

    record(branchy, torch.ones(2), True)
    free = [t for t in TOOLS if sys.monitoring.get_tool(t) is None]
    assert free == list(TOOLS)
    for tool in TOOLS:
        sys.monitoring.use_tool_id(tool, "someone else")
    try:
        with pytest.raises(Unavailable, match="taken"):
            record(branchy, torch.ones(2), True)
    finally:
        for tool in TOOLS:
            sys.monitoring.free_tool_id(tool)
