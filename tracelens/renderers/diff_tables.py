"""``tracelens diff`` as text (rich), Markdown or JSON, and the rows and lines the dashboard's compare view
shows: the Diff's numbers as they are, never recomputed."""

from __future__ import annotations

import io

from ..contract.two_runs import Diff
from .common import cut, kernel_name, ms
from .markdown import table as md_table

FORMATS = ("text", "markdown", "json")
SIDE_HEADERS = ("", "step ms", "ranks", "world", "steps", "device")
CULPRIT_HEADER = "culprit"
CAUSE_HEADERS = ("cause", "before ms", "after ms", "predicted saving ms")
CHANGES_TITLE = "what changed most, per step (mean over ranks)"
CHANGE_HEADERS = ("kind", "name", "before ms", "after ms", "change ms", "count before", "count after")
# Each table's columns of numbers, aligned right in the text and the Markdown alike (the words left).
SIDE_RIGHT = ("step ms", "ranks", "world", "steps")
CAUSE_RIGHT = ("before ms", "after ms", "predicted saving ms")
CHANGE_RIGHT = ("before ms", "after ms", "change ms", "count before", "count after")


def render_diff(diff: Diff, fmt: str, *, color: bool = False, width: int = 120) -> str:
    if fmt == "json":
        return diff.to_json().decode() + "\n"
    if fmt == "markdown":
        return _markdown(diff)
    if fmt == "text":
        return _text(diff, color, width)
    raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")


def side_rows(d: Diff, names: tuple[str, str] = ("before", "after"), *, culprit: bool = False
              ) -> list[list[str]]:
    """The SIDE_HEADERS row of each run (``culprit``: and a CULPRIT_HEADER cell)."""
    return [[name, ms(s.step_ns), str(s.ranks), "?" if s.world_size is None else str(s.world_size), str(s.steps),
             s.mode] + ([_culprit(s)] if culprit else []) for name, s in zip(names, (d.before, d.after))]


def _culprit(side) -> str:
    return "—" if side.culprit is None else f"rank {side.culprit.rank} ({side.culprit.reason})"


def verdicts(d: Diff, names: tuple[str, str] = ("before", "after")) -> list[str]:
    return [f"{name}'s verdict: {s.headline}" for name, s in zip(names, (d.before, d.after))]


def _saving(c) -> str:
    """A CauseChange's or the Prediction's saving, with its interval where it has one."""
    if c.predicted_ns is None:
        return "—"
    if c.predicted_low_ns == c.predicted_high_ns:
        return ms(c.predicted_ns)
    return f"{ms(c.predicted_ns)} ({ms(c.predicted_low_ns)}–{ms(c.predicted_high_ns)})"


def cause_rows(d: Diff) -> list[list[str]]:
    return [[c.cause, ms(c.before_ns), ms(c.after_ns), _saving(c)] for c in d.causes]


def prediction_line(d: Diff) -> str:
    """The prediction checked, as one line: what BEFORE predicted, what AFTER shows, whether it held."""
    p = d.prediction
    if p is None:
        return "no prediction: no cause of BEFORE's verdict got smaller"
    observed = f"observed {ms(p.observed_ns)} ms"
    if p.predicted_ns is None:
        return f"{p.cause}: no prediction: {p.note or 'BEFORE made none'}; {observed}"
    return (f"{p.cause}: predicted {_saving(p)} ms, {observed}: "
            + ("the prediction held" if p.held else "the prediction did not hold"))


_KERNELS = ("compute", "comm")


def change_rows(d: Diff, name_width: int) -> list[list[str]]:
    # Only a kernel's name is a C++ signature to shorten; an op's or a collective's is cut as it is.
    return [[c.kind, kernel_name(c.name, name_width) if c.kind in _KERNELS else cut(c.name, name_width),
             ms(c.before_ns), ms(c.after_ns), f"{c.change_ns / 1e6:+,.3f}", f"{c.before_count:g}", f"{c.after_count:g}"]
            for c in d.changes]


def labels(d: Diff, names: tuple[str, str] = ("before", "after")) -> list[str]:
    """Where each run was read from, the labels aligned."""
    width = max(len(n) for n in names) + 1
    return [f"{name + ':':<{width}} {s.label}" for name, s in zip(names, (d.before, d.after))]


def _text(d: Diff, color: bool, width: int) -> str:
    # lazy: rich (and the text renderer's layouts), for the text format only
    from rich.console import Console  # lazy: as above
    from rich.text import Text  # lazy: as above

    from .text import fit, header, new_table  # lazy: as above

    buf = io.StringIO()
    con = Console(file=buf, width=width, color_system="standard" if color else None, force_terminal=color,
                  no_color=False if color else None, highlight=False, emoji=False)
    con.print(Text.assemble(("diff", "bold"), ": ", (d.summary, "bold")))
    for line in labels(d):
        con.print(Text(line))

    def table(headers, rows, right, wrap=()):
        def build(layout):
            t = new_table(layout)
            for h in headers:
                t.add_column(header(h, layout), justify="right" if h in right else "left", no_wrap=h not in wrap)
            for row in rows(layout):
                t.add_row(*row)
            return [t]
        return fit(con, width, build)[1][0]

    con.print(table(SIDE_HEADERS, lambda lay: side_rows(d), SIDE_RIGHT))
    for line in verdicts(d):
        con.print(Text(line))
    if d.causes:
        con.print(table(CAUSE_HEADERS, lambda lay: cause_rows(d), CAUSE_RIGHT))
    if d.changes:
        con.print(Text(CHANGES_TITLE, style="bold"))
        con.print(table(CHANGE_HEADERS, lambda lay: change_rows(d, 24 if lay.tight else 60), CHANGE_RIGHT))
    for note in d.notes:
        con.print(Text(f"note: {note}"))
    return buf.getvalue()


def _words(headers: tuple, right: tuple) -> tuple:
    return tuple(h for h in headers if h not in right)


def _markdown(d: Diff) -> str:
    out = ["# tracelens diff", "", f"**{d.summary}**", ""]
    out += [f"- {line.replace('  ', ' ')}" for line in labels(d)] + [""]
    out += md_table(SIDE_HEADERS, side_rows(d), _words(SIDE_HEADERS, SIDE_RIGHT)) + [""]
    out += [f"- {line}" for line in verdicts(d)] + [""]
    if d.causes:
        out += md_table(CAUSE_HEADERS, cause_rows(d), _words(CAUSE_HEADERS, CAUSE_RIGHT)) + [""]
    if d.changes:
        out += [f"## {CHANGES_TITLE.capitalize()}", ""]
        out += md_table(CHANGE_HEADERS, [[f"`{r[1]}`" if i == 1 else r[i] for i in range(len(r))]
                                          for r in change_rows(d, 80)], _words(CHANGE_HEADERS, CHANGE_RIGHT)) + [""]
    out += [f"> note: {n}" for n in d.notes]
    return "\n".join(out).rstrip() + "\n"
