"""``tracelens export``: the parsed trace tables and the report's own numbers as Parquet, for other tools."""

from __future__ import annotations

import click

from .. import api
from ..errors import UsageError, printable
from .terminal import folder_output, input_options, progress, writing


@click.command("export", short_help="Write the trace tables and the metrics as Parquet.")
@click.argument("paths", nargs=-1, required=True)
@folder_output("the Parquet files", "the files of an earlier export")
@input_options
def export(paths, out_dir, force, comm_patterns, step_nvtx, no_cache) -> None:
    """Write the parsed trace tables as Parquet (one file per table, rank as a column), and the report's
    per-step and per-collective metrics beside them (step_metrics.parquet, collective_metrics.parquet).

    steps.parquet has each step's host range (host_start_ns, host_end_ns: the ProfilerStep on the CPU) and
    its window (window_start_ns, window_end_ns: the device time every metric counts).

    Example:

        tracelens export runs/ddp_bs32/ -o tables/
    """
    from ..export import existing       # lazy: pandas and pyarrow, only for tracelens export

    # One rule with report -o: what exists is not overwritten without --force (checked before the slow parse).
    found = existing(out_dir)
    if found and not force:
        raise UsageError(f"output folder holds an earlier export ({', '.join(found)}): use --force to overwrite "
                         "those files", path=out_dir)
    with progress() as on_file:
        traces = api.load(paths, comm_patterns=comm_patterns, step_nvtx=step_nvtx, on_file=on_file,
                          cache=False if no_cache else None)
    if not traces:
        raise UsageError("no trace files found: NCCL logs alone have no tables to export", path=" ".join(paths))
    # The report's numbers as `tracelens report` gives them: the config file's thresholds, the run's NCCL logs.
    report = api.analyze(traces, api.thresholds(), nccl=api.nccl_inputs(paths, traces))
    from ..export import export_parquet     # lazy: as above

    with writing(out_dir):
        written = export_parquet(traces, out_dir, report)
    for path in written:
        click.echo(printable(str(path), one_line=True))
