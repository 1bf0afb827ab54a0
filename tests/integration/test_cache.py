"""The warm cache (tracelens/cache.py): hits, every way an entry goes stale or bad, the bound, the commands,
and reports that are the same warm and cold."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pandas as pd
import pytest

import tracelens
from tracelens import api, cache, cache_files
from tracelens.cli import main
from tracelens.parsers import kineto, nsys
from tracelens.renderers import render
from tracelens.model.table import Labels

from conftest import SAMPLES, host, kernel, write_trace

PAST = time.time() - 3600       # an mtime well outside the racy window


@pytest.fixture
def root(tmp_path, monkeypatch):
    """A cache of this test's own."""
    folder = tmp_path / "cache"
    monkeypatch.setenv(cache.CACHE_ENV, str(folder))
    return folder


def counting(monkeypatch, owner, name: str, note) -> list:
    """``owner.name`` replaced by itself, noting ``note(first argument)`` of every call in the list returned."""
    seen: list = []
    real = getattr(owner, name)

    def counted(first, *args, **kwargs):
        seen.append(note(first))
        return real(first, *args, **kwargs)
    monkeypatch.setattr(owner, name, counted)
    return seen


@pytest.fixture
def parses(monkeypatch):
    """The Kineto parses that really ran (a cache hit runs none)."""
    return counting(monkeypatch, kineto, "parse", Path)


def trace_file(folder: Path, name: str = "rank0.json", n: int = 3, mtime: float = PAST, rank: int = 0,
               world: int | None = 1) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    events = [host("ProfilerStep#1", 0, 100 * n + 50)]
    events += [kernel("ncclKernel_AllReduce_RING_LL_Sum_float", 10 + 100 * i, 40, corr=i) for i in range(n)]
    events += [kernel("volta_sgemm_128x64_nn", 50 + 100 * i, 40, stream=8) for i in range(n)]
    path = write_trace(folder / name, events, distributedInfo={"rank": rank, **({} if world is None else {"world_size": world})})
    os.utime(path, (mtime, mtime))
    return path


def load(path, **kw):
    return tracelens.load(str(path), jobs=0, cache=True, **kw)


def entries(root: Path) -> list[Path]:
    return sorted((root / "tables").glob("*" + cache.SUFFIX))


def same_traces(a, b) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.meta == y.meta
        for name in ("device_ops", "host_ops", "collectives", "steps", "threads"):
            same_table(getattr(x, name), getattr(y, name))


def same_table(a, b) -> None:
    """Equal columns, in order, of equal types and values (Labels: equal codes over equal names)."""
    assert a.columns == b.columns and len(a) == len(b)
    for c in a.columns:
        u, v = a[c], b[c]
        assert type(u) is type(v), c
        if isinstance(u, Labels):
            assert u.categories.tolist() == v.categories.tolist() and u.codes.tolist() == v.codes.tolist(), c
        else:
            assert u.dtype == v.dtype and u.tolist() == v.tolist(), c


def test_second_load_is_a_hit_with_the_same_tables(tmp_path, root, parses):
    path = trace_file(tmp_path / "run")
    cold = load(path)
    assert len(entries(root)) == 1 and parses == [path]
    warm = load(path)
    assert parses == [path]               # not parsed again
    same_traces(cold, warm)


def test_corpus_trace_round_trips_exactly(root, parses):
    from conftest import corpus_file

    path = corpus_file("hta/df_index_resolver/df_index_resolver.json.gz")
    cold = tracelens.load(str(path), jobs=0, cache=False)
    load(path)
    warm = load(path)
    assert len(parses) == 2               # the cache=False load, then the one that filled the cache
    same_traces(cold, warm)


def test_a_file_just_written_is_not_cached(tmp_path, root, parses):
    # Within RACY_S of its mtime a same-size rewrite could carry the same mtime: such a file is never cached.
    path = trace_file(tmp_path / "run", mtime=time.time())
    load(path)
    load(path)
    assert entries(root) == [] and parses == [path, path]


def test_touch_rewrite_version_and_options_each_miss(tmp_path, root, parses, monkeypatch):
    path = trace_file(tmp_path / "run")
    load(path)
    os.utime(path, (PAST + 10, PAST + 10))              # touched: same bytes, new mtime
    load(path)
    assert len(parses) == 2
    trace_file(tmp_path / "run", n=4, mtime=PAST + 10)  # rewritten: other size, the same mtime as before
    load(path)
    assert len(parses) == 3
    load(path)
    assert len(parses) == 3                             # and that one is cached in turn
    load(path, comm_patterns=["volta_sgemm"])           # an option that changes parsing
    load(path, step_nvtx="ProfilerStep#(\\d+)")
    assert len(parses) == 5
    from tracelens import _version

    monkeypatch.setattr(_version, "__version__", _version.__version__ + ".post1")
    cache._code_stamp.cache_clear()
    try:
        load(path)
    finally:
        cache._code_stamp.cache_clear()
    assert len(parses) == 6


