"""What users really point tracelens at: run directories holding other JSON files, and several runs at once."""

from __future__ import annotations

import gzip
import json

import pytest

import tracelens
from tracelens.cli import main
from tracelens.errors import UsageError

from conftest import SAMPLES, corpus_file, host, kernel, write_trace


def run(capsys, *args):
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def _step(ts=0, corr=1):
    """One ProfilerStep (1 ms) launching one 100 µs kernel, starting at ``ts`` µs."""
    return [host("ProfilerStep#1", ts, 1000, cat="user_annotation"),
            host("cudaLaunchKernel", ts + 10, 5, cat="cuda_runtime", correlation=corr),
            kernel("gemm", ts + 20, 100, corr=corr)]


def _rank(path, rank, world, ts=0, **kw):
    return write_trace(path, _step(ts), distributedInfo={"rank": rank, "world_size": world, "backend": "nccl"}, **kw)


# --- files that are not traces ------------------------------------------------------------------------------

def _run_dir_with_side_json(tmp_path):
    d = tmp_path / "checkpoint-500"
    d.mkdir()
    _rank(d / "rank0.json", 0, 2)
    _rank(d / "rank1.json.gz", 1, 2, gz=True)
    (d / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 4096}))
    (d / "trainer_state.json").write_text(json.dumps({"best_metric": None, "log_history": [{"loss": 1.0}]}))
    # A tokenizer's vocabulary is megabytes without a "traceEvents" key: scanned to its end, never parsed.
    (d / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {f"tok{i}": i for i in range(100_000)}}}))
    (d / "tokenizer_config.json.gz").write_bytes(gzip.compress(b'{"model_max_length": 2048}'))
    (d / "notes.json").write_text("lr sweep, run 3\n")
    rep = tracelens.analyze(tracelens.load(str(SAMPLES / "one_bucket"), jobs=0))
    (d / "report.json").write_bytes(rep.to_json())      # a saved report, no manifest beside it
    return d


