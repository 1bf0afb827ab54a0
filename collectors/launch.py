"""What ``tracelens collect`` will run: the options, the run directory made ready, and the command and
environment every worker gets (:func:`plan`); :mod:`.runner` runs it and :mod:`.manifest` records it.

The command is not changed in torch.profiler mode: a ``sitecustomize`` written into the run directory and
put first on ``PYTHONPATH`` loads the agent (``agent.py``) into every Python process the job starts, and
chains to any ``sitecustomize`` that was already on the path. In nsys mode each worker (not the launcher)
runs under ``nsys profile``, via torchrun's ``--no-python`` form.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Optional

from tracelens import outputs
from tracelens._speed import user_environ
from tracelens.errors import UsageError
from tracelens.model.rundir_layout import BOOTSTRAP, MANIFEST, NCCL_INSPECTOR, NCCL_LOGS, REPORT, WORKERS

from . import agent

DEFAULT_STEPS = agent.DEFAULT_STEPS
# How often the Inspector plugin's thread writes what it gathered: a second keeps its cost out of the job and
# loses at most that much of a rank killed before NCCL finalizes.
INSPECTOR_DUMP_INTERVAL_US = "1000000"
NSYS_OUTPUT = "rank%q{RANK}"
NSYS_TRACE_FLAGS = ("-t", "cuda,nvtx,osrt", "--sample=none")
# torchrun options that take no value (torch.distributed.run.get_args_parser, torch 2.x); every other
# option takes one, unless written --name=value.
TORCHRUN_FLAGS = frozenset({"--standalone", "--no-python", "--no_python", "--run-path", "--run_path",
                            "--virtual-local-rank", "--virtual_local_rank", "-m", "--module", "-h", "--help"})
LAUNCHER_MODULES = ("torch.distributed.run", "torch.distributed.launch")

_SITECUSTOMIZE = '''\
# Written by `tracelens collect`: loads the profiling agent into this Python process, after running any
# sitecustomize this one shadows.
import importlib.machinery, importlib.util, os, sys

def _chain():
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)

_chain()
try:
    from tracelens.collectors import agent as _agent
    _agent.install()
except Exception as _exc:  # the job must run even when profiling cannot
    sys.stderr.write(f"tracelens: this process is not profiled: {_exc!r} (python {sys.executable})\\n")
'''


@dataclass
class CollectOptions:
    command: list[str]
    out: Optional[Path] = None
    profiler: str = "torch"                          # torch | nsys
    steps: tuple[int, int, int] = DEFAULT_STEPS      # wait, warmup, active
    steps_given: bool = False                        # --steps was on the command line (nsys capture range)
    with_stack: bool = False
    force: bool = False
    nccl_inspector: Optional[Path] = None            # the NCCL Inspector profiler plugin (a .so) to load


@dataclass
class Plan:
    """What will run: the final command, its environment and where everything goes."""

    run_dir: Path
    argv: list[str]
    env: dict[str, str]
    options: CollectOptions
    nsys: Optional[str] = None


def parse_steps(text: str) -> tuple[int, int, int]:
    """``"wait,warmup,active"`` -> a tuple; UsageError (exit 2) when it is not three counts, active >= 1."""
    parts = text.split(",")
    try:
        wait, warmup, active = (int(p) for p in parts)
    except ValueError:
        raise UsageError(f"--steps {text!r}: expected wait,warmup,active, e.g. 3,2,5") from None
    if min(wait, warmup) < 0 or active < 1:
        raise UsageError(f"--steps {text!r}: wait and warmup must be >= 0 and active >= 1")
    return wait, warmup, active


def default_run_dir(now: Optional[datetime] = None) -> Path:
    return Path("runs") / (now or datetime.now()).strftime("%Y%m%d-%H%M%S")


def plan(options: CollectOptions, environ: Optional[dict] = None) -> Plan:
    """Check the options, create the run directory and build the command and environment."""
    if not options.command:
        raise UsageError("no command to run: give it after --, e.g. tracelens collect -- torchrun ... train.py")
    if shutil.which(options.command[0]) is None:
        raise UsageError(not_found(options.command[0]))
    nsys = None
    if options.profiler == "nsys":
        from tracelens.tools.nsys_export import nsys_executable  # lazy: sqlite3, only for --profiler nsys

        nsys = nsys_executable()
        if not nsys:
            raise UsageError("--profiler nsys needs Nsight Systems: install it so that `nsys` is on PATH (or set "
                             "TRACELENS_NSYS=/path/to/nsys), or use the default torch.profiler mode")
    if options.nccl_inspector is not None and not options.nccl_inspector.is_file():
        raise UsageError("--nccl-inspector must name the plugin's shared library (libnccl-profiler-inspector.so "
                         "from NCCL's ext-profiler/inspector)", path=str(options.nccl_inspector))
    run_dir = options.out or default_run_dir()
    if run_dir.exists() and not run_dir.is_dir():
        raise UsageError("--out must name a directory (the run directory), not an existing file", path=str(run_dir))
    if run_dir.is_dir() and any(run_dir.iterdir()) and not options.force:
        raise UsageError("run directory is not empty (use --force to reuse it)", path=str(run_dir))
    try:
        for sub in (NCCL_LOGS, WORKERS, BOOTSTRAP) + ((NCCL_INSPECTOR,) if options.nccl_inspector else ()):
            (run_dir / sub).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create the run directory: {exc.strerror or exc}",
                         path=str(exc.filename or run_dir)) from None
    # A reused run directory (--force) keeps none of an earlier run's records: the report would mix them in.
    for stale in (f"{WORKERS}/*.json", "rank*.pt.trace.json.gz", "rank*.nsys-rep", "rank*.sqlite", MANIFEST, REPORT,
                  f"{NCCL_INSPECTOR}/*"):
        for path in run_dir.glob(stale):
            if not path.is_dir():
                path.unlink()
    outputs.write_text(run_dir / BOOTSTRAP / "sitecustomize.py", _SITECUSTOMIZE)
    env = worker_env(user_environ() if environ is None else dict(environ), run_dir.resolve(), options)
    argv = list(options.command)
    if options.profiler == "nsys":
        argv = nsys_command(argv, nsys, run_dir.resolve(), options.steps_given)
    return Plan(run_dir=run_dir, argv=argv, env=env, options=options, nsys=nsys)


def not_found(name: str, path: Optional[str] = None, python: Optional[str] = None) -> str:
    """Why the command cannot be run, where it was looked for, and what works instead: a launcher of the
    virtual environment tracelens runs from is not on PATH until that environment is activated."""
    if os.sep in name or (os.altsep and os.altsep in name):
        return f"command not found: {name} (no executable file at that path)"
    folders = [f for f in (os.environ.get("PATH", "") if path is None else path).split(os.pathsep) if f]
    shown = ", ".join(folders[:6]) + (f" and {len(folders) - 6} more" if len(folders) > 6 else "")
    message = f"command not found: {name} (looked in PATH: {shown or 'empty'})"
    python = python or sys.executable
    beside = Path(python).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return (f"{message}; the environment tracelens runs from has it: give its path ({beside}) or activate "
                "that environment")
    if name == "torchrun":
        return (f"{message}; torchrun with the Python tracelens runs from: {python} -m torch.distributed.run "
                "(the same arguments), or activate its environment")
    return message


def nccl_logging_notes(env: dict) -> list[str]:
    """A note when the user's own NCCL logging settings leave out the lines the transport verdict reads."""
    level = env.get("NCCL_DEBUG", "").strip().upper()
    subsys = {s.strip().upper() for s in env.get("NCCL_DEBUG_SUBSYS", "").split(",")}
    if level not in ("INFO", "TRACE"):
        return [f"NCCL_DEBUG={env.get('NCCL_DEBUG', '')} (set by you): the NCCL logs will not show the network "
                "transport; tracelens report needs NCCL_DEBUG=INFO"]
    if "ALL" not in subsys and not {"INIT", "NET"} <= subsys and not any(s.startswith("^") for s in subsys):
        return [f"NCCL_DEBUG_SUBSYS={env['NCCL_DEBUG_SUBSYS']} (set by you) leaves out INIT or NET: the NCCL logs "
                "will not show the network transport"]
    return []


