"""Output-path plants: before a writer runs (``annotate -o``, ``export -o``, ``report -o``, ``gate --junit``,
``--html``, ``--summary-md``, ``history add``, the warm cache), something is put at a path it will write:
a link to one of its inputs, a link to a file outside the output folder, a dangling link, a hard link to an
input or to a file outside, a folder, a read-only file, a file, a FIFO, the output folder itself as a link
or a file, and files at the temporary names the writers use (``.NAME.<hex>.tmp``, tracelens/outputs.py) or
would clean up (a stale ``.tmp`` in the cache). Then the writer runs once.

The case folder holds ``in/`` (a copy of the bundled run, the writer's input), ``out/`` (its output folder),
``outside/`` (a canary: files no writer may change) and ``elsewhere/`` (a folder ``out`` may be a link to:
writing there is what was asked). A case passes when every input and every file in ``outside/`` is byte for
byte as it was (a hard link's other name included), the exit code is one docs/errors.md gives the command,
an error is one line without a traceback, and no temporary file of a writer is left in ``out/``.

The warm cache's entries are named by their key, which holds the input's path: a cache case runs the report
once to learn its entries' names, removes them, plants at those names, and runs it again.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import stat
import time
from pathlib import Path

SAMPLE = "one_bucket"           # two gzip Kineto ranks, small: every writer takes well under a second
INPUTS = ["rank0.json.gz", "rank1.json.gz"]
_GATE = ["--min-overlap-pct", "1", "--no-config"]
# writer -> (its command line, relative to the case folder; the names it writes in out/)
WRITERS = {
    "report": (["report", "in", "--format", "json", "-o", "out/report.json"], ["report.json"]),
    "report-text": (["report", "in", "-o", "out/report.txt"], ["report.txt"]),
    "annotate": (["annotate", "in", "-o", "out"], ["rank0.tracelens.json.gz", "rank1.tracelens.json.gz"]),
    "export": (["export", "in", "-o", "out"], ["steps.parquet", "ranks.parquet", "step_metrics.parquet",
                                                "device_ops.parquet"]),
    "gate-junit": (["gate", "in", *_GATE, "--junit", "out/junit.xml"], ["junit.xml"]),
    "gate-html": (["gate", "in", *_GATE, "--html", "out/report.html"], ["report.html"]),
    "gate-summary": (["gate", "in", *_GATE, "--summary-md", "out/summary.md"], ["summary.md"]),
    "history": (["history", "add", "in", "--db", "out/history.db", "--label", "main"],
                ["history.db", "history.db-journal", "history.db-wal", "history.db-shm"]),
    "cache": (["report", "in", "--format", "json"], []),
}
WEIGHTS = {"report": 4, "report-text": 2, "annotate": 5, "export": 3, "gate-junit": 2, "gate-html": 1,
           "gate-summary": 3, "history": 4, "cache": 4}
# The exit codes docs/errors.md gives each command (gate: 1 when a rule failed).
CODES = {"report": {0, 2, 3}, "annotate": {0, 2, 3}, "export": {0, 2, 3}, "gate": {0, 1, 2, 3},
         "history": {0, 2, 3}}
KINDS = ["link_input", "link_outside", "dangling", "hardlink_input", "hardlink_outside", "dir", "readonly_file",
         "file", "fifo", "tmp_link_outside", "tmp_file"]
FOLDER_KINDS = ["link_elsewhere", "link_input_folder", "dangling", "file", "readonly_dir"]
LAYERS = ["tables", "analyses", "reports", "renders"]


def plan(rng: random.Random) -> list:
    """The writer, --force or not, and 1 to 3 plants."""
    writer = rng.choices(list(WEIGHTS), weights=list(WEIGHTS.values()))[0]
    ops = [["writer", writer], ["force", rng.random() < 0.5]]
    names = WRITERS[writer][1]
    for _ in range(rng.choice([1, 1, 2, 3])):
        where = rng.random()
        if where < 0.12:
            ops.append(["plant", ".", rng.choice(FOLDER_KINDS)])
        elif writer == "cache":
            if where < 0.3:
                ops.append(["plant", f"cache/{rng.choice(LAYERS)}", rng.choice(["dangling", "file", "readonly_dir",
                                                                               "stale_tmp"])])
            else:
                ops.append(["plant", ["entry", rng.randrange(8)], rng.choice(KINDS)])
        else:
            ops.append(["plant", rng.choice(names), rng.choice(KINDS)])
    return ops


def _digest(root: Path) -> dict[str, tuple]:
    """Every name under ``root`` (not following links): its kind and bytes, or its link's text."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            if stat.S_ISLNK(st.st_mode):
                out[str(p.relative_to(root))] = ("link", os.readlink(p))
            elif stat.S_ISREG(st.st_mode):
                out[str(p.relative_to(root))] = ("file", hashlib.blake2b(p.read_bytes(), digest_size=8).hexdigest())
            else:
                out[str(p.relative_to(root))] = (stat.filemode(st.st_mode)[0],)
    return out


