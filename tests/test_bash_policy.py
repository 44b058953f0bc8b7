"""The Bash policy, rule by rule: each row is a command, who runs it on which branch, and the verdict."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from session_scheduler.core.config import SessionType
from session_scheduler.core.machine import feature
from session_scheduler.guard.bash_policy import BashContext, bash_refusal, simple_commands
from session_scheduler.guard.security import git_rules, settings_for

T = SessionType
PROJECT = Path("/work/project")
WORK = "feature/F001"
OK = None


def context(role: SessionType, branch: str | None = WORK, cwd: Path = PROJECT) -> BashContext:
    allowed, refused = git_rules(settings_for(role))
    work = feature("F001") if role in (T.IMPLEMENT, T.REVIEW, T.FIX) else None
    return BashContext(
        role, work, PROJECT, cwd, branch, frozenset({"main", WORK, "feature/F002"}), allowed, refused
    )


HEREDOC_MESSAGE = "git commit -m \"$(cat <<'EOF'\nfeat: add /api/todos\n\nWith tests.\nEOF\n)\""
ROWS: list[tuple[SessionType, str | None, str, str | None]] = [
    # ordinary work
    (T.IMPLEMENT, WORK, "git status && git diff --stat", OK),
    # a project's CLAUDE.md is the person's file (never read by the CLI, never handed on when edited)
    (T.IMPLEMENT, WORK, "printf 'Use tabs.\\n' >> CLAUDE.md && git add CLAUDE.md docs/CLAUDE.md", OK),
    (T.IMPLEMENT, WORK, "git add -A && git commit -m 'feat: all of it'", OK),
    (T.IMPLEMENT, WORK, "git add src/app.py tests/test_app.py && git commit -m 'feat: /api/users'", OK),
    (T.IMPLEMENT, WORK, HEREDOC_MESSAGE, OK),
    (T.IMPLEMENT, "main", "git checkout -b feature/F001", OK),
    (T.IMPLEMENT, "main", "git checkout main && git checkout -b feature/F001 && git commit -m x", OK),
    (T.IMPLEMENT, WORK, "git log --oneline main..feature/F001 | head -5", OK),
    (T.IMPLEMENT, WORK, "git --no-pager log -1", OK),
    (T.IMPLEMENT, WORK, "git branch -a && git branch --show-current", OK),
    (T.IMPLEMENT, WORK, "git reset HEAD src/app.py", OK),
    (T.IMPLEMENT, WORK, "git reset --hard HEAD", OK),
    (T.IMPLEMENT, "main", "git checkout -- src/app.py", OK),
    (T.IMPLEMENT, WORK, "git show HEAD:src/app.py", OK),
    (T.IMPLEMENT, WORK, "timeout 5 nohup git commit -m x", OK),
    (T.IMPLEMENT, WORK, "rm -rf build2 dist node_modules/.cache src/*", OK),
    (T.IMPLEMENT, WORK, "find . -name '*.pyc' -exec rm {} +", OK),
    (T.IMPLEMENT, WORK, "for f in *.py; do python3 -m py_compile $f; done", OK),
    (T.IMPLEMENT, WORK, "kill $(lsof -t -i:3000) 2>/dev/null || true", OK),
    (T.IMPLEMENT, WORK, "python3 -c 'import json; json.load(open(\"progress.json\"))'", OK),
    (T.IMPLEMENT, WORK, "cat CLAUDE.md .agent_state.json | head -5; grep -c x .agent_logs/a.log", OK),
    (T.IMPLEMENT, WORK, "bash init.sh && sh -c 'npm test'", OK),
    (T.IMPLEMENT, WORK, "env NODE_ENV=test npm test", OK),
    (T.IMPLEMENT, WORK, "cd src && git status && cd ..", OK),
    (T.IMPLEMENT, WORK, "git -C /work/project status", OK),
    (T.IMPLEMENT, WORK, "git -C src log --oneline -3 && git -C /work/project/src diff --stat", OK),
    (T.IMPLEMENT, "main", "git -C /work/project checkout -b feature/F001", OK),
    (T.REVIEW, WORK, "git checkout main", OK),
    (T.REVIEW, "main", 'git merge --no-ff feature/F001 -m "Merge feature/F001"', OK),
    (T.REVIEW, "main", "git merge -s ort feature/F001", OK),
    (T.REVIEW, "main", "git reset --hard ORIG_HEAD", OK),
    (T.REVIEW, "main", "git merge --abort", OK),
    (T.FIX, WORK, "git merge main", OK),
    (T.FIX, WORK, "git merge --abort", OK),
    (T.ARCHITECTURE, "main", "git log --oneline -30 && git checkout main", OK),
    (T.INITIALIZER, "main", "git add init.sh && git commit -m init", OK),
    (T.IMPLEMENT, None, "git commit -m 'on a detached HEAD'", OK),
    # role rules from the policy table
    (T.IMPLEMENT, "main", "git commit -m x", "IMPLEMENT may not change the branch main"),
    (T.IMPLEMENT, WORK, "git checkout main && git commit -m x", "IMPLEMENT may not change the branch main"),
    (
        T.IMPLEMENT,
        WORK,
        "git switch main; git reset --hard HEAD~1",
        "IMPLEMENT may not change the branch main",
    ),
    (T.IMPLEMENT, WORK, "git checkout -b other", "IMPLEMENT may not change the branch other"),
    (T.IMPLEMENT, WORK, "git switch -c other", "IMPLEMENT may not change the branch other"),
    (T.IMPLEMENT, WORK, "git branch -f main HEAD", "IMPLEMENT may not change the branch main"),
    (T.IMPLEMENT, WORK, "git branch -D feature/F002", "IMPLEMENT may not change the branch feature/F002"),
    (T.IMPLEMENT, "main", "git branch -m renamed", "IMPLEMENT may not change the branch main"),
    (T.IMPLEMENT, WORK, "git branch -m feature/F002 x", "IMPLEMENT may not change the branch feature/F002"),
    (T.IMPLEMENT, WORK, "git branch other", "IMPLEMENT may not change the branch other"),
    (
        T.IMPLEMENT,
        WORK,
        "git checkout feature/F002 && git commit -m x",
        "IMPLEMENT may not change the branch feature/F002",
    ),
    (
        T.IMPLEMENT,
        WORK,
        "git push origin main",
        "`git push` with these arguments is not among IMPLEMENT's git commands",
    ),
    (T.IMPLEMENT, WORK, "git merge main", "`git merge` with these arguments is not among IMPLEMENT's"),
    (
        T.REVIEW,
        "main",
        "git merge --no-ff feature/F002",
        "REVIEW may merge only feature/F001, not feature/F002",
    ),
    (T.REVIEW, "main", "git merge feature/F001 feature/F002", "REVIEW may merge only feature/F001"),
    (
        T.REVIEW,
        WORK,
        "git checkout feature/F002 && git merge feature/F001",
        "REVIEW may not change the branch feature/F002",
    ),
    (T.REVIEW, "main", "git commit -m x", "not among REVIEW's git commands"),
    (T.REVIEW, "main", "git branch -D feature/F001", "not among REVIEW's git commands"),
    (T.FIX, "main", "git merge main", "FIX may not change the branch main"),
    (
        T.FIX,
        WORK,
        "git checkout main && git merge --abort && git commit -m x",
        "FIX may not change the branch main",
    ),
    (T.FIX, WORK, "git merge feature/F002", "not among FIX's git commands"),
    (
        T.ARCHITECTURE,
        "main",
        "git branch x",
        "ARCHITECTURE may not change the branch x (it may change no branch)",
    ),
    (T.ARCHITECTURE, "main", "git commit -m x", "not among ARCHITECTURE's git commands"),
    (T.INITIALIZER, "main", "git checkout -b x", "not among INITIALIZER's git commands"),
    # git options, variables and aliases that run code or leave the project
    (T.IMPLEMENT, WORK, "git -c core.hooksPath=hooks commit -m x", "the git option -c is refused"),
    (T.IMPLEMENT, WORK, "git -C /tmp status", "`git -C /tmp` leaves the project"),
    (T.IMPLEMENT, WORK, "git -C .. status", "`git -C ..` leaves the project"),
    (T.IMPLEMENT, WORK, "git -C /work/project/../other log", "leaves the project"),
    (
        T.IMPLEMENT,
        WORK,
        "git -C /work/project -c core.hooksPath=h commit -m x",
        "the git option -c is refused",
    ),
    (T.IMPLEMENT, WORK, "git -C", "the git option -C is refused"),
    (T.IMPLEMENT, WORK, "git --git-dir=/tmp/x/.git log", "the git option --git-dir=/tmp/x/.git is refused"),
    (T.IMPLEMENT, WORK, "git --exec-path=/tmp commit", "the git option --exec-path=/tmp is refused"),
    (T.IMPLEMENT, WORK, "GIT_DIR=/tmp/x git status", "environment variables are refused for git"),
    (
        T.IMPLEMENT,
        WORK,
        "env GIT_CONFIG_COUNT=1 git commit -m x",
        "environment variables are refused for git",
    ),
    (T.IMPLEMENT, WORK, "git log --output=/tmp/x", "the git option --output is refused"),
    (T.IMPLEMENT, WORK, "git diff --ext-diff", "the git option --ext-diff is refused"),
    (T.IMPLEMENT, WORK, "git commit --template=t.txt -m x", "the git option --template is refused"),
    (T.IMPLEMENT, WORK, "git log --upload-pack=x", "the git option --upload-pack is refused"),
    (
        T.IMPLEMENT,
        WORK,
        "git commit -m x --cleanup=strip core.fsmonitor=x",
        "names a git setting that runs code",
    ),
    (T.IMPLEMENT, WORK, "git add alias.x", "names a git setting that runs code"),
    (T.REVIEW, "main", "git merge -s evil feature/F001", "the merge strategy evil is not one of git's own"),
    (T.REVIEW, "main", "git merge --strategy=evil feature/F001", "the merge strategy evil"),
    (T.REVIEW, "main", "git merge -sevil feature/F001", "the merge strategy evil"),
    (T.IMPLEMENT, WORK, "git diff --no-index ~/.ssh/id_rsa a.py", "git may not read or write ~/.ssh/id_rsa"),
    (
        T.IMPLEMENT,
        WORK,
        "git diff --no-index ../../etc/passwd a.py",
        "git may not read or write ../../etc/passwd",
    ),
    (T.IMPLEMENT, WORK, "git commit -F /etc/passwd", "git may not read or write /etc/passwd"),
    (T.IMPLEMENT, WORK, "git foo", "`git foo` is not a git command"),
    (T.IMPLEMENT, WORK, 'git commit -m "$(touch /tmp/x)"', "git arguments must be written out"),
    (T.IMPLEMENT, WORK, 'git commit -m "$(cat <<EOF\n$(id)\nEOF\n)"', "git arguments must be written out"),
    (T.IMPLEMENT, WORK, "git add $FILES", "git arguments must be written out"),
    (T.IMPLEMENT, WORK, "ls | xargs git add", "git arguments must be written out"),
    (T.IMPLEMENT, WORK, "find . -exec git add {} ;", "git arguments must be written out"),
    (T.IMPLEMENT, WORK, "cd /tmp && git status", "git runs only in the project folder"),
    (T.IMPLEMENT, WORK, "cd $HOME && git status", "git runs only in the project folder"),
    # scheduler files and git internals
    (T.IMPLEMENT, WORK, "echo '{}' > .agent_state.json", "the command names .agent_state.json"),
    (T.IMPLEMENT, WORK, "cat x >> .agent_logs/events.jsonl", "the command names .agent_logs"),
    (
        T.IMPLEMENT,
        WORK,
        "python3 -c \"open('.agent_config.json','w')\"",
        "the command names .agent_config.json",
    ),
    (T.IMPLEMENT, WORK, "cp evil.sh .git/hooks/pre-commit", "the command names .git/hooks"),
    (T.IMPLEMENT, WORK, "tee -a .git/config < x", "the command names .git/config"),
    (T.IMPLEMENT, WORK, "mkdir -p .claude && cp s.json .claude/settings.json", "the command names .claude"),
    (T.IMPLEMENT, WORK, "rm -f .agent.lock .claude_settings.json", "the command names .agent.lock"),
    # what cannot be seen
    (T.IMPLEMENT, WORK, "echo 'unterminated", "could not be parsed"),
    (T.IMPLEMENT, WORK, "$(echo rm) -rf x", "the command name `$(echo rm)` is computed at run time"),
    (T.IMPLEMENT, WORK, "$CMD x", "the command name `$CMD` is computed at run time"),
    (T.IMPLEMENT, WORK, 'eval "$X"', "`eval` runs a string computed at run time"),
    (T.IMPLEMENT, WORK, 'bash -c "$X"', "`bash` runs a string computed at run time"),
    (T.IMPLEMENT, WORK, "timeout $T git status", "`timeout` is given an argument computed at run time"),
    (T.IMPLEMENT, WORK, "env -S 'git status'", "`env -S` is refused"),
    (
        T.IMPLEMENT,
        WORK,
        "bash -c 'git checkout main && git commit -m x'",
        "IMPLEMENT may not change the branch main",
    ),
    (
        T.IMPLEMENT,
        WORK,
        "eval 'git checkout main; git commit -m x'",
        "IMPLEMENT may not change the branch main",
    ),
    (T.IMPLEMENT, WORK, "watch -n 1 git checkout main", OK),
    (T.IMPLEMENT, "main", 'sh -c "sh -c \'sh -c \\"sh -c git\\"\'"', OK),
    (T.IMPLEMENT, WORK, 'sh -c \'sh -c "sh -c \\"sh -c \\\\\\"sh -c x\\\\\\"\\""\'', "nested this deep"),
    (
        T.IMPLEMENT,
        WORK,
        "xargs -I{} sh -c 'git checkout main && git commit -m x'",
        "IMPLEMENT may not change the branch main",
    ),
    (
        T.IMPLEMENT,
        WORK,
        "find . -exec sh -c 'git checkout main; git commit -m x' ;",
        "IMPLEMENT may not change the branch main",
    ),
    (
        T.IMPLEMENT,
        WORK,
        "f() { git checkout main; git commit -m x; }; f",
        "IMPLEMENT may not change the branch main",
    ),
    # deleting the project itself
    (T.IMPLEMENT, WORK, "rm -rf .", "`rm -r .` would delete the whole project"),
    (T.IMPLEMENT, WORK, "rm -r -f ./", "`rm -r ./` would delete the whole project"),
    (T.IMPLEMENT, WORK, "rm --recursive ..", "`rm -r ..` would delete the whole project"),
    (T.IMPLEMENT, WORK, "rm -Rf /", "`rm -r /` would delete the whole project"),
    (T.IMPLEMENT, WORK, "rm -rf *", "`rm -r *` would delete the whole project"),
    (T.IMPLEMENT, WORK, "cd src && rm -rf *", OK),
    (T.IMPLEMENT, WORK, "rm -f *", OK),
    (T.IMPLEMENT, WORK, "rm -rf .*", "`rm -r .*` would delete the whole project"),
    (T.IMPLEMENT, WORK, "rm -R ./*", "`rm -r ./*` would delete the whole project"),
    (T.IMPLEMENT, WORK, "rm -fr src", OK),
    (T.IMPLEMENT, WORK, "rm -f -- -r", OK),
    # more of each rule's edges
    (T.IMPLEMENT, WORK, "git checkout -b", OK),
    (T.IMPLEMENT, WORK, "git switch --create=other", "IMPLEMENT may not change the branch other"),
    (T.IMPLEMENT, WORK, "git switch --orphan other", "IMPLEMENT may not change the branch other"),
    (T.IMPLEMENT, WORK, "git checkout -B main", "IMPLEMENT may not change the branch main"),
    (T.IMPLEMENT, "main", "git reset HEAD~1", "IMPLEMENT may not change the branch main"),
    (T.IMPLEMENT, "main", "git reset --soft HEAD~1", "IMPLEMENT may not change the branch main"),
    (T.IMPLEMENT, "main", "git reset feature/F002", "IMPLEMENT may not change the branch main"),
    (T.IMPLEMENT, "main", "git reset -- src/app.py && git reset src/app.py && git reset", OK),
    (T.IMPLEMENT, WORK, "git reset main", OK),
    (T.IMPLEMENT, WORK, "git checkout --detach main && git commit -m x", OK),
    (T.IMPLEMENT, WORK, "git checkout HEAD~2 && git commit -m x", OK),
    (T.IMPLEMENT, WORK, "git checkout feature/F002 -- src/app.py && git commit -m x", OK),
    (T.REVIEW, "main", "git merge --strategy evil feature/F001", "the merge strategy evil"),
    (T.REVIEW, "main", "git merge --strategy=ours -Xours -s ort feature/F001", OK),
    (T.REVIEW, "main", "git merge", "REVIEW may merge only feature/F001, not this"),
    (T.FIX, WORK, "git merge main -m 'sync main'", OK),
    (T.FIX, WORK, "git merge --no-ff main", "not among FIX's git commands"),
    (T.IMPLEMENT, WORK, "env --split-string='git status'", "`env -S` is refused"),
    (T.IMPLEMENT, WORK, "env --split-string 'git status'", "`env -S` is refused"),
    (T.IMPLEMENT, "main", "env -- git commit -m x", "IMPLEMENT may not change the branch main"),
    (
        T.IMPLEMENT,
        "main",
        "env -i PATH=/usr/bin git commit -m x",
        "environment variables are refused for git",
    ),
    (T.IMPLEMENT, "main", "env -u HOME git commit -m x", "IMPLEMENT may not change the branch main"),
    (T.IMPLEMENT, "main", "timeout -s KILL 5 git commit -m x", "IMPLEMENT may not change the branch main"),
    (T.IMPLEMENT, "main", "nice -n 5 git commit -m x", "IMPLEMENT may not change the branch main"),
    (T.IMPLEMENT, "main", "timeout 5 nohup nice git commit -m x", "IMPLEMENT may not change the branch main"),
    (T.IMPLEMENT, WORK, "timeout 5 && env -i", OK),
    (T.IMPLEMENT, WORK, "ls | xargs -n 1 echo && ls | xargs", OK),
    (T.IMPLEMENT, WORK, "find . -execdir git add {} ;", "git arguments must be written out"),
    (T.IMPLEMENT, WORK, "find . -ok git add {} ;", "git arguments must be written out"),
    (T.IMPLEMENT, WORK, "find . -okdir git add {} ;", "git arguments must be written out"),
    (
        T.IMPLEMENT,
        "main",
        "find . -name x -exec echo \\; -exec git commit -m x +",
        "IMPLEMENT may not change the branch main",
    ),
    (T.IMPLEMENT, WORK, "find . -exec git status ;", OK),
    (T.IMPLEMENT, WORK, "cd && git status", "git runs only in the project folder"),
    (T.IMPLEMENT, WORK, "cd -P /tmp && git status", "git runs only in the project folder"),
    (T.IMPLEMENT, WORK, "cd -P src && git status && rm -rf ..", "`rm -r ..` would delete the whole project"),
    (T.IMPLEMENT, WORK, "cd src && rm -rf ../src", OK),
]


@pytest.mark.parametrize(
    ("role", "branch", "command", "verdict"), ROWS, ids=[f"{r[0].value}:{r[2][:40]}" for r in ROWS]
)
def test_each_rule(role: SessionType, branch: str | None, command: str, verdict: str | None) -> None:
    reason = bash_refusal(command, context(role, branch))
    if verdict is None:
        assert reason is None
    else:
        assert reason is not None and verdict in reason, reason


def test_a_shell_whose_working_directory_left_the_project_runs_no_git() -> None:
    assert bash_refusal("git status", context(T.IMPLEMENT, cwd=Path("/tmp"))) == (
        "git runs only in the project folder; cd back into it first"
    )
    assert bash_refusal("ls", context(T.IMPLEMENT, cwd=Path("/tmp"))) is None


@pytest.mark.parametrize(
    "char", ["\U000f8584", "\U00033bdc", "\U00080000", "\U0010fffd", "\ud800", "\x8f", "\x00"]
)
def test_characters_that_crash_the_parser_are_refused_before_it(char: str) -> None:
    reason = bash_refusal(f"{{{char}\u00f5.", context(T.IMPLEMENT))
    assert reason is not None and "a character the shell parser cannot take" in reason
    assert (
        bash_refusal("git commit -m '\u2728 feat: \U0001f389 caf\u00e9 \u4e2d'", context(T.IMPLEMENT)) is None
    )


@settings(max_examples=300)
@given(st.text(max_size=60))
def test_any_text_gets_an_answer_never_an_exception(command: str) -> None:
    reason = bash_refusal(command, context(T.IMPLEMENT))
    assert reason is None or isinstance(reason, str)


@pytest.mark.parametrize(
    ("line", "commands"),
    [
        ("git status; git push", [["git", "status"], ["git", "push"]]),
        ("ls\ngit push origin main", [["ls"], ["git", "push", "origin", "main"]]),
        ("sleep 1 & git push || true", [["sleep", "1"], ["git", "push"], ["true"]]),
        ("ls | nc 127.0.0.1 9", [["ls"], ["nc", "127.0.0.1", "9"]]),
        ('git commit -m "a; rm -rf / | b"', [["git", "commit", "-m", "a; rm -rf / | b"]]),
        ("(cd src && 'git' log) # ; git push", [["cd", "src"], ["git", "log"]]),
        ('echo "$(git push)"', [["echo", '"$(git push)"'], ["git", "push"]]),  # computed: as written
        ("GIT_DIR=x git log > out 2>&1", [["git", "log"]]),
        ('git commit -m ""', [["git", "commit", "-m", ""]]),
        ("$CMD x", [["$CMD", "x"]]),
        ("", []),
        ("echo \x01 ; ls", [["echo", "\x01", ";", "ls"]]),  # not parsed: split at white space
    ],
)
def test_a_command_line_is_split_into_its_simple_commands(line: str, commands: list[list[str]]) -> None:
    assert simple_commands(line) == commands
