"""The repository map (core/outline.py, core/refgraph.py, core/codemap.py, repo/repomap.py): the
definitions found per language, the ranking, the byte budget whatever the input, the bounds on the
work, and the reading of a commit through the hardened git, cached per commit."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from helpers import sh
from hypothesis import given, settings
from hypothesis import strategies as st

from session_scheduler.core import codemap
from session_scheduler.core.codemap import RepoMap, SourceFile, inline_code, make_map, render, to_read
from session_scheduler.core.errors import GitError
from session_scheduler.core.outline import Definition, Outliner, language_of, one_line
from session_scheduler.guard import safe_git
from session_scheduler.repo import repomap
from session_scheduler.repo.repomap import DEFAULT_BUDGET, build, cached

PYTHON = '''"""A module."""
import os

LIMIT = 10
name = "not a constant"


class Store(Base):
    """Keeps things."""

    def put(self, key, value):
        pass

    @property
    def size(self) -> int:
        return 0


@cache
async def fetch(url: str,
                timeout: float = 1.0) -> bytes:  # a comment
    return b""


def _private():
    pass
'''

SCRIPT = """import { x } from './x.js';
export const API_URL = 'https://example.invalid';
const local = 1;
export const handler = async (event) => event;
function helper(a, b) { return a + b; }
export default function main() {}
export class Widget extends Base {
  render() {}
  static create() {}
}
"""

TYPESCRIPT = """export interface Shape { area(): number; }
export type Id = string;
export enum Color { Red }
export abstract class Base<T> implements Shape { abstract area(): number; name(): string { return ''; } }
export function make<T>(a: T): T { return a; }
"""


def outline(path: str, text: str) -> tuple[Definition, ...]:
    lang = language_of(path)
    assert lang is not None
    return Outliner().outline(lang.grammar, text).definitions


def headers(definitions: tuple[Definition, ...]) -> list[str]:
    return [d.header for d in definitions]


def test_python_definitions_are_classes_functions_and_constants() -> None:
    found = outline("pkg/store.py", PYTHON)
    assert headers(found) == [
        "LIMIT = 10",
        "class Store(Base)",
        "async def fetch(url: str, timeout: float = 1.0) -> bytes",
        "def _private()",
    ]
    assert [d.kind for d in found] == ["constant", "class", "function", "function"]
    assert found[1].members == ("put", "size")


def test_javascript_definitions_are_functions_classes_and_exported_constants() -> None:
    found = outline("web/app.js", SCRIPT)
    assert [(d.kind, d.name) for d in found] == [
        ("constant", "API_URL"),
        ("function", "handler"),
        ("function", "helper"),
        ("function", "main"),
        ("class", "Widget"),
    ]
    assert found[-1].header == "class Widget extends Base"
    assert found[-1].members == ("render", "create")
    assert found[2].header == "function helper(a, b)"


def test_typescript_definitions_include_interfaces_types_and_enums() -> None:
    found = outline("src/shape.ts", TYPESCRIPT)
    assert [(d.kind, d.name) for d in found] == [
        ("class", "Shape"),
        ("type", "Id"),
        ("type", "Color"),
        ("class", "Base"),
        ("function", "make"),
    ]
    assert found[0].members == ("area",)
    assert found[3].members == ("area", "name")
    assert outline("src/view.tsx", "export function View() { return <div/>; }\n")[0].name == "View"


def test_other_languages_by_a_line_pattern_or_by_name_only() -> None:
    go = outline("cmd/main.go", "package main\n\nfunc (s *Server) Serve() {\n}\n\ntype Server struct {\n}\n")
    assert [(d.kind, d.name) for d in go] == [("function", "Serve"), ("type", "Server")]
    assert outline("lib/x.c", "int main(void) { return 0; }\n") == ()
    assert language_of("README") is None and language_of(".bashrc") is None


def test_a_header_is_one_printable_line_however_the_file_writes_it() -> None:
    assert one_line("def f(\n  a,\r\n  b\x1b[2J)") == "def f( a, b [2J)"
    assert len(one_line("x" * 500)) == 100
    assert inline_code("a`b\nc") == "``a`b c``"
    assert inline_code("`x") == "`` `x ``"


def files(texts: dict[str, str]) -> list[SourceFile]:
    return [SourceFile(path, len(text.encode()), text) for path, text in texts.items()]


def test_a_file_whose_names_many_files_use_ranks_above_one_no_file_uses_and_tests_come_last() -> None:
    texts = {
        "app/lonely.py": "def unused_helper():\n    return 1\n",
        "app/core.py": "class PriceBook:\n    pass\n\n\ndef compute_total(items):\n    return 0\n",
        **{
            f"app/user_{n}.py": f"from app.core import compute_total, PriceBook\n\n\ndef run_{n}():\n"
            f"    return compute_total(PriceBook())\n"
            for n in range(3)
        },
        "tests/test_core.py": "from app import core, lonely\n\n\ndef test_it():\n"
        "    assert core.compute_total([]) == lonely.unused_helper() - 1\n",
    }
    ranked = [m.path for m in make_map(files(texts), "c" * 40).files]
    assert ranked[0] == "app/core.py"
    assert ranked.index("app/core.py") < ranked.index("app/lonely.py")
    assert ranked[-1] == "tests/test_core.py"


def test_a_name_in_a_comment_or_docstring_is_not_a_use() -> None:
    texts = {
        "a/config.py": "def configure_everything():\n    pass\n",
        "a/other.py": "def other_thing():\n    pass\n",
        **{
            f"a/prose_{n}.py": f'"""Calls configure_everything, as config says."""\n# configure_everything\n'
            f"def p{n}():\n    return other.other_thing()\n"
            for n in range(3)
        },
    }
    ranked = [m.path for m in make_map(files(texts), "c" * 40).files]
    assert ranked.index("a/other.py") < ranked.index("a/config.py")


def test_definitions_most_mentioned_elsewhere_are_shown_first() -> None:
    texts = {
        "m/lib.py": "def rarely_used():\n    pass\n\n\ndef often_used():\n    pass\n",
        "m/a.py": "from m import lib\nlib.often_used()\n",
        "m/b.py": "from m import lib\nlib.often_used()\nlib.rarely_used()\n",
        "m/c.py": "from m import lib\nlib.often_used()\n",
    }
    lib = next(m for m in make_map(files(texts), "c" * 40).files if m.path == "m/lib.py")
    assert [d.name for d in lib.definitions] == ["often_used", "rarely_used"]


def test_vendored_large_and_binary_files_are_not_parsed_and_the_map_says_so() -> None:
    big = "x = 1\n" * (codemap.MAX_FILE_BYTES // 6 + 1)
    given = [
        *files(
            {"src/main.py": "def main():\n    pass\n", "node_modules/lib/index.js": "function lib() {}\n"}
        ),
        *files({"web/app.min.js": "function a(){}", "src/big.py": big, "docs/guide.md": "# Guide\n"}),
        SourceFile("src/blob.py", 10, "\0\0binary\0"),
        SourceFile("src/unread.py", 10, None),
    ]
    repo_map = make_map(given, "c" * 40)
    assert [m.path for m in repo_map.files] == ["src/main.py"]
    assert repo_map.skipped == codemap.Skipped(vendored=2, large=1, binary=2, past_cap=0)
    text = render(repo_map)
    assert "2 files in vendored or generated folders" in text
    assert "1 source file over 200 KB" in text
    assert "2 source files that are not text" in text


def test_the_files_parsed_are_capped_sources_and_shallow_paths_first() -> None:
    listing = [(f"pkg/deep/er/m{n:04}.py", 10) for n in range(codemap.MAX_PARSED_FILES)]
    listing += [("pkg/top.py", 10), ("tests/test_a.py", 10), ("README.md", 10)]
    chosen = to_read(listing)
    assert len(chosen) == codemap.MAX_PARSED_FILES
    assert chosen[0] == "pkg/top.py" and "tests/test_a.py" not in chosen and "README.md" not in chosen
    heavy = [(f"src/m{n:03}.py", codemap.MAX_FILE_BYTES) for n in range(60)]
    assert len(to_read(heavy)) == codemap.MAX_PARSED_BYTES // codemap.MAX_FILE_BYTES
    repo_map = make_map([SourceFile(p, s, "def f():\n    pass\n") for p, s in listing], "c" * 40)
    assert repo_map.skipped.past_cap == 2
    assert "2 source files past the cap of 2,000 files or 8 MB parsed" in render(repo_map)


def test_layout_and_languages_count_files_and_bytes() -> None:
    repo_map = make_map(files({"a/x.py": "1234", "a/y.py": "12", "b/z.js": "1", "top.md": "12345"}), "c" * 40)
    assert [(f.name, f.files) for f in repo_map.layout] == [("a", 2), ("", 1), ("b", 1)]
    assert [(s.name, s.files, s.bytes) for s in repo_map.languages] == [
        ("Python", 2, 6),
        ("Markdown", 1, 5),
        ("JavaScript", 1, 1),
    ]
    text = render(repo_map)
    assert "Layout (files per top-level folder): `a/` 2, `b/` 1; 1 file at the top." in text
    assert (
        "Languages: Python 2 files (6 bytes), Markdown 1 file (5 bytes), JavaScript 1 file (1 byte)." in text
    )


PATHS = st.lists(
    st.text(alphabet=st.sampled_from("ab/_.é\n`"), min_size=1, max_size=12).map(lambda s: s + ".py"),
    max_size=12,
    unique=True,
)
BODIES = st.lists(
    st.sampled_from(
        ["def f(x):\n    pass\n", "class K:\n    def m(self): pass\n", "X = 'ü' * 3\n", "y = f()\n"]
    ),
    max_size=6,
).map("".join)


@settings(max_examples=150, deadline=None)
@given(paths=PATHS, bodies=st.lists(BODIES, min_size=12, max_size=12), budget=st.integers(0, 3_000))
def test_the_rendered_map_never_exceeds_its_budget_and_shows_a_prefix_of_the_ranking(
    paths: list[str], bodies: list[str], budget: int
) -> None:
    repo_map = make_map([SourceFile(p, len(b), b) for p, b in zip(paths, bodies, strict=False)], "d" * 40)
    text = render(repo_map, budget)
    assert len(text.encode("utf-8")) <= budget
    shown = [line.split("\n")[0] for line in re.findall(r"^- .*", text, re.M)]
    for line, mapped in zip(shown, repo_map.files, strict=False):
        assert line.startswith(f"- {inline_code(mapped.path)}")
    left = re.search(r"^([\d,]+) more files? left out", text, re.M)
    if left:
        assert int(left.group(1).replace(",", "")) == len(repo_map.files) - len(shown)


def test_at_the_default_budget_the_lowest_ranked_files_are_cut_and_counted() -> None:
    texts = {
        f"pkg/mod_{n:03}.py": "".join(f"def function_{n}_{k}(a, b):\n    pass\n" for k in range(8))
        for n in range(300)
    }
    text = render(make_map(files(texts), "e" * 40))
    assert len(text.encode()) <= DEFAULT_BUDGET == 8_000
    shown = len(re.findall(r"^- `", text, re.M))
    assert 10 < shown < 300
    assert f"{300 - shown} more files left out to fit 8,000 bytes." in text


def test_a_map_with_nothing_to_show_says_so() -> None:
    assert "no commit yet" in render(make_map((), ""))
    assert "The commit holds no files." in render(make_map((), "f" * 40))
    only_docs = render(make_map(files({"README.md": "# Hi\n"}), "f" * 40))
    assert "No source file was parsed." in only_docs


# The edge: a commit read through the hardened git.


def commit_files(project: Path, texts: dict[str, bytes]) -> str:
    project.mkdir(exist_ok=True)
    if not (project / ".git").exists():
        sh(project, "git init -q -b main")
    for path, data in texts.items():
        (project / path).parent.mkdir(parents=True, exist_ok=True)
        (project / path).write_bytes(data)
    sh(project, "git add -A && git commit -q --allow-empty -m files")
    return sh(project, "git rev-parse HEAD")


def test_build_maps_a_commit_and_not_the_work_tree(tmp_path: Path) -> None:
    project = tmp_path / "project"
    first = commit_files(project, {"app/store.py": PYTHON.encode(), "web/app.js": SCRIPT.encode()})
    (project / "app" / "store.py").write_text("def changed_in_the_work_tree():\n    pass\n")
    text = build(project, first)
    assert f"# Repository map of commit {first[:12]}" in text
    assert "class Store(Base): put, size" in text and "export class Widget" not in text
    assert "class Widget extends Base: render, create" in text
    assert "changed_in_the_work_tree" not in text
    assert build(project, "main") == text


def test_a_filter_or_textconv_the_repository_names_never_runs_and_the_blob_is_read_raw(
    tmp_path: Path,
) -> None:
    project = tmp_path / "project"
    marker = tmp_path / "ran"
    sha = commit_files(
        project,
        {"app/raw.py": b"def raw_name():\n    pass\n", ".gitattributes": b"*.py filter=evil diff=evil\n"},
    )
    command = f"sh -c 'touch {marker}; sed s/raw_name/filtered_name/'"
    for key in ("filter.evil.clean", "filter.evil.smudge", "diff.evil.textconv"):
        sh(project, f'git config {key} "{command}"')
    sh(project, "git config filter.evil.required true")
    text = build(project, sha)
    assert "def raw_name()" in text and "filtered_name" not in text
    assert not marker.exists()
    # The control: git asked for the file as a checkout would write it runs the filter.
    assert "filtered_name" in sh(project, "git cat-file --filters HEAD:app/raw.py")
    assert marker.exists()


def test_binary_and_huge_files_of_a_commit_are_skipped_and_said(tmp_path: Path) -> None:
    project = tmp_path / "project"
    sha = commit_files(
        project,
        {
            "src/ok.py": b"def fine():\n    pass\n",
            "src/blob.py": b"\x00\x01\x02 binary",
            "src/huge.py": b"# filler\n" * 30_000,
            "img/logo.png": b"\x89PNG\r\n\x1a\n\x00",
        },
    )
    (project / "src" / "link.py").symlink_to("/etc/passwd")  # a link's blob is its target's name
    sha = commit_files(project, {})
    text = build(project, sha)
    assert "link.py" not in text
    assert "1 source file over 200 KB" in text
    assert "1 source file that is not text" in text
    assert "- `src/ok.py`" in text and "src/huge.py" not in text.split("## ")[-1]


def test_a_file_name_that_is_not_utf8_is_shown_cleaned(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    with open(bytes(project) + b"/caf\xe9\n.py", "wb") as handle:
        handle.write(b"def cafe_function():\n    pass\n")
    sha = commit_files(project, {})
    text = build(project, sha)
    assert "  - def cafe_function()" in text
    entry = next(line for line in text.splitlines() if line.startswith("- `caf"))
    assert entry.isprintable() and entry.endswith(".py`")


def test_the_cache_returns_the_same_text_without_reading_the_repository_again(tmp_path: Path) -> None:
    project, cache = tmp_path / "project", tmp_path / "cache"
    sha = commit_files(project, {"a.py": b"def alpha():\n    pass\n"})
    first = cached(project, cache, "HEAD", 2_000)
    assert (cache / f"{sha}-2000.md").read_text(encoding="utf-8") == first == build(project, sha, 2_000)
    shutil.rmtree(project / ".git")  # a second build could not read anything
    assert cached(project, cache, sha, 2_000) == first
    with pytest.raises(GitError, match="no git repository"):
        cached(project, cache, sha, 3_000)  # another budget is another map


def test_an_empty_repository_and_an_empty_commit_give_a_short_map(tmp_path: Path) -> None:
    project, cache = tmp_path / "project", tmp_path / "cache"
    project.mkdir()
    sh(project, "git init -q -b main")
    text = cached(project, cache, "HEAD")
    assert text == build(project, "HEAD") and "no commit yet" in text and len(text) < 200
    assert not cache.exists()  # nothing to key it by
    sha = commit_files(project, {})
    assert "The commit holds no files." in build(project, sha)


def test_a_name_that_is_no_commit_of_a_repository_with_commits_is_an_error(tmp_path: Path) -> None:
    project = tmp_path / "project"
    commit_files(project, {"a.py": b"x = 1\n"})
    with pytest.raises(GitError, match="no commit"):
        build(project, "--output=/tmp/x")
    with pytest.raises(GitError, match="no commit"):
        build(project, "no-such-branch")


def test_a_commit_whose_tree_git_cannot_read_is_a_git_error(tmp_path: Path) -> None:
    project = tmp_path / "project"
    sha = commit_files(project, {"a.py": b"x = 1\n"})
    tree = sh(project, "git rev-parse HEAD^{tree}")
    (project / ".git" / "objects" / tree[:2] / tree[2:]).unlink()
    with pytest.raises(GitError, match="git failed"):
        build(project, sha)


def test_read_map_gives_the_pure_map(tmp_path: Path) -> None:
    project = tmp_path / "project"
    sha = commit_files(
        project, {"a.py": b"def alpha():\n    pass\n", "b.py": b"from a import alpha\nalpha()\n"}
    )
    repo_map = repomap.read_map(safe_git.open(project), sha)
    assert isinstance(repo_map, RepoMap) and repo_map.commit == sha
    assert [m.path for m in repo_map.files] == ["a.py", "b.py"]
    assert repomap.read_blobs(safe_git.open(project), []) == {}
