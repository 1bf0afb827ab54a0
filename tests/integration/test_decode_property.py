"""One corrupted field of one event, in real corpus traces: the report must not change beyond that event.

Each case takes a corpus trace, writes it back as JSON (the clean file), and writes a copy in which one
field of one randomly chosen event has a wrong type (the corrupted file). What the report of the corrupted
file must equal:

- a recoverable value (a number written as text, a whole number written as a float): the clean report;
- an unrecoverable one (garbage text, null, a list, an object, a fraction where an id belongs, a list as
  ``ph``) in a field the event's kind reads: the report of the clean file without that event;
- the same in a field that kind does not read (``ts`` of a metadata event, anything but ``ph`` of a flow
  event): the clean report;
- a number as ``name``: the report of the clean file whose event is named by that number's text.

Reports are compared as JSON, except the input paths and sizes and the two warnings only the corrupted
file may have: ``coerced-values`` or ``malformed-events``, which must then name the field, count one and
point at the event's index.
"""

from __future__ import annotations

import json
import random

import pytest

from tracelens.parsers.kineto.schema import Args

from fixtures.findings import placeless_report
from conftest import corpus_file

TRACES = [
    "hta/trace_filter/sampled_rank-0.json.gz",                     # ProfilerSteps, SendRecv comm, int µs
    "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz",  # syncs, no steps
    "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",   # ROCm, string streams, float µs + base
    "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",  # gloo CPU-only
    "hta/distributed_info_unavailable/distributed_info_not_found.json.gz",  # nccl:* with Input Dims, no GPU
    "hta/critical_path/cuda_event_sync_multi_stream/event_sync_trace.json.gz",
    "kineto_misc/kineto_unit_test_cuda_sync/kineto_after_fix_trace.json",
    "hta/nccl_parser_config/nccl_data.json.gz",                    # full collective args
    "tracelens_amd/b200/eager_trace.json.gz",                      # modern collective args, no M events
]
NUMERIC = {"ts", "dur", "args.bytes", "args.In msg nelems", "args.Out msg nelems", "args.In msg size",
           "args.Out msg size", "args.Group size"}            # int or float in the decoder
IDS = {"pid", "tid", "args.correlation", "args.External id", "args.device", "args.stream"}   # int or text
ARGS = {f"args.{name}" for name in Args.__struct_encode_fields__}
READ = {"X": {"ph", "ts", "dur", "cat", "name", "pid", "tid", "args"} | ARGS,
        "M": {"ph", "name", "pid", "tid", "args"} | ARGS}
KINDS = [  # (field, corruption)
    ("ts", "text"), ("ts", "whole-float"), ("ts", "garbage"), ("ts", "null"), ("ts", "list"), ("ts", "object"),
    ("dur", "text"), ("dur", "whole-float"), ("dur", "garbage"), ("dur", "null"), ("dur", "list"),
    ("dur", "object"), ("args.bytes", "text"), ("args.bytes", "garbage"), ("args.In msg nelems", "text"),
    ("args.Out msg nelems", "text"), ("args.Group size", "text"), ("args.In msg nelems", "garbage"),
    ("args.correlation", "whole-float"), ("args.correlation", "fraction"), ("args.External id", "whole-float"),
    ("pid", "whole-float"), ("tid", "whole-float"), ("args.stream", "whole-float"), ("name", "number"),
    ("ph", "list"), ("args", "list"),
]
CASES = 135   # five rounds of every kind
NEW_CODES = {"coerced-values", "malformed-events"}


def _get(event: dict, field: str):
    head, _, rest = field.partition(".")
    if rest:
        args = event.get(head)
        return args.get(rest, KeyError) if isinstance(args, dict) else KeyError
    return event.get(head, KeyError)


def _set(event: dict, field: str, value) -> None:
    head, _, rest = field.partition(".")
    if rest:
        event[head][rest] = value
    else:
        event[head] = value


def _fits(value, corruption: str) -> bool:
    if value is KeyError or value is None or isinstance(value, bool):
        return False
    if corruption in ("text", "garbage", "null", "list", "object"):
        return isinstance(value, (int, float)) or corruption != "text"
    if corruption in ("whole-float", "fraction"):
        return isinstance(value, int)
    return True


