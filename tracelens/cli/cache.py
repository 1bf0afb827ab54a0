"""``tracelens cache``: where the warm cache is and what it holds (``info``), and emptying it (``clear``)."""

from __future__ import annotations

import json

import click

from .terminal import echo_fitted


@click.group("cache", short_help="Show or clear the cache of parsed traces.")
def cache() -> None:
    """The warm cache of parsed and analysed traces (and of .nsys-rep exports): a second report of an
    unchanged file skips parsing and analysing it. Location: $TRACELENS_CACHE, else $XDG_CACHE_HOME/tracelens, else ~/.cache/tracelens."""


@cache.command("info", short_help="Where the cache is, its size and entries.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def cache_info(fmt) -> None:
    """Show the cache's location, size bound, entries and bytes.

    Example:

        tracelens cache info
    """
    from .. import cache as warm        # lazy: not for --help (and the budget test keeps it so)

    got = warm.info()
    if fmt == "json":
        click.echo(json.dumps(got, indent=2))
        return
    state = "" if got["enabled"] else " (off: TRACELENS_NO_CACHE is set)"
    echo_fitted(f"location: {got['location']}{state}")
    echo_fitted(f"parsed traces: {got['entries']} entr{'y' if got['entries'] == 1 else 'ies'}, "
                f"{_size(got['bytes'])}")
    echo_fitted(f"analysed traces: {got['analyses']} entr{'y' if got['analyses'] == 1 else 'ies'}, "
                f"{_size(got['analyses_bytes'])}")
    echo_fitted(f"reports: {got['reports']} entr{'y' if got['reports'] == 1 else 'ies'}, "
                f"{_size(got['reports_bytes'])}")
    echo_fitted(f"rendered reports: {got['renders']} entr{'y' if got['renders'] == 1 else 'ies'}, "
                f"{_size(got['renders_bytes'])}")
    echo_fitted(f"nsys exports: {got['nsys_exports']}, {_size(got['nsys_bytes'])}")
    echo_fitted(f"bound: {_size(got['max_bytes'])} (TRACELENS_CACHE_MAX; least recently used removed first)")


@cache.command("clear", short_help="Remove every cached entry.")
def cache_clear() -> None:
    """Remove every cached parse, analysis, report and nsys export (the cache refills as reports run).

    Example:

        tracelens cache clear
    """
    from .. import cache as warm        # lazy: not for --help (and the budget test keeps it so)

    files, size = warm.clear()
    echo_fitted(f"removed {files} file{'' if files == 1 else 's'} ({_size(size)}) from {warm.root()}")


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
