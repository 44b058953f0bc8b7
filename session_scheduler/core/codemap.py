"""A bounded map of a repository's code, for a planning session: its languages, its layout, and its
source files with their definitions, the files other files refer to most first, cut to a size
budget. PURE: the files come in as values (repo/repomap.py reads them from a commit).

Ranking follows aider's repository map in spirit: a file is a node, a file that mentions a name
another file defines points at it (weighted by how telling the name is and how often it is
mentioned), and the files are ordered by PageRank over those links; tests come last, vendored and
generated folders are not read. The work is bounded as well as the text: files over
`MAX_FILE_BYTES` are not read, and at most `MAX_PARSED_FILES` files and `MAX_PARSED_BYTES` bytes
are parsed, chosen by a cheap pre-rank (`to_read`); the map says what it left out."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, replace

from session_scheduler.core import refgraph
from session_scheduler.core.humane import number, plural
from session_scheduler.core.outline import Definition, Outliner, language_of, one_line

DEFAULT_BUDGET = 8_000
"""Bytes (UTF-8) of a rendered map unless the caller says otherwise."""
MAX_FILE_BYTES = 200_000
"""A larger source file is not read (generated, or data)."""
MAX_PARSED_FILES = 2_000
MAX_PARSED_BYTES = 8_000_000
"""At most this many files and bytes are parsed (about a second of tree-sitter on 2 cores)."""

VENDORED_DIRS = frozenset(
    {"node_modules", "bower_components", "vendor", "vendored", "third_party", "third-party", "external",
     "dist", "build", "_build", "out", "target", ".next", ".nuxt", "coverage", "site-packages", ".venv",
     "venv", "__pycache__", ".git", "migrations", "generated", "__generated__", ".tox", ".mypy_cache"}
)  # fmt: skip
VENDORED_NAME = re.compile(r"\.min\.(js|css)$|\.bundle\.js$|_pb2(_grpc)?\.pyi?$|\.pb\.go$|\.generated\.\w+$")
"""Folders and file names of code a project did not write (or does not edit by hand)."""
TEST_DIRS = frozenset({"test", "tests", "__tests__", "spec", "specs", "testdata", "e2e"})
TEST_NAME = re.compile(r"^test_|_test\.\w+$|\.(test|spec)\.\w+$|^conftest\.py$|Tests?\.(java|kt|cs)$")
SHOWN_DEFINITIONS, SHOWN_MEMBERS, SHOWN_LANGUAGES, SHOWN_FOLDERS = 6, 6, 8, 12
"""What one file's entry, the languages line and the layout line show at most."""


@dataclass(frozen=True)
class SourceFile:
    """A file of the commit: its path, its size in bytes, and its text (None: not read, or not text)."""

    path: str
    size: int
    text: str | None


@dataclass(frozen=True)
class Share:
    """A language's part of the repository."""

    name: str
    files: int
    bytes: int


@dataclass(frozen=True)
class Folder:
    name: str
    """A top-level folder; "" for the files at the top."""
    files: int


@dataclass(frozen=True)
class MappedFile:
    path: str
    language: str
    test: bool
    definitions: tuple[Definition, ...]
    score: float
    """Its PageRank among the parsed files (they sum to 1)."""


@dataclass(frozen=True)
class Skipped:
    """Files not parsed, by reason."""

    vendored: int = 0
    """Any file under a vendored or generated folder or named as one (`VENDORED_DIRS`)."""
    large: int = 0
    """Source files over `MAX_FILE_BYTES`."""
    binary: int = 0
    """Source files that are not text."""
    past_cap: int = 0
    """Source files past `MAX_PARSED_FILES` or `MAX_PARSED_BYTES`."""


@dataclass(frozen=True)
class RepoMap:
    commit: str
    """The commit mapped; "" when the repository has no commit."""
    total_files: int
    total_bytes: int
    languages: tuple[Share, ...]
    """Outside vendored folders, most files first."""
    layout: tuple[Folder, ...]
    """Most files first."""
    files: tuple[MappedFile, ...]
    """The parsed source files, ranked: the most referred to first, tests after the rest."""
    skipped: Skipped


def is_vendored(path: str) -> bool:
    parts = path.split("/")
    return any(part in VENDORED_DIRS for part in parts[:-1]) or bool(VENDORED_NAME.search(parts[-1]))


def is_test(path: str) -> bool:
    parts = path.split("/")
    return any(part in TEST_DIRS for part in parts[:-1]) or bool(TEST_NAME.search(parts[-1]))


