"""Diagnostic rendering: the caret sits under the reported column however the line looks."""

from __future__ import annotations

from cuvil.dsl.ast import Pos
from cuvil.dsl.diagnostics import NOTE, CvrError, Diagnostic, caret_lines


def caret_column(lines: list[str]) -> int:
    return lines[1].index("^") - 4  # both lines are indented by four spaces


def test_caret_under_the_column_with_tabs_kept():
    shown, caret = caret_lines("\tx = \tbad\r\n", 7)
    assert shown == "    \tx = \tbad"
    assert caret == "    \t    \t^"  # the tabs line up in any terminal


def test_unprintable_characters_do_not_reach_the_terminal():
    lines = caret_lines("ab\x1b[31mc\x00d", 10)
    assert "\x1b" not in lines[0] and "\x00" not in lines[0]
    assert lines[0][4 + 9] == "d" and caret_column(lines) == 9
    message = Diagnostic(Pos("f", 1, 1), "bad string literal '\x1b[2J'").render()
    assert "\x1b" not in message


def test_a_long_line_is_cut_around_the_column():
    text = "".join(chr(ord("a") + i % 26) for i in range(1000))
    lines = caret_lines(text, 500, width=40)
    assert lines[0].startswith("    ...") and lines[0].endswith("...")
    assert len(lines[0]) == 4 + 3 + 40 + 3
    assert lines[0][4 + caret_column(lines)] == text[499]


def test_rendering_with_a_note_and_a_file_level_error():
    note = Diagnostic(Pos("a.cvr", 1, 6), "'r' is first defined here", NOTE, "rule r: x => y")
    error = Diagnostic(Pos("b.cvr", 2, 6), "duplicate rule 'r'", source_line="rule r: y => x",
                       notes=(note,))
    missing = Diagnostic(Pos("c.cvr", 0, 0), "no such file or directory")
    assert str(CvrError([error, missing])).splitlines() == [
        "b.cvr:2:6: error: duplicate rule 'r'", "    rule r: y => x", "         ^",
        "a.cvr:1:6: note: 'r' is first defined here", "    rule r: x => y", "         ^",
        "c.cvr: error: no such file or directory"]
