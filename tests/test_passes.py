"""The pass runner: each pass entered once, in order, timed under its name; a pass's cache
is looked up by its input, a hit skipping the function and a miss storing its output."""

from __future__ import annotations

from cuvil.passes import Pass, run
from cuvil.trace import Tracer


class DictCache:
    """A cache keyed by the input itself; `serves(value)` says which inputs it keys."""

    def __init__(self, serves=lambda value: True):
        self.stored: dict = {}
        self.serves = serves

    def lookup(self, value):
        key = value if self.serves(value) else None
        return key, self.stored.get(key)

    def store(self, key, value, result):
        self.stored[key] = result


def counting(function, calls: list, name: str):
    def counted(value):
        calls.append(name)
        return function(value)

    return counted


def test_passes_run_in_order_each_once_and_are_timed_under_their_names():
    calls, tracer = [], Tracer()
    passes = [Pass("double", counting(lambda v: 2 * v, calls, "double")),
              Pass("inc", counting(lambda v: v + 1, calls, "inc")),
              Pass("square", counting(lambda v: v * v, calls, "square"))]
    assert run(passes, 3, tracer) == (2 * 3 + 1) ** 2
    assert calls == ["double", "inc", "square"]
    assert list(tracer.passes) == ["double", "inc", "square"]
    assert all(seconds >= 0 for seconds in tracer.passes.values())
    assert tracer.totals == {}  # passes are not stages: the stages' totals stay theirs
    assert [e["name"] for e in tracer.events] == ["double", "inc", "square"]


def test_a_cache_hit_skips_the_function_and_a_miss_stores_its_output():
    calls, cache = [], DictCache()
    cached = Pass("square", counting(lambda v: v * v, calls, "square"), cache)
    assert cached(4) == 16 and cache.stored == {4: 16}
    assert cached(4) == 16 and calls == ["square"]
    assert cached(5) == 25 and calls == ["square", "square"]


def test_an_input_the_cache_does_not_key_runs_the_function_and_stores_nothing():
    calls, cache = [], DictCache(serves=lambda value: value > 0)
    cached = Pass("negate", counting(lambda v: -v, calls, "negate"), cache)
    assert cached(-2) == 2 and cached(-2) == 2
    assert calls == ["negate", "negate"] and cache.stored == {}
