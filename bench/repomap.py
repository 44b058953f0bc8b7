"""Benchmark: the repository map (repo/repomap.py) of a large real repository and of a small one.

The large one is a big PyPI sdist (Django by default, another if it cannot be had), unpacked and
committed into a new git repository; the small one is this checkout at HEAD. For each it prints the
files of the commit, their bytes (all, and source code), the files parsed, the time of a cold
`build` (no cache; the median of `--runs`), the first `cached` call (build and write) and a warm
one (read back), and the bytes of the map at the default budget; then the ratios large / small.

    .venv/bin/python bench/repomap.py [--package django==5.1.4] [--runs 3] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from session_scheduler.core import codemap
from session_scheduler.core.outline import language_of
from session_scheduler.guard import safe_git
from session_scheduler.repo import repomap

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("django==5.1.4", "sympy==1.13.3", "pandas==2.2.3")
"""Large sdists, tried in order: the first that downloads is the large repository."""
GOAL_S = 5.0
"""A cold build of the large repository takes at most this long (a planning session waits for it)."""


@dataclass(frozen=True)
class Figures:
    name: str
    files: int
    bytes: int
    source_bytes: int
    parsed: int
    cold_s: list[float]
    cold_cpu_s: list[float]
    """The scheduler process's own CPU time of each cold build (git's excluded): steadier than the
    wall time on a shared machine."""
    first_cached_s: float
    warm_cached_s: float
    map_bytes: int
    shown: int


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def large_repository(workdir: Path, wanted: tuple[str, ...]) -> Path:
    """A git repository of the first sdist of `wanted` that pip downloads (kept in `workdir`)."""
    for spec in wanted:
        project = workdir / spec.replace("==", "-")
        if (project / ".git").exists():
            return project
        download = workdir / "download"
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-binary",
                ":all:",
                "--no-deps",
                spec,
                "-d",
                str(download),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        name = spec.split("==")[0].lower()
        archives = [p for p in download.glob("*") if p.name.lower().startswith(name)]
        if done.returncode or not archives:
            print(
                f"{spec}: not downloaded ({done.stderr.strip().splitlines()[-1:]}); trying the next",
                flush=True,
            )
            continue
        unpack(archives[0], project)
        git(project, "init", "-q", "-b", "main")
        git(project, "add", "-A")
        git(project, "-c", "user.name=bench", "-c", "user.email=bench@localhost", "commit", "-q", "-m", spec)
        return project
    raise SystemExit(f"none of {', '.join(wanted)} could be downloaded")


def synthetic_repository(workdir: Path, count: int) -> Path:
    """A repository of `count` small Python files in folders of 1,000, each calling another's
    function (written by `git fast-import`: no work tree)."""
    project = workdir / f"synthetic-{count}"
    if (project / ".git").exists():
        return project
    project.mkdir(parents=True)
    git(project, "init", "-q", "-b", "main")
    stream = ["commit refs/heads/main", "committer bench <bench@localhost> 0 +0000", "data 9", "synthetic"]
    for i in range(count):
        body = f"def function_{i}():\n    return function_{(i * 7919) % count}()\n"
        stream += [f"M 100644 inline pkg_{i // 1000}/module_{i}.py", f"data {len(body.encode())}", body]
    subprocess.run(
        ["git", "fast-import", "--quiet"], cwd=project, input="\n".join(stream) + "\n", text=True, check=True
    )
    return project


def unpack(archive: Path, project: Path) -> None:
    """The sdist's one top folder becomes `project`."""
    scratch = project.with_name(project.name + ".unpack")
    shutil.rmtree(scratch, ignore_errors=True)
    if archive.name.endswith(".zip"):
        with zipfile.ZipFile(archive) as z:
            z.extractall(scratch)
    else:
        with tarfile.open(archive) as t:
            t.extractall(scratch, filter="data")
    (top,) = scratch.iterdir()
    top.rename(project)
    scratch.rmdir()


