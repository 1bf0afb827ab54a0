"""Run fuzz cases in this process: each case's file is written, ``tracelens report --format json`` runs on
it through the CLI entry (:func:`tracelens.cli.main`, as the console script calls it), and the result is
checked (:mod:`.check`). One JSON line per case on standard output.

Why in-process batches: an interpreter that imports tracelens, numpy and pandas takes ~0.6 s to start,
more than most cases take to run; CI has 2 cores and about 3 minutes for 600+ cases. A case that hangs is
caught by the caller's timeout on the whole batch (the last ``start`` line names the case), and a few cases
also run as real ``tracelens`` subprocesses (:mod:`.test_fuzz`), so the console script's own path is covered.

    python tests/fuzz/driver.py kineto SEED FIRST COUNT [WORKDIR]
    python tests/fuzz/driver.py replay FILE.json [...]
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
CORPUS = ROOT.parent / "shared" / "corpus"
SAMPLES = ROOT / "sample_traces"
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from fuzz import (check, config_mut, history_mut, inspector_mut, kineto_mut, manifest_mut, nsys_mut,  # noqa: E402
                  outputs_mut, report_mut)
from fixtures.opens import opened_files  # noqa: E402

# Real traces small enough to run hundreds of times a minute; corpus first (what CI requires), then the
# bundled samples (recorded gloo and CUDA runs, generated WFBP ranks).
KINETO_BASES = [
    "corpus/hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
    "corpus/hta/critical_path/cuda_event_sync_multi_stream/event_sync_trace.json.gz",
    "corpus/hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "corpus/kineto_misc/kineto_unit_test_cuda_sync/kineto_after_fix_trace.json",
    "corpus/kineto_misc/kineto_unit_test_cuda_sync/kineto_before_fix_trace.json",
    "corpus/hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz",
    "corpus/hta/distributed_info_unavailable/distributed_info_not_found.json.gz",
    "corpus/hta/trace_filter/sampled_rank-0.json.gz",
    "samples/one_bucket/rank0.json.gz",
    "samples/legacy_wfbp/rank1.json.gz",
    "samples/straggler/rank2.json.gz",
    "samples/gloo_one_bucket/rank0.pt.trace.json.gz",
    "samples/cuda_nccl_ddp/rank0.pt.trace.json.gz",
]
NSYS_BASES = [
    "corpus/nsys/nsys-ai/healthy_1pct_minimal.sqlite",
    "corpus/nsys/extrap/con_kernel.sqlite",
    "corpus/nsys/extrap/concurrent_s16_profile16.sqlite",
    "corpus/nsys/nsys-ai/mock_rtx3080.sqlite",
    "corpus/nsys/nsys-ai/mfu_2gpu_before.sqlite",
    "samples/nsys_wfbp_100/all_ranks.sqlite",
]
# Run folders of tracelens collect (trace, manifest, NCCL log): their manifest is what is mutated.
MANIFEST_BASES = [
    "samples/cuda_nccl_ddp",
    "samples/cuda_nccl_avg",
    "samples/gloo_one_bucket",
]
# A history database made of this run, and a config file read with a report of this run (docs in their modules).
HISTORY_BASES = [f"samples/{history_mut.SAMPLE}"]
CONFIG_BASES = [f"samples/{config_mut.SAMPLE}"]
# Saved reports of bundled samples and two corpus traces, written by tracelens report -o (report_mut.py).
REPORT_BASES = report_mut.bases_of(SAMPLES, CORPUS)
# The writers' outputs are of this bundled run (outputs_mut.py).
OUTPUT_BASES = [f"samples/{outputs_mut.SAMPLE}"]
CASE_SECONDS = 20          # a case still running after this is a hang


def resolve(base: str) -> Path:
    root, _, rel = base.partition("/")
    return (CORPUS if root == "corpus" else SAMPLES) / rel


def bases(fmt: str) -> list[str]:
    if fmt == "manifest":
        return [b for b in MANIFEST_BASES if (resolve(b) / "manifest.json").is_file()]
    if fmt in ("history", "config"):
        return HISTORY_BASES if fmt == "history" else CONFIG_BASES
    if fmt == "report":
        return [b for b, p in REPORT_BASES.items() if p.exists()]
    if fmt == "outputs":
        return OUTPUT_BASES
    if fmt == "inspector":
        return list(inspector_mut.BASES)
    return [b for b in (KINETO_BASES if fmt == "kineto" else NSYS_BASES) if resolve(b).is_file()]


_DOCS: dict[str, object] = {}


def kineto_doc(base: str):
    if base not in _DOCS:
        data = resolve(base).read_bytes()
        _DOCS[base] = json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)
    return _DOCS[base]


_TEMPLATES: list[Path] = []


def report_template(base: str) -> Path:
    """The saved report of ``base``, made once per process in a folder of its own."""
    if not _TEMPLATES:
        import atexit

        _TEMPLATES.append(Path(tempfile.mkdtemp(prefix="tracelens-fuzz-reports-")))
        atexit.register(shutil.rmtree, _TEMPLATES[0], True)
    return report_mut.template(base, REPORT_BASES[base], _TEMPLATES[0])


def draw(fmt: str, seed: int, index: int) -> dict:
    """The case ``index`` of run ``seed``: its base file and plan."""
    rng = random.Random(f"{fmt}/{seed}/{index}")
    base = rng.choice(bases(fmt))
    if fmt == "manifest":
        ops = manifest_mut.plan(rng, json.loads((resolve(base) / "manifest.json").read_text()))
    elif fmt == "report":
        ops = report_mut.plan(rng, json.loads(report_template(base).read_bytes()))
    elif fmt == "outputs":
        ops = outputs_mut.plan(rng)
    elif fmt == "inspector":
        ops = inspector_mut.plan(rng, files=4, lines=40)
    elif fmt in ("history", "config"):
        ops = (history_mut if fmt == "history" else config_mut).plan(rng)
    else:
        ops = kineto_mut.plan(rng, kineto_doc(base)) if fmt == "kineto" else nsys_mut.plan(rng)
    return {"format": fmt, "base": base, "ops": ops}


def materialise(case: dict, folder: Path) -> tuple[Path, tuple[int, int] | None]:
    """Write the case's file into ``folder``; returns it and the trace's span (see :mod:`.check`)."""
    if case["format"] == "manifest":
        run = manifest_mut.write(case["ops"], resolve(case["base"]), folder)
        spans = [check.kineto_span(t.read_bytes()) for t in sorted(run.glob("rank*.pt.trace.json.gz"))]
        spans = [s for s in spans if s is not None]
        return run, (min(s[0] for s in spans), max(s[1] for s in spans)) if spans else None
    if case["format"] == "history":
        return history_mut.write(case["ops"], history_mut.template(folder.parent, SAMPLES), folder), None
    if case["format"] == "config":
        return config_mut.write(case["ops"], folder), None
    if case["format"] == "report":
        original = report_template(case["base"])
        data, name = report_mut.apply(case["ops"], json.loads(original.read_bytes()), SAMPLES)
        shutil.copy(original, folder / "original.json")
        (folder / name).write_bytes(data)
        return folder / name, None
    if case["format"] == "inspector":
        paths = inspector_mut.logs(case["base"], folder)
        inspector_mut.apply(case["ops"], paths)
        return folder, check.inspector_span(folder)
    if case["format"] == "kineto":
        data = kineto_mut.apply(case["ops"], kineto_doc(case["base"]))
        path = folder / kineto_mut.file_name(case["ops"], ".json.gz" if data[:2] == b"\x1f\x8b" else ".json")
        path.write_bytes(data)
        return path, check.kineto_span(data)
    path = nsys_mut.apply(case["ops"], resolve(case["base"]), folder / "export.sqlite")
    return path, check.nsys_span(path)


class _Hang(Exception):
    pass


def _alarm(signum, frame):
    raise _Hang()


def run_case(case: dict, workdir: Path) -> dict:
    if case["format"] == "outputs":
        return _outputs_case(case, workdir)
    from tracelens.cli import main

    folder = Path(tempfile.mkdtemp(dir=workdir))
    path, span = materialise(case, folder)
    digest = manifest_mut.digest if case["format"] in ("manifest", "inspector") else _digest
    before = digest(folder)
    args, env = _command(case, path)
    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    signal.alarm(CASE_SECONDS)
    opened: list[str] = []
    saved = {k: os.environ.get(k) for k in env}
    try:
        os.environ.update(env)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), opened_files() as opened:
            if args is None:            # a saved report read through the Python API, not the CLI
                code, said, made = report_mut.run_api(case["ops"], path)
                err.write(said)
            else:
                code = main(args)
    except _Hang:
        code, problems = -1, [f"no answer within {CASE_SECONDS} s"]
    except BaseException:          # a traceback: what the console script would print
        code, problems = -1, ["traceback: " + traceback.format_exc(limit=-3).strip().splitlines()[-1]]
        err.write(traceback.format_exc())
    else:
        if case["format"] == "report":
            fmt = args[args.index("--format") + 1] if args and "--format" in args else None
            problems = check.report_problems(code, out.getvalue(), err.getvalue(), fmt, path.name)
            if args is None:
                problems += check.figure_problems(made)
        elif case["format"] in ("history", "config"):
            problems = check.command_problems(code, out.getvalue(), err.getvalue(), "--format" in args)
        else:
            problems = check.problems(code, out.getvalue(), err.getvalue(), span)
        problems += check.expected(case.get("expect"), code, out.getvalue())
    finally:
        signal.alarm(0)
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    if case["format"] == "manifest":
        problems += [f"opened {p}, outside the run folder" for p in _outside(opened, path)]
    if digest(folder) != before:
        problems.append("the input folder changed: " + ", ".join(sorted(set(digest(folder)) ^ set(before))
                                                                 or ["a file's bytes"]))
    seconds = time.perf_counter() - t0
    shutil.rmtree(folder)
    return {**case, "code": code, "problems": problems, "seconds": round(seconds, 4),
            "stderr": err.getvalue()[-2000:] if problems else ""}


def _command(case: dict, path: Path) -> tuple[list[str], dict[str, str]]:
    """The command line a case runs on its file, and the environment it adds."""
    if case["format"] == "history":
        return history_mut.argv(case["ops"], path, SAMPLES), {}
    if case["format"] == "config":
        return config_mut.argv(case["ops"], path, SAMPLES)
    if case["format"] == "report":
        if report_mut.command(case["ops"]) in ("api", "dashboard"):
            return None, {}
        return report_mut.argv(case["ops"], path, path.with_name("original.json")), {}
    return ["report", "--format", "json", str(path)], {}


def _outputs_case(case: dict, workdir: Path) -> dict:
    """A writer run on paths planted beforehand (:mod:`.outputs_mut`): its inputs, and everything beside its
    output folder, must be byte for byte as they were; its answer an exit code of docs/errors.md in one line."""
    from tracelens.cli import main

    folder = Path(tempfile.mkdtemp(dir=workdir))
    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    signal.alarm(CASE_SECONDS)
    code, problems = -1, []
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code, problems = outputs_mut.run(case["ops"], resolve(case["base"]), folder, main)
        expect = case.get("expect")
        if expect and code != expect.get("code", 0):
            problems.append(f"exit code {code}, where exit code {expect.get('code', 0)} was expected")
    except _Hang:
        problems = [f"no answer within {CASE_SECONDS} s"]
    except BaseException:
        problems = ["traceback: " + traceback.format_exc(limit=-3).strip().splitlines()[-1]]
        err.write(traceback.format_exc())
    finally:
        signal.alarm(0)
    seconds = time.perf_counter() - t0
    outputs_mut.clean(folder)
    return {**case, "code": code, "problems": problems, "seconds": round(seconds, 4),
            "stderr": err.getvalue()[-2000:] if problems else ""}


def _outside(opened: list[str], run: Path) -> list[str]:
    """The files opened that lead outside the run folder and are none of Python's, the project's (imports)
    or the warm cache's."""
    from tracelens.cache import root

    allowed = [os.path.realpath(p) for p in (run, sys.prefix, sys.base_prefix, ROOT, root())]
    return sorted({p for p in opened
                   if not any(os.path.realpath(p) == a or os.path.realpath(p).startswith(a + os.sep)
                              for a in allowed)})


def _digest(folder: Path) -> dict[str, int]:
    import hashlib
    return {p.name: int(hashlib.blake2b(p.read_bytes(), digest_size=8).hexdigest(), 16) for p in folder.iterdir()}


def main(argv: list[str]) -> int:
    os.environ.setdefault("TRACELENS_JOBS", "0")
    # The gzip bombs the mutator writes inflate to 48 MiB: stopped at 32 MiB, not after a GiB.
    os.environ.setdefault("TRACELENS_MAX_INFLATE", "32M")
    os.environ.setdefault("NO_COLOR", "1")
    signal.signal(signal.SIGALRM, _alarm)
    workdir = Path(tempfile.mkdtemp(prefix="tracelens-fuzz-"))
    if argv[0] == "replay":
        cases = [json.loads(Path(f).read_text()) for f in argv[1:]]
    else:
        fmt, seed, first, count = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
        cases = [dict(draw(fmt, seed, i), index=i, seed=seed) for i in range(first, first + count)]
    for case in cases:
        print(json.dumps({"start": case.get("index"), "base": case["base"]}), flush=True)
        print(json.dumps(run_case(case, workdir)), flush=True)
    shutil.rmtree(workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
