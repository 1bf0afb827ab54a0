"""Every writer of tracelens, with a link already at the names it writes (issue 49, item 1): nothing already at
an output's path, or at a temporary name beside it, is followed or truncated (tracelens/outputs.py).

The links point at a copy of an input trace (the victim): before, `tracelens annotate` with a link at its
predictable temporary name `.rankN.tracelens.json.gz.<pid>.tmp` left the input 0 bytes long."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from pathlib import Path

import pytest

from tracelens import outputs
from tracelens.cli import main

from conftest import SAMPLES
from fixtures import synth
from fixtures.fake_nsys import fake_nsys


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def run(tmp_path) -> Path:
    """A copy of a bundled sample run (two ranks' gzipped traces): the inputs the links point at."""
    out = tmp_path / "run"
    shutil.copytree(SAMPLES / "gloo_sawtooth", out)
    return out


@pytest.fixture
def victim(run) -> tuple[Path, str]:
    path = sorted(run.glob("*.json.gz"))[0]
    return path, digest(path)


def untouched(victim) -> bool:
    path, before = victim
    return path.is_file() and not path.is_symlink() and digest(path) == before


def regular(path: Path) -> bool:
    return stat.S_ISREG(os.lstat(path).st_mode)


def test_annotate_never_writes_through_a_link_at_its_temporary_name(run, victim, tmp_path, capsys):
    out = tmp_path / "annotated"
    out.mkdir()
    ranks = range(2)
    for r in ranks:
        (out / f".rank{r}.tracelens.json.gz.{os.getpid()}.tmp").symlink_to(victim[0])
    assert main(["annotate", str(run), "-o", str(out)]) == 0
    assert untouched(victim)
    assert sorted(p.name for p in out.iterdir() if not p.is_symlink()) == [f"rank{r}.tracelens.json.gz"
                                                                          for r in ranks]
    assert all(regular(out / f"rank{r}.tracelens.json.gz") for r in ranks)


def test_annotate_refuses_a_link_to_an_input_at_its_output_name(run, victim, tmp_path, capsys):
    out = tmp_path / "annotated"
    out.mkdir()
    (out / "rank0.tracelens.json.gz").symlink_to(victim[0])
    assert main(["annotate", str(run), "-o", str(out), "--force"]) == 2
    assert "would overwrite an input" in capsys.readouterr().err and untouched(victim)


def test_report_output_replaces_a_link_with_force_and_refuses_it_without(run, victim, tmp_path, capsys):
    out = tmp_path / "report.json"
    out.symlink_to(victim[0])
    assert main(["report", str(run), "--format", "json", "-o", str(out)]) == 2
    assert "output file exists" in capsys.readouterr().err
    assert main(["report", str(run), "--format", "json", "-o", str(out), "--force"]) == 0
    assert untouched(victim) and regular(out) and out.read_text().startswith("{")
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_report_output_to_a_device_through_a_link_is_written_to(run, tmp_path, capsys):
    """/dev/stdout is a link to the process's standard output: written to, as a shell would, never replaced."""
    out = tmp_path / "null"
    out.symlink_to(os.devnull)
    assert main(["report", str(run), "-o", str(out)]) == 0
    assert out.is_symlink() and os.path.realpath(out) == os.devnull


def test_export_replaces_links_at_its_files(run, victim, tmp_path, capsys):
    from tracelens.export import FILES

    out = tmp_path / "tables"
    out.mkdir()
    for name in FILES:
        (out / name).symlink_to(victim[0])
    assert main(["export", str(run), "-o", str(out), "--force"]) == 0
    assert untouched(victim)
    assert all(regular(out / name) for name in FILES)


def test_gate_files_replace_links_and_its_summary_refuses_one(run, victim, tmp_path, capsys):
    junit, html, md = tmp_path / "gate.xml", tmp_path / "gate.html", tmp_path / "summary.md"
    for path in (junit, html, md):
        path.symlink_to(victim[0])
    code = main(["gate", str(run), "--min-overlap-pct", "0", "--no-config", "--junit", str(junit),
                 "--html", str(html)])
    assert code == 0 and untouched(victim) and regular(junit) and regular(html)
    assert junit.read_text().startswith("<?xml")
    # The summary is appended to (GitHub's step summary file): a link there is refused, exit 2.
    code = main(["gate", str(run), "--min-overlap-pct", "0", "--no-config", "--summary-md", str(md)])
    err = capsys.readouterr().err
    assert code == 2 and f"{md}: cannot write output: a symbolic link" in err
    assert untouched(victim) and md.is_symlink()


@pytest.mark.parametrize("at", ["", "-journal", "-wal"])
def test_history_refuses_a_link_at_the_database_or_its_journals(run, victim, tmp_path, capsys, at):
    db = tmp_path / "history.db"
    (tmp_path / f"history.db{at}").symlink_to(victim[0])
    code = main(["history", "add", str(run), "--db", str(db), "--label", "main"])
    err = capsys.readouterr().err
    assert code == 2 and "a symbolic link: tracelens never writes a history through one" in err
    assert untouched(victim)


def test_cache_entries_replaced_by_links_are_never_written_through(run, victim, tmp_path, monkeypatch, capsys):
    cache = tmp_path / "cache"
    monkeypatch.setenv("TRACELENS_CACHE", str(cache))
    assert main(["report", str(run), "--format", "json"]) == 0
    first = capsys.readouterr().out
    entries = [p for p in cache.rglob("*") if p.is_file()]
    assert entries
    for entry in entries:               # every entry now a link to an input: unreadable as an entry, a miss
        entry.unlink()
        entry.symlink_to(victim[0])
    assert main(["report", str(run), "--format", "json"]) == 0
    assert capsys.readouterr().out == first
    assert untouched(victim)
    assert not [p for p in cache.rglob("*") if p.is_symlink() and p.resolve() == victim[0].resolve()
                and p.name.endswith(".tmp")]


def test_nsys_export_never_writes_through_a_link_at_its_old_temporary_name(tmp_path, monkeypatch, capsys):
    (export,) = synth.write_nsys(synth.SCENARIOS["one_bucket"], tmp_path / "src", per_rank=False)
    victim = tmp_path / "input.sqlite"                 # an export the user reads: an input
    shutil.copyfile(export, victim)
    before = digest(victim)
    exe, _ = fake_nsys(tmp_path, export)
    monkeypatch.setenv("TRACELENS_NSYS", str(exe))
    monkeypatch.delenv("TRACELENS_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    rep = tmp_path / "profile.nsys-rep"
    rep.write_bytes(b"only nsys reads it")
    st = rep.stat()
    folder = tmp_path / "cache" / "tracelens" / "nsys"
    folder.mkdir(parents=True)
    keyed = f"{rep.stem}-{st.st_size:x}-{int(st.st_mtime_ns):x}.sqlite"
    (folder / f".{keyed}.{os.getpid()}.tmp.sqlite").symlink_to(victim)
    assert main(["report", str(rep), "--format", "json"]) == 0
    assert digest(victim) == before and regular(folder / keyed)


def test_the_collector_s_manifest_never_writes_through_a_link(tmp_path):
    from tracelens.collectors.launch import CollectOptions, Plan
    from tracelens.collectors.manifest import write_manifest

    victim = tmp_path / "input.json"
    victim.write_text("{}")
    run_dir = tmp_path / "run"
    (run_dir / "workers").mkdir(parents=True)
    (run_dir / "nccl").mkdir()
    (run_dir / ".manifest.json.tmp").symlink_to(victim)     # the name it used to write through
    (run_dir / "manifest.json").symlink_to(victim)
    plan = Plan(run_dir=run_dir, argv=["python", "x.py"], env={}, options=CollectOptions(command=["python", "x.py"]))
    write_manifest(plan, 0, 0.0, 1.0, [])
    assert victim.read_text() == "{}" and regular(run_dir / "manifest.json")


# ------------------------------------------------------------------------------------------ the one way


def test_a_failed_write_leaves_neither_the_file_nor_a_temporary_one(tmp_path):
    target = tmp_path / "out.json"
    target.write_text("before")
    with pytest.raises(KeyboardInterrupt):
        with outputs.replacing(target) as fh:
            fh.write(b"half")
            raise KeyboardInterrupt
    assert target.read_text() == "before" and sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_a_new_file_has_the_mode_open_would_give_it(tmp_path):
    outputs.write_text(tmp_path / "a", "x")
    old = os.umask(0o027)
    try:
        outputs.write_text(tmp_path / "b", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "a").st_mode) == 0o666 & ~old
    assert stat.S_IMODE(os.stat(tmp_path / "b").st_mode) == 0o640


def test_a_hard_link_keeps_its_bytes(tmp_path):
    other = tmp_path / "input.json"
    other.write_text("input")
    os.link(other, tmp_path / "out.json")
    outputs.write_text(tmp_path / "out.json", "output")
    assert other.read_text() == "input" and (tmp_path / "out.json").read_text() == "output"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_appending_to_a_fifo_nobody_reads_is_an_error_not_a_wait(tmp_path):
    fifo = tmp_path / "summary"
    os.mkfifo(fifo)
    with pytest.raises(OSError):
        outputs.append_text(fifo, "x")


def test_no_writer_opens_a_file_for_writing_itself():
    """Files are written through tracelens/outputs.py alone (a device or pipe a report names too)."""
    import ast

    root = Path(__file__).resolve().parents[2]
    found = []
    for path in [*(root / "tracelens").rglob("*.py"), *(root / "collectors").rglob("*.py")]:
        if path.name == "outputs.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call) or getattr(getattr(node.func, "value", None), "id", "") == "outputs":
                continue
            name = getattr(node.func, "attr", getattr(node.func, "id", ""))
            mode = [a.value for a in node.args[1:2] if isinstance(a, ast.Constant)]
            if name in ("write_text", "write_bytes", "to_parquet", "copyfile") or \
                    (name == "open" and mode and set(str(mode[0])) & set("wax+")):
                found.append((str(path.relative_to(root)), name))
    allowed = {("tracelens/export.py", "to_parquet"),          # into the file outputs.replacing gives it
               ("tracelens/parsers/nsys/sql.py", "copyfile")}  # into a folder of its own, fresh (mkdtemp)
    assert set(found) == allowed, found
