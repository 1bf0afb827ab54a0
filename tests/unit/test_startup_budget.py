"""The command line's start-up budget, held by tests instead of comments.

1. Every import inside a function says why it is there and not at the top of its module: a ``# lazy:
   <reason>`` comment at the end of the import's first line, or on the comment line(s) right above it (one
   such comment covers the run of imports that follows it, blank lines between them allowed). An import whose deferral pays nothing
   belongs at the top; bench/bench_startup.py measures what one that pays saves.
2. What ``import tracelens``, ``tracelens --help`` and ``tracelens --version`` load stays within the budget
   below: none of the heavy libraries and none of the parsers or analyzers. Each runs in a fresh
   interpreter, and a module that breaks the budget is named with the chain of imports that brought it in.

No timing here (timings live in bench/, bench/RESULTS.md "Start-up"): what is loaded, not how fast.
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("tracelens", "dashboards", "collectors")      # dashboards/ and collectors/ install as tracelens.*
LAZY = re.compile(r"#\s*lazy:\s*\S")

# Not loaded before a command's own work starts. Each entry: (module, why it must wait). A module matches
# itself and its submodules.
BUDGET = [
    ("numpy", "a report forks its workers before numpy, so they import it on their own cores (forked.py)"),
    ("msgspec", "the contract's structs: after the fork, like numpy; --help needs no Report"),
    ("tracelens.contract", "msgspec (above)"),
    ("tracelens.parsers", "reading traces: a report imports them once its options are checked"),
    ("tracelens.analyzers", "numpy and the analysis: after the fork, and not at all on a warm report"),
    ("tracelens.cache", "a report's cache keys, after its options are checked; no use to --help"),
    ("rich", "only a progress bar on a terminal and the text report; click writes --help itself"),
    ("plotly", "the HTML report and the dashboard (the optional dashboard extra)"),
    ("dash", "tracelens dashboard only (the optional dashboard extra)"),
    ("dask", "--executor dask only (the optional dask extra; its import takes most of a second)"),
    ("distributed", "--executor dask only, as dask"),
    ("sqlite3", "Nsight Systems exports and the history database only"),
    ("sqlite_utils", "the history database only"),
    ("pandas", "tracelens export, Table.to_pandas and Report.to_pandas only: no report imports it"),
    ("pyarrow", "the nsys reader and tracelens export only"),
    ("subprocess", "fresh-interpreter workers and tracelens collect only"),
]

# (what runs, the Python that runs it in a fresh interpreter)
STARTS = {
    "import tracelens": "import tracelens",
    "import tracelens.collectors": "import tracelens.collectors",      # runs inside every profiled worker
    "tracelens --help": "from tracelens.cli import main; main(['--help'])",
    "tracelens --version": "from tracelens.cli import main; main(['--version'])",
    "tracelens report --help": "from tracelens.cli import main; main(['report', '--help'])",
}


# ------------------------------------------------------------------------------------ lazy imports' reasons

def _comments(source: str) -> dict[int, str]:
    """Line number -> the comment on that line (tokenize: a '#' inside a string is no comment)."""
    out = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            out[tok.start[0]] = tok.string
    return out


def _unexplained(path: Path) -> list[str]:
    """``file:line: import`` for every import inside a function of ``path`` without a ``# lazy:`` reason."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    comments = _comments(source)

    def comment_only(n: int) -> bool:
        return 1 <= n <= len(lines) and lines[n - 1].lstrip().startswith("#")

    def said_above(n: int) -> bool:
        """A ``# lazy:`` among the comment lines right above line ``n``."""
        n -= 1
        while comment_only(n):
            if LAZY.search(comments.get(n, "")):
                return True
            n -= 1
        return False

    tree = ast.parse(source)
    inside = set()          # the imports that some function's body holds, at any depth
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inside.update(n for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom)))
    bad = []
    for node in sorted(inside, key=lambda n: n.lineno):
        if LAZY.search(comments.get(node.lineno, "")) or said_above(node.lineno):
            continue
        # One of several imports in a row (blank lines between them allowed), under one comment above the
        # first of them.
        first, n = node.lineno, node.lineno - 1
        while n >= 1 and (not lines[n - 1].strip() or re.match(r"\s*(import|from)\s", lines[n - 1])):
            first = n if lines[n - 1].strip() else first
            n -= 1
        if first < node.lineno and said_above(first):
            continue
        bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    return bad


