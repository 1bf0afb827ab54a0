"""Runs inside every worker process of a ``tracelens collect`` job (loaded by the injected sitecustomize).

Nothing happens until the job imports torch; then a global optimizer step hook (or an explicit
``tracelens.collectors.step()``) drives torch.profiler's wait/warmup/active schedule. The trace of the
active window is written atomically as ``<run>/rank{R}.pt.trace.json.gz`` (R = the global rank), and a
small record of the worker (host, pid, ranks, versions, allow-listed environment) goes to
``<run>/workers/`` for the manifest. In nsys mode the same clock emits ``ProfilerStep#N`` NVTX ranges and
opens the capture range with cudaProfilerStart/Stop instead.

The launcher (torchrun itself) also imports torch but never steps an optimizer, so it is never profiled.
"""

from __future__ import annotations

import atexit
import importlib.abc
import importlib.util
import json
import os
import signal
import socket
import sys
import time

from tracelens import outputs
from tracelens.model.envlist import allowed_env
from tracelens.model.rundir_layout import TORCH_TRACE, WORKERS

RUN_DIR = "TRACELENS_RUN_DIR"
STEPS = "TRACELENS_STEPS"            # "wait,warmup,active"
WITH_STACK = "TRACELENS_WITH_STACK"  # "1" to record Python stacks
MODE = "TRACELENS_MODE"              # "torch" (default) | "nsys"
# wait, warmup, active. The wait skips start-up noise: allocator growth, cuBLAS/NCCL set-up, and DDP's runtime
# logging, which waits on CUDA timer events (8 cudaEventSynchronize per forward) in its first 10 iterations.
DEFAULT_STEPS = (10, 2, 5)

_state: "_Agent | None" = None


def install() -> None:
    """Arm the agent in this process if ``tracelens collect`` asked for it (called from sitecustomize)."""
    global _state
    if _state is not None or not os.environ.get(RUN_DIR):
        return
    _state = _Agent()
    if "torch" in sys.modules:
        _state.on_torch(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, _TorchImportHook())


def step() -> None:
    """Advance the profiling schedule by one training step (see tracelens.collectors.step)."""
    if _state is not None:
        _state.step(explicit=True)


