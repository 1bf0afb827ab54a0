"""The claims audit: every warning and critical finding on every corpus trace, checked against its raw events.

For each finding a small computation of its own reads the trace as a reviewer would (json over the Kineto
events, sqlite3 over the nsys export; no tracelens code) and recomputes the finding's headline number:
exposed communication and what the verdict claims (overlap pattern), the device idle a sync caused, the
time nothing but copies ran, the observed exposed all-reduce of the bucket model, a dimension's exposed
communication, the NCCL calls of a CPU-only trace. Communication is what the raw names say it is (NCCL
kernels, ``ncclDevKernel``/``ncclKernel``), compute every other kernel, copies the memcpy/memset records.
The step windows are taken from the report (their rule, the device work launched in a step, is tested in
test_steps.py); everything measured inside them is recomputed here. A finding of an id without an audit
fails: a new warning on the corpus needs its check. docs/metrics.md ("The corpus findings, checked") lists
them with why each is right.
"""

from __future__ import annotations

import bisect
import gzip
import json
import re
import sqlite3
import statistics
from functools import cached_property

import pytest

import tracelens

from conftest import CORPUS_TRACES, corpus_file

TOL_NS = 2_000            # float µs timestamps: a few ns per event, far below this
REL = 0.002


def close(a: int, b: int) -> bool:
    return abs(a - b) <= max(TOL_NS, REL * max(abs(a), abs(b)))


# ------------------------------------------------------------------------------------------ interval sums

def merge(xs):
    out = []
    for s, e in sorted(x for x in xs if x[1] > x[0]):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def length(xs) -> int:
    return sum(e - s for s, e in merge(xs))


def clip(xs, lo, hi):
    return [(max(s, lo), min(e, hi)) for s, e in xs if e > lo and s < hi]


def both(a, b):
    """The time covered by both lists."""
    a, b, out, j = merge(a), merge(b), 0, 0
    for s, e in a:
        while j < len(b) and b[j][1] <= s:
            j += 1
        k = j
        while k < len(b) and b[k][0] < e:
            out += min(e, b[k][1]) - max(s, b[k][0])
            k += 1
    return out


def minus(a, b):
    return length(a) - both(a, b)


# ------------------------------------------------------------------------------------------- raw readers

COMM = re.compile(r"^(void )?nccl|^ncclDevKernel|^ncclKernel", re.IGNORECASE)
SYNC_CALLS = re.compile(r"^(cuda)(Stream|Device|Event)Synchronize$|^cudaMemcpy$|^cudaMemset$")
OPS = (("all_to_all", r"all_?to_?all"), ("all_reduce", r"all_?reduce"), ("all_gather", r"all_?gather"),
       ("reduce_scatter", r"reduce_?scatter"), ("broadcast", r"broadcast"), ("send_recv", r"send|recv"))


def kernel_op(name: str) -> str | None:
    """Without an NCCL scope around its launch, what the kernel's own name says (``..._SendRecv...``)."""
    return op_of(re.sub(r"^.*?nccl(Dev)?Kernel_", "", name, flags=re.IGNORECASE).split("(")[0])


def op_of(scope: str | None) -> str | None:
    for op, rx in OPS:
        if scope and re.search(rx, scope, re.IGNORECASE):
            return op
    return None