def test_options_change_the_tables_they_cache(tmp_path, root):
    path = trace_file(tmp_path / "run")
    plain = load(path)[0]
    custom = load(path, comm_patterns=["volta_sgemm"])[0]
    # The pattern makes the 3 sgemm kernels communication too (trace_file: n=3): a hit of the plain entry
    # would show 3.
    assert (plain.device_ops["kind"] == "comm").sum() == 3
    assert (custom.device_ops["kind"] == "comm").sum() == 6


@pytest.mark.parametrize("damage", ["truncated", "garbage", "flipped", "empty", "header only"])
def test_a_damaged_entry_is_rebuilt_not_trusted(tmp_path, root, parses, damage):
    path = trace_file(tmp_path / "run")
    cold = load(path)
    (entry,) = entries(root)
    data = entry.read_bytes()
    entry.write_bytes({"truncated": data[: len(data) // 2], "garbage": os.urandom(len(data)),
                       "flipped": data[:-40] + bytes([data[-40] ^ 1]) + data[-39:], "empty": b"",
                       "header only": data[:16]}[damage])
    warm = load(path)
    assert parses == [path, path]         # parsed again, and the entry written again whole
    same_traces(cold, warm)
    assert entry.read_bytes() == data
    load(path)
    assert parses == [path, path]


def test_an_entry_of_another_key_is_not_used(tmp_path, root, parses):
    # Two files whose entries trade places (as a hash collision would): the key inside the entry is checked.
    a, b = trace_file(tmp_path / "a", n=2), trace_file(tmp_path / "b", n=5)
    load(a)
    load(b)
    ea = cache.TABLES.entry(cache.TABLES.key(a, _options()))
    eb = cache.TABLES.entry(cache.TABLES.key(b, _options()))
    da, db = ea.read_bytes(), eb.read_bytes()
    ea.write_bytes(db)
    eb.write_bytes(da)
    assert len(load(a)[0].device_ops) == 4          # n=2: two comm and two compute kernels
    assert parses == [a, b, a]


def _options():
    from tracelens.options import ReportOptions
    from tracelens.parsers import cache_options

    return cache_options(ReportOptions())


def test_least_recently_used_entries_go_first(tmp_path, root, parses, monkeypatch):
    paths = [trace_file(tmp_path / f"r{i}", n=3) for i in range(3)]
    load(paths[0])
    size = entries(root)[0].stat().st_size
    # Room for two entries of this size (the three traces have the same shape, so about the same size).
    monkeypatch.setenv(cache.MAX_ENV, str(int(size * 2.5)))
    e0 = entries(root)[0]
    os.utime(e0, (PAST, PAST))
    load(paths[1])
    e1 = cache.TABLES.entry(cache.TABLES.key(paths[1], _options()))
    os.utime(e1, (PAST + 1, PAST + 1))
    load(paths[0])                                   # a hit: paths[0] is now the most recently used
    assert e0.stat().st_mtime > PAST + 1
    load(paths[2])                                   # no room for three: the least recently used goes
    assert e0.exists() and not e1.exists() and len(entries(root)) == 2
    assert parses == paths[:2] + paths[2:]


def test_an_interrupted_write_leaves_no_entry(tmp_path, root, parses, monkeypatch):
    path = trace_file(tmp_path / "run")

    def interrupted(src, dst):
        assert Path(src).stat().st_size > 0          # the whole entry was written, under its temporary name
        raise KeyboardInterrupt
    with monkeypatch.context() as m, pytest.raises(KeyboardInterrupt):
        m.setattr(cache.os, "replace", interrupted)
        load(path)
    assert not any((root / "tables").iterdir())
    # A temporary file a killed writer left (an hour old) is removed; a fresh one (a live writer's) is not.
    (root / "tables" / ".old.tmp").write_bytes(b"x")
    os.utime(root / "tables" / ".old.tmp", (PAST - 10, PAST - 10))
    (root / "tables" / ".live.tmp").write_bytes(b"x")
    monkeypatch.setattr(cache_files, "_usage", None)      # as in the next process: it looks at the folder afresh
    load(path)
    load(path)
    assert parses == [path, path]                    # interrupted, then parsed and cached once
    assert sorted(p.name for p in (root / "tables").iterdir()) == [".live.tmp", entries(root)[0].name]


def test_zero_bound_caches_nothing_and_a_bad_bound_is_a_usage_error(tmp_path, root, monkeypatch, capsys):
    path = trace_file(tmp_path / "run")
    monkeypatch.setenv(cache.MAX_ENV, "0")
    load(path)
    assert entries(root) == []
    monkeypatch.setenv(cache.MAX_ENV, "lots")
    assert main(["report", str(path), "--format", "json"]) == 2
    assert "TRACELENS_CACHE_MAX" in capsys.readouterr().err


def test_an_unwritable_cache_is_no_cache(tmp_path, monkeypatch, parses):
    blocker = tmp_path / "a-file"
    blocker.write_text("a file where the cache folder would go")
    monkeypatch.setenv(cache.CACHE_ENV, str(blocker / "cache"))
    path = trace_file(tmp_path / "run")
    cold = render(api.report(str(path), cache=False), "json")
    assert render(api.report(str(path)), "json") == cold
    assert render(api.report(str(path)), "json") == cold
    assert len(parses) == 3


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_read_only_cache_is_no_cache(tmp_path, root, parses):
    path = trace_file(tmp_path / "run")
    (root / "tables").mkdir(parents=True)
    os.chmod(root / "tables", 0o555)
    try:
        load(path)
        load(path)
    finally:
        os.chmod(root / "tables", 0o755)
    assert len(parses) == 2 and entries(root) == []


def test_no_cache_flag_and_environment(tmp_path, root, monkeypatch, capsys):
    path = trace_file(tmp_path / "run")
    assert main(["report", str(path), "--format", "json", "--no-cache"]) == 0
    monkeypatch.setenv(cache.NO_CACHE_ENV, "1")
    assert main(["report", str(path), "--format", "json"]) == 0
    assert entries(root) == []
    monkeypatch.delenv(cache.NO_CACHE_ENV)
    assert main(["report", str(path), "--format", "json"]) == 0
    assert len(entries(root)) == 1


def test_cache_info_and_clear(tmp_path, root, capsys):
    for i in range(2):
        load(trace_file(tmp_path / f"r{i}"))
    (root / "nsys").mkdir()
    (root / "nsys" / "profile-1-2.sqlite").write_bytes(b"x" * 100)
    capsys.readouterr()
    assert main(["cache", "info", "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["location"] == str(root) and got["entries"] == 2 and got["nsys_exports"] == 1
    assert got["bytes"] == sum(p.stat().st_size for p in entries(root)) and got["nsys_bytes"] == 100
    assert got["max_bytes"] == cache.DEFAULT_MAX and got["enabled"] is True
    assert got["analyses"] == 0             # api.load parses; only a report analyses
    json_of(tmp_path / "r0")
    assert main(["cache", "info", "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["analyses"] == 1 and got["analyses_bytes"] == analysis_entries(root)[0].stat().st_size > 0
    assert main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert str(root) in out and "analysed traces: 1 entry" in out and "reports: 1 entry" in out
    assert got["reports"] == 1 and got["reports_bytes"] == report_entries(root)[0].stat().st_size > 0
    assert main(["cache", "clear"]) == 0
    assert "removed 5 files" in capsys.readouterr().out
    assert entries(root) == analysis_entries(root) == report_entries(root) == []
    assert not list((root / "nsys").iterdir())
    assert main(["cache", "clear"]) == 0           # an empty (or absent) cache clears without complaint


def test_one_root_for_both_caches(tmp_path, monkeypatch):
    from tracelens.tools.nsys_export import cache_dir

    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "mine"))
    assert cache.root() == tmp_path / "mine" and cache_dir() == tmp_path / "mine" / "nsys"
    monkeypatch.delenv(cache.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "tracelens" / "nsys"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.root() == tmp_path / "home" / ".cache" / "tracelens"


def test_the_suite_never_caches_into_the_home_folder():
    # tests/conftest.py points every test (and the processes tests start) at a folder of this session.
    assert os.environ[cache.CACHE_ENV] and not cache.root().is_relative_to(Path.home() / ".cache")


@pytest.mark.parametrize("case", sorted(p.name for p in SAMPLES.iterdir() if p.is_dir()))
def test_warm_report_is_byte_identical_to_cold(case, tmp_path, root, monkeypatch):
    """Every bundled sample (the goldens' inputs), copied so that its files can be dated outside the racy
    window: cold without the cache, then a run that fills it, then one that only reads it."""
    run = tmp_path / case
    shutil.copytree(SAMPLES / case, run)
    for f in run.rglob("*"):
        os.utime(f, (PAST, PAST))
    monkeypatch.chdir(tmp_path)
    cold = render(api.report(case, cache=False), "json")
    assert render(api.report(case), "json") == cold
    assert entries(root)

    def refuse(*args, **kwargs):
        raise AssertionError("parsed although cached")
    monkeypatch.setattr(kineto, "parse", refuse)
    monkeypatch.setattr(nsys, "parse", refuse)
    assert render(api.report(case), "json") == cold                     # the Report layer
    monkeypatch.setattr(cache.REPORTS, "get", lambda k: None)
    assert render(api.report(case), "json") == cold                     # the analysis layer, combined again


def test_a_copy_keeping_size_and_mtime_is_not_taken_for_the_old_file(tmp_path, root, parses):
    # Same size, same mtime, other bytes (cp -p of another rank's file over this one): the ctime tells them apart.
    a = trace_file(tmp_path / "a")
    b = tmp_path / "b" / "rank0.json"
    b.parent.mkdir()
    b.write_bytes(a.read_bytes().replace(b"128x64_nn", b"128x64_tn"))
    os.utime(b, (PAST, PAST))
    dst = tmp_path / "run" / "rank0.json"
    dst.parent.mkdir()
    shutil.copy2(a, dst)
    assert "volta_sgemm_128x64_nn" in set(load(dst)[0].device_ops["name"])
    time.sleep(0.02)       # ctime ticks with the kernel's coarse clock (up to 10 ms): the copy comes a tick later
    shutil.copy2(b, dst)
    assert dst.stat().st_size == a.stat().st_size and dst.stat().st_mtime_ns == a.stat().st_mtime_ns
    assert "volta_sgemm_128x64_tn" in set(load(dst)[0].device_ops["name"])


def test_a_file_changed_while_it_is_parsed_is_not_cached(tmp_path, root, monkeypatch):
    path = trace_file(tmp_path / "run")
    real = kineto.parse

    def rewritten_meanwhile(p, *args, **kwargs):
        got = real(p, *args, **kwargs)
        trace_file(tmp_path / "run", n=5, mtime=PAST + 20)     # another writer, dated outside the racy window
        return got
    monkeypatch.setattr(kineto, "parse", rewritten_meanwhile)
    load(path)
    assert entries(root) == []


def test_console_script_warm_and_cold_print_the_same(tmp_path, root):
    """The real process (it exits without teardown, tracelens/_speed.py): the entries it writes are whole,
    and the next process reads the Report entry (the analysis entry is for a report of other inputs, the
    table entry for api.load)."""
    import subprocess
    import sys

    path = trace_file(tmp_path / "run")
    cmd = [sys.executable, "-c", "from tracelens.cli import run; run()", "report", str(path), "--format", "json"]
    env = {**os.environ, cache.CACHE_ENV: str(root)}
    cold = subprocess.run([*cmd, "--no-cache"], capture_output=True, env=env)
    filling = subprocess.run(cmd, capture_output=True, env=env)
    (table,) = entries(root)
    (analysis,) = analysis_entries(root)
    (whole,) = report_entries(root)
    written = whole.stat().st_mtime_ns
    for e in (table, analysis, whole):
        os.utime(e, ns=(written - 10**9, written - 10**9))
    warm = subprocess.run(cmd, capture_output=True, env=env)
    assert cold.returncode == filling.returncode == warm.returncode == 0, warm.stderr
    assert cold.stdout == filling.stdout == warm.stdout and b'"schema": "tracelens.report/1"' in cold.stdout
    assert whole.stat().st_mtime_ns > written - 10**9        # read (last use stamped), not rewritten
    assert table.stat().st_mtime_ns == analysis.stat().st_mtime_ns == written - 10**9       # not needed
    assert entries(root) == [table] and analysis_entries(root) == [analysis] and report_entries(root) == [whole]


# ----------------------------------------------------------------------------------- the analysis layer

@pytest.fixture
def analyses(monkeypatch):
    """The rank analyses that really ran (a report whose files' analyses are cached runs none). The Report
    layer is switched off: these tests are of the layer below it, which a report of changed inputs reads."""
    from tracelens.analyzers import rank

    monkeypatch.setattr(cache.REPORTS, "get", lambda k: None)
    return counting(monkeypatch, rank, "analyze_rank", lambda trace: trace.meta.rank)


def damaged(blob: bytes, how: str) -> bytes:
    """An entry's bytes cut in half, zeroed, with one bit flipped in the header, or empty."""
    return {"truncated": blob[: len(blob) // 2], "garbage": b"\x00" * len(blob),
            "flipped": blob[:40] + bytes([blob[40] ^ 1]) + blob[41:], "empty": b""}[how]


def analysis_entries(root: Path) -> list[Path]:
    return sorted((root / "analyses").glob("*" + cache.SUFFIX))


def report_entries(root: Path) -> list[Path]:
    return sorted((root / "reports").glob("*" + cache.SUFFIX))


def json_of(paths, **kw) -> str:
    return render(api.report(paths, jobs=0, **kw), "json")


def run_dir(tmp_path: Path, log: bytes = b"NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n") -> Path:
    """A collect run directory: two traces (their world size only in the manifest), a manifest naming each
    rank's NCCL log, and the logs."""
    run = tmp_path / "collected"
    for r in (0, 1):
        trace_file(run, f"rank{r}.json", n=2 + r, rank=r, world=None)
    (run / "nccl").mkdir()
    for r in (0, 1):
        (run / "nccl" / f"h.{r}.log").write_bytes(log)
    manifest = {"schema": "tracelens.manifest/1", "world_size": 2, "env": {"NCCL_ALGO": "Ring"},
                "ranks": [{"rank": r, "nccl_log": f"nccl/h.{r}.log"} for r in (0, 1)]}
    (run / "manifest.json").write_text(json.dumps(manifest))
    for f in run.rglob("*"):
        os.utime(f, (PAST, PAST))
    return run


def test_a_warm_report_reads_analyses_and_neither_parses_nor_analyses(tmp_path, root, parses, analyses):
    run = tmp_path / "run"
    for r in (0, 1):
        trace_file(run, f"rank{r}.json", n=2 + r, rank=r, world=2)
    cold = json_of(run, cache=False)
    assert json_of(run) == cold and len(analysis_entries(root)) == 2
    parses.clear(), analyses.clear()
    assert json_of(run) == cold
    assert parses == [] and analyses == []


def test_each_thing_an_analysis_depends_on_makes_a_miss(tmp_path, root, analyses, monkeypatch):
    run = run_dir(tmp_path)
    json_of(run)
    assert sorted(analyses) == [0, 1]

    def again(**kw) -> list:
        analyses.clear()
        json_of(run, **kw)
        return sorted(analyses)
    assert again() == []
    assert again(thresholds=["stall_min_ns=1"]) == [0, 1]          # other thresholds
    assert again(comm_patterns=["volta_sgemm"]) == [0, 1]          # other patterns
    assert again(step_nvtx="ProfilerStep#(\\d+)") == [0, 1]
    os.utime(run / "rank1.json", (PAST + 5, PAST + 5))              # one trace touched: that file only
    assert again() == [1]
    (run / "nccl" / "h.0.log").write_bytes(b"NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>\n" * 3)
    os.utime(run / "nccl" / "h.0.log", (PAST, PAST))                # a log the manifest names: its size
    assert again() == [0, 1]
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["env"]["NCCL_ALGO"] = "Tree"                           # the manifest itself
    (run / "manifest.json").write_text(json.dumps(manifest))
    os.utime(run / "manifest.json", (PAST, PAST))
    assert again() == [0, 1]
    assert again() == []
    monkeypatch.setattr(cache, "_analysis_stamp", lambda: (("edited.py", 1, 2),))   # the analysing code
    assert again() == [0, 1]
    monkeypatch.undo()
    assert again() == []


def test_an_analysis_entry_follows_what_its_manifest_says(tmp_path, root):
    """The environment a manifest gives lands in the Report (settings checks): a cached analysis must not
    keep the old one."""
    run = run_dir(tmp_path)
    rep = api.report(run, jobs=0)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["world_size"] = 4
    (run / "manifest.json").write_text(json.dumps(manifest))
    os.utime(run / "manifest.json", (PAST, PAST))
    assert {r.world_size for r in rep.ranks} == {2}
    assert {r.world_size for r in api.report(run, jobs=0).ranks} == {4}
    assert {r.world_size for r in api.report(run, jobs=0, cache=False).ranks} == {4}


@pytest.mark.parametrize("damage", ["truncated", "garbage", "flipped", "empty"])
def test_a_damaged_analysis_entry_is_rebuilt(tmp_path, root, analyses, damage):
    path = trace_file(tmp_path / "run")
    cold = json_of(path, cache=False)
    json_of(path)
    (entry,) = analysis_entries(root)
    blob = entry.read_bytes()
    entry.write_bytes(damaged(blob, damage))
    analyses.clear()
    assert json_of(path) == cold
    assert analyses == [0]                  # analysed again, and cached again
    analyses.clear()
    assert json_of(path) == cold and analyses == []


def test_unnumbered_ranks_are_renumbered_the_same_from_the_cache(tmp_path, root, analyses):
    """Ranks recorded nowhere are numbered by input order after every file is read: a cached analysis is
    stored before that, so warm and cold agree (and the cached entry is not changed by the numbering)."""
    run = tmp_path / "anon"
    run.mkdir()
    for name, n in (("a.json", 2), ("b.json", 3)):
        events = [host("ProfilerStep#1", 0, 100 * n + 50)]
        events += [kernel("ncclKernel_AllReduce_RING_LL_Sum_float", 10 + 100 * i, 40, corr=i) for i in range(n)]
        os.utime(write_trace(run / name, events), (PAST, PAST))
    cold = json_of(run, cache=False)
    assert json_of(run) == cold
    analyses.clear()
    assert json_of(run) == cold == json_of(run)
    assert analyses == []
    assert [r["rank"] for r in json.loads(cold)["ranks"]] == [0, 1]


def test_no_report_imports_pandas_and_a_warm_one_not_even_numpy(tmp_path, root):
    """A first report of a Kineto trace parses and analyses on numpy columns: no pandas (0.3-0.9 s to import,
    once most of a small report). A repeated report is read whole: no numpy, parser or analyzer."""
    import subprocess
    import sys

    path = trace_file(tmp_path / "run")
    code = ("import sys; from tracelens import api; from tracelens.renderers import render; "
            "render(api.report(sys.argv[1], jobs=0), sys.argv[2]); print(sorted(m for m in sys.modules "
            "if m.split('.')[0] in ('pandas', 'pyarrow', 'numpy') or m in ('tracelens.parsers.kineto.decode', "
            "'tracelens.parsers.kineto.build', 'tracelens.parsers.nsys', 'tracelens.analyzers.rank', "
            "'tracelens.analyzers.run')))")
    env = {**os.environ, cache.CACHE_ENV: str(root)}
    first = subprocess.run([sys.executable, "-c", code, str(path), "json"], capture_output=True, text=True,
                           env=env, check=True)
    assert [m for m in eval(first.stdout) if not m.startswith("numpy.")] == [
        "numpy", "tracelens.analyzers.rank", "tracelens.analyzers.run", "tracelens.parsers.kineto.build",
        "tracelens.parsers.kineto.decode"], first.stdout
    for fmt in ("json", "text", "markdown"):
        warm = subprocess.run([sys.executable, "-c", code, str(path), fmt], capture_output=True, text=True,
                              env=env, check=True)
        assert warm.stdout.strip() == "[]", (fmt, warm.stdout)


# ------------------------------------------------------------------------------------- the Report layer

@pytest.fixture
def combines(monkeypatch):
    """The runs of ``combine`` (a report served whole from the cache runs none)."""
    import tracelens.analyzers as analyzers

    return counting(monkeypatch, analyzers, "combine", len)


def test_a_repeated_report_is_read_whole_in_every_format(tmp_path, root, parses, combines):
    run = run_dir(tmp_path)
    cold = api.report(run, jobs=0, cache=False)
    assert render(api.report(run, jobs=0), "json") == render(cold, "json") and combines == [2, 2]
    parses.clear(), combines.clear()
    for fmt in ("json", "text", "markdown"):
        assert render(api.report(run, jobs=0), fmt) == render(cold, fmt), fmt
    assert parses == [] and combines == [] and len(report_entries(root)) == 1


def test_each_thing_a_report_depends_on_makes_a_miss(tmp_path, root, combines, monkeypatch):
    run = run_dir(tmp_path)
    json_of(run)

    def again(**kw) -> int:
        combines.clear()
        json_of(run, **kw)
        return len(combines)
    assert again() == 0
    assert again(thresholds=["stall_min_ns=1"]) == 1                 # other thresholds
    assert again(comm_patterns=["volta_sgemm"]) == 1
    os.utime(run / "rank1.json", (PAST + 5, PAST + 5))                # one trace touched
    assert again() == 1 and again() == 0
    # An NCCL log rewritten at the same size: the analyses keep (they know its size), the Report does not.
    log = run / "nccl" / "h.0.log"
    log.write_bytes(log.read_bytes().replace(b"10.0.0.1", b"10.0.0.2"))
    os.utime(log, (PAST + 7, PAST + 7))
    assert again() == 1 and again() == 0
    (run / "config.json").write_text('{"lr": 0.1}')                   # a file the report says it skipped
    os.utime(run / "config.json", (PAST, PAST))
    assert again() == 1 and again() == 0
    assert "not-a-trace" in {w["code"] for w in json.loads(json_of(run))["warnings"]}
    monkeypatch.setattr(cache, "_analysis_stamp", lambda: (("edited.py", 1, 2),))   # the code
    assert again() == 1


def test_a_report_of_the_same_files_named_otherwise_is_its_own_entry(tmp_path, root, monkeypatch):
    # The Report holds each input's path as given: a relative and an absolute name are two Reports.
    run = run_dir(tmp_path)
    monkeypatch.chdir(tmp_path)
    named = {json.loads(json_of(p))["inputs"][0]["path"] for p in (run, "collected", run, "collected")}
    assert named == {str(run / "rank0.json"), "collected/rank0.json"} and len(report_entries(root)) == 2


def test_a_report_of_a_file_just_written_is_not_cached(tmp_path, root, combines):
    path = trace_file(tmp_path / "run", mtime=time.time())
    json_of(path), json_of(path)
    assert combines == [1, 1] and report_entries(root) == []


@pytest.mark.parametrize("damage", ["truncated", "garbage", "flipped", "not a report"])
def test_a_damaged_report_entry_is_rebuilt(tmp_path, root, combines, damage):
    path = trace_file(tmp_path / "run")
    cold = json_of(path, cache=False)
    json_of(path)
    (entry,) = report_entries(root)
    blob = entry.read_bytes()
    if damage == "not a report":        # whole and keyed right, but not a Report of this version
        import pickle

        k = cache.REPORTS.key([cache.ANALYSES.key(path, ())], ())
        (entry_k, _, _) = pickle.loads(blob[16:16 + int.from_bytes(blob[8:16], "little")])
        cache_files.write(entry, cache_files.framed(pickle.dumps((entry_k, b"\x81\xa1x\x01", 0)), []), cache.max_bytes(),
                          [entry.parent])
        assert k != entry_k             # (the test's own key is not the report's: only the entry's is used)
    else:
        entry.write_bytes(damaged(blob, damage))
    combines.clear()
    assert json_of(path) == cold and combines == [1]        # combined again, and cached again
    assert json_of(path) == cold and combines == [1]


def test_a_report_of_traces_alone_follows_the_logs_their_manifest_names(tmp_path, root, combines):
    # The traces named one by one: their NCCL logs come from the manifest, not from the inputs, and the
    # transport verdict reads their lines: a log rewritten at the same size is a new Report.
    run = run_dir(tmp_path)
    traces = [str(run / "rank0.json"), str(run / "rank1.json")]
    json_of(traces), json_of(traces)
    assert combines == [2]
    log = run / "nccl" / "h.1.log"
    log.write_bytes(log.read_bytes().replace(b"eth0", b"eth9"))
    os.utime(log, (PAST + 7, PAST + 7))
    json_of(traces)
    assert combines == [2, 2]


# ------------------------------------------------------------------------------ writes beside the report

def test_a_reports_tables_entry_is_written_beside_it_and_is_the_same_entry(tmp_path, monkeypatch):
    """A report without file workers writes its tables entry from a forked worker while it analyses; the
    entry is there when the report returns, byte for byte the one this process writes itself."""
    from tracelens import pool
    from tracelens.options import ReportOptions

    path = trace_file(tmp_path / "run")
    monkeypatch.setattr(pool, "cores", lambda: 2)
    forked = counting(monkeypatch, cache, "_write_job", lambda layer: layer.folder)
    beside = counting(monkeypatch, cache, "_write_beside", lambda layer: layer.folder)
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "beside"))
    api.report_with([path], ReportOptions())
    assert beside == ["tables", "analyses"] and forked == []      # the tables in the child, not here
    (there,) = entries(tmp_path / "beside")
    monkeypatch.setattr(pool, "cores", lambda: 1)                          # one core: written here
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "here"))
    api.report_with([path], ReportOptions())
    (here,) = entries(tmp_path / "here")
    assert there.read_bytes() == here.read_bytes()
    assert not list((tmp_path / "beside" / "tables").glob(".*.tmp"))


@pytest.mark.slow
def test_ctrl_c_at_any_moment_of_a_first_report_leaves_no_damaged_entry(tmp_path):
    """SIGINT to the process group (what a terminal's Ctrl-C sends: the report and its workers, the cache's
    writer among them) at several moments of a first report of the 54 MB trace: whatever entries are left,
    the report read from them afterwards is the report made without the cache, and no temporary file is
    left behind."""
    import signal
    import subprocess
    import sys

    from conftest import corpus_file

    big = corpus_file("hta/df_index_resolver/df_index_resolver.json.gz")
    env = {**os.environ, cache.CACHE_ENV: str(tmp_path / "cache")}
    cmd = [sys.executable, "-c", "from tracelens.cli import run; run()", "report", str(big), "--format", "json"]
    truth = subprocess.run([*cmd, "--no-cache"], capture_output=True, env=env, check=True).stdout
    for delay in (0.3, 0.5, 0.7, 0.9, 1.1):
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True)
        time.sleep(delay)
        try:
            os.killpg(proc.pid, signal.SIGINT)
        except ProcessLookupError:
            pass                        # already done: its entries are whole
        proc.communicate(timeout=60)
        deadline = time.time() + 10     # a writer that outlived the report (it may not) ends by itself
        while any(p.name.endswith(".tmp") for p in (tmp_path / "cache").rglob("*")) and time.time() < deadline:
            time.sleep(0.05)
        assert not [p for p in (tmp_path / "cache").rglob("*.tmp")], delay
        after = subprocess.run(cmd, capture_output=True, env=env, check=True).stdout
        assert after == truth, delay
        shutil.rmtree(tmp_path / "cache", ignore_errors=True)