class _TorchImportHook(importlib.abc.MetaPathFinder):
    """Calls the agent once ``import torch`` has finished, without importing torch itself."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        original = spec.loader.exec_module

        def exec_module(module):
            original(module)
            if _state is not None:
                _state.on_torch(module)

        spec.loader.exec_module = exec_module
        return spec


class _Agent:
    def __init__(self) -> None:
        self.run_dir = os.environ[RUN_DIR]
        self.mode = os.environ.get(MODE, "torch")
        steps = os.environ.get(STEPS)
        self.wait, self.warmup, self.active = (int(x) for x in steps.split(",")) if steps else DEFAULT_STEPS
        self.with_stack = os.environ.get(WITH_STACK) == "1"
        self.torch = None
        self.prof = None
        self.started = False
        self.steps = 0               # schedule steps completed since profiling started
        self.clock = None            # the optimizer whose steps count (the first one that stepped)
        self.explicit = False        # step() was called: optimizer hooks stop counting
        self.done = False
        self.trace = None
        self.partial = False
        self.nvtx_open = False
        self.capturing = False
        self.old_sigterm = None
        self.started_at = time.time()
        self.counter = None          # fd of workers/rank{R}.{pid}.steps: the step count, rewritten every step
        self.exited = False          # the exit handlers ran (a process killed by SIGKILL never gets there)
        self.exit_signal = None      # the signal that ended the process, when it was one
        self.known_ranks = None      # rank, world size and backend from the process group, once it existed

    # -- hooks -------------------------------------------------------------------------------------

    def on_torch(self, torch) -> None:
        self.torch = torch
        try:
            from torch.optim.optimizer import register_optimizer_step_post_hook  # lazy: torch is the job's
        except ImportError:  # pragma: no cover - torch < 2.0: only explicit steps
            return
        register_optimizer_step_post_hook(self._optimizer_stepped)

    def _optimizer_stepped(self, optimizer, args, kwargs) -> None:
        if self.explicit:
            return
        if self.clock is None:
            self.clock = id(optimizer)
        if id(optimizer) == self.clock:
            self.step()

    def step(self, explicit: bool = False) -> None:
        """One training step ended. The first call starts profiling (so the first step, with its one-off
        start-up work, is never recorded); each later call advances the wait/warmup/active schedule."""
        if explicit:
            self.explicit = True
        if self.torch is None and "torch" in sys.modules:
            self.on_torch(sys.modules["torch"])
        if self.done or self.torch is None:
            return
        if not self.started:
            self.started = True
            self._start()
            return
        self.steps += 1
        self._count()
        if self.mode == "nsys":
            self._nsys_step()
            return
        self.prof.step()
        if self.steps >= self.wait + self.warmup + self.active:
            self._stop()

    # -- torch.profiler ------------------------------------------------------------------------------

    def _start(self) -> None:
        atexit.register(self._at_exit)
        record = self._record("running")
        try:
            self.counter = os.open(record.removesuffix(".json") + ".steps",
                                   os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
            self._count()
        except OSError:
            self.counter = None
        if self.mode == "nsys":
            self._nsys_step()
            return
        prof = self.torch.profiler
        activities = [prof.ProfilerActivity.CPU]
        if self.torch.cuda.is_available():
            activities.append(prof.ProfilerActivity.CUDA)
        schedule = prof.schedule(wait=self.wait, warmup=self.warmup, active=self.active, repeat=1)
        self.prof = prof.profile(activities=activities, schedule=schedule, on_trace_ready=self._save,
                                 with_stack=self.with_stack, record_shapes=False)
        self.prof.start()
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            # torchrun stops the other ranks with SIGTERM when one fails: unwind so atexit keeps what
            # was recorded. Only where the job left SIGTERM alone.
            self.old_sigterm = signal.signal(signal.SIGTERM, _sigterm_to_exit)

    def _stop(self) -> None:
        prof, self.prof = self.prof, None
        self.done = True
        if prof is not None:
            prof.stop()     # saves when the schedule is in its active window (a job that ended early)
        if self.old_sigterm is not None and signal.getsignal(signal.SIGTERM) is _sigterm_to_exit:
            signal.signal(signal.SIGTERM, self.old_sigterm)
        self._record("finished" if self.trace else "no-trace")

    def _save(self, prof) -> None:
        rank = self._ranks()["rank"]
        final = os.path.join(self.run_dir, TORCH_TRACE.format(rank=rank))
        # A fresh name (torch writes through whatever is at the name it is given), renamed into place: readers
        # never see half a trace.
        fd, tmp = outputs.fresh(final, suffix=".partial.gz")
        os.close(fd)
        try:
            prof.export_chrome_trace(str(tmp))
            os.replace(tmp, final)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        self.trace = os.path.basename(final)
        self.partial = self.steps < self.wait + self.warmup + self.active

    def _at_exit(self) -> None:
        # `tracelens collect` turns a second Ctrl-C into SIGTERM (a third into SIGKILL): neither of the first
        # two may cut the save short.
        previous = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
        self.exited = True
        last = getattr(sys, "last_type", None)     # the exception that is ending the interpreter, if any
        if last is not None and issubclass(last, KeyboardInterrupt):
            self.exit_signal = self.exit_signal or "SIGINT"
        try:
            if not self.done:
                if self.mode == "nsys":
                    self._nsys_close()
                    self.done = True
                else:
                    self._stop()
                    return
            try:        # that the exit handlers ran: only a record, never worth failing the job's exit for
                self._record("finished" if self.trace or self.mode == "nsys" else "no-trace")
            except Exception:  # noqa: BLE001
                pass
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)

    # -- nsys -----------------------------------------------------------------------------------------

    def _nsys_step(self) -> None:
        """A ProfilerStep#N NVTX range per step; the capture range (cudaProfilerStart/Stop) spans the
        active steps."""
        cuda = self.torch.cuda
        if self.nvtx_open:
            cuda.nvtx.range_pop()
            self.nvtx_open = False
        if self.steps == self.wait + self.warmup and cuda.is_available():
            cuda.profiler.start()
            self.capturing = True
        if self.steps >= self.wait + self.warmup + self.active:
            self._nsys_close()
            self.done = True
            self._record("finished")
            return
        cuda.nvtx.range_push(f"ProfilerStep#{self.steps}")
        self.nvtx_open = True

    def _nsys_close(self) -> None:
        cuda = self.torch.cuda
        if self.nvtx_open:
            cuda.nvtx.range_pop()
            self.nvtx_open = False
        if self.capturing:
            cuda.profiler.stop()
            self.capturing = False

    # -- the worker record ------------------------------------------------------------------------------

    def _count(self) -> None:
        """Keep the step count on disk, for the manifest of a worker killed before it could say more
        (SIGKILL, out of memory): one small write in place per step, no new file, no rename."""
        if self.counter is None:
            return
        try:
            os.pwrite(self.counter, b"%-12d\n" % self.steps, 0)
        except OSError:
            self.counter = None

    def _ranks(self) -> dict:
        env = os.environ
        out = {"rank": int(env.get("RANK", 0)), "local_rank": int(env.get("LOCAL_RANK", 0)),
               "world_size": int(env.get("WORLD_SIZE", 1)), "backend": None}
        dist = getattr(self.torch, "distributed", None)
        try:
            if dist is not None and dist.is_available() and dist.is_initialized():
                out.update(rank=dist.get_rank(), world_size=dist.get_world_size(), backend=str(dist.get_backend()))
                self.known_ranks = out
        except Exception:  # noqa: BLE001 - a broken process group must not break the job
            pass
        # At exit the job may have destroyed its process group already: what it was still holds.
        return out if out["backend"] or self.known_ranks is None else self.known_ranks

    def _record(self, status: str) -> str:
        torch = self.torch
        cuda = torch.cuda.is_available()
        info = {
            **self._ranks(), "host": socket.gethostname(), "pid": os.getpid(), "status": status,
            "mode": self.mode, "steps_seen": self.steps, "trace": self.trace, "partial": self.partial,
            "exited": self.exited, "exit_signal": self.exit_signal,
            "schedule": {"wait": self.wait, "warmup": self.warmup, "active": self.active},
            "started_at": self.started_at, "updated_at": time.time(),
            "python": sys.version.split()[0], "torch": torch.__version__, "cuda": torch.version.cuda,
            "nccl": _nccl_version(torch) if cuda else None,
            "device": torch.cuda.get_device_name(torch.cuda.current_device()) if cuda else None,
            "env": allowed_env(os.environ),
            "cpus": _usable_cpus(),
        }
        folder = os.path.join(self.run_dir, WORKERS)
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"rank{info['rank']}.{os.getpid()}.json")
        outputs.write_text(path, json.dumps(info, indent=1))
        return path


def _nccl_version(torch):
    try:
        v = torch.cuda.nccl.version()
        return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception:  # noqa: BLE001 - builds without NCCL
        return None


def _sigterm_to_exit(signum, frame):
    if _state is not None:
        _state.exit_signal = signal.Signals(signum).name
    raise SystemExit(128 + signum)


def _usable_cpus() -> int | None:
    """The cores this process may run on (its affinity, as a launcher or a container sets it): ranks of one
    host that outnumber them share cores, and a rank that idles then frees its core to the others."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()