class Kineto:
    """A Kineto trace's device work (per device: kernels, copies, with their launch call and the NCCL scope
    around it) and host calls, times in absolute ns."""

    def __init__(self, path):
        opener = gzip.open if str(path).endswith(".gz") else open
        with opener(path, "rt") as f:
            doc = json.load(f)
        base = doc.get("baseTimeNanoseconds", 0)
        self.events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
        self._devices: dict = {}
        for e in self.events:
            e["s"] = base + round(float(e["ts"]) * 1000)
            e["e"] = e["s"] + round(float(e.get("dur", 0)) * 1000)

    @cached_property
    def launches(self):
        return {e["args"]["correlation"]: e for e in self.events
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}

    @cached_property
    def scopes(self) -> dict:
        """Per thread, the NCCL scopes (``nccl:*``, ``record_param_comms``) sorted by start."""
        out: dict = {}
        for e in self.events:
            if e["name"].startswith("nccl:") or e["name"] == "record_param_comms":
                out.setdefault(e["tid"], []).append(e)
        for v in out.values():
            v.sort(key=lambda e: e["s"])
        return out

    def device(self, dev: int) -> list[dict]:
        if dev not in self._devices:
            self._devices[dev] = self._device(dev)
        return self._devices[dev]

    def _device(self, dev: int) -> list[dict]:
        out = []
        for e in self.events:
            if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
                continue
            if e["args"].get("device", e.get("pid")) != dev:
                continue
            kind = "copy" if e["cat"] != "kernel" else "comm" if COMM.search(e["name"]) else "compute"
            launch = self.launches.get(e["args"].get("correlation"))
            op = (self._op(launch) or kernel_op(e["name"])) if kind == "comm" else None
            out.append({"kind": kind, "name": e["name"], "s": e["s"], "e": e["e"],
                        "launch": launch["s"] if launch else None, "op": op})
        return out

    def _op(self, launch):
        if launch is None:
            return None
        scopes = self.scopes.get(launch["tid"], [])
        k = bisect.bisect_right([e["s"] for e in scopes], launch["s"]) if scopes else 0
        around = [e for e in scopes[max(0, k - 8):k] if launch["s"] < e["e"]]      # nesting is a few deep
        return next((op_of(e["name"]) for e in reversed(around) if op_of(e["name"])), None)

    def host_calls(self, names: re.Pattern) -> list[dict]:
        return [e for e in self.events if e.get("cat") in ("cuda_runtime", "cuda_driver") and names.search(e["name"])]

    def count_host(self, rx: str) -> int:
        return sum(1 for e in self.events if e.get("cat") in ("cpu_op", "user_annotation") and re.search(rx, e["name"]))