def measure(name: str, project: Path, runs: int, cache: Path) -> Figures:
    sha = git(project, "rev-parse", "HEAD")
    cold, cpu = [], []
    for _ in range(runs):
        start, start_cpu = time.perf_counter(), time.process_time()
        text = repomap.build(project, sha)
        cold.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    shutil.rmtree(cache, ignore_errors=True)
    start = time.perf_counter()
    first = repomap.cached(project, cache, sha)
    first_s = time.perf_counter() - start
    start = time.perf_counter()
    warm = repomap.cached(project, cache, sha)
    warm_s = time.perf_counter() - start
    assert first == warm == text, "the cache gave another text"
    repo_map = repomap.read_map(safe_git.open(project), sha)
    listing = git(project, "ls-tree", "-r", "-l", "-z", sha).split("\0")
    sizes = {e.split("\t", 1)[1]: int(e.split()[3]) for e in listing if e and e.split()[1] == "blob"}
    source = sum(size for path, size in sizes.items() if (lang := language_of(path)) and lang.code)
    return Figures(
        name,
        repo_map.total_files,
        repo_map.total_bytes,
        source,
        len(repo_map.files) + repo_map.skipped.binary,
        cold,
        cpu,
        first_s,
        warm_s,
        len(text.encode("utf-8")),
        text.count("\n- "),
    )


def machine() -> str:
    return f"{os.cpu_count()} cores, {platform.system()} {platform.release()}, Python {platform.python_version()}"


def report(large: Figures, small: Figures) -> str:
    """A Markdown table of both repositories' figures, with the ratio large / small where it tells."""
    rows: list[tuple[str, Callable[[Figures], float], str, bool]] = [
        ("files in the commit", lambda f: f.files, "{:,.0f}", True),
        ("bytes in the commit (MB)", lambda f: f.bytes / 1e6, "{:.1f}", True),
        ("source code bytes (MB)", lambda f: f.source_bytes / 1e6, "{:.1f}", True),
        ("files parsed", lambda f: f.parsed, "{:,.0f}", True),
        ("cold `build`, median (s)", lambda f: statistics.median(f.cold_s), "{:.2f}", True),
        ("cold `build`, slowest (s)", lambda f: max(f.cold_s), "{:.2f}", False),
        (
            "cold `build`, CPU of the process, median (s)",
            lambda f: statistics.median(f.cold_cpu_s),
            "{:.2f}",
            True,
        ),
        ("first `cached`: build and write (s)", lambda f: f.first_cached_s, "{:.2f}", False),
        ("warm `cached` (ms)", lambda f: f.warm_cached_s * 1000, "{:.2f}", False),
        (f"map bytes (budget {codemap.DEFAULT_BUDGET:,})", lambda f: f.map_bytes, "{:,.0f}", False),
        ("files shown in the map", lambda f: f.shown, "{:,.0f}", False),
    ]
    lines = [f"| | {large.name} | {small.name} | ratio |", "|---|---:|---:|---:|"]
    for label, value, form, ratio in rows:
        times = f"{value(large) / value(small):.1f}x" if ratio and value(small) else ""
        lines.append(f"| {label} | {form.format(value(large))} | {form.format(value(small))} | {times} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--package", action="append", help="a large sdist (name==version); repeat for fallbacks"
    )
    parser.add_argument(
        "--runs", type=int, default=3, help="cold builds per repository (the median is shown)"
    )
    parser.add_argument(
        "--synthetic", type=int, default=100_000, help="files of a generated repository (0: none)"
    )
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "repomap-bench")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    large_project = large_repository(args.workdir, tuple(args.package or PACKAGES))
    large = measure(large_project.name, large_project, args.runs, args.workdir / "cache-large")
    small = measure(
        f"this checkout ({git(ROOT, 'rev-parse', '--short', 'HEAD')})",
        ROOT,
        args.runs,
        args.workdir / "cache-small",
    )
    print(f"Machine: {machine()}; {time.strftime('%Y-%m-%d')}\n")
    print(report(large, small))
    measured = [large, small]
    if args.synthetic:
        generated = synthetic_repository(args.workdir, args.synthetic)
        huge = measure(
            f"generated, {args.synthetic:,} files", generated, args.runs, args.workdir / "cache-huge"
        )
        print(f"\n{report(huge, small)}")
        measured.append(huge)
    over = [f.name for f in measured if f.map_bytes > codemap.DEFAULT_BUDGET]
    print(f"\nEvery map stays under its budget: {'FAIL: ' + ', '.join(over) if over else 'PASS'}")
    for f in measured:
        if f is not small:
            verdict = "PASS" if max(f.cold_s) <= GOAL_S else "FAIL"
            print(
                f"A cold build of {f.name} takes at most {GOAL_S:g} s: {verdict} ({max(f.cold_s):.2f} s, slowest of {args.runs})"
            )


if __name__ == "__main__":
    main()
