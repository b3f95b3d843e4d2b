"""Extending the stock library: `"stock"` as a source, `include` lines, and `override rule`
(a user rule of a stock rule's name is an error naming both places unless it says
`override`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuvil.dsl import CvrError
from cuvil.library import load

MINE = "ruleset mine\n# abs is idempotent\nrule abs_abs: abs(abs(x)) => abs(x)\n"
RELU_FLOAT = "relu_relu: relu(relu(x)) => relu(x)\n    where is_float(x)\n"


def write(path: Path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def test_stock_names_the_stock_library():
    stock = load(None)
    assert load("stock").rules == stock.rules
    assert load(["stock", None, "stock"]).files == stock.files  # each file loads once


def test_stock_and_a_file_is_the_stock_library_extended(tmp_path):
    stock = load(None)
    library = load(["stock", write(tmp_path / "my.cvr", MINE)])
    assert library.rules[:-1] == stock.rules
    assert library.rules[-1].name == "abs_abs" and library.rulesets["mine"] == ("abs_abs",)
    assert library.files == (*stock.files, str(tmp_path / "my.cvr"))


def test_a_stock_name_again_is_one_line_naming_both_places(tmp_path):
    mine = write(tmp_path / "my.cvr", "rule " + RELU_FLOAT)
    first = load(None).rule("relu_relu").pos
    with pytest.raises(CvrError) as info:
        load(["stock", mine])
    (error,) = info.value.errors
    assert error.render().splitlines()[0] == (
        f"{mine}:1:6: error: duplicate rule 'relu_relu' (first defined at {first.path}:"
        f"{first.line}:{first.col}); to replace it, write `override rule relu_relu`")


def test_override_takes_the_stock_rule_place(tmp_path):
    stock = load(None)
    library = load(["stock", write(tmp_path / "my.cvr", MINE + "override rule " + RELU_FLOAT)])
    old, new = stock.rule("relu_relu"), library.rule("relu_relu")
    assert new.where == f"{tmp_path / 'my.cvr'}:4" and new.guard is not None
    assert new.ruleset == old.ruleset and library.rulesets == {**stock.rulesets,
                                                                "mine": ("abs_abs",)}
    names = [r.label for r in library.rules]
    assert names[:-1] == [r.label for r in stock.rules] and names[-1] == "abs_abs"
    assert sum(r.name == "relu_relu" for r in library.rules) == 1


def test_override_of_nothing_is_an_error(tmp_path):
    with pytest.raises(CvrError, match="override rule 'relu_relu' replaces no rule"):
        load(write(tmp_path / "my.cvr", "override rule " + RELU_FLOAT))


def test_include_loads_its_files_first_and_each_once(tmp_path):
    write(tmp_path / "lib" / "more.cvr", 'include "../my.cvr"\nrule n: neg(neg(x)) => x\n')
    mine = write(tmp_path / "my.cvr", f'include "stock"\ninclude "lib"\n{MINE}')
    stock = load(None)
    library = load(mine)
    assert library.files == (*stock.files, str(tmp_path / "lib" / "more.cvr"), mine)
    assert [r.name for r in library.rules[len(stock.rules):]] == ["n", "abs_abs"]
    assert load(["stock", mine, "stock"]).files == library.files


def test_an_include_that_does_not_exist_is_an_error_at_its_line(tmp_path):
    mine = write(tmp_path / "my.cvr", f'{MINE}include "nope.cvr"\n')
    with pytest.raises(CvrError) as info:
        load(mine)
    assert str(info.value).splitlines()[0] == (
        f"{mine}:4:9: error: cannot include 'nope.cvr': no such file or directory (a path "
        f"is relative to this file)")