# ------------------------------------------------------------------------------------ the renders layer

def render_entries(root: Path) -> list[Path]:
    return sorted((root / "renders").glob("*" + cache.SUFFIX))


@pytest.fixture
def draws(monkeypatch):
    """The renderings really drawn (a rendering read back from the cache draws none)."""
    import tracelens.renderers as renderers

    return counting(monkeypatch, renderers, "render", lambda rep: rep.schema)


def text_of(paths, fmt="text", **view) -> str:
    from tracelens.options import ReportOptions

    return api.rendered_with([str(p) for p in ([paths] if not isinstance(paths, list) else paths)],
                             ReportOptions(jobs=0), fmt, **view)


def test_a_repeated_rendering_is_read_back_and_is_the_rendering(tmp_path, root, draws, combines):
    run = run_dir(tmp_path)
    cold = api.report(run, jobs=0, cache=False)
    for fmt in ("text", "markdown"):
        assert text_of(run, fmt, width=100) == render(cold, fmt, width=100), fmt
    draws.clear(), combines.clear()
    for fmt in ("text", "markdown"):
        assert text_of(run, fmt, width=100) == render(cold, fmt, width=100), fmt
    assert draws == [] and combines == [] and len(render_entries(root)) == 2
    assert text_of(run, "json") == render(cold, "json") and draws == ["tracelens.report/1"]    # JSON: drawn
    assert len(render_entries(root)) == 2


