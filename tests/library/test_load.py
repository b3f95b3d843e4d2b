"""`cuvil.library.load`: what each kind of source means, directory order, reopened rulesets,
file errors, and the stock library."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuvil.dsl import CvrError
from cuvil.ir.devices import rule_files
from cuvil.library import load
from cuvil.library.loader import stock_rules_dir

ROOT = Path(__file__).resolve().parents[2]
RELU = "rule relu_relu: relu(relu(x)) => relu(x)\n"


def write(folder: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return folder


def test_none_is_the_stock_library_shipped_as_the_top_level_rules():
    assert stock_rules_dir().resolve() == (ROOT / "rules").resolve()
    stock = load(None)
    expected = sorted(p.relative_to(stock_rules_dir()).as_posix()
                      for p in stock_rules_dir().rglob("*.cvr"))
    targets = [p.relative_to(ROOT / "cuvil").as_posix() for p in rule_files()]
    assert targets  # the CUDA target's placement rules
    assert list(stock.files) == [f"rules/{name}" for name in expected] + targets
    assert len(stock.rules) == len(load([stock_rules_dir(), *rule_files()]).rules)


def test_text_with_a_newline_is_source_and_other_strings_are_paths(tmp_path, monkeypatch):
    from_text = load(RELU)
    assert from_text.files == ("<string>",) and from_text.rules[0].ruleset == "default"
    write(tmp_path, {"mine.cvr": RELU})
    monkeypatch.chdir(tmp_path)
    from_path = load("mine.cvr")
    assert from_path.files == ("mine.cvr",) and from_path.rules[0].ruleset == "mine"
    assert from_path.rules[0].where == "mine.cvr:1"
    assert load(tmp_path / "mine.cvr").rules[0].pos.path == str(tmp_path / "mine.cvr")


def test_a_missing_path_is_a_clear_error(tmp_path):
    missing = str(tmp_path / "nope.cvr")
    with pytest.raises(CvrError) as info:
        load(missing)
    assert str(info.value) == f"{missing}: error: no such file or directory"


def test_a_directory_loads_every_cvr_file_sorted_and_recursively(tmp_path):
    write(tmp_path, {"b.cvr": "rule b: neg(neg(x)) => x\n",
                     "a/z.cvr": "rule z: abs(abs(x)) => abs(x)\n",
                     "a/b.cvr": "ruleset shared\n" + RELU,
                     "notes.txt": "not rules at all (",
                     "c/d/e.cvr": "ruleset shared\nrule e: exp(log(x)) => x\n"})
    library = load(str(tmp_path))
    rel = [Path(f).relative_to(tmp_path).as_posix() for f in library.files]
    assert rel == ["a/b.cvr", "a/z.cvr", "b.cvr", "c/d/e.cvr"]
    assert [r.name for r in library.rules] == ["relu_relu", "z", "b", "e"]
    assert library.rulesets == {"shared": ("relu_relu", "e"), "z": ("z",), "b": ("b",)}


def test_an_empty_directory_is_an_empty_library(tmp_path):
    library = load(tmp_path)
    assert library.rules == () and library.ops == {} and library.files == ()


def test_a_list_loads_its_sources_together(tmp_path):
    write(tmp_path, {"one.cvr": "ruleset algebra\n" + RELU})
    library = load([tmp_path / "one.cvr", "ruleset algebra\nrule n: neg(neg(x)) => x\n",
                    str(tmp_path)])  # the directory repeats one.cvr: it loads once
    assert library.rulesets["algebra"] == ("relu_relu", "n")
    with pytest.raises(CvrError) as info:
        load([tmp_path / "one.cvr", RELU])
    assert f"<string>:1:6: error: duplicate rule 'relu_relu' (first defined at " \
        f"{tmp_path / 'one.cvr'}:2:6)" in str(info.value)


def test_several_texts_are_several_sources(tmp_path, monkeypatch):
    library = load(["rule a: relu(relu(x)) => relu(x)\n", "rule b: neg(neg(x)) => x\n"])
    assert library.files == ("<string>", "<string 2>")
    assert [r.where for r in library.rules] == ["<string>:1", "<string 2>:1"]
    write(tmp_path, {"a.cvr": RELU})
    monkeypatch.chdir(tmp_path)
    assert load(["a.cvr", "./a.cvr", str(tmp_path / "a.cvr"), "."]).files == ("a.cvr",)


def test_errors_of_every_file_are_reported_together(tmp_path):
    write(tmp_path, {"a.cvr": "rule a: relu(x) => y\n", "b.cvr": "rule b: relu(x) =>\n"})
    tmp_path.joinpath("c.cvr").write_bytes(b"rule c: relu(x) => x # \xff\n")
    with pytest.raises(CvrError) as info:
        load(tmp_path)
    places = [(Path(d.pos.path).name, d.pos.line, d.pos.col) for d in info.value.errors]
    assert places == [("a.cvr", 1, 20), ("b.cvr", 1, 19), ("c.cvr", 1, 24)]


def test_a_byte_order_mark_and_crlf_line_ends_are_fine(tmp_path):
    text = "\ufeffruleset algebra\n# doubled relu\n" + RELU
    tmp_path.joinpath("win.cvr").write_bytes(text.replace("\n", "\r\n").encode())
    rule = load(tmp_path / "win.cvr").rules[0]
    assert (rule.ruleset, rule.description, rule.pos.line) == ("algebra", "doubled relu", 3)


def test_without_drops_rulesets_and_rules():
    library = load("ruleset a\n" + RELU + "rule n: neg(neg(x)) => x\n"
                   "ruleset b\nrule m: abs(abs(x)) => abs(x)\n")
    assert [r.name for r in library.without(["b", "n"]).rules] == ["relu_relu"]
    assert library.without(["a"]).rulesets == {"b": ("m",)}


def test_the_reference_example_loads_with_its_schedule_targets_and_costs():
    library = load(ROOT / "tests" / "cvr" / "pass" / "reference.cvr")
    assert list(library.rulesets) == ["fusion", "algebra", "layout", "placement"]
    assert len(library.rules) == 10  # add_comm is two rules, one each way
    assert list(library.targets) == ["cpu"] and list(library.costs) == ["linear"]
    steps = library.schedule.steps
    assert [s.rulesets for s in steps] == [("algebra",), ("fusion", "layout", "placement")]