def worker_env(env: dict, run_dir: Path, options: CollectOptions) -> dict:
    """The job's environment: NCCL debug logging into the run directory, the agent's settings, and the
    bootstrap first on PYTHONPATH. NCCL_DEBUG / NCCL_DEBUG_SUBSYS / NCCL_DEBUG_FILE set by the user win."""
    env.setdefault("NCCL_DEBUG", "INFO")
    # INIT,NET print the transport lines; ENV echoes the NCCL_* settings NCCL read (NCCL_IB_DISABLE, ...).
    env.setdefault("NCCL_DEBUG_SUBSYS", "INIT,NET,ENV")
    env.setdefault("NCCL_DEBUG_FILE", str(run_dir / NCCL_LOGS / "%h.%p.log"))
    boot = str(run_dir / BOOTSTRAP)
    env["PYTHONPATH"] = os.pathsep.join([boot] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    if options.nccl_inspector is not None:
        # The plugin asked for on the command line is the one loaded; where and how often it writes, and its
        # kernel timestamps (each rank's arrival at a collective), only unless the user set them.
        env["NCCL_PROFILER_PLUGIN"] = str(options.nccl_inspector.resolve())
        env["NCCL_INSPECTOR_ENABLE"] = "1"
        env.setdefault("NCCL_INSPECTOR_DUMP_DIR", str(run_dir / NCCL_INSPECTOR))
        env.setdefault("NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS", INSPECTOR_DUMP_INTERVAL_US)
        env.setdefault("NCCL_INSPECTOR_DUMP_VERBOSE", "1")
    env[agent.RUN_DIR] = str(run_dir)
    env[agent.STEPS] = ",".join(map(str, options.steps))
    env[agent.MODE] = options.profiler
    env[agent.WITH_STACK] = "1" if options.with_stack else "0"
    return env


def nsys_command(command: list[str], nsys: str, run_dir: Path, capture_range: bool) -> list[str]:
    """Wrap each worker in ``nsys profile`` (never the launcher, so every rank gets its own report).

    ``torchrun [opts] script args`` becomes ``torchrun [opts] --no-python nsys profile ... python -u script
    args``; any other command is profiled whole as rank 0.
    """
    profile = [nsys, "profile", *NSYS_TRACE_FLAGS, "--force-overwrite", "true"]
    if capture_range:
        # The agent opens the range with cudaProfilerStart after wait+warmup steps, closes it after active.
        profile += ["--capture-range=cudaProfilerApi", "--capture-range-end=stop"]
    launcher, script = split_launcher(command)
    if launcher is None:
        return profile + ["-o", str(run_dir / "rank0")] + command
    profile += ["-o", str(run_dir / NSYS_OUTPUT)]
    opts = list(launcher)
    if "--no-python" in opts or "--no_python" in opts:
        worker = script                                  # already an executable
    elif "-m" in opts or "--module" in opts:
        opts = [o for o in opts if o not in ("-m", "--module")]
        worker = [sys.executable, "-u", "-m"] + script
        opts.append("--no-python")
    else:
        opts = [o for o in opts if o not in ("--run-path", "--run_path")]
        worker = [sys.executable, "-u"] + script
        opts.append("--no-python")
    return opts + profile + worker


def split_launcher(command: list[str]) -> tuple[Optional[list[str]], list[str]]:
    """(launcher with its options, script with its args) for torchrun / python -m torch.distributed.run;
    (None, command) for anything else."""
    name = os.path.basename(command[0])
    if name == "torchrun":
        head = 1
    elif name.startswith("python") and command[1:3] and command[1] == "-m" and command[2] in LAUNCHER_MODULES:
        head = 3
    else:
        return None, command
    i = head
    while i < len(command):
        tok = command[i]
        if tok == "--":
            return command[:i], command[i + 1:]
        if not tok.startswith("-"):
            return command[:i], command[i:]
        i += 1 if tok in TORCHRUN_FLAGS or "=" in tok else 2
    raise UsageError("no training script found in the torchrun command", path=" ".join(command))
