"""``tracelens export``: the parsed trace tables as Parquet, for other tools."""

from __future__ import annotations

import click

from .. import api
from ..errors import UsageError
from .terminal import input_options, progress, writing


@click.command("export")
@click.argument("paths", nargs=-1, required=True)
@click.option("-o", "--output", "out_dir", required=True, metavar="DIR", help="Folder for the Parquet files.")
@input_options
def export(paths, out_dir, comm_patterns, step_nvtx, no_cache) -> None:
    """Write the parsed trace tables as Parquet (one file per table, rank as a column).

    Example:

        tracelens export runs/ddp_bs32/ -o tables/
    """
    with progress() as on_file:
        traces = api.load(paths, comm_patterns=comm_patterns, step_nvtx=step_nvtx, on_file=on_file,
                          cache=False if no_cache else None)
    if not traces:
        raise UsageError("no trace files found: NCCL logs alone have no tables to export", path=" ".join(paths))
    from ..export import export_parquet

    with writing(out_dir):
        written = export_parquet(traces, out_dir)
    for path in written:
        click.echo(str(path))