def _sources() -> list[Path]:
    return sorted(p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py"))


def test_every_import_inside_a_function_says_why():
    bad = [line for path in _sources() for line in _unexplained(path)]
    assert not bad, ("imports inside a function without a '# lazy: <reason>' comment (move each to the top of "
                     "its module, or say why it waits):\n" + "\n".join(bad))


def test_the_reason_check_sees_what_it_should(tmp_path):
    # The check itself, on a module written here: each way of giving the reason, and each way of not.
    module = tmp_path / "tracelens" / "m.py"
    module.parent.mkdir()
    module.write_text(
        "import os\n"                                       # top of the module: nothing to say
        "def f():\n"
        "    import numpy  # lazy: after the fork\n"        # said at the end of the line
        "    # lazy: rich, only on a terminal\n"
        "    from rich.console import Console\n"            # said above
        "\n"
        "    from rich.progress import Progress\n"          # covered by the comment above the run
        "    x = 1\n"
        "    import json\n"                                 # 9: another statement ends the run
        "    s = '# lazy: inside a string'; import sys\n"   # 10: a string is no comment
        "    # why, without the word\n"
        "    import re\n"                                   # 12: a comment that gives no lazy reason
        "    # lazy:\n"
        "    import gc\n"                                   # 14: the word, but no reason
        "    def g():\n"
        "        # lazy:\n"
        "        # plotly, the dashboard extra\n"
        "        import plotly\n"                           # 18: the reason must be on the lazy: line
        "        import math  # noqa: F401  # lazy: a float's parts\n")
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        bad = _unexplained(module)
    finally:
        ROOT = saved
    assert [b.split(":")[1] for b in bad] == ["9", "10", "12", "14", "18"], bad


# ---------------------------------------------------------------------------------------- start-up budget

def _loaded(code: str, cwd: Path = ROOT) -> tuple[set[str], list[tuple[int, str]]]:
    """The modules ``code`` loads in a fresh interpreter, and ``-X importtime``'s (depth, module) rows."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c",
                           f"{code}\nimport sys\nprint('\\nMODULES', *sorted(sys.modules))"],
                          capture_output=True, text=True, timeout=120, cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    modules = set(proc.stdout.rsplit("\nMODULES ", 1)[1].split())
    rows = []
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            name = line.split("|")[2]
            if name.strip() != "imported package":
                rows.append(((len(name) - len(name.lstrip())) // 2, name.strip()))
    return modules, rows


def _chain(rows: list[tuple[int, str]], module: str) -> str:
    """``a -> b -> module``: who imported ``module`` (importtime prints each import after its own imports,
    one level deeper than the module that imported it)."""
    for k, (depth, name) in enumerate(rows):
        if name == module:
            chain = [name]
            for d, parent in rows[k + 1:]:
                if d < depth:
                    chain.append(parent)
                    depth = d
            return " -> ".join(reversed(chain))
    return module


def _over_budget(code: str, cwd: Path = ROOT) -> list[str]:
    modules, rows = _loaded(code, cwd)
    out = []
    for banned, why in BUDGET:
        hits = sorted(m for m in modules if m == banned or m.startswith(banned + "."))
        if hits:
            out.append(f"{hits[0]} ({why}); imported through {_chain(rows, hits[0])}")
    return out


@pytest.mark.parametrize("start", sorted(STARTS))
def test_start_up_stays_within_budget(start):
    over = _over_budget(STARTS[start])
    assert not over, f"{start} loads what it must not:\n" + "\n".join(over)


def test_the_budget_check_names_a_module_over_budget_and_its_importers(tmp_path):
    # The check itself, on a package written here: pkg imports pkg.a, which imports sqlite3 (over budget);
    # json is not in the budget.
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("import json\nfrom . import a\n")
    (tmp_path / "pkg" / "a.py").write_text("import sqlite3\n")
    over = _over_budget("import pkg", cwd=tmp_path)
    assert len(over) == 1, over
    assert over[0].startswith("sqlite3 (Nsight Systems") and over[0].endswith("through pkg -> pkg.a -> sqlite3")
    assert _over_budget("import json", cwd=tmp_path) == []


def test_a_report_loads_no_other_command_and_no_wording(tmp_path):
    # A warm `tracelens report` (its Report from the cache) runs the report command alone: the other commands'
    # modules and the findings' sentences (they are in the Report already) stay unloaded (bench/RESULTS.md,
    # "Warm report imports").
    sample = str(ROOT / "sample_traces" / "wfbp_100")
    env = f"import os; os.environ['TRACELENS_CACHE'] = {str(tmp_path)!r}"
    code = (f"{env}\nfrom tracelens.cli import main\nassert main(['report', {sample!r}, '-o', "
            f"{str(tmp_path / 'out.txt')!r}, '--force']) == 0")
    _loaded(code)                                            # cold: fills the cache
    modules, _ = _loaded(code)                               # warm
    others = {f"tracelens.cli.{c}" for c in ("collect", "export", "annotate", "gate", "history", "dashboard", "cache")}
    assert "tracelens.cli.report" in modules and not others & modules, sorted(others & modules)
    assert not {m for m in modules if m.startswith("tracelens.analyzers.wording")}