class Nsys:
    """An nsys export's device work and runtime calls, times in absolute ns (session start + capture clock)."""

    def __init__(self, path):
        self.db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        (self.base,) = self.db.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
        self.strings = dict(self.db.execute("SELECT id, value FROM StringIds"))
        self._devices: dict = {}

    def device(self, dev: int) -> list[dict]:
        if dev not in self._devices:
            self._devices[dev] = self._device(dev)
        return self._devices[dev]

    def _device(self, dev: int) -> list[dict]:
        q = self.db.execute
        runtime = {(pid, c): (s, tid) for s, tid, c, pid in q(
            "SELECT start, globalTid, correlationId, globalTid / 16777216 FROM CUPTI_ACTIVITY_KIND_RUNTIME")}
        nvtx = [(s, e, t, tid) for s, e, t, tid in q("SELECT start, end, text, globalTid FROM NVTX_EVENTS "
                                                     "WHERE text LIKE 'nccl:%' AND end IS NOT NULL")]
        out = []
        for s, e, name, c, pid in q("SELECT start, end, shortName, correlationId, globalPid / 16777216 FROM "
                                    "CUPTI_ACTIVITY_KIND_KERNEL WHERE deviceId = ?", (dev,)):
            name = self.strings[name]
            comm = bool(COMM.search(name))
            launch = runtime.get((pid, c))
            op = None
            if comm and launch:
                op = next((op_of(t) for a, b, t, tid in nvtx if tid == launch[1] and a <= launch[0] < b), None)
            op = op or (kernel_op(name) if comm else None)
            out.append({"kind": "comm" if comm else "compute", "name": name, "s": self.base + s, "e": self.base + e,
                        "launch": None if launch is None else self.base + launch[0], "op": op})
        for table in ("CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
            out += [{"kind": "copy", "name": table, "s": self.base + s, "e": self.base + e, "launch": None, "op": None}
                    for s, e in q(f"SELECT start, end FROM {table} WHERE deviceId = ?", (dev,))]
        return out

    def host_calls(self, names: re.Pattern) -> list[dict]:
        return [{"name": self.strings[n], "s": self.base + s, "e": self.base + e} for s, e, n in self.db.execute(
            "SELECT start, end, nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME") if names.search(self.strings[n])]


def raw(path):
    return Nsys(path) if str(path).endswith(".sqlite") else Kineto(path)


# ------------------------------------------------------------------------------------------------ audits

def sets(work, lo, hi):
    iv = lambda kind, op=None: clip([(w["s"], w["e"]) for w in work if w["kind"] == kind
                                     and (op is None or op(w))], lo, hi)
    return iv("comm"), iv("compute"), iv("copy")


def audit_pattern(r, rep, d):
    """Exposed communication of the step, and what the verdict claims, from the kernels in the window."""
    ev = d.evidence
    st = step_of(rep, d)
    lo, hi = st.start_ns, st.end_ns
    work = r.device(rank_of(rep, d).device)
    C, K, _ = sets(work, lo, hi)
    comm, overlap = length(C), both(C, K)
    assert close(comm, ev["comm_ns"]) and close(comm - overlap, ev["exposed_comm_ns"]), (comm, overlap, ev)
    pct = 100 * overlap / comm
    p = ev["compute_phase_end_ns"]
    tail = length(clip(C, p, hi))
    def issued_during():
        """The tail time of collectives launched before the last compute launch of the phase."""
        last = max(w["launch"] for w in work if w["kind"] == "compute" and lo <= w["s"] < p and w["launch"])
        during = [(w["s"], w["e"]) for w in work if w["kind"] == "comm" and lo <= w["s"] < hi and w["launch"]
                  and w["launch"] < last]
        return length(clip(during, p, hi))

    if ev["pattern"] in ("two-phase", "backlog"):
        # Most communication runs after the compute phase, and the phase holds at least half the compute.
        assert tail >= 0.8 * comm and 2 * length(clip(K, lo, p)) >= length(K), (tail, comm)
    if ev["pattern"] == "backlog":
        assert close(issued_during(), ev["backlog_ns"]) and 2 * ev["backlog_ns"] > tail
    if ev["pattern"] == "two-phase" and ev.get("backlog_ns") is not None:
        # Two-phase says the tail was issued at the end of compute: at most half of it was issued during it.
        assert close(issued_during(), ev["backlog_ns"]) and 2 * ev["backlog_ns"] <= tail
    if ev["pattern"] == "serialized":
        gaps = merge(C)
        bursts = 1 + sum(1 for a, b in zip(gaps, gaps[1:]) if both([(a[1], b[0])], K) > 0)
        assert pct <= 10 and bursts >= 3 and bursts == ev["bursts"], (pct, bursts)
    if ev["pattern"] == "partial":
        assert pct < 50 and 2 * length(clip(K, lo, p)) >= length(K)
        if tail >= 0.8 * comm:      # a two-phase shape whose tail was mostly issued during compute
            assert close(issued_during(), ev["backlog_ns"]) and 2 * ev["backlog_ns"] > tail
    # Counts per operation, as the sentence states them.
    if ev.get("ops"):
        ops = {}
        for w in work:
            if w["kind"] == "comm" and lo <= w["s"] < hi and w["op"]:
                ops[w["op"]] = ops.get(w["op"], 0) + 1
        assert ops == ev["ops"], (ops, ev["ops"])


def audit_sync(r, rep, d):
    """The device idle the syncs caused: per call, the idle from the drain it waited through to the next
    device work, charged once per drain, at most the call's blocked time."""
    ev = d.evidence
    busy = merge([(w["s"], w["e"]) for w in r.device(rank_of(rep, d).device)])
    st = step_of(rep, d)
    calls = sorted((c["s"], c["e"]) for c in r.host_calls(SYNC_CALLS))
    if d.step is not None:
        calls = [c for c in calls if st.start_ns <= c[0] < st.end_ns]
    total, charged = 0, set()
    for s, e in calls:
        before = [i for i, b in enumerate(busy) if b[0] <= e]
        if not before or busy[before[-1]][1] > e or before[-1] + 1 >= len(busy):
            continue
        i = before[-1]
        if busy[i][1] > s and i not in charged:
            charged.add(i)
            total += min(busy[i + 1][0] - busy[i][1], e - s)
    assert close(total, ev["idle_caused_ns"]), (total, ev["idle_caused_ns"])
    assert ev["impact_ns"] <= ev["idle_caused_ns"] and ev["impact_ns"] < ev["blocked_ns"]


def audit_copies(r, rep, d):
    """The time the device did nothing but copy or set memory, and its share of the window."""
    ev = d.evidence
    st = step_of(rep, d)
    C, K, X = sets(r.device(rank_of(rep, d).device), st.start_ns, st.end_ns)
    exposed = minus(X, C + K)
    assert close(exposed, ev["exposed_copy_ns"]), (exposed, ev["exposed_copy_ns"])
    assert round(100 * exposed / (st.end_ns - st.start_ns)) == round(100 * ev["copy_fraction"])


def audit_bucket(r, rep, d):
    """The bucket model's observed number: the median step's exposed all-reduce time."""
    ev = d.evidence
    rank = rank_of(rep, d)
    work = r.device(rank.device)
    per_step = []
    for st in rank.steps:
        C, K, _ = sets([w for w in work if w["kind"] != "comm" or w["op"] == "all_reduce"], st.start_ns, st.end_ns)
        per_step.append(minus(C, K))
    assert close(statistics.median_low(per_step), ev["observed_exposed_ns"]), (per_step, ev)
    assert ev["suggested_exposed_ns"] < ev["observed_exposed_ns"]


def audit_dimension(r, rep, d):
    """A dimension's exposed communication over the rank's steps: the collectives of the operations it lists
    (on these traces each operation serves one dimension: checked against the rank's other entries), and
    how many there are."""
    ev = d.evidence
    rank = rank_of(rep, d)
    ops = set(ev["ops"])
    others = [x for x in rep.diagnoses if x.id == "parallelism" and x.rank == d.rank and x is not d]
    assert all(not ops & set(x.evidence["ops"]) for x in others), "an operation in two dimensions: pick by group"
    work = [w for w in r.device(rank.device) if w["kind"] != "comm" or w["op"] in ops]
    exposed = sum(minus(*sets(work, st.start_ns, st.end_ns)[:2]) for st in rank.steps)
    count = sum(1 for w in work if w["kind"] == "comm" and any(st.start_ns <= w["s"] < st.end_ns for st in rank.steps))
    assert close(exposed, ev["exposed_comm_ns"]) and count == ev["collectives"], (exposed, count, ev)


def audit_no_gpu(r, rep, d):
    """No device work at all, and the NCCL calls the sentence counts."""
    assert not any(e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime") for e in r.events)
    assert r.count_host(r"^nccl:|^nccl[A-Z]") == d.evidence["nccl_calls"] > 0


def audit_straggler(r, rep, d):
    """The rank the others wait for: the comm kernels of the ranks paired in order; at each pair where it
    starts last (by at least 10 µs), each other rank waits its duration minus the shorter one (the transfer)."""
    ev = d.evidence
    assert "late_count" in ev, f"no audit for a straggler by step time: {d.title}"
    ranks = {x.rank: sorted((w for w in r.device(x.device) if w["kind"] == "comm"), key=lambda w: w["s"])
             for x in rep.ranks}
    late = caused = 0
    for inst in zip(*ranks.values()):
        by_rank = dict(zip(ranks, inst))
        first = min(w["s"] for w in inst)
        if by_rank[d.rank]["s"] - first < 10_000 or by_rank[d.rank]["s"] < max(w["s"] for w in inst):
            continue
        transfer = min(w["e"] - w["s"] for w in inst)
        late += 1
        caused += sum((w["e"] - w["s"]) - transfer for k, w in by_rank.items() if k != d.rank)
    assert late == ev["late_count"] and close(caused, ev["caused_wait_ns"]), (late, caused, ev)


def audit_clocks(readers, rep, d):
    """Offsets too uncertain to correct: the end-time differences of the same collectives (each operation's
    in order) between the reference rank and the other spread (p90 - p10) more than the threshold."""
    ev = d.evidence
    for unit in ev["uncertain_units"]:
        for rank in unit["ranks"]:
            diffs = []
            mine = {k: sorted((w for w in readers[k].device(rank_of(rep, k).device) if w["kind"] == "comm"),
                              key=lambda w: w["s"]) for k in (ev["reference_rank"], rank)}
            for op in {w["op"] for w in mine[rank]}:
                pairs = zip(*([w for w in mine[k] if w["op"] == op] for k in mine))
                diffs += [b["e"] - a["e"] for a, b in pairs]
            q = statistics.quantiles(diffs, n=10)
            assert q[-1] - q[0] > ev["max_spread_ns"], (q, ev)


AUDITS = {"straggler": audit_straggler, "overlap-pattern": audit_pattern, "sync-stall": audit_sync, "memcpy-bound": audit_copies,
          "bucket-size": audit_bucket, "parallelism": audit_dimension, "no-gpu-activity": audit_no_gpu}


def rank_of(rep, d):
    rank = d if isinstance(d, int) else d.rank
    return next(r for r in rep.ranks if r.rank == rank)


def step_of(rep, d):
    steps = rank_of(rep, d).steps
    if d.step is None:            # a whole-trace window, or a finding about the rank: its first and last step
        return type("W", (), {"start_ns": steps[0].start_ns, "end_ns": steps[-1].end_ns})
    return next(s for s in steps if s.step == d.step)


CORPUS = CORPUS_TRACES


@pytest.mark.parametrize("rel", CORPUS)
def test_every_warning_is_what_the_raw_events_say(rel):
    path = corpus_file(rel)
    rep = tracelens.analyze(tracelens.load(str(path)))
    loud = [d for d in rep.diagnoses if d.severity in ("warning", "critical")]
    r = raw(path) if loud else None
    for d in loud:
        assert d.id in AUDITS, f"{rel}: no audit for {d.id} ({d.title}): add one that checks it on the raw events"
        AUDITS[d.id](r, rep, d)


PAIR = ["hta/trace_filter/sampled_rank-0.json.gz", "hta/trace_filter/sampled_rank-1.json.gz"]


def test_the_real_pair_together():
    # The two ranks of one job, reported together: the cross-rank findings join the per-rank ones, each
    # rank's checked on its own file.
    paths = [corpus_file(p) for p in PAIR]
    rep = tracelens.analyze(tracelens.load([str(p) for p in paths]))
    readers = {rank: raw(p) for rank, p in enumerate(paths)}
    loud = [d for d in rep.diagnoses if d.severity in ("warning", "critical")]
    assert {d.id for d in loud} == {"clock-offset", "parallelism", "overlap-pattern"}
    for d in loud:
        if d.id == "clock-offset":
            audit_clocks(readers, rep, d)
        else:
            AUDITS[d.id](readers[d.rank], rep, d)


# The findings the audit confirms on the corpus today, as docs/metrics.md lists them: a change that adds,
# drops or moves one shows here (and the list there is updated with why it is right).
EXPECTED = {
    "hta/df_index_resolver/df_index_resolver.json.gz": {("overlap-pattern", 1, s) for s in (2, 3, 4, 5, 6)},
    "hta/distributed_info_unavailable/distributed_info_not_found.json.gz": {("no-gpu-activity", 0, None)},
    "hta/nccl_parser_config/nccl_data.json.gz": {("bucket-size", 0, None),
                                                 *(("overlap-pattern", 0, s) for s in (4, 5, 6))},
    "hta/negative_queue_length_values_check/rank0.json.gz": {("parallelism", 0, None),
                                                            *(("overlap-pattern", 0, s) for s in range(550, 555))},
    "hta/trace_filter/sampled_rank-0.json.gz": {("parallelism", 0, None), ("overlap-pattern", 0, 551),
                                               ("overlap-pattern", 0, 552)},
    "hta/trace_filter/sampled_rank-1.json.gz": {("parallelism", 1, None), ("overlap-pattern", 1, 551),
                                               ("overlap-pattern", 1, 552)},
    "nsys/nsys-ai/h100_2gpu_1s.sqlite": {("memcpy-bound", 0, None), ("memcpy-bound", 1, None)},
    # Rank 0's serialized entry is info: 11.40 of its 17.17 ms exposed is waiting for rank 1 (the straggler).
    "nsys/nsys-ai/mfu_2gpu_before.sqlite": {("straggler", 1, None)},
    "nsys/pipit/saxpy-mpi-cuda_nsys_perlmutter0.sqlite": {("sync-stall", 0, None)},
}


def test_the_corpus_findings_are_the_listed_ones():
    got = {}
    for rel in CORPUS:
        rep = tracelens.analyze(tracelens.load(str(corpus_file(rel))))
        loud = {(d.id, d.rank, d.step) for d in rep.diagnoses if d.severity in ("warning", "critical")}
        if loud:
            got[rel] = loud
    # Others' findings may come and go with their own rules; the ones this audit's issue is about must not.
    mine = {"overlap-pattern", "sync-stall", "memcpy-bound", "bucket-size", "launch-order"}
    assert {k: {f for f in v if f[0] in mine} for k, v in got.items() if any(f[0] in mine for f in v)} == \
        {k: {f for f in v if f[0] in mine} for k, v in EXPECTED.items() if any(f[0] in mine for f in v)}
