"""Parse `.cvr` text into the AST of `cuvil.dsl.ast`, with Lark (grammar: `cvr.lark`).

A file is split into its top-level items (a line starting with `rule`, `override`, `op`,
`ruleset`, `target`, `cost`, `schedule` or `include` at column 0 starts one; continuation
lines are indented) and each item is parsed on its own, so one file reports all its syntax
errors. Rules get the ruleset they follow and the comment right above them as their
description.
"""

from __future__ import annotations

import ast as python_ast
import contextlib
import functools
import os
import re
import warnings
from dataclasses import replace
from pathlib import Path

from lark import Lark, Token, Transformer
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken, VisitError

from cuvil.dsl import ast
from cuvil.dsl.diagnostics import CvrError, Diagnostic, Reporter
from cuvil.paths import cache_dir

ITEM_KEYWORDS = ("rule", "override", "op", "ruleset", "target", "cost", "schedule", "include")
_ITEM_START = re.compile(rf"({'|'.join(ITEM_KEYWORDS)})(?![\w.])")
MAX_DEPTH = 100  # terms and expressions nest at most this deeply
DEFAULT_RULESET = "default"  # the ruleset of leading rules in source text (no file stem)


@functools.cache
def _lark() -> Lark:
    """The parser. Building its tables takes longer than checking a file, so they are kept
    in the cache directory (Lark's own cache, keyed by a hash of the grammar and options)."""
    grammar = Path(__file__).with_name("cvr.lark").read_text()
    return Lark(grammar, parser="lalr", lexer="basic", maybe_placeholders=True,
                cache=_tables_file() or False)


def _tables_file() -> str | None:
    folder = cache_dir() / "rules"
    with contextlib.suppress(OSError):
        folder.mkdir(parents=True, exist_ok=True)
    return str(folder / "cvr-parser.lark") if os.access(folder, os.W_OK) else None


def parse(text: str, path: str = "<string>") -> ast.Module:
    """The AST of one `.cvr` file; `CvrError` with every syntax error if there are any."""
    module, diagnostics = parse_module(text, path)
    if any(d.is_error for d in diagnostics):
        raise CvrError(diagnostics)
    return module


def parse_module(text: str, path: str) -> tuple[ast.Module, list[Diagnostic]]:
    """The items that parse and a diagnostic for each one that does not."""
    reporter = Reporter({path: text})
    lines = text.split("\n")
    starts = [0] + [i for i, line in enumerate(lines) if i and _ITEM_START.match(line)]
    items: list[ast.Item] = []
    for first, end in zip(starts, [*starts[1:], len(lines)], strict=True):
        parsed = _parse_item("\n".join(lines[first:end]), path, first, reporter)
        if parsed:
            parsed[0] = _describe(parsed[0], lines, first)
        items += parsed
    return ast.Module(path, tuple(_assign_rulesets(items, path))), reporter.diagnostics


def _parse_item(chunk: str, path: str, offset: int, reporter: Reporter) -> list[ast.Item]:
    try:
        tree = _lark().parse(chunk)
        items = list(_ToAst(path, offset).transform(tree).children)
        if any(depth(item) > MAX_DEPTH for item in items):
            raise RecursionError
        return items
    except UnexpectedInput as e:
        pos, message = _syntax_message(e, path, offset, chunk.startswith("op"))
        reporter.error(pos, message)
    except VisitError as e:
        if not isinstance(e.orig_exc, _ItemError):
            raise
        reporter.error(e.orig_exc.pos, e.orig_exc.message)
    except RecursionError:
        reporter.error(ast.Pos(path, offset + 1, 1), f"this item is nested too deeply (more "
                                                     f"than {MAX_DEPTH} levels)")
    return []