def test_each_thing_a_rendering_depends_on_makes_a_miss(tmp_path, root, draws, monkeypatch):
    run = run_dir(tmp_path)
    text_of(run)

    def again(fmt="text", **view) -> int:
        draws.clear()
        text_of(run, fmt, **view)
        return len(draws)
    assert again() == 0
    for view in ({"width": 80}, {"color": True}, {"top": 3}, {"rank": 1}, {"every": True}, {"every_step": True}):
        assert again(**view) == 1 and again(**view) == 0, view
    assert again("markdown") == 1 and again("markdown") == 0
    for name, value in (("NO_COLOR", "1"), ("TERM", "dumb"), ("COLUMNS", "90")):      # what rich reads
        monkeypatch.setenv(name, value)
        assert again() == 1 and again() == 0, name
    import tracelens.renderers as renderers                # another rich: its files differ
    real = renderers.view_key
    monkeypatch.setattr(renderers, "view_key", lambda fmt, **v: real(fmt, **v) + (("rich/console.py", 1, 2),))
    assert again() == 1 and again() == 0
    monkeypatch.setattr(cache, "_analysis_stamp", lambda: (("edited.py", 1, 2),))        # tracelens' code
    assert again() == 1


def test_a_rank_the_report_lacks_is_refused_warm_too(tmp_path, root):
    from tracelens.errors import UsageError

    run = run_dir(tmp_path)
    text_of(run)
    for _ in range(2):
        with pytest.raises(UsageError, match="--rank 7: no such rank in the report \\(ranks: 0, 1\\)"):
            text_of(run, rank=7)
    assert len(render_entries(root)) == 1


def test_a_warm_text_report_imports_neither_rich_nor_the_renderers(tmp_path, root):
    """The console script, twice: the second prints the same bytes without importing rich or any format's
    renderer (their import and layout were most of a warm text report)."""
    import subprocess
    import sys

    path = trace_file(tmp_path / "run")
    code = ("import sys, atexit; from tracelens import cli; sys.argv[0] = 'tracelens'; "
            "code = cli.main(sys.argv[1:]); sys.stdout.flush(); "
            "print('\\nMODULES', sorted(m for m in sys.modules if m.split('.')[0] == 'rich' "
            "or m.startswith('tracelens.renderers.')), file=sys.stderr)")
    env = {**os.environ, cache.CACHE_ENV: str(root), "COLUMNS": "100"}
    runs = [subprocess.run([sys.executable, "-c", code, "report", str(path)], capture_output=True, text=True,
                           env=env, check=True) for _ in range(2)]
    assert runs[0].stdout == runs[1].stdout and runs[0].stdout.startswith("verdict: ")
    assert "'rich.console'" in runs[0].stderr
    assert runs[1].stderr.strip().endswith("MODULES []"), runs[1].stderr