def to_read(listing: Iterable[tuple[str, int]]) -> tuple[str, ...]:
    """Which files of (path, size) to read, before anything is read: source files that are not
    vendored nor over `MAX_FILE_BYTES`, those outside tests and nearest the top first, up to
    `MAX_PARSED_FILES` files and `MAX_PARSED_BYTES` bytes."""
    candidates = sorted(
        (is_test(path), path.count("/"), path, size)
        for path, size in listing
        if _is_source(path) and not is_vendored(path) and size <= MAX_FILE_BYTES
    )
    chosen: list[str] = []
    spent = 0
    for _test, _depth, path, size in candidates:
        if len(chosen) == MAX_PARSED_FILES or spent + size > MAX_PARSED_BYTES:
            break
        chosen.append(path)
        spent += size
    return tuple(chosen)


def _is_source(path: str) -> bool:
    lang = language_of(path)
    return lang is not None and lang.code


def make_map(files: Iterable[SourceFile], commit: str) -> RepoMap:
    """The map of a commit's files (`files`: every regular file, read or not). Only what
    `to_read` names is parsed, whatever text the others come with."""
    every = sorted({f.path: f for f in files}.values(), key=lambda f: f.path)
    chosen = set(to_read((f.path, f.size) for f in every))
    languages: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    folders: Counter[str] = Counter()
    vendored = large = binary = past_cap = 0
    parsed: list[tuple[SourceFile, str, str]] = []
    for f in every:
        folders[f.path.split("/", 1)[0] if "/" in f.path else ""] += 1
        lang = language_of(f.path)
        if is_vendored(f.path):
            vendored += 1
            continue
        if lang is None:
            continue
        languages[lang.name][0] += 1
        languages[lang.name][1] += f.size
        if not lang.code:
            continue
        if f.size > MAX_FILE_BYTES:
            large += 1
        elif f.path not in chosen:
            past_cap += 1
        elif f.text is None or "\0" in f.text:
            binary += 1
        else:
            parsed.append((f, lang.name, lang.grammar))
    outliner = Outliner()
    outlines = [outliner.outline(grammar, f.text or "") for f, _name, grammar in parsed]
    ranking = refgraph.rank([f.path for f, _, _ in parsed], outlines)
    mapped = sorted(
        (MappedFile(f.path, name, is_test(f.path), _ordered(o.definitions, ranking.referrers), score)
         for (f, name, _), o, score in zip(parsed, outlines, ranking.scores, strict=True)),
        key=lambda m: (m.test, -m.score, m.path),
    )  # fmt: skip
    return RepoMap(
        commit,
        len(every),
        sum(f.size for f in every),
        tuple(
            sorted(
                (Share(k, n, b) for k, (n, b) in languages.items()),
                key=lambda s: (-s.files, -s.bytes, s.name),
            )
        ),
        tuple(Folder(name, n) for name, n in sorted(folders.items(), key=lambda item: (-item[1], item[0]))),
        tuple(mapped),
        Skipped(vendored, large, binary, past_cap),
    )


def _ordered(definitions: tuple[Definition, ...], referrers: Counter[str]) -> tuple[Definition, ...]:
    """A file's definitions, those the most files mention first, public before private (`_name`),
    else in the file's order; a class's methods public first, each name once."""

    def members(d: Definition) -> tuple[str, ...]:
        unique = dict.fromkeys(d.members)
        return tuple(sorted(unique, key=lambda m: m.startswith("_")))

    ranked = sorted(
        enumerate(definitions), key=lambda x: (-referrers[x[1].name], x[1].name.startswith("_"), x[0])
    )
    return tuple(replace(d, members=members(d)) for _, d in ranked)


def render(repo_map: RepoMap, budget: int = DEFAULT_BUDGET) -> str:
    """The map as Markdown of at most `budget` bytes (UTF-8): the files in rank order, each with
    its definitions (or, when those do not fit, its path and their count), until the next does
    not fit; then how many were left out."""
    text = _head(repo_map)
    total = len(repo_map.files)
    if total:
        text += "\n## Source files, the most referred to first (tests last)\n\n"
    used, shown = _size(text), 0
    for mapped in repo_map.files:
        tail = _size(_left_out(total - shown - 1, budget))
        block = next(
            (b for b in (_entry(mapped), _entry(mapped, short=True)) if used + _size(b) + tail <= budget),
            None,
        )
        if block is None:
            break
        text, used, shown = text + block, used + _size(block), shown + 1
    return _fit(text + _left_out(total - shown, budget), budget)


