"""The differential fuzzer's CI set: a fixed set of seeds, each a random model compiled by
Cuvil and compared with eager (results and the caller's tensors, at two batch sizes, one
model in ten also from 4 threads). A refusal (`CuvilError`) passes and is counted (the
summary at the end of the run); a miscompile or a crash fails with the model shrunk to a
minimal reproducer. `bench/fuzz.py` runs thousands more.
"""

from __future__ import annotations

import pytest
from fuzz_check import check
from fuzz_generate import generate
from fuzz_shrink import Shrinker, reproducer

SEEDS = [*range(100), 2143, 2824, 4760]  # and release-run finds: writes into an expand
SHRINKS = 3  # failures shrunk per run (each try is a compile); later ones print as drawn
_shrunk = []


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory):
    """The models' files and a compile cache of their own, shared by the module's seeds so
    that kernels one model compiled serve the next."""
    folder = tmp_path_factory.mktemp("fuzz")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CUVIL_CACHE_DIR", str(folder / "cache"))
        yield folder


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_compiled_model_matches_eager(seed, fuzz_dir, record_property):
    program = generate(seed)
    outcome = check(program, fuzz_dir / "models")
    record_property("fuzz_outcome", outcome.kind)
    if outcome.kind == "refused":
        record_property("fuzz_refusal", f"{outcome.where}: {outcome.detail}")
    if not outcome.failed:
        return
    if len(_shrunk) < SHRINKS:
        _shrunk.append(seed)
        program, outcome = Shrinker(outcome, fuzz_dir / "models").shrink(program)
    pytest.fail(f"seed {seed}: {outcome}\n\n{reproducer(program, outcome)}", pytrace=False)