def _corrupt(value, corruption: str, rng: random.Random):
    return {"text": lambda: json.dumps(value), "whole-float": lambda: float(value),
            "garbage": lambda: rng.choice(["soon", "", "n/a", "12 µs", "0x1f"]), "null": lambda: None,
            "list": lambda: [value], "object": lambda: {"value": value}, "fraction": lambda: value + 0.5,
            "number": lambda: rng.choice([7, 1234567, 2.5])}[corruption]()


def _recoverable(field: str, corruption: str) -> bool:
    if corruption == "text":
        return field in NUMERIC
    return corruption in ("whole-float", "number")


_loaded: dict = {}


def _trace(rel: str) -> tuple[dict, list, list]:
    """(document without its events, the events, each event's JSON text), read once per trace."""
    if rel not in _loaded:
        import gzip

        path = corpus_file(rel)
        with (gzip.open(path, "rt") if path.name.endswith(".gz") else open(path)) as fh:
            doc = json.load(fh)
        events = doc.pop("traceEvents")
        _loaded[rel] = doc, events, [json.dumps(e) for e in events]
    return _loaded[rel]


def _write(path, head: dict, pieces) -> None:
    """The document as JSON text, its events given as their JSON text."""
    front = json.dumps(head)[:-1]
    path.write_text(front + (", " if head else "") + '"traceEvents": [' + ", ".join(pieces) + "]}")


def _split_warnings(data: dict) -> list:
    new = [w for w in data["warnings"] if w["code"] in NEW_CODES]
    data["warnings"] = [w for w in data["warnings"] if w["code"] not in NEW_CODES]
    return new


_clean_reports: dict = {}


@pytest.mark.parametrize("case", range(CASES))
def test_one_corrupted_field_costs_only_its_event(tmp_path, case):
    rng = random.Random(case)
    field, corruption = KINDS[case % len(KINDS)]
    order = TRACES[:]
    rng.shuffle(order)
    for rel in order:
        head, events, pieces = _trace(rel)
        candidates = [i for i, e in enumerate(events) if _fits(_get(e, field), corruption)]
        if candidates:
            break
    else:
        pytest.fail(f"no corpus trace has a {field} to corrupt as {corruption}")
    index = rng.choice(candidates)
    name = corpus_file(rel).name.removesuffix(".gz")

    def write(folder: str, replaced: str | None):
        (tmp_path / folder).mkdir()
        path = tmp_path / folder / name
        _write(path, head, pieces[:index] + ([replaced] if replaced is not None else []) + pieces[index + 1:])
        return path

    event = events[index]
    phase = event.get("ph")
    read = field in READ.get(phase, {"ph"})
    bad = _corrupt(_get(event, field), corruption, rng)
    changed = json.loads(pieces[index])
    _set(changed, field, bad)
    got = placeless_report(write("corrupted", json.dumps(changed)))
    new = _split_warnings(got)

    if corruption == "number":
        _set(changed, field, str(bad))
        expected = placeless_report(write("reference", json.dumps(changed)))
    elif _recoverable(field, corruption) or not read:
        if rel not in _clean_reports:
            _clean_reports[rel] = placeless_report(write("clean", pieces[index]))
        expected = json.loads(json.dumps(_clean_reports[rel]))
    else:
        expected = placeless_report(write("reference", None))
    assert _split_warnings(expected) == []
    assert got == expected, f"{rel}: event {index} ({phase}) {field}={bad!r}"

    # The warning: only when the event's kind reads that field and the value was not already acceptable.
    if read and corruption != "number" and not (corruption == "whole-float" and field in NUMERIC):
        code = "coerced-values" if _recoverable(field, corruption) else "malformed-events"
        assert [(w["code"], w["count"]) for w in new] == [(code, 1)], f"{rel}: event {index} {field}={bad!r}"
        assert f"traceEvents[{index}]" in new[0]["message"] and field in new[0]["message"]
    else:
        assert new == []