def test_non_trace_json_in_a_directory_is_skipped_with_one_warning(tmp_path, capsys):
    # Before: config.json was parsed as a trace and the whole report stopped with exit code 3.
    d = _run_dir_with_side_json(tmp_path)
    code, out, err = run(capsys, "report", str(d), "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert [r["rank"] for r in data["ranks"]] == [0, 1]
    assert [i["path"] for i in data["inputs"]] == [str(d / "rank0.json"), str(d / "rank1.json.gz")]
    skipped = [w for w in data["warnings"] if w["code"] == "not-a-trace"]
    assert len(skipped) == 1 and skipped[0]["rank"] is None and skipped[0]["count"] == 6
    message = skipped[0]["message"]
    for name in ("config.json", "trainer_state.json", "tokenizer.json", "tokenizer_config.json.gz"):
        assert str(d / name) in message
    assert f"{d / 'report.json'} (a saved tracelens report)" in message
    assert f"{d / 'notes.json'} (not JSON)" in message


def test_a_glob_skips_non_traces_too(tmp_path):
    d = _run_dir_with_side_json(tmp_path)
    traces = tracelens.load(str(d / "*.json*"), jobs=0)
    assert [t.meta.rank for t in traces] == [0, 1]
    assert [w.count for w in traces[0].meta.input_warnings] == [6]


def test_a_non_trace_named_explicitly_is_still_an_input_error(tmp_path, capsys):
    d = _run_dir_with_side_json(tmp_path)
    code, _, err = run(capsys, "report", str(d / "rank0.json"), str(d / "config.json"))
    assert code == 3 and str(d / "config.json") in err and "traceEvents" in err


def test_a_broken_trace_in_a_directory_is_still_an_input_error(tmp_path, capsys):
    d = tmp_path / "run"
    d.mkdir()
    _rank(d / "rank0.json", 0, 2)
    data = gzip.compress(json.dumps({"traceEvents": _step() * 200}).encode())
    (d / "rank1.json.gz").write_bytes(data[: len(data) // 2])      # a rank whose writer died
    (d / "rank2.json").write_text('{"traceEvents": [{"ph": "X", "cat": "kernel",')
    code, _, err = run(capsys, "report", str(d))
    assert code == 3 and "rank1.json.gz" in err


def test_a_directory_of_nothing_but_side_files_names_them(tmp_path, capsys):
    (tmp_path / "config.json").write_text("{}")
    code, _, err = run(capsys, "report", str(tmp_path))
    assert code == 2 and "no trace files found" in err and "config.json" in err


def test_a_run_directory_own_report_and_list_form_traces(tmp_path):
    # tracelens collect writes report.json next to manifest.json: left out without a warning. A trace in the
    # Chrome list form ([{"ph": ...}, ...]) is a trace.
    d = tmp_path / "run"
    d.mkdir()
    (d / "manifest.json").write_text(json.dumps({"schema": "tracelens.manifest/1", "ranks": []}))
    (d / "report.json").write_text(json.dumps({"schema": "tracelens.report/1"}))
    (d / "rank0.json").write_text(json.dumps(_step()))
    traces = tracelens.load(str(d), jobs=0)
    assert [t.meta.source for t in traces] == [str(d / "rank0.json")]
    assert "not-a-trace" not in {w.code for w in tracelens.analyze(traces).warnings}


# --- several runs at once -----------------------------------------------------------------------------------

def test_runs_of_different_world_sizes_stop_with_exit_2(tmp_path, capsys):
    # Before: the 2-rank and 4-rank runs were averaged into one 4-rank report (ranks 0 and 1 twice).
    (tmp_path / "bs32").mkdir()
    (tmp_path / "bs64").mkdir()
    for k in range(2):
        _rank(tmp_path / "bs32" / f"rank{k}.json", k, 2)
    for k in range(4):
        _rank(tmp_path / "bs64" / f"rank{k}.json", k, 4)
    code, out, err = run(capsys, "report", str(tmp_path))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "2 different runs" in err and "world sizes 2, 4" in err
    assert f"{tmp_path / 'bs32'}/: rank0.json, rank1.json" in err
    assert f"{tmp_path / 'bs64'}/: rank0.json, rank1.json, rank2.json, … (4 files)" in err
    assert "tracelens report " + str(tmp_path / "bs") in err          # how to pick one


def test_the_same_ranks_in_two_folders_are_two_runs(tmp_path):
    for run_name in ("lr3e-4", "lr1e-3"):
        (tmp_path / run_name).mkdir()
        for k in range(2):
            _rank(tmp_path / run_name / f"rank{k}.json", k, 2)
    with pytest.raises(UsageError) as err:
        tracelens.load(str(tmp_path), jobs=0)
    assert err.value.exit_code == 2
    assert str(tmp_path / "lr3e-4") in str(err.value) and str(tmp_path / "lr1e-3") in str(err.value)


def test_traces_hours_apart_are_two_runs(tmp_path):
    # Same world size, ranks 0 and 1 of 2, but rank 1 starts 2 h (7.2e9 µs) after rank 0: two runs.
    (tmp_path / "run").mkdir()
    _rank(tmp_path / "run" / "rank0.json", 0, 2, ts=1_700_000_000_000_000)
    _rank(tmp_path / "run" / "rank1.json", 1, 2, ts=1_700_000_000_000_000 + 7_200_000_000)
    with pytest.raises(UsageError, match=r"2 different runs \(starts 2\.0 h apart\)") as err:
        tracelens.load(str(tmp_path), jobs=0)
    assert "started 2023-11-14 22:13:20 UTC" in str(err.value)      # 1.7e15 µs after the epoch, by hand
    # The folder holds both: the advice names the first run's files instead.
    assert f"tracelens report {tmp_path / 'run' / 'rank0.json'}" in str(err.value)


def test_one_rank_twice_in_one_folder_is_refused(tmp_path):
    _rank(tmp_path / "rank0.json", 0, 2)
    _rank(tmp_path / "rank0_old.json", 0, 2)
    _rank(tmp_path / "rank1.json", 1, 2)
    with pytest.raises(UsageError, match="rank 0 is claimed by") as err:
        tracelens.load(str(tmp_path), jobs=0)
    assert str(tmp_path / "rank0_old.json") in str(err.value)


def test_a_partial_run_minutes_apart_is_one_run(tmp_path):
    # Ranks 0 and 3 of 8, rank 3 starting 10 minutes later, a third trace without world size: one run.
    _rank(tmp_path / "rank0.json", 0, 8, ts=1_700_000_000_000_000)
    _rank(tmp_path / "rank3.json", 3, 8, ts=1_700_000_000_000_000 + 600_000_000)
    write_trace(tmp_path / "rank5.json", _step(1_700_000_000_000_000))
    traces = tracelens.load(str(tmp_path), jobs=0)
    assert [t.meta.rank for t in traces] == [0, 3, 5]


@pytest.mark.parametrize("folder", sorted(p.name for p in SAMPLES.iterdir() if p.is_dir()))
def test_every_bundled_sample_is_one_run(folder):
    # Each folder holds one run (docs/samples.md): it still reports, every rank once.
    ranks = [t.meta.rank for t in tracelens.load(str(SAMPLES / folder), jobs=0)]
    assert ranks and len(set(ranks)) == len(ranks)


def test_the_corpus_rank_pair_is_one_run():
    # hta/trace_filter: ranks 0 and 1 of one 128-rank job (corpus.md), a partial rank set.
    folder = corpus_file("hta/trace_filter/sampled_rank-0.json.gz").parent
    assert [t.meta.rank for t in tracelens.load(str(folder), jobs=0)] == [0, 1]


def test_runs_named_by_relative_and_absolute_paths_still_give_one_line(tmp_path, monkeypatch, capsys):
    for name, world in (("bs32", 2), ("bs64", 4)):
        (tmp_path / name).mkdir()
        _rank(tmp_path / name / "rank0.json", 0, world)
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "report", "bs32", str(tmp_path / "bs64"))
    assert code == 2 and err.count("\n") == 1 and "bs32/: rank0.json" in err
