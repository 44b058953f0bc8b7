"""The Bash policy: what the OS sandbox cannot see, because it happens inside the project.

The sandbox (sandbox.py) confines every Bash command, git included, and whatever interpreter or
script it starts, to the project; it keeps `.git/hooks`, `.git/config`, `.git/info` and the
scheduler's files read-only (the rest of `.git` is written by the agent's git). What is left is
decided here, for each command before it runs (the PreToolUse hook in agent.py), as a pure
function of the command and the session's context:

- git: the role's git commands from the policy table (a role that may not change a branch
  cannot commit on it, merge into it, reset or move it; REVIEW merges only the branch under
  review and FIX only `main`), no git option, environment variable or alias that runs code or
  leaves the project (`-c`, `-C` out of it, `--exec-path`, `--upload-pack`, `core.hooksPath`,
  `GIT_*` set before it, exported or not, ...), and only literal arguments;
- the scheduler's files and `.git/hooks`, `.git/config`: no command names them, except a plain
  reader such as `cat` or `grep` (redirections and interpreters' code included);
- `rm -r` of the project itself or above;
- what cannot be seen: a command the shell parser cannot parse, a command name built at run
  time (`$CMD`, `$(...)`), `eval` or `sh -c` of a string built at run time.

Commands are parsed with tree-sitter-bash; wrappers (`env`, `timeout`, `nohup`, `xargs`,
`find -exec`, `sh -c '...'`, ...) are looked through, to any depth the parser can see.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import tree_sitter_bash
from tree_sitter import Language, Node, Parser

from session_scheduler.core.config import SessionType
from session_scheduler.core.layout import SCHEDULER_FILES
from session_scheduler.core.machine import WorkItem
from session_scheduler.core.policy import policy

_PARSER = Parser(Language(tree_sitter_bash.language()))
UNPARSABLE = frozenset({"Cn", "Co", "Cs", "Cc"})
"""Unicode categories refused before parsing (unassigned, private use, surrogates, control
characters but tab and newline): with them tree-sitter-bash 0.23 to 0.25 can read out of
bounds and kill the process (found by the property test). No real command needs them."""


def _unparsable(char: str) -> bool:
    return char not in "\t\n\r" and unicodedata.category(char) in UNPARSABLE


MAX_DEPTH = 4
"""How deep `sh -c '...'` and `eval` strings are parsed before a command is refused as unseen."""

GIT_INTERNALS = (".git/hooks", ".git/config")
PROTECTED = (*SCHEDULER_FILES, *GIT_INTERNALS)
"""Paths no command may name, except a plain reader."""
_MENTION = re.compile("|".join(rf"(?<![\w.-]){re.escape(name)}(?![\w.-])" for name in PROTECTED).encode())
READERS = frozenset(
    {
        "cat",
        "head",
        "tail",
        "less",
        "more",
        "wc",
        "grep",
        "egrep",
        "fgrep",
        "rg",
        "ls",
        "stat",
        "file",
        "diff",
        "jq",
        "sort",
        "uniq",
        "md5sum",
        "sha256sum",
    }
)
"""Commands that only read the files they name (a mention of a scheduler file is fine there)."""

SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh"})
_WRAPPERS: dict[str, tuple[frozenset[str], int]] = {
    # wrapper: (its options that take a value, how many positional words precede the command)
    "env": (frozenset({"-u", "--unset", "-C", "--chdir"}), 0),
    "timeout": (frozenset({"-s", "--signal", "-k", "--kill-after"}), 1),
    "nohup": (frozenset(), 0),
    "nice": (frozenset({"-n", "--adjustment"}), 0),
    "time": (frozenset(), 0),
    "command": (frozenset(), 0),
    "builtin": (frozenset(), 0),
    "exec": (frozenset({"-a"}), 0),
    "setsid": (frozenset(), 0),
    "stdbuf": (frozenset({"-i", "-o", "-e"}), 0),
    "ionice": (frozenset({"-c", "-n", "-p", "-P", "-u"}), 0),
    "taskset": (frozenset(), 1),
    "chrt": (frozenset(), 1),
    "flock": (frozenset({"-w", "--timeout", "-E"}), 1),
    "sudo": (frozenset({"-u", "-g", "-C", "-D", "-h", "-p", "-U"}), 0),
    "doas": (frozenset({"-u", "-C"}), 0),
    "strace": (frozenset({"-o", "-e", "-p", "-s", "-u", "-E"}), 0),
    "ltrace": (frozenset({"-o", "-e", "-p", "-s", "-u"}), 0),
    "xargs": (
        frozenset(
            {
                "-I",
                "-i",
                "-L",
                "-l",
                "-n",
                "-P",
                "-s",
                "-d",
                "-E",
                "-e",
                "-a",
                "--arg-file",
                "--delimiter",
                "--max-args",
                "--max-procs",
                "--replace",
            }
        ),
        0,
    ),
    "unbuffer": (frozenset(), 0),
}
"""Commands that run another command given in their arguments."""
_SOURCE_WRAPPERS = frozenset({"watch", "eval"})
"""Commands that run their arguments joined as shell source."""

GIT_GLOBALS = frozenset(
    {"--no-pager", "-P", "--no-optional-locks", "--literal-pathspecs", "--no-replace-objects"}
)
"""The only options allowed before a git subcommand, besides `-C` into the project (`-c`, `--git-dir`, `--exec-path`, ... are not)."""
GIT_COMMANDS = frozenset(
    [
        "add",
        "am",
        "annotate",
        "apply",
        "archive",
        "bisect",
        "blame",
        "branch",
        "bundle",
        "cat-file",
        "check-attr",
        "check-ignore",
        "checkout",
        "checkout-index",
        "cherry",
        "cherry-pick",
        "clean",
        "clone",
        "commit",
        "config",
        "count-objects",
        "describe",
        "diff",
        "diff-files",
        "diff-index",
        "diff-tree",
        "difftool",
        "fetch",
        "for-each-ref",
        "format-patch",
        "fsck",
        "gc",
        "grep",
        "help",
        "init",
        "log",
        "ls-files",
        "ls-remote",
        "ls-tree",
        "merge",
        "merge-base",
        "mergetool",
        "mv",
        "name-rev",
        "notes",
        "prune",
        "pull",
        "push",
        "range-diff",
        "rebase",
        "reflog",
        "remote",
        "reset",
        "restore",
        "rev-list",
        "rev-parse",
        "revert",
        "rm",
        "shortlog",
        "show",
        "show-branch",
        "show-ref",
        "stash",
        "status",
        "submodule",
        "switch",
        "symbolic-ref",
        "tag",
        "update-index",
        "update-ref",
        "version",
        "worktree",
    ]
)
"""git's own commands; any other word is an alias or a `git-*` program, which could run anything."""
_CODE_OPTIONS = (
    "--upload-pack",
    "--receive-pack",
    "--exec",
    "--output",
    "--open-files-in-pager",
    "--ext-diff",
    "--textconv",
    "--config",
    "--template",
    "--extcmd",
    "--tool",
)
_CODE_SETTINGS = re.compile(
    r"(?i)hookspath|sshcommand|fsmonitor|askpass|gitproxy|core\.(editor|pager)|alias\."
)
_STRATEGIES = frozenset({"ort", "recursive", "resolve", "octopus", "ours", "subtree"})
_MESSAGE_OPTIONS = frozenset({"-m", "--message"})
_MOVES_BRANCH = frozenset({"commit", "merge", "cherry-pick", "revert", "am", "pull", "rebase"})
_CREATE = {
    "checkout": frozenset({"-b", "-B", "--orphan"}),
    "switch": frozenset({"-c", "-C", "--create", "--force-create", "--orphan"}),
}
_BRANCH_WRITES = frozenset(
    {
        "-d",
        "-D",
        "--delete",
        "-m",
        "-M",
        "--move",
        "-c",
        "-C",
        "--copy",
        "-f",
        "--force",
        "-u",
        "--set-upstream-to",
        "--unset-upstream",
        "--edit-description",
    }
)
_BRANCH_LISTS = frozenset(
    {
        "-l",
        "--list",
        "--contains",
        "--no-contains",
        "--merged",
        "--no-merged",
        "--points-at",
        "-a",
        "--all",
        "-r",
        "--remotes",
        "--show-current",
    }
)
_RESET_MODES = frozenset({"--hard", "--soft", "--keep", "--merge", "--mixed"})
_REVISION = re.compile(r"^(HEAD|ORIG_HEAD|FETCH_HEAD|MERGE_HEAD|@|[0-9a-f]{7,40})([~^].*)?$")


