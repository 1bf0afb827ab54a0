"""``tracelens collect``: run a training command with every rank profiled, then report on the run."""

from __future__ import annotations

from pathlib import Path

import click

from .. import outputs
from ..errors import EXIT_NO_TRACE, TracelensError
from .report import report_for
from .terminal import color_option, report_options, say, show


@click.command("collect", short_help="Run a training job with every rank profiled.",
               context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--profiler", type=click.Choice(["torch", "nsys"]), default="torch", show_default=True,
              help="torch.profiler in every worker, or Nsight Systems around every worker.")
@click.option("--out", metavar="DIR", help="Run directory (default runs/<timestamp>/).")
@click.option("--steps", metavar="WAIT,WARMUP,ACTIVE",
              help="Profiler schedule in training steps after the first (default 10,2,5).")
@click.option("--with-stack", is_flag=True, help="Record Python call stacks (bigger traces).")
@click.option("--force", is_flag=True, help="Reuse a non-empty run directory.")
@click.option("--no-report", is_flag=True, help="Only collect; do not analyze the run afterwards.")
@click.option("--nccl-inspector", metavar="PLUGIN", type=click.Path(dir_okay=False, path_type=Path),
              help="Load NCCL's Inspector profiler plugin (libnccl-profiler-inspector.so) in every rank; its "
                   "dumps go to the run directory.")
@color_option
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def collect(profiler, out, steps, with_stack, force, no_report, nccl_inspector, color, command) -> int:
    """Run a training command with every rank profiled; keep traces, NCCL logs and a manifest, then report.

    The training script is not changed. A full trace needs 1+WAIT+WARMUP+ACTIVE training steps (18 with the
    default --steps 10,2,5); a job that ends inside the active window keeps a partial one.

    Exit code: the job's; 4 when the job succeeded but no rank wrote a trace; 2 for a usage error.
    Ctrl-C is passed on to the job: SIGINT, again SIGTERM, a third time SIGKILL.

    Example:

    \b
        tracelens collect --out runs/exp7 -- torchrun --nproc-per-node 8 train.py
    """
    # lazy: the collector (subprocess, the agent) and the renderers (msgspec): only tracelens collect
    from ..collectors import launch, runner
    from ..renderers.common import size
    from ..model.rundir_layout import MANIFEST, REPORT

    options = launch.CollectOptions(
        command=list(command), out=Path(out) if out else None, profiler=profiler, with_stack=with_stack,
        force=force, steps=launch.parse_steps(steps) if steps else launch.DEFAULT_STEPS, steps_given=bool(steps),
        nccl_inspector=nccl_inspector)
    plan = launch.plan(options)
    say(f"tracelens: collecting into {plan.run_dir}/ ({profiler}; steps wait,warmup,active = "
        f"{','.join(map(str, options.steps))})")

    def progress(event: dict) -> None:
        if event["event"] == "trace":
            ranks = ", ".join(map(str, event["ranks"]))
            say(f"tracelens: {event['file']} written ({size(event['bytes'])}); ranks with traces: {ranks} "
                f"({len(event['ranks'])} of {event['world_size']})")
        elif event["event"] == "export":
            say(f"tracelens: exported {event['file']}")
        elif event["event"] == "signal":
            then = f"; again: {event['next']}" if event["next"] else ""
            say(f"tracelens: {event['received']}: sent {event['sent']} to the job{then}")

    result = runner.execute(plan, progress)
    m = result.manifest
    written = [r for r in m["ranks"] if r["trace"]]
    say(f"tracelens: job exited with {result.exit_code}"
        + (f" after an interrupt ({', '.join(result.signals_sent)} sent)" if result.interrupted else "")
        + f"; traces for {len(written)} of {m['world_size']} rank(s); manifest {plan.run_dir / MANIFEST}")
    for w in m["warnings"]:
        say(f"tracelens: warning: {w}")
    if not written:
        if result.exit_code == 0:
            # A job that ran fine but left nothing to analyse is a failed collection for a CI script.
            say(f"tracelens: error: the job succeeded but no rank wrote a trace (exit code {EXIT_NO_TRACE})")
            return EXIT_NO_TRACE
        return result.exit_code
    if no_report:
        return result.exit_code
    try:
        rep = report_for([str(plan.run_dir)], report_options(), color=color)
    except TracelensError as exc:
        say(f"tracelens: error: {exc}")
        return result.exit_code or exc.exit_code
    outputs.write_bytes(plan.run_dir / REPORT, rep.to_json())
    show(rep, color=color)
    return result.exit_code
