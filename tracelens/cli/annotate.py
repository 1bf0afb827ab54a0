"""``tracelens annotate``: per rank, the trace with tracelens' tracks added, for Perfetto UI and chrome://tracing."""

from __future__ import annotations

import click

from .. import api
from ..errors import printable
from .terminal import folder_output, input_options, progress, report_options, steps_option, threshold_option


@click.command("annotate", short_help="Write each rank's trace with the analysis added, for Perfetto.")
@click.argument("paths", nargs=-1, required=True)
@folder_output("the annotated traces", "the annotated traces of an earlier run")
@threshold_option
@input_options
@steps_option
def annotate(paths, out_dir, force, thresholds, comm_patterns, step_nvtx, no_cache, steps_from) -> None:
    """Write, per rank, a Chrome-trace JSON that Perfetto UI (ui.perfetto.dev) and chrome://tracing open:
    the rank's own events, unchanged, and the tracks tracelens adds: the step windows, the exposed
    communication, the wait for peers and the transfer of each matched collective, one marker per finding
    and counters of the overlap % and the exposed fraction per step.

    DIR/rank<N>.tracelens.json (.json.gz for a gzipped trace). An Nsight Systems export gets an overlay:
    the added tracks alone, in microseconds since the start of its session.

    Example:

        tracelens annotate runs/ddp_bs32/ -o annotated/
    """
    options = report_options(comm_patterns, step_nvtx, thresholds, no_cache, steps_from=steps_from)
    with progress() as bar:
        written = api.annotate_with(paths, out_dir, options, force=force, on_file=bar,
                                    on_done=bar.done if bar else None)
    for path in written:
        click.echo(printable(str(path), one_line=True))
