"""Property tests: no input makes the `.cvr` front end raise anything but `CvrError`.

Random bytes go through a file (decoding included), random text and random mutations of
the valid example files go through `cuvil.library.load`. A load that succeeds must give a
library whose rules all cite a line of the source.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cuvil.dsl import CvrError, parse
from cuvil.library import load

PASS = Path(__file__).resolve().parents[1] / "cvr" / "pass"
VALID = [p.read_text() for p in sorted(PASS.rglob("*.cvr"))]
VOCABULARY = [
    "rule", "op", "ruleset", "target", "cost", "schedule", "where", "and", "or", "not",
    "=>", "<=>", "=", "==", "!=", "<", ">=", "(", ")", ",", ":", ".", "_", "-", "+", "*",
    "/", "%", "#", "\n", "\n    ", " ", "x", "y", "relu", "add", "matmul", "transpose",
    "conv2d", "cat", "linear", "rank(x)", "dim(x, -1)", "layout(x)", "has_target(", "1",
    "1.0", "-1", "1e3", '"NHWC"', "'cpu'", "(1, 1)", "()", "True", "None", "target.gflops",
    "saturate(", "repeat(8, ", "stride=", "\t", "\r\n", "\x00", "\u00e9", "\ufeff",
]
EXAMPLES = int(os.environ.get("CUVIL_FUZZ_EXAMPLES", "150"))  # raise it for a long campaign
FUZZ = settings(max_examples=EXAMPLES, suppress_health_check=[HealthCheck.too_slow,
                                                             HealthCheck.function_scoped_fixture])


def load_or_cvr_error(source) -> None:
    try:
        library = load(source)
    except CvrError as e:
        assert any(d.is_error for d in e.diagnostics)
        assert ": error: " in str(e)
        return
    for rule in library.rules:
        assert rule.pos.line >= 1 and rule.where.endswith(f":{rule.pos.line}")


@st.composite
def mutated(draw) -> str:
    text = draw(st.sampled_from(VALID))
    for _ in range(draw(st.integers(1, 4))):
        a = draw(st.integers(0, len(text)))
        b = draw(st.integers(a, min(len(text), a + 12)))
        piece = draw(st.sampled_from(VOCABULARY) | st.text(max_size=3))
        action = draw(st.sampled_from(["insert", "replace", "delete", "swap_lines"]))
        if action == "insert":
            text = text[:a] + piece + text[a:]
        elif action == "replace":
            text = text[:a] + piece + text[b:]
        elif action == "delete":
            text = text[:a] + text[b:]
        else:
            lines = text.split("\n")
            i, j = draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
            text = "\n".join(lines)
    return text + "\n"


@FUZZ
@given(data=st.binary(max_size=300))
def test_random_bytes_in_a_file(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("fuzz") / "random.cvr"
    path.write_bytes(data)
    load_or_cvr_error(path)


@FUZZ
@given(pieces=st.lists(st.sampled_from(VOCABULARY) | st.text(max_size=2), max_size=60))
def test_random_text(pieces):
    text = "".join(pieces)
    load_or_cvr_error(text + "\n")
    with contextlib.suppress(CvrError):
        parse(text)


@FUZZ
@given(text=mutated())
def test_mutated_valid_files(text):
    load_or_cvr_error(text)