class Refused(Exception):
    """Why a command is refused (its message is the reason the agent sees)."""


@dataclass(frozen=True)
class BashContext:
    """What the rules need besides the command: who runs it, where, on which branch."""

    role: SessionType
    work: WorkItem | None
    project: Path
    cwd: Path
    branch: str | None
    """The branch checked out when the command is asked for (None: a detached HEAD)."""
    branches: frozenset[str] = frozenset()
    """The repository's local branches."""
    allowed_git: tuple[str, ...] = ()
    refused_git: tuple[str, ...] = ()
    """The role's git command prefixes, as its permission settings allow and deny them."""


@dataclass
class _Shell:
    """What a command line changes as it goes: the working directory and the checked-out branch."""

    cwd: Path | None
    branch: str | None
    allowed_git: list[list[str]] = field(default_factory=list)
    refused_git: list[list[str]] = field(default_factory=list)


@dataclass(frozen=True)
class _Word:
    value: str | None
    """The word as the command receives it, or None when it is computed at run time."""
    node: Node


def bash_refusal(command: str, ctx: BashContext) -> str | None:
    """Why `command` is refused in `ctx`, or None when it may run."""
    shell = _Shell(
        ctx.cwd if _inside(ctx.project, ctx.cwd) else None,
        ctx.branch,
        [p.split() for p in ctx.allowed_git],
        [p.split() for p in ctx.refused_git],
    )
    try:
        _check_source(command, ctx, shell, depth=0)
    except Refused as refused:
        return str(refused)
    return None


