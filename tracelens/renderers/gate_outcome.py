"""Gate outcomes as terminal lines, JSON, JUnit XML and a Markdown step summary (formatting only)."""

from __future__ import annotations

import textwrap
import xml.etree.ElementTree as ET

import click

from ..gating import GateResult, RuleOutcome

_MARK = {"pass": "PASS", "fail": "FAIL", "skip": "SKIP"}
_COLOR = {"pass": "green", "fail": "red", "skip": "yellow"}


def _limit(rule: RuleOutcome) -> str:
    if rule.rule.startswith("min-"):
        return f"≥ {rule.limit:g}"
    if rule.rule.startswith("max-"):
        return f"≤ {rule.limit:g}"
    return str(rule.limit).lower() if isinstance(rule.limit, bool) else str(rule.limit)


def _where(rule: RuleOutcome) -> str:
    if rule.worst_rank is None:
        return ""
    step = "" if rule.worst_step is None else f" step {rule.worst_step}"
    return f"rank {rule.worst_rank}{step}"


def verdict(result: GateResult) -> str:
    failed = len(result.failed)
    return f"FAILED ({failed} of {len(result.rules)} rules)" if failed else f"passed ({len(result.rules)} rules)"


def text(result: GateResult, *, color: bool = False, width: int | None = None) -> str:
    """One line per rule, then the notes and the verdict; long messages wrap at ``width`` under their
    column (or, when that column leaves too little room, under the rule)."""
    rule_w = max((len(r.rule) for r in result.rules), default=0)
    lines = []
    for r in result.rules:
        lead = f"{_MARK[r.status]}  {r.rule:<{rule_w}}  {_limit(r):<8}  "
        body = _wrap(lead + r.message, width, " " * (len(lead) if width and width - len(lead) >= 30 else 6))
        if color:
            body = click.style(_MARK[r.status], fg=_COLOR[r.status], bold=True) + body[len(_MARK[r.status]):]
        lines.append(body)
    lines += [_wrap(f"note: {n}", width, "      ") for n in result.notes]
    base = f", baseline {result.baseline}" if result.baseline else ""
    head = verdict(result)
    tail = _wrap(f"gate: {head} — {result.input} ({result.aggregate} over steps, per rank{base})", width, "      ")
    if color:
        tail = "gate: " + click.style(head, fg="red" if result.failed else "green", bold=True) + tail[6 + len(head):]
    lines.append(tail)
    return "\n".join(lines) + "\n"


def _wrap(line: str, width: int | None, indent: str) -> str:
    if not width or len(line) <= width:
        return line
    return textwrap.fill(line, width, subsequent_indent=indent, break_on_hyphens=False)


def json(result: GateResult) -> str:
    return result.to_json().decode() + "\n"


def junit(result: GateResult) -> bytes:
    """JUnit XML: one testcase per rule x rank (one per rule when it has no ranks), failures carry the
    message, skipped rules are <skipped/>."""
    cases = []
    for r in result.rules:
        for o in r.ranks or [None]:
            status = o.status if o else r.status
            cases.append((r, f"rank {o.rank}" if o else "all ranks", status, o.message if o else r.message))
    failures = sum(c[2] == "fail" for c in cases)
    skipped = sum(c[2] == "skip" for c in cases)
    counts = {"tests": str(len(cases)), "failures": str(failures), "errors": "0", "skipped": str(skipped)}
    root = ET.Element("testsuites", name="tracelens gate", **counts)
    suite = ET.SubElement(root, "testsuite", name="tracelens.gate", time="0", **counts)
    props = ET.SubElement(suite, "properties")
    for key, value in (("input", result.input), ("aggregate", result.aggregate),
                       ("baseline", result.baseline or "")):
        ET.SubElement(props, "property", name=key, value=value)
    for rule, name, status, message in cases:
        case = ET.SubElement(suite, "testcase", classname=f"tracelens.gate.{rule.rule}", name=name, time="0")
        if status == "fail":
            node = ET.SubElement(case, "failure", message=message, type=rule.rule)
            node.text = f"{rule.description}: limit {_limit(rule)}\n{message}"
        elif status == "skip":
            ET.SubElement(case, "skipped", message=message)
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(result: GateResult) -> str:
    """A section for a CI step summary or a PR comment."""
    icon = {"pass": "✅", "fail": "❌", "skip": "⏭️"}
    lines = [f"### tracelens gate: {icon['fail'] if result.failed else icon['pass']} {verdict(result)}", "",
             f"Input `{result.input}`, {result.aggregate} over each rank's steps"
             + (f", baseline `{result.baseline}`" if result.baseline else "") + ".", "",
             "| | rule | limit | worst | detail |", "|---|---|---|---|---|"]
    for r in result.rules:
        lines.append(f"| {icon[r.status]} | `{r.rule}` | {_cell(_limit(r))} | {_where(r)} | {_cell(r.message)} |")
    if result.notes:
        lines += [""] + [f"- {_cell(n)}" for n in result.notes]
    return "\n".join(lines) + "\n\n"
