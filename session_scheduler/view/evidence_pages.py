"""Each feature's evidence as HTML and as Markdown (pure): its gates with a red gate's output, and
each review's acceptance steps with their screenshots (inline in HTML, image links in Markdown),
snapshots (links) and the console's messages (errors marked).

Every file is linked by its path relative to the folder the report is written in (`base`), so
the page works where it lies and nothing is fetched from anywhere else.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from html import escape
from urllib.parse import quote

from session_scheduler.core.humane import duration
from session_scheduler.view.markup import block, md
from session_scheduler.view.review_evidence import (
    LATER_ERRORS,
    Cited,
    ConsoleRead,
    FeatureEvidence,
    ReviewEvidence,
    console_lines,
)

Texts = Mapping[str, tuple[str, ...]]
"""Feature id -> its acceptance steps as its feature list says them."""
SHOT_WIDTH = 360
"""The widest a screenshot is drawn on the page (px); a click opens it whole."""

CSS = f"""
article.evidence{{background:#fff;border:1px solid #e5e7eb;border-radius:8px;padding:8px 16px;margin:12px 0}}
article.evidence h3{{margin:4px 0}}article.evidence h4{{margin:12px 0 4px}}
ul.gates li.red{{color:#b91c1c}}pre.output,pre.console{{background:#0f172a;color:#e2e8f0;padding:8px;
border-radius:6px;white-space:pre-wrap;word-break:break-word;max-height:320px;overflow:auto;font-size:12px}}
pre.console .err{{color:#fca5a5;font-weight:600}}ol.evidence-steps>li{{margin:8px 0}}
li.step.failed>b{{color:#b91c1c}}pre.snapshot{{background:#f1f5f9;padding:8px;border-radius:6px;
white-space:pre-wrap;max-height:320px;overflow:auto;font-size:12px}}.missing{{color:#b45309}}
figure.shot{{margin:6px 0;display:inline-block}}figure.shot img{{max-width:{SHOT_WIDTH}px;height:auto;
border:1px solid #cbd5e1;border-radius:4px;display:block}}figure.shot figcaption{{font-size:12px;color:#6b7280}}
"""


def step_text(texts: Texts, feature: str, n: int) -> str:
    """What step `n` of the feature asks (as its feature list says it), or `step n`."""
    steps = texts.get(feature, ())
    return steps[n - 1] if 0 < n <= len(steps) else f"step {n}"


def link(root: str, file: str, base: str) -> str:
    """A project file's address relative to the folder the report is written in (URL-quoted)."""
    return quote(os.path.relpath(os.path.join(root, file), base).replace(os.sep, "/"))


# -- HTML -----------------------------------------------------------------------------------------


def evidence_html(
    features: tuple[FeatureEvidence, ...], texts: Texts, titles: Mapping[str, str], root: str, base: str
) -> str:
    """One block per feature: its gates, then each review's steps, screenshots and console."""
    if not features:
        return '<p id="evidence-none">No gate has run and no review has graded a step yet.</p>'
    return "".join(_feature_html(f, texts, titles.get(f.feature, ""), root, base) for f in features)


def _feature_html(f: FeatureEvidence, texts: Texts, title: str, root: str, base: str) -> str:
    gates = "".join(
        f'<li class="{"passed" if g.passed else "red"}">{escape(g.where)}: <b>{escape(g.name)}</b>'
        f"{f' ({escape(g.kind)})' if g.kind and g.kind != g.name else ''} "
        f"{'passed' if g.passed else 'red'} in {duration(g.seconds)}"
        f"{f'<pre class=output>{escape(g.output)}</pre>' if g.output else ''}</li>"
        for g in f.gates
    )
    reviews = "".join(_review_html(f.feature, r, texts, root, base) for r in f.reviews)
    return (
        f'<article class="evidence" id="evidence-{escape(f.feature)}">'
        f"<h3>{escape(f.feature)}{f': {escape(title)}' if title else ''}</h3>"
        + (f'<ul class="gates">{gates}</ul>' if gates else '<p class="note">No gate has run on it.</p>')
        + (reviews or '<p class="note">No review has graded its steps yet.</p>')
        + "</article>"
    )


def _review_html(feature: str, r: ReviewEvidence, texts: Texts, root: str, base: str) -> str:
    def cited(c: Cited | None, what: str, n: int) -> str:
        if c is None:
            return f'<span class="missing">no {what} cited</span>' if r.browser else ""
        if c.file is None:
            return f'<span class="missing">{what}: {escape(c.problem)}</span>'
        src = escape(link(root, c.file, base))
        if what == "snapshot":
            return (
                f'<details class="snapshot"><summary><a class="snapshot" href="{src}">snapshot {escape(c.name)}'
                f'</a></summary><pre class="snapshot">{escape(c.text)}</pre></details>'
            )
        alt = escape(f"Screenshot of step {n}: {step_text(texts, feature, n)}")
        return (
            f'<figure class="shot"><a href="{src}"><img class="evidence" src="{src}" alt="{alt}"></a>'
            f"<figcaption>{escape(c.name)}</figcaption></figure>"
        )

    steps = "".join(
        f'<li value="{s.step}" class="step {"passed" if s.passed else "failed"}"><b>{"passed" if s.passed else "failed"}</b>: '
        f"{escape(step_text(texts, feature, s.step))}"
        f"{f'<br><small>{escape(s.evidence)}</small>' if s.evidence else ''}"
        f"<br>{cited(s.screenshot, 'screenshot', s.step)} {cited(s.snapshot, 'snapshot', s.step)}</li>"
        for s in r.steps
    )
    missing = "".join(f"<li>{escape(m)}</li>" for m in r.missing)
    return (
        f'<section class="review" id="review-{r.review_id}"><h4>Review #{r.review_id} {escape(r.verdict)}'
        f"{f' (session {r.session})' if r.session is not None else ''}</h4>"
        + (f'<ol class="evidence-steps">{steps}</ol>' if steps else "")
        + "".join(_console_html(c, root, base) for c in r.console)
        + (f'<ul class="missing">{missing}</ul>' if missing else "")
        + "</section>"
    )


def console_shown(c: ConsoleRead) -> tuple[list[tuple[bool, str]], str]:
    """The lines of a console read the report shows (each marked when it reports an error): its
    first lines, then, when it was cut, a line saying so and the error lines past the cut; and
    how many error lines it has, in words."""
    lines = console_lines(c.text)
    if c.left_out:
        among = "; the error lines among them:" if c.later_errors else ""
        lines += [(False, f"… {c.left_out} more characters in the file{among}")]
        lines += [(True, line) for line in c.later_errors]
    errors = sum(err for err, _ in lines)
    capped = " or more" if len(c.later_errors) >= LATER_ERRORS else ""
    return lines, f"{errors}{capped} error line{'' if errors == 1 else 's'}"


def _console_html(c: ConsoleRead, root: str, base: str) -> str:
    lines, errors = console_shown(c)
    body = "\n".join(f'<span class="err">{escape(t)}</span>' if err else escape(t) for err, t in lines)
    return (
        f'<details class="console" open><summary>Console: <a href="{escape(link(root, c.file, base))}">'
        f'{escape(c.name)}</a>, {errors}</summary><pre class="console">{body}</pre></details>'
    )


# -- Markdown -------------------------------------------------------------------------------------


def evidence_markdown(
    features: tuple[FeatureEvidence, ...], texts: Texts, titles: Mapping[str, str], root: str, base: str
) -> list[str]:
    if not features:
        return ["No gate has run and no review has graded a step yet."]
    lines: list[str] = []
    for f in features:
        title = titles.get(f.feature, "")
        lines += ["", f"#### {md(f.feature)}{': ' + md(title) if title else ''}", ""]
        lines.append(
            "Gates: "
            + (
                "; ".join(
                    f"{md(g.where)}: {md(g.name)} {'passed' if g.passed else 'red'} in {duration(g.seconds)}"
                    for g in f.gates
                )
                or "none has run"
            )
        )
        for g in f.gates:
            if g.output:
                lines += ["", f"{md(g.name)} ({md(g.where)}), the end of its output:", "", *block(g.output)]
        for r in f.reviews:
            lines += _review_markdown(f.feature, r, texts, root, base)
    return lines


def _review_markdown(feature: str, r: ReviewEvidence, texts: Texts, root: str, base: str) -> list[str]:
    def cited(c: Cited | None, what: str, n: int) -> str:
        if c is None:
            return f" (no {what} cited)" if r.browser else ""
        if c.file is None:
            return f" ({what}: {md(c.problem)})"
        target = link(root, c.file, base)
        return f" ![step {n}]({target})" if what == "screenshot" else f" [snapshot {md(c.name)}]({target})"

    session = f" (session {r.session})" if r.session is not None else ""
    lines = ["", f"Review #{r.review_id} {md(r.verdict)}{session}:", ""]
    lines += [
        f"- step {s.step} {'passed' if s.passed else '**failed**'}: {md(step_text(texts, feature, s.step))}"
        + (f" ({md(s.evidence)})" if s.evidence else "")
        + cited(s.screenshot, "screenshot", s.step)
        + cited(s.snapshot, "snapshot", s.step)
        for s in r.steps
    ]
    lines += [f"- missing: {md(m)}" for m in r.missing]
    for c in r.console:
        shown, errors = console_shown(c)
        lines += ["", f"Console ([{md(c.name)}]({link(root, c.file, base)}), {errors}):", ""]
        lines += block("\n".join(line for _, line in shown))
    return lines