def simple_commands(command: str) -> list[list[str]]:
    """The simple commands of a command line, in the order they appear, each as its words (the
    command's name, then its arguments, as the command receives them: quotes and escapes removed;
    a word computed at run time as written). The one splitter of command lines: tree-sitter-bash
    reads `&&`, `||`, `;`, `|`, `&`, newlines, subshells, groups and command substitutions, and
    nothing inside quotes, comments or here-documents; assignments and redirections before or
    after a command are not its words. A line the parser cannot take is one command, split at
    white space."""
    if any(_unparsable(c) for c in command):  # tree-sitter-bash's scanner can crash on these
        return [command.split()] if command.split() else []
    found = []
    for node in _walk(_PARSER.parse(command.encode()).root_node):
        name = node.child_by_field_name("name") if node.type == "command" else None
        if name is None:
            continue
        words = [name, *node.children_by_field_name("argument")]
        found.append([_literal(word) for word in words])
    return found


def _literal(node: Node) -> str:
    value = _value(node.named_children[0] if node.type == "command_name" and node.named_children else node)
    return _text(node) if value is None else value


def _check_source(source: str, ctx: BashContext, shell: _Shell, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise Refused("commands nested this deep in `sh -c` or `eval` are refused; run them directly")
    odd = next((c for c in source if _unparsable(c)), None)
    if odd is not None:  # tree-sitter-bash's scanner can crash the process on these
        raise Refused(
            f"the command contains a character the shell parser cannot take (U+{ord(odd):04X}); remove it"
        )
    data = source.encode()
    tree = _PARSER.parse(data)
    if tree.root_node.has_error:
        raise Refused("the command could not be parsed as shell; write it as plain commands, one per line")
    _check_mentions(data, tree.root_node)
    for node in _walk(tree.root_node):
        if node.type == "command":
            _check_command(node, ctx, shell, depth)
        else:
            _check_git_variable(node)


def _check_git_variable(node: Node) -> None:
    """No git variable is set for the rest of the line, where a later `git` would read it: a bare
    `GIT_DIR=...`, or `export`/`declare`/`readonly`/`local` of one (a prefix of one command is
    checked with that command)."""
    if node.type == "variable_assignment" and (node.parent is None or node.parent.type != "command"):
        name = node.child_by_field_name("name")
    elif (
        node.type == "variable_name" and node.parent is not None and node.parent.type == "declaration_command"
    ):
        name = node
    else:
        return
    if name is not None and _text(name).startswith("GIT_"):
        raise Refused(
            f"setting {_text(name)} is refused: git reads it (GIT_DIR, GIT_CONFIG_* and the like can run code or leave the project)"
        )


def _walk(node: Node) -> Iterator[Node]:
    yield node
    for child in node.children:
        yield from _walk(child)


def _text(node: Node) -> str:
    return (node.text or b"").decode(errors="replace")


def _value(node: Node) -> str | None:
    """A word's value as the command receives it, or None when the shell computes it at run time."""
    kind = node.type
    if kind in ("word", "number"):
        return re.sub(r"\\(.)", r"\1", _text(node))
    if kind == "raw_string":
        return _text(node)[1:-1]
    if kind == "string":
        parts = [_string_part(child) for child in node.named_children]
        return None if None in parts else "".join(p for p in parts if p is not None)
    if kind == "concatenation":
        values = [_value(child) for child in node.named_children]
        return None if None in values else "".join(v for v in values if v is not None)
    if kind == "command_substitution":
        return _heredoc_text(node)
    return None


def _string_part(node: Node) -> str | None:
    if node.type == "string_content":
        return re.sub(r'\\([$`"\\\n])', r"\1", _text(node))
    if node.type == "command_substitution":
        return _heredoc_text(node)
    return None


def _heredoc_text(node: Node) -> str | None:
    """The text of `$(cat <<'EOF' ... EOF)` (how agents pass a commit message) when nothing in it
    is computed; None for any other command substitution."""
    statements = node.named_children
    if len(statements) != 1 or statements[0].type != "redirected_statement":
        return None
    body = statements[0].child_by_field_name("body")
    redirects = [c for c in statements[0].named_children if c.type == "heredoc_redirect"]
    if body is None or body.type != "command" or len(body.named_children) != 1 or len(redirects) != 1:
        return None
    if _value(body.named_children[0].named_children[0]) != "cat":
        return None
    texts = [c for c in redirects[0].named_children if c.type == "heredoc_body"]
    if len(texts) != 1 or texts[0].named_children:
        return None
    return _text(texts[0])


def _check_mentions(data: bytes, root: Node) -> None:
    """No command names a scheduler file or git's hooks and config (by an argument, a redirection,
    an interpreter's code or a here-document), except as an argument of a plain reader."""
    spans = [
        (arg.start_byte, arg.end_byte)
        for node in _walk(root)
        if node.type == "command" and _command_name(node) in READERS
        for arg in node.children_by_field_name("argument")
        if _value(arg) is not None
    ]
    for match in _MENTION.finditer(data):
        if not any(a <= match.start() and match.end() <= b for a, b in spans):
            raise Refused(
                f"the command names {match.group(0).decode()}, which only the scheduler may change; "
                "read it with cat or the Read tool if you must, never write it"
            )


def _command_name(node: Node) -> str | None:
    name = node.child_by_field_name("name")
    if name is None or not name.named_children:
        return None
    value = _value(name.named_children[0])
    return PurePosixPath(value).name if value else value


def _check_command(node: Node, ctx: BashContext, shell: _Shell, depth: int) -> None:
    name = node.child_by_field_name("name")
    if name is None:
        return  # a bare assignment such as `X=1`
    words = [_Word(_value(name.named_children[0]) if name.named_children else None, name)]
    words += [_Word(_value(arg), arg) for arg in node.children_by_field_name("argument")]
    assigns = any(child.type == "variable_assignment" for child in node.children)
    _check_words(words, assigns, ctx, shell, depth)


def _check_words(words: list[_Word], assigns: bool, ctx: BashContext, shell: _Shell, depth: int) -> None:
    """Check one command given as its words, looking through wrappers."""
    head = words[0].value
    if head is None:
        raise Refused(
            f"the command name `{_text(words[0].node)}` is computed at run time; write the command itself"
        )
    program = PurePosixPath(head).name
    rest = words[1:]
    if program in _WRAPPERS:
        inner, env_assigns = _unwrap(program, rest)
        if inner:
            _check_words(inner, assigns or env_assigns, ctx, shell, depth)
        return
    if program in _SOURCE_WRAPPERS:
        _check_source(_joined(rest, program), ctx, shell, depth + 1)
        return
    if program in SHELLS:
        source = _shell_source(rest)
        if source is not None:
            _check_source(_joined(source, program), ctx, shell, depth + 1)
        return
    if program == "find":
        for inner in _find_exec(rest):
            _check_words(inner, assigns, ctx, shell, depth)
        return
    if program in ("cd", "pushd"):
        target = _cd(shell, rest)
        shell.cwd = target if target is not None and _inside(ctx.project, target) else None
    elif program == "rm":
        _check_rm(ctx, shell, rest)
    elif program == "git":
        _check_git(rest, assigns, ctx, shell)


def _joined(words: list[_Word], program: str) -> str:
    if any(word.value is None for word in words):
        raise Refused(
            f"`{program}` runs a string computed at run time, which cannot be checked; run the commands directly"
        )
    return " ".join(word.value for word in words if word.value is not None)


def _unwrap(program: str, words: list[_Word]) -> tuple[list[_Word], bool]:
    """The command a wrapper runs, and whether it sets environment variables for it."""
    takes_value, positionals = _WRAPPERS[program]
    assigns, i = False, 0
    while i < len(words):
        value = words[i].value
        if value is None:
            raise Refused(f"`{program}` is given an argument computed at run time; write it out")
        if program == "env" and (value in ("-S", "--split-string") or value.startswith("--split-string=")):
            raise Refused("`env -S` is refused; run the command directly")
        if value == "--":
            i += 1
            break
        if value.startswith("-") and value != "-":
            i += 2 if value in takes_value else 1
        elif program == "env" and "=" in value:
            assigns, i = True, i + 1
        elif positionals:
            positionals, i = positionals - 1, i + 1
        else:
            break
    if program == "xargs" and i < len(words):
        return [*words[i:], _Word(None, words[-1].node)], assigns  # xargs appends what it reads
    return words[i:], assigns


def _shell_source(words: list[_Word]) -> list[_Word] | None:
    """The `-c` string of a shell (None when it runs a script file, which runs sandboxed)."""
    for i, word in enumerate(words):
        value = word.value
        if value is None:
            raise Refused("a shell is started with arguments computed at run time; run the commands directly")
        if value.startswith("-") and not value.startswith("--") and "c" in value[1:]:
            return words[i + 1 : i + 2] if i + 1 < len(words) else []
        if not value.startswith("-"):
            return None
    return None


def _find_exec(words: list[_Word]) -> Iterator[list[_Word]]:
    """The commands `find -exec`/`-execdir`/`-ok` runs (`{}` stands for paths found at run time)."""
    i = 0
    while i < len(words):
        if words[i].value in ("-exec", "-execdir", "-ok", "-okdir"):
            end = i + 1
            while end < len(words) and words[end].value not in (";", "+"):
                end += 1
            inner = [
                _Word(None if w.value is not None and "{}" in w.value else w.value, w.node)
                for w in words[i + 1 : end]
            ]
            if inner:
                yield inner
            i = end
        i += 1


def _inside(project: Path, path: Path) -> bool:
    return path.resolve().is_relative_to(project.resolve())


def _resolve(shell: _Shell, value: str) -> Path | None:
    path = Path(value).expanduser()
    if path.is_absolute():
        return path
    return None if shell.cwd is None else shell.cwd / path


def _cd(shell: _Shell, words: list[_Word]) -> Path | None:
    targets = [w.value for w in words if w.value is None or not w.value.startswith("-")]
    if not targets:
        return Path.home()
    return None if targets[0] is None else _resolve(shell, targets[0])


def _check_rm(ctx: BashContext, shell: _Shell, words: list[_Word]) -> None:
    values = [w.value for w in words if w.value is not None]
    recursive = any(
        v == "--recursive" or (v.startswith("-") and not v.startswith("--") and set(v) & {"r", "R"})
        for v in values
    )
    for value in (v for v in values if recursive and not v.startswith("-")):
        path = _resolve(shell, value.rstrip("*") or ".")
        if path is not None and ctx.project.resolve().is_relative_to(path.resolve()):
            raise Refused(f"`rm -r {value}` would delete the whole project; delete the paths you mean")


def _check_git(words: list[_Word], assigns: bool, ctx: BashContext, shell: _Shell) -> None:
    if assigns:
        raise Refused(
            "environment variables are refused for git (GIT_DIR, GIT_CONFIG_* and the like can run code or leave the project)"
        )
    values = [word.value for word in words]
    if None in values:
        raise Refused(
            "git arguments must be written out: no $VAR or $(...) in a git command "
            "(a commit message may come from $(cat <<'EOF' ... EOF))"
        )
    args = [v for v in values if v is not None]
    if shell.cwd is None:
        raise Refused("git runs only in the project folder; cd back into it first")
    while args and args[0].startswith("-"):
        if args[0] == "-C" and len(args) > 1:  # `git -C <folder>`: only a folder inside the project
            target = _resolve(shell, args[1])
            if target is None or not _inside(ctx.project, target):
                raise Refused(f"`git -C {args[1]}` leaves the project; git runs only inside it")
            args = args[2:]
            continue
        if args[0] not in GIT_GLOBALS:
            raise Refused(
                f"the git option {args[0]} is refused (options before the git command can run code or leave the project)"
            )
        args = args[1:]
    if not args:
        return
    sub, rest = args[0], args[1:]
    if sub not in GIT_COMMANDS:
        raise Refused(f"`git {sub}` is not a git command (aliases and git-* programs are refused)")
    _check_git_options(sub, rest, ctx, shell)
    line = ["git", sub, *rest]
    if any(line[: len(p)] == p for p in shell.refused_git) or not any(
        line[: len(p)] == p for p in shell.allowed_git
    ):
        raise Refused(f"`git {sub}` with these arguments is not among {ctx.role.value}'s git commands")
    _check_branches(sub, rest, ctx, shell)


def _check_git_options(sub: str, rest: list[str], ctx: BashContext, shell: _Shell) -> None:
    skip_next = False
    for i, arg in enumerate(rest):
        if skip_next:
            skip_next = False
            continue
        if arg in _MESSAGE_OPTIONS:
            skip_next = True
            continue
        if arg.startswith(("--message=", "-m")) and arg not in ("-m",):
            continue
        if arg.startswith(_CODE_OPTIONS) or (sub == "grep" and arg.startswith("-O")):
            raise Refused(
                f"the git option {arg.split('=')[0]} is refused: it can run code or write outside the project"
            )
        if _CODE_SETTINGS.search(arg):
            raise Refused(f"`{arg}` names a git setting that runs code; it is refused")
        strategy = _strategy(sub, arg, rest[i + 1] if i + 1 < len(rest) else "")
        if strategy is not None and strategy not in _STRATEGIES:
            raise Refused(
                f"the merge strategy {strategy} is not one of git's own ({', '.join(sorted(_STRATEGIES))})"
            )
        for value in (arg, arg.split("=", 1)[1] if arg.startswith("-") and "=" in arg else ""):
            if value.startswith(("/", "~", "../")) or value == ".." or "/../" in value:
                path = _resolve(shell, value)
                if path is None or not _inside(ctx.project, path):
                    raise Refused(f"git may not read or write {value}: it is outside the project")


_STRATEGY_SHORT = frozenset({"merge", "pull", "rebase"})
"""The git commands whose `-s` names a merge strategy (elsewhere it is `--signoff`, `--no-patch`,
`--stage`, `--summary`, ...)."""
_STRATEGY_LONG = _STRATEGY_SHORT | {"cherry-pick", "revert"}
"""The git commands that take `--strategy`."""


def _strategy(sub: str, arg: str, following: str) -> str | None:
    """The merge strategy an argument of `git <sub>` names (`-s x`, `-sx`, `--strategy x`, `--strategy=x`)."""
    if sub in _STRATEGY_LONG and arg.startswith("--strategy="):
        return arg.removeprefix("--strategy=")
    if sub in _STRATEGY_LONG and arg == "--strategy":
        return following
    return (arg[2:] or following) if sub in _STRATEGY_SHORT and arg.startswith("-s") else None


_TAKES_VALUE = frozenset(
    {"-m", "--message", "-F", "--file", "-s", "--strategy", "-X", "--strategy-option", "-C", "-c"}
)
"""Options of commit and merge followed by their value (a message, a strategy, a commit)."""


def _positionals(rest: list[str], takes_value: frozenset[str] = _TAKES_VALUE) -> list[str]:
    """The arguments that are not options nor their values, up to `--`."""
    out, skip = [], False
    for arg in rest:
        if arg == "--":
            break
        if skip:
            skip = False
        elif arg in takes_value:
            skip = True
        elif not arg.startswith("-"):
            out.append(arg)
    return out


def _check_branches(sub: str, rest: list[str], ctx: BashContext, shell: _Shell) -> None:
    """The branch rules of the role's policy, following checkouts within the command line."""
    rights = policy(ctx.role)
    may_change = rights.branches_it_may_change(ctx.work, "PASS")
    role = ctx.role.value

    def changes(branch: str | None) -> None:
        if branch is not None and branch not in may_change:
            allowed = ", ".join(sorted(may_change)) or "no branch"
            raise Refused(f"{role} may not change the branch {branch} (it may change {allowed})")

    if sub in ("checkout", "switch"):
        created = _created_branch(sub, rest)
        if created is not None:
            changes(created)
            shell.branch = created
            return
        targets = _positionals(rest, frozenset())
        if "--detach" in rest or (targets and "--" not in rest and _REVISION.match(targets[0])):
            shell.branch = None
        elif "--" not in rest and targets and (targets[0] in ctx.branches or targets[0] in may_change):
            shell.branch = targets[0]
    elif sub == "branch":
        flags = [a for a in rest if a.startswith("-")]
        names: list[str | None] = list(_positionals(rest, frozenset()))
        if any(f in _BRANCH_WRITES for f in flags) or (names and not any(f in _BRANCH_LISTS for f in flags)):
            if any(f in ("-d", "-D", "--delete") for f in flags):
                touched = names
            elif any(f in ("-m", "-M", "--move", "-c", "-C", "--copy") for f in flags):
                touched = names if len(names) > 1 else [shell.branch, *names]
            else:
                touched = names[:1] or [shell.branch]  # a new or forced branch, or its upstream
            for branch in touched:
                changes(branch)
    elif sub in _MOVES_BRANCH or (sub == "reset" and _reset_moves(rest, ctx)):
        if sub == "merge" and not any(a in ("--abort", "--quit") for a in rest):
            _check_merge_source(rest, ctx)
        if sub != "merge" or not any(a in ("--abort", "--quit") for a in rest):
            changes(shell.branch)


def _created_branch(sub: str, rest: list[str]) -> str | None:
    for i, arg in enumerate(rest):
        for flag in _CREATE[sub]:
            if arg == flag:
                return rest[i + 1] if i + 1 < len(rest) else None
            if arg.startswith(flag + "=") and flag.startswith("--"):
                return arg.split("=", 1)[1]
    return None


def _reset_moves(rest: list[str], ctx: BashContext) -> bool:
    """A reset moves the branch with a mode (`--hard`, ...) or a revision; `git reset [HEAD] [--] paths` does not."""
    targets = _positionals(rest, frozenset())[:1]
    return any(a in _RESET_MODES for a in rest) or any(
        t != "HEAD" and (_REVISION.match(t) is not None or t in ctx.branches) for t in targets
    )


def _check_merge_source(rest: list[str], ctx: BashContext) -> None:
    source = "main" if policy(ctx.role).merges == "main" else getattr(ctx.work, "branch", None)
    sources = _positionals(rest)
    if sources != [source]:
        raise Refused(f"{ctx.role.value} may merge only {source}, not {' '.join(sources) or 'this'}")