def _head(repo_map: RepoMap) -> str:
    if not repo_map.commit:
        return "# Repository map\n\nThe repository has no commit yet: there is no code to map.\n"
    head = f"# Repository map of commit {repo_map.commit[:12]}\n\n"
    if not repo_map.total_files:
        return head + "The commit holds no files.\n"
    head += (
        f"{plural(repo_map.total_files, 'file')}, {_bytes(repo_map.total_bytes)}, read from the commit "
        "(nothing run).\n"
    )
    shares = [f"{s.name} {plural(s.files, 'file')} ({_bytes(s.bytes)})" for s in repo_map.languages]
    if shares:
        head += f"\nLanguages: {_listed(shares, SHOWN_LANGUAGES, 'more language')}.\n"
    folders = [f"{inline_code(f.name + '/')} {number(f.files)}" for f in repo_map.layout if f.name]
    top = sum(f.files for f in repo_map.layout if not f.name)
    if folders:
        head += f"\nLayout (files per top-level folder): {_listed(folders, SHOWN_FOLDERS, 'more folder')}"
        head += f"; {plural(top, 'file')} at the top.\n" if top else ".\n"
    head += _skipped(repo_map.skipped)
    if not repo_map.files:
        head += "\nNo source file was parsed.\n"
    return head


def _skipped(skipped: Skipped) -> str:
    said = []
    if skipped.vendored:
        said.append(f"{plural(skipped.vendored, 'file')} in vendored or generated folders")
    if skipped.large:
        said.append(f"{plural(skipped.large, 'source file')} over {_bytes(MAX_FILE_BYTES)}")
    if skipped.binary:
        said.append(
            f"{plural(skipped.binary, 'source file')} that {'is' if skipped.binary == 1 else 'are'} not text"
        )
    if skipped.past_cap:
        said.append(
            f"{plural(skipped.past_cap, 'source file')} past the cap of {number(MAX_PARSED_FILES)} files or "
            f"{_bytes(MAX_PARSED_BYTES)} parsed (tests and the deepest folders left first)"
        )
    return f"\nNot parsed: {'; '.join(said)}.\n" if said else ""


def _entry(mapped: MappedFile, short: bool = False) -> str:
    path = f"- {inline_code(mapped.path)}"
    if not mapped.definitions:
        return path + "\n"
    if short:
        return f"{path} ({plural(len(mapped.definitions), 'definition')} not shown)\n"
    lines = [path]
    for d in mapped.definitions[:SHOWN_DEFINITIONS]:
        line = f"  - {d.header}"
        if d.members:
            line += f": {_listed([one_line(m, 40) for m in d.members], SHOWN_MEMBERS, 'more method')}"
        lines.append(line)
    if len(mapped.definitions) > SHOWN_DEFINITIONS:
        lines.append(f"  - and {plural(len(mapped.definitions) - SHOWN_DEFINITIONS, 'more definition')}")
    return "\n".join(lines) + "\n"


def inline_code(name: str) -> str:
    """A path or name as Markdown code on one line, whatever backticks it holds (CommonMark: a
    fence longer than any run of backticks inside, spaced when the name starts or ends with one)."""
    text = one_line(name, 200)
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _listed(items: list[str], shown: int, more: str) -> str:
    """The first `shown` items, then how many `more` there are (`more`: "more language")."""
    rest = len(items) - shown
    return ", ".join(items[:shown]) + (f" and {plural(rest, more)}" if rest > 0 else "")


def _left_out(count: int, budget: int) -> str:
    if not count:
        return ""
    return f"\n{plural(count, 'more file')} left out to fit {number(budget)} bytes.\n"


def _bytes(n: int) -> str:
    for unit, size in (("MB", 1_000_000), ("KB", 1_000)):
        if n >= size:
            return f"{n / size:.1f} {unit}".replace(".0 ", " ")
    return plural(n, "byte")


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def _fit(text: str, budget: int) -> str:
    """`text` if it fits `budget` bytes, else its longest prefix of whole lines that does (of
    whole characters when not even one line does)."""
    data = text.encode("utf-8")
    if len(data) <= budget:
        return text
    cut = data[: max(budget, 0)].decode("utf-8", "ignore")
    return cut[: cut.rfind("\n") + 1] if "\n" in cut else cut
