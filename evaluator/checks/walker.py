"""The one walker: it visits a candidate's syntax tree for the rules registered with it, and keeps what they find.

A rule family registers what it looks at, and the walker calls it, in the order the families registered:

* `on_write(visit)`: every target written anywhere (`x.a = ...`, `del m[k]`, `for t in ...`, `with ... as t`),
  before anything else, so that the nodes inside a target are known as written, not read;
* `on(types, visit, reads_only=)`: every node of those types, in `ast.walk` order (`reads_only` skips the
  nodes inside written targets);
* `on_string(visit)`: every string the candidate holds or spells (below);
* `then(step)`: last, steps that follow the code rather than the tree (what ModelNew.forward reaches).

String scanning covers every string constant except bare expression statements (docstrings and the like,
which cannot reach `load_inline`), and every string spelled from known parts (`"py::ex" + "ec("`), whose
findings beyond those of its parts are reported once. The C++ handed to `load_inline` is such a string,
whatever variable or argument carries it.

`Findings` keeps one entry per place a flag was seen and makes one `Flag` per flag name of them, its reason
naming every place (`line 3: ...; lines 7, 9: ...`), ordered by the first place.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator

from evaluator.checks.names import Resolver, unpack
from evaluator.wire.records import Flag, FlagPolicy

NodeVisit = Callable[[ast.AST, int], None]  # (node, line)
WriteVisit = Callable[[ast.AST, str], None]  # (target, "assign" or "delete")
StringVisit = Callable[[ast.AST, str, list[str] | None], None]  # (node, text, the constants it is spelled from)


def store_targets(tree: ast.AST) -> Iterator[tuple[ast.AST, str]]:
    """Every (target, kind) written anywhere: kind is 'assign' or 'delete'."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                for x in unpack(t):
                    yield x, "assign"
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            if isinstance(node, ast.AnnAssign) and node.value is None:
                continue
            yield node.target, "assign"
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            for x in unpack(node.target):
                yield x, "assign"
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                if item.optional_vars is not None:
                    for x in unpack(item.optional_vars):
                        yield x, "assign"
        elif isinstance(node, ast.Delete):
            for t in node.targets:
                for x in unpack(t):
                    yield x, "delete"


Entry = tuple[int, str, str | None]  # (line, what, the dotted name it was seen as)


def _covered(e: Entry, entries: list[Entry]) -> bool:
    """Whether a longer name seen on the same line says what `e` says: `uses gc.collect` covers `uses gc`."""
    return e[2] is not None and any(
        o[0] == e[0] and o[2] and o[2] != e[2] and o[2].startswith((e[2] + ".", e[2] + "["))
        for o in entries)


class Findings:
    """Every place each flag was seen: (line, what, dotted name it was seen as)."""

    def __init__(self) -> None:
        self.found: dict[str, list[Entry]] = {}

    def add(self, name: str, line: int, what: str, key: str | None = None) -> None:
        """One place where `name` was seen. `key`: the dotted name it was seen as, so that on one line
        `uses gc.collect` stands for `uses gc` as well."""
        entries = self.found.setdefault(name, [])
        if (line, what, key) not in entries:
            entries.append((line, what, key))

    def flags(self, policies: dict[str, FlagPolicy]) -> list[Flag]:
        """One Flag per name, its reason every place it was seen (`line 3: ...; lines 5, 9: ...`),
        ordered by the first place (ties keep discovery order)."""
        flags: list[tuple[int, Flag]] = []
        for name, entries in self.found.items():
            kept = sorted((e for e in entries if not _covered(e, entries)), key=lambda e: e[0])
            places: dict[str, list[int]] = {}
            for line, what, _ in kept:
                lines = places.setdefault(what, [])
                if line not in lines:
                    lines.append(line)
            reason = "; ".join(f"line{'s' if len(lines) > 1 else ''} {', '.join(map(str, lines))}: {what}"
                               for what, lines in places.items())
            flags.append((kept[0][0], Flag(name=name, reason=reason, policy=policies[name])))
        return [f for _, f in sorted(flags, key=lambda x: x[0])]


class Walker:
    """One candidate module: its tree, what its names stand for, who its nodes' parents are, and the rules
    registered to look at it."""

    def __init__(self, tree: ast.Module):
        self.tree = tree
        self.names = Resolver(tree)
        self.findings = Findings()
        self.add = self.findings.add
        self.parents: dict[int, ast.AST] = self.names.scopes.parents  # made once, by the resolver's scopes
        self.written: set[int] = set()  # nodes inside written targets, once `walk` has met them
        self._writes: list[WriteVisit] = []
        self._nodes: list[tuple[tuple[type[ast.AST], ...], NodeVisit, bool]] = []
        self._strings: list[StringVisit] = []
        self._steps: list[Callable[[], None]] = []

    # ---- registration
    def on_write(self, visit: WriteVisit) -> None:
        self._writes.append(visit)

    def on(self, types: type[ast.AST] | tuple[type[ast.AST], ...], visit: NodeVisit, *, reads_only: bool = False) -> None:
        self._nodes.append((types if isinstance(types, tuple) else (types,), visit, reads_only))

    def on_string(self, visit: StringVisit) -> None:
        self._strings.append(visit)

    def then(self, step: Callable[[], None]) -> None:
        self._steps.append(step)

    # ---- the walk
    def walk(self) -> None:
        for target, kind in store_targets(self.tree):
            for sub in ast.walk(target):
                self.written.add(id(sub))
            for write in self._writes:
                write(target, kind)
        for node in ast.walk(self.tree):
            line = getattr(node, "lineno", 0)
            for types, visit, reads_only in self._nodes:
                if isinstance(node, types) and not (reads_only and id(node) in self.written):
                    visit(node, line)
        for node, text, parts in self.strings():
            for visit in self._strings:
                visit(node, text, parts)
        for step in self._steps:
            step()

    def strings(self) -> Iterator[tuple[ast.AST, str, list[str] | None]]:
        """Every string constant (bare expression statements apart: docstrings cannot reach load_inline),
        and every string the source spells from known parts (`"py::ex" + "ec("`, f-strings, joins: `fold`),
        with the constants it is spelled from (None for a constant)."""
        bare: set[int] = set()
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
                bare.add(id(node.value))
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if id(node) not in bare:
                    yield node, node.value, None
            elif isinstance(node, (ast.BinOp, ast.JoinedStr, ast.Call, ast.Subscript)):
                text = self.names.fold(node)
                parent = self.parents.get(id(node))
                if text is None or (parent is not None and self.names.fold(parent) is not None):
                    continue  # not a string, or part of a longer one: scanned as that
                parts = [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
                if text in parts:
                    continue  # nothing spelled beyond a constant it holds
                yield node, text, parts
