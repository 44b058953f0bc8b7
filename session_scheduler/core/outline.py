"""What a source file is (its language, from its name) and what it defines (its classes, functions
and constants): tree-sitter for Python, JavaScript and TypeScript, a line pattern for a few more
languages, nothing for the rest. PURE: text in, values out; nothing is run."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

import tree_sitter_javascript
import tree_sitter_python
import tree_sitter_typescript
from tree_sitter import Language, Node, Parser, Query, QueryCursor

Kind = Literal["class", "function", "constant", "type"]


@dataclass(frozen=True)
class Definition:
    """One name a file defines at its top level (a class's methods are its `members`)."""

    kind: Kind
    name: str
    header: str
    """The definition's first words as written (`def f(a, b) -> int`), on one line, shortened."""
    members: tuple[str, ...] = ()
    """A class's methods (an interface's members), by name, in the file's order."""


@dataclass(frozen=True)
class Lang:
    """A language as a file's name tells it."""

    name: str
    code: bool
    """Source code (listed in the map's files) rather than documents, data or styles."""
    grammar: str = ""
    """How its definitions are found: a tree-sitter grammar or a line pattern (`OUTLINES`);
    empty: the file is listed by name only."""


LANGUAGES: dict[str, Lang] = {
    ".py": Lang("Python", True, "python"),
    ".pyi": Lang("Python", True, "python"),
    ".js": Lang("JavaScript", True, "javascript"),
    ".mjs": Lang("JavaScript", True, "javascript"),
    ".cjs": Lang("JavaScript", True, "javascript"),
    ".jsx": Lang("JavaScript", True, "javascript"),
    ".ts": Lang("TypeScript", True, "typescript"),
    ".mts": Lang("TypeScript", True, "typescript"),
    ".cts": Lang("TypeScript", True, "typescript"),
    ".tsx": Lang("TypeScript", True, "tsx"),
    ".go": Lang("Go", True, "go"),
    ".rs": Lang("Rust", True, "rust"),
    ".java": Lang("Java", True, "java"),
    ".kt": Lang("Kotlin", True, "java"),
    ".cs": Lang("C#", True, "java"),
    ".rb": Lang("Ruby", True, "ruby"),
    **{ext: Lang("C", True) for ext in (".c", ".h")},
    **{ext: Lang("C++", True) for ext in (".cc", ".cpp", ".cxx", ".hpp", ".hh")},
    ".php": Lang("PHP", True),
    ".swift": Lang("Swift", True),
    ".scala": Lang("Scala", True),
    ".lua": Lang("Lua", True),
    **{ext: Lang("Shell", True) for ext in (".sh", ".bash", ".zsh")},
    **{ext: Lang("Markdown", False) for ext in (".md", ".markdown")},
    ".rst": Lang("reStructuredText", False),
    ".txt": Lang("Text", False),
    ".json": Lang("JSON", False),
    **{ext: Lang("YAML", False) for ext in (".yaml", ".yml")},
    ".toml": Lang("TOML", False),
    **{ext: Lang("INI", False) for ext in (".ini", ".cfg")},
    **{ext: Lang("HTML", False) for ext in (".html", ".htm")},
    **{ext: Lang("CSS", False) for ext in (".css", ".scss", ".sass", ".less")},
    ".xml": Lang("XML", False),
    ".sql": Lang("SQL", False),
    ".svg": Lang("SVG", False),
}
"""By file extension (lower case). A name not here is of no language the map names."""


def language_of(path: str) -> Lang | None:
    name = path.rpartition("/")[2]
    dot = name.rfind(".")
    return LANGUAGES.get(name[dot:].lower()) if dot > 0 else None


_TREE_SITTER: dict[str, Language] = {
    "python": Language(tree_sitter_python.language()),
    "javascript": Language(tree_sitter_javascript.language()),
    "typescript": Language(tree_sitter_typescript.language_typescript()),
    "tsx": Language(tree_sitter_typescript.language_tsx()),
}
"""The grammars (immutable); a parser is made per use (`Outliner`), never shared across threads."""

OUTLINES: dict[str, re.Pattern[str]] = {
    "go": re.compile(r"^(?:func(?: \([^)\n]*\))? (?P<function>\w+)|type (?P<type>\w+))", re.M),
    "rust": re.compile(
        r"^[ \t]*(?:pub(?:\([^)\n]*\))? )?(?:async )?(?:fn (?P<function>\w+)|(?:struct|enum|trait) (?P<type>\w+))",
        re.M,
    ),
    "java": re.compile(
        r"^[ \t]*(?:(?:public|private|protected|internal|abstract|final|static|sealed|data|open)[ \t]+)*"
        r"(?:class|interface|enum|record|object)[ \t]+(?P<class>\w+)",
        re.M,
    ),
    "ruby": re.compile(
        r"^[ \t]*(?:(?:class|module)[ \t]+(?P<class>[\w:]+)|def[ \t]+(?P<function>[\w.?!]+))", re.M
    ),
}
"""Line patterns for languages without a grammar here: each named group is a definition's kind."""
KINDS: dict[str, Kind] = {"class": "class", "function": "function", "type": "type"}

MAX_DEFINITIONS = 200
"""Definitions kept per file (and members per class): a generated file may define thousands."""
MAX_HEADER = 100
"""Characters of a definition's header kept."""
CONSTANT = re.compile(r"^[A-Z][A-Z0-9_]*$")
"""A Python top-level constant's name."""


def one_line(text: str, limit: int = MAX_HEADER) -> str:
    """`text` on one line of printable characters, at most `limit` characters: the map is read by
    a model, and a file's own words must not start lines of their own in it."""
    head = text[: limit * 4]  # a constant's value may be a megabyte long
    flat = " ".join("".join(c if c.isprintable() else " " for c in head).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


@dataclass(frozen=True)
class Outline:
    """What a file defines, and the text its mentions of names are counted in."""

    definitions: tuple[Definition, ...]
    code: str
    """The text without its comments and docstrings (with a tree-sitter grammar): prose mentions
    every common word, and a name in prose is not a use of it."""


PROSE: dict[str, str] = {
    "python": "(comment) @prose (expression_statement (string) @prose)",
    **dict.fromkeys(("javascript", "typescript", "tsx"), "(comment) @prose"),
}
"""Per grammar, the query for the text that is not code."""


class Outliner:
    """Outlines files; holds a parser and a query per grammar, made on first use (one per outliner:
    a tree-sitter parser is not shared between threads)."""

    def __init__(self) -> None:
        self._tools: dict[str, tuple[Parser, Query]] = {}

    def outline(self, grammar: str, text: str) -> Outline:
        """What a file of `grammar` (`Lang.grammar`) written as `text` defines at its top level."""
        if grammar in OUTLINES:
            return Outline(_by_pattern(OUTLINES[grammar], text), text)
        if grammar not in _TREE_SITTER:
            return Outline((), text)
        if grammar not in self._tools:
            language = _TREE_SITTER[grammar]
            self._tools[grammar] = (Parser(language), Query(language, PROSE[grammar]))
        parser, prose = self._tools[grammar]
        source = text.encode("utf-8", "replace")
        root = parser.parse(source).root_node
        found = _python(root, source) if grammar == "python" else _script(root, source)
        return Outline(tuple(found[:MAX_DEFINITIONS]), _without(source, QueryCursor(prose).captures(root)))


def _without(source: bytes, captured: dict[str, list[Node]]) -> str:
    """`source` without the captured nodes' text (each replaced by a space)."""
    kept, at = [], 0
    for start, end in sorted(
        (node.start_byte, node.end_byte) for nodes in captured.values() for node in nodes
    ):
        if start >= at:
            kept.append(source[at:start])
            at = end
    kept.append(source[at:])
    return b" ".join(kept).decode("utf-8", "replace")


def _by_pattern(pattern: re.Pattern[str], text: str) -> tuple[Definition, ...]:
    found = []
    for match in pattern.finditer(text):
        group, name = next((k, v) for k, v in match.groupdict().items() if v)
        line_end = text.find("\n", match.start())
        line = text[match.start() : line_end if line_end >= 0 else len(text)]
        found.append(Definition(KINDS[group], name, one_line(line.rstrip("{ \t"))))
        if len(found) == MAX_DEFINITIONS:
            break
    return tuple(found)


def _text(node: Node | None, source: bytes) -> str:
    return "" if node is None else source[node.start_byte : node.end_byte].decode("utf-8", "replace")


def _header(node: Node, source: bytes) -> str:
    """The node's text up to its body: `def f(a) -> int`, `class A extends B` (Python's up to its
    colon: a comment may stand between the colon and the body)."""
    body = node.child_by_field_name("body")
    colon = next((child for child in node.children if child.type == ":"), None)
    end = colon.start_byte if colon is not None else body.start_byte if body is not None else node.end_byte
    return one_line(source[node.start_byte : end].decode("utf-8", "replace").rstrip().rstrip(":{").rstrip())


def _python(root: Node, source: bytes) -> list[Definition]:
    found = []
    for node in root.named_children:
        if node.type == "decorated_definition":
            node = node.child_by_field_name("definition") or node
        name = _text(node.child_by_field_name("name"), source)
        if node.type == "function_definition":
            found.append(Definition("function", name, _header(node, source)))
        elif node.type == "class_definition":
            found.append(Definition("class", name, _header(node, source), _python_methods(node, source)))
        elif node.type == "expression_statement" and node.named_children:
            assigned = node.named_children[0]
            target = _text(assigned.child_by_field_name("left"), source)
            if assigned.type == "assignment" and CONSTANT.match(target):
                found.append(Definition("constant", target, one_line(_text(assigned, source), 60)))
    return found


def _python_methods(node: Node, source: bytes) -> tuple[str, ...]:
    body = node.child_by_field_name("body")
    names = []
    for member in body.named_children if body is not None else ():
        if member.type == "decorated_definition":
            member = member.child_by_field_name("definition") or member
        if member.type == "function_definition":
            names.append(_text(member.child_by_field_name("name"), source))
    return tuple(names[:MAX_DEFINITIONS])


CLASSES = ("class_declaration", "abstract_class_declaration", "interface_declaration")
FUNCTIONS = ("function_declaration", "generator_function_declaration")
TYPES = ("type_alias_declaration", "enum_declaration")
VALUES = ("lexical_declaration", "variable_declaration")
MEMBERS = ("method_definition", "method_signature", "abstract_method_signature")


def _script(root: Node, source: bytes) -> list[Definition]:
    """JavaScript and TypeScript: functions, classes, interfaces, types and enums, exported or
    not; exported constants; a top-level constant whose value is a function is a function."""
    found = []
    for statement in root.named_children:
        exported = statement.type == "export_statement"
        node = statement.child_by_field_name("declaration") if exported else statement
        if node is None:
            continue
        name = _text(node.child_by_field_name("name"), source)
        if node.type in FUNCTIONS:
            found.append(Definition("function", name, _header(node, source)))
        elif node.type in CLASSES:
            found.append(Definition("class", name, _header(node, source), _script_members(node, source)))
        elif node.type in TYPES:
            found.append(Definition("type", name, one_line(_text(node, source).split("{")[0].split("=")[0])))
        elif node.type in VALUES:
            found += _script_values(node, source, exported)
    return found


def _script_members(node: Node, source: bytes) -> tuple[str, ...]:
    body = node.child_by_field_name("body")
    names = [
        _text(member.child_by_field_name("name"), source)
        for member in (body.named_children if body is not None else ())
        if member.type in MEMBERS
    ]
    return tuple(names[:MAX_DEFINITIONS])


def _script_values(node: Node, source: bytes, exported: bool) -> list[Definition]:
    found = []
    keyword = _text(node.children[0], source) if node.children else "const"
    for declarator in node.named_children:
        if declarator.type != "variable_declarator":
            continue
        name_node, value = declarator.child_by_field_name("name"), declarator.child_by_field_name("value")
        if name_node is None or name_node.type != "identifier":
            continue  # a destructuring pattern
        name = _text(name_node, source)
        if value is not None and value.type in ("arrow_function", "function_expression", "function"):
            params = _text(
                value.child_by_field_name("parameters") or value.child_by_field_name("parameter"), source
            )
            found.append(Definition("function", name, one_line(f"{keyword} {name} = ({params.strip('()')})")))
        elif exported:
            found.append(Definition("constant", name, one_line(f"{keyword} {name}")))
    return found
