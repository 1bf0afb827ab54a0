"""Finding NCCL Inspector logs among the inputs (parsers.discover) and reading them for combine (nccl.inputs)."""

from __future__ import annotations

import json

from fixtures import synth
from fixtures.synth.inspector import write_inspector
from tracelens.parsers import discover, nccl

SC = synth.SCENARIOS["xrank_shared"]


def test_a_dump_folder_beside_traces(tmp_path):
    traces = synth.write(SC, tmp_path)
    logs = write_inspector(SC, tmp_path)
    stray = logs[0].parent / "notes.log"
    stray.write_text("copied by hand\n")
    debug = tmp_path / "nccl-debug.log"
    debug.write_text("node0:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n")
    files = discover([str(tmp_path)])
    assert sorted(files) == sorted(traces)
    assert sorted(files.inspector_logs) == sorted(logs)
    # The debug log stays a debug log; a file of the dump folder that is not Inspector output is skipped.
    assert files.nccl_logs == [debug]
    assert (stray, "not NCCL Inspector output") in files.logs_skipped


def test_inspector_logs_alone_named_or_by_glob(tmp_path):
    (log,) = write_inspector(SC, tmp_path, gz=True, one_file=True)
    moved = tmp_path / "gathered.log.gz"
    log.rename(moved)
    for args in ([str(moved)], [str(tmp_path / "*.gz")], [str(tmp_path)]):
        files = discover(args)
        assert list(files) == [] and files.inspector_logs == [moved], args


def test_notes_on_what_could_not_be_read(tmp_path):
    (log,) = write_inspector(SC, tmp_path, ranks=[0], version="v4.0")
    lines = log.read_text().splitlines()
    newer = json.loads(lines[1])
    newer["metadata"]["inspector_output_format_version"] = "v4.7"
    newer["coll_perf"]["coll_future_field"] = 3
    lines[1] = json.dumps(newer)
    lines[2] = lines[2][:40]                        # one line cut in the middle
    log.write_text("\n".join(lines) + "\n")
    (empty,) = write_inspector(SC, tmp_path / "other", ranks=[1])
    empty.write_text("")
    got = nccl.inputs([], [], inspector=[log, empty])
    assert [x.path for x in got.inspector] == [str(log)]
    codes = {code: (n, msg) for code, n, msg in got.notes}
    # One line of each kind of trouble, as made above.
    assert codes["inspector-not-json"][0] == 1
    assert codes["inspector-unknown-version"][0] == 1 and "v4.7" in codes["inspector-unknown-version"][1]
    assert codes["inspector-unknown-fields"][0] == 1 and "coll_future_field" in codes["inspector-unknown-fields"][1]
    assert codes["nccl-log-skipped"][0] == 1
    # The other records are whole: every all-reduce of rank 0 but the cut one.
    assert got.inspector[0].records == SC.steps * len(SC.buckets) - 1