def depth(node) -> int:
    """How deeply an AST node nests (counted without recursion, so any input is safe)."""
    deepest, stack = 0, [(node, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, tuple):
            stack.extend((child, level) for child in node)
        elif hasattr(node, "__dataclass_fields__") and not isinstance(node, ast.Pos):
            deepest = max(deepest, level)
            stack.extend((getattr(node, name), level + 1) for name in node.__dataclass_fields__)
    return deepest


def _describe(item: ast.Item, lines: list[str], first: int) -> ast.Item:
    """Rules and ops take the comment lines right above them as their description."""
    if not isinstance(item, ast.Rule | ast.OpDecl):
        return item
    comment: list[str] = []
    i = first - 1
    while i >= 0 and lines[i].strip().startswith("#"):
        comment.insert(0, lines[i].strip()[1:].strip())
        i -= 1
    return replace(item, description=" ".join(c for c in comment if c))


def _assign_rulesets(items: list[ast.Item], path: str) -> list[ast.Item]:
    current = DEFAULT_RULESET if path.startswith("<") else Path(path).stem
    out = []
    for item in items:
        if isinstance(item, ast.RulesetDecl):
            current = item.name
        elif isinstance(item, ast.Rule):
            item = replace(item, ruleset=current)
        out.append(item)
    return out


# -- syntax errors ----------------------------------------------------------------------------
_FRIENDLY = {"NAME": "a name", "INT": "an integer", "FLOAT": "a number", "STRING": "a string",
             "TRUE": "True", "FALSE": "False", "NONE": "None", "COMPARE": "a comparison"}
_LITERALS = {"INT", "FLOAT", "STRING", "TRUE", "FALSE", "NONE"}
_GROUPS = [  # (words, terminals that must all be expected, terminals the words also cover)
    ("a term", {"NAME", "LPAR", "MINUS", *_LITERALS}, set()),
    ("an expression", {"NAME", "LPAR", "MINUS", "INT", "FLOAT", "STRING"},
     {"TRUE", "FALSE", "TARGET", "NOT"}),
    ("an operator", {"AND", "OR", "COMPARE", "PLUS", "MINUS", "STAR", "SLASH", "PERCENT"},
     set()),
]
_ITEM_TERMINALS = {"$END", *(k.upper() for k in ITEM_KEYWORDS)}


def _syntax_message(e: UnexpectedInput, path: str, offset: int, in_op: bool
                    ) -> tuple[ast.Pos, str]:
    """Where and what; `kernel` is offered only in an `op` item (a term ends a rule side
    and an op body alike, so the parser's state after one expects it in either)."""
    if isinstance(e, UnexpectedCharacters):
        char = e.char if e.char.isprintable() else ascii(e.char)[1:-1]
        what = f"character '{char}'"
        expected = e.interactive_parser.accepts() if e.interactive_parser else set()
        line, col = e.line, e.column
    elif isinstance(e, UnexpectedToken) and e.token.type == "$END":
        what, expected = "end of the item", e.expected
        line, col = e.token.end_line or e.line, e.token.end_column or e.column
    else:
        token = e.token if isinstance(e, UnexpectedToken) else None
        what = f"'{token.value}'" if token is not None else "input"
        expected = e.expected if isinstance(e, UnexpectedToken) else set()
        line, col = e.line, e.column
    message = f"syntax error: unexpected {what}"
    expected = set(expected) - (set() if in_op else {"KERNEL"})
    if expected:
        message += f", expected {describe_expected(set(expected))}"
    return ast.Pos(path, max(line, 1) + offset, max(col, 1)), message


def describe_expected(terminals: set[str]) -> str:
    """Terminal names as words: `{'NAME', 'LPAR'}` -> `'(' or a name`."""
    if terminals <= _ITEM_TERMINALS:
        return "the end of the item"
    names = set(terminals) - _ITEM_TERMINALS
    words = []
    for label, group, covered in _GROUPS:
        if group <= names:
            words.append(label)
            names -= group | covered
    patterns = {t.name: t.pattern.value for t in _lark().terminals}
    friendly = sorted(_FRIENDLY[n] for n in names if n in _FRIENDLY)
    quoted = sorted(f"'{patterns.get(n, n.lower())}'" for n in names if n not in _FRIENDLY)
    words += friendly + quoted
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


# -- the transformer: Lark tree -> AST ----------------------------------------------------------
class _ItemError(Exception):
    """A problem the grammar cannot express (e.g. `repeat` without a count)."""

    def __init__(self, pos: ast.Pos, message: str):
        super().__init__(message)
        self.pos, self.message = pos, message


class _Kwarg(tuple):
    """`name=term` inside a call, before it is split into `Call.kwargs`."""


class _ToAst(Transformer):
    def __init__(self, path: str, offset: int):
        super().__init__()
        self.path, self.offset = path, offset

    def pos(self, token: Token) -> ast.Pos:
        return ast.Pos(self.path, (token.line or 1) + self.offset, token.column or 1)

    # items
    def rule(self, c):
        override, name, lhs, arrow, rhs, _where, guard, _approx, tolerance = c
        return ast.Rule(str(name), lhs, rhs, guard, arrow.type == "BOTH", "", "", self.pos(name),
                        tolerance, override is not None)

    def op_decl(self, c):
        name, *params, body, _kernel, family = c
        return ast.OpDecl(str(name), self._names(params), body, "", self.pos(name),
                          str(family or ""), self.pos(family) if family else None)

    def include(self, c):
        return ast.Include(self.string(c).value, self.pos(c[0]))

    def ruleset_decl(self, c):
        return ast.RulesetDecl(str(c[0]), self.pos(c[0]))

    def target_decl(self, c):
        name, *params = c
        params = [p for p in params if p is not None]
        seen: set[str] = set()
        for key, _value, token in params:
            if key in seen:
                raise _ItemError(self.pos(token), f"target parameter '{key}' given twice")
            seen.add(key)
        return ast.TargetDecl(str(name), tuple((k, v) for k, v, _ in params), self.pos(name))

    def target_arg(self, c):
        return (str(c[0]), c[1].value, c[0])

    def cost_decl(self, c):
        name, *params, expr = c
        return ast.CostDecl(str(name), self._names(params), expr, self.pos(name))

    def schedule(self, c):
        return ast.Schedule(tuple(c[1:]), self.pos(c[0]))

    def step(self, c):
        name, *args = c
        pos = self.pos(name)
        if name == "saturate":
            if any(a.type != "NAME" for a in args):
                raise _ItemError(pos, "saturate(...) takes ruleset names only")
            return ast.Saturate(tuple(str(a) for a in args), pos)
        if name == "repeat":
            if args[0].type != "INT" or len(args) < 2 or any(a.type != "NAME" for a in args[1:]):
                raise _ItemError(pos, "repeat(...) takes a count, then ruleset names")
            return ast.Repeat(int(args[0]), tuple(str(a) for a in args[1:]), pos)
        raise _ItemError(pos, f"unknown schedule step '{name}', expected saturate or repeat")

    @staticmethod
    def _names(tokens) -> tuple[str, ...]:
        return tuple(str(t) for t in tokens if t is not None)

    # terms
    def call(self, c):
        name, *args = c
        positional, kwargs, key_pos = [], [], []
        for arg in (a for a in args if a is not None):
            if isinstance(arg, _Kwarg):
                kwargs.append((str(arg[0]), arg[1]))
                key_pos.append(self.pos(arg[0]))
            elif kwargs:
                raise _ItemError(_term_pos(arg), "positional argument after a keyword argument")
            else:
                positional.append(arg)
        return ast.Call(str(name), tuple(positional), tuple(kwargs), self.pos(name),
                        tuple(key_pos))

    def kwarg(self, c):
        return _Kwarg((c[0], c[1]))

    def var(self, c):
        if c[0] == "_":
            return ast.Wildcard(self.pos(c[0]))
        return ast.Var(str(c[0]), self.pos(c[0]))

    def int(self, c):
        return ast.Literal(-int(c[1]) if len(c) == 2 else int(c[0]), self.pos(c[0]))

    def float(self, c):
        return ast.Literal(-float(c[1]) if len(c) == 2 else float(c[0]), self.pos(c[0]))

    def string(self, c):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            try:
                value = python_ast.literal_eval(c[0])
            except (SyntaxError, ValueError, Warning):
                raise _ItemError(self.pos(c[0]), f"bad string literal {c[0]}") from None
        return ast.Literal(value, self.pos(c[0]))

    def true(self, c):
        return ast.Literal(True, self.pos(c[0]))

    def false(self, c):
        return ast.Literal(False, self.pos(c[0]))

    def none(self, c):
        return ast.Literal(None, self.pos(c[0]))

    def tuple(self, c):
        paren, *elements = c
        elements = [e for e in elements if e is not None]
        for e in elements:
            if not isinstance(e, ast.Literal):
                raise _ItemError(_term_pos(e), "tuple elements must be literals")
        return ast.Literal(tuple(e.value for e in elements), self.pos(paren))

    # expressions
    def binop(self, c):
        left, op, right = c
        return ast.BinOp(str(op), left, right, self.pos(op))

    def not_(self, c):
        return ast.Not(c[1], self.pos(c[0]))

    def neg(self, c):
        operand = c[1]
        if isinstance(operand, ast.Literal) and type(operand.value) in (int, float):
            return ast.Literal(-operand.value, self.pos(c[0]))
        return ast.Neg(operand, self.pos(c[0]))

    def builtin(self, c):
        name, *args = c
        return ast.Builtin(str(name), tuple(a for a in args if a is not None), self.pos(name))

    def target_param(self, c):
        return ast.TargetParam(str(c[0]), self.pos(c[0]))


def _term_pos(node) -> ast.Pos:
    return node.pos