def _plant(path: Path, kind: str, folder: Path) -> None:
    """``kind`` put at ``path`` (its folder made first)."""
    if not path.parent.is_dir() and (path.parent.is_symlink() or path.parent.exists()):
        return                  # out/ is itself a plant (a file, a dangling link): nothing goes in it
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.000000000000.tmp")
    if path.is_symlink() or path.exists() or tmp.is_symlink() or tmp.exists():
        return                  # a second plant at the same name: the first stays
    inp, canary = folder / "in" / INPUTS[0], folder / "outside" / "canary.txt"
    if kind == "link_input":
        path.symlink_to(inp)
    elif kind == "link_outside":
        path.symlink_to(canary)
    elif kind == "dangling":
        path.symlink_to(folder / "outside" / "missing")
    elif kind == "hardlink_input":
        os.link(inp, path)
    elif kind == "hardlink_outside":
        os.link(canary, path)
    elif kind == "dir":
        path.mkdir()
        (path / "kept.txt").write_text("kept")
    elif kind in ("file", "readonly_file"):
        path.write_bytes(b"an earlier file\n")
        if kind == "readonly_file":
            path.chmod(0o444)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "tmp_link_outside":
        # The temporary names outputs.fresh makes, and a link at one: guessed, never followed.
        tmp.symlink_to(canary)
    elif kind == "tmp_file":
        tmp.write_bytes(b"not ours")
    elif kind == "stale_tmp":
        # What the cache's clean-up removes (a .tmp older than an hour): a link, whose target must stay.
        path.mkdir(parents=True, exist_ok=True)
        link = path / "left-over.tmp"
        link.symlink_to(canary)
        old = time.time() - 7200
        os.utime(canary, (old, old))
        os.utime(link, (old, old), follow_symlinks=False)
    elif kind == "link_elsewhere":
        path.symlink_to(folder / "elsewhere", target_is_directory=True)
    elif kind == "link_input_folder":
        path.symlink_to(folder / "in", target_is_directory=True)
    elif kind == "readonly_dir":
        path.mkdir(exist_ok=True)
        path.chmod(0o555)


def run(ops: list, sample: Path, folder: Path, main) -> tuple[int, list[str]]:
    """Run the case in ``folder`` with the CLI entry ``main``; returns (exit code, problems)."""
    import io
    import sys

    writer = next(op[1] for op in ops if op[0] == "writer")
    force = any(op[0] == "force" and op[1] for op in ops)
    shutil.copytree(sample, folder / "in")
    (folder / "outside").mkdir()
    (folder / "outside" / "canary.txt").write_text("canary\n")
    (folder / "elsewhere").mkdir()
    args, _ = WRITERS[writer]
    args = [str(folder / a) if a in ("in", "out") or a.startswith("out/") else a for a in args]
    if force and writer in ("report", "report-text", "annotate", "export"):
        args.append("--force")
    saved = os.environ.get("TRACELENS_CACHE")
    os.environ["TRACELENS_CACHE"] = str(folder / "out" / "cache") if writer == "cache" else saved or ""
    if not os.environ["TRACELENS_CACHE"]:
        del os.environ["TRACELENS_CACHE"]
    # The inputs are the names in in/ before anything is planted: out/ may be a link to in/, and what is
    # planted at an output's name there is the output's to replace, not an input (its target, where it is a
    # link or another name of an input, is one of these names and still checked).
    inputs = set(_digest(folder / "in"))
    try:
        entries = []
        if writer == "cache":
            (folder / "out").mkdir()
            first = main(args)
            cache = folder / "out" / "cache"
            entries = sorted(p for p in cache.rglob("*") if p.is_file())
            for p in entries:
                p.unlink()
            if first != 0:
                return first, [f"the cache's first report exited {first}"]
        for op in ops:
            if op[0] != "plant":
                continue
            where = op[1]
            if isinstance(where, list):
                if not entries:
                    continue
                target = entries[where[1] % len(entries)]
            else:
                target = folder / "out" / where if where != "." else folder / "out"
            if where == "." and target.exists():
                continue
            _plant(target, op[2], folder)
        if not (folder / "out").is_symlink() and not (folder / "out").exists():
            (folder / "out").mkdir()
        before_in = {n: v for n, v in _digest(folder / "in").items() if n in inputs}
        before_out = _digest(folder / "outside")
        before_tmp = _temporaries(folder / "out")
        err = io.StringIO()
        real_err = sys.stderr
        sys.stderr = err
        try:
            code = main(args)
        finally:
            sys.stderr = real_err
            real_err.write(err.getvalue())
    finally:
        if saved is None:
            os.environ.pop("TRACELENS_CACHE", None)
        else:
            os.environ["TRACELENS_CACHE"] = saved
    problems = []
    said = err.getvalue()
    if code not in CODES[args[0]]:
        problems.append(f"exit code {code}")
    if "Traceback" in said:
        problems.append("traceback on stderr")
    if code not in (0, 1) and said.count("\n") != 1:
        problems.append(f"error is not one line: {said!r}")
    after_in = {n: v for n, v in _digest(folder / "in").items() if n in before_in}
    if after_in != before_in:
        problems.append("an input changed: " + ", ".join(sorted(n for n in before_in if after_in.get(n) != before_in[n])))
    after_out = _digest(folder / "outside")
    if after_out != before_out:
        problems.append("outside the output folder changed: " + ", ".join(
            sorted(n for n in set(before_out) | set(after_out) if before_out.get(n) != after_out.get(n))))
    left = _temporaries(folder / "out") - before_tmp
    if left:
        problems.append("temporary files left: " + ", ".join(sorted(left)))
    return code, problems


def _temporaries(out: Path) -> set[str]:
    """The writers' temporary names (``.NAME.<hex>.tmp``) under ``out``."""
    if not out.is_dir():
        return set()
    return {str(p.relative_to(out)) for p in out.rglob(".*.tmp")}


def clean(folder: Path) -> None:
    """Remove the case folder, read-only folders in it included."""
    for dirpath, dirnames, _ in os.walk(folder):
        for d in dirnames:
            p = Path(dirpath) / d
            if not p.is_symlink():
                p.chmod(0o755)
    shutil.rmtree(folder, ignore_errors=True)
