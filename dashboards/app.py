"""The app factory and the server. A :class:`Session` holds what the dashboard was started with: the Reports
(analysed once, through ``tracelens.api``), with two runs their Diff (``api.compare_reports``, made once too),
and how their traces were read. Every view is drawn from them; the step timeline is the only thing fetched
later, for one rank and step, from that rank's own input file."""

from __future__ import annotations

import errno
import ipaddress
import logging
import socket
import sys
import threading
import webbrowser
from collections import OrderedDict
from dataclasses import dataclass, field

from tracelens import api
from tracelens.errors import UsageError
from tracelens.contract import Report
from tracelens.contract.two_runs import Diff

from .guard import Invalid, shown

TIMELINE_CACHE = 8          # timelines kept (a rank's trace is re-read on a miss)


@dataclass
class Run:
    name: str               # "A", "B", or the input as given
    report: Report


@dataclass
class Session:
    runs: list[Run]
    comm_patterns: tuple[str, ...] = ()
    step_nvtx: str | None = None
    history: list[dict] | None = None       # runs of a history database (api.history_runs), oldest first
    diff: Diff | None = None                # runs[0] (before) against runs[1] (after): api.compare_reports
    _timelines: OrderedDict = field(default_factory=OrderedDict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def run(self, index) -> Run:
        """The run at ``index`` (an int from the page, never a path); :class:`Invalid` for anything else."""
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(self.runs):
            raise Invalid(f"no run {shown(index)}")
        return self.runs[index]

    def timeline(self, index: int, rank: int, step):
        """The StepTimeline of one rank and step of run ``index`` (cached): api.step_timeline reads only the
        rank's input file named in that run's Report."""
        run = self.run(index)          # before the index is a key: a list there is Invalid, not a TypeError
        key = (index, rank, step)
        with self._lock:
            if key in self._timelines:
                self._timelines.move_to_end(key)
                return self._timelines[key]
        tl = api.step_timeline(run.report, rank, step, comm_patterns=self.comm_patterns,
                               step_nvtx=self.step_nvtx)
        with self._lock:
            self._timelines[key] = tl
            while len(self._timelines) > TIMELINE_CACHE:
                self._timelines.popitem(last=False)
        return tl


def create_app(session: Session):
    """The Dash app over ``session``: assets served from the installed packages (no CDN)."""
    # lazy: dash, once the reports are made (their workers fork before it loads)
    from dash import Dash

    from . import callbacks, guard, layout      # lazy: they import dash

    # The across-ranks section is redrawn per run: its strip step selector exists only for a run with a strip.
    app = Dash(__name__, title="tracelens", serve_locally=True, update_title=None, suppress_callback_exceptions=True,
               assets_ignore=".*", external_scripts=[], external_stylesheets=[])
    app.layout = layout.page(session)
    callbacks.register(app, session)
    guard.install(app)
    return app


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(session: Session, host: str = "127.0.0.1", port: int = 8050, open_browser: bool = False) -> None:
    """Run the dashboard until interrupted; debug stays off (no reloader, no in-browser tracebacks)."""
    app = create_app(session)
    url = f"http://{f'[{host}]' if ':' in host else host}:{port}/"
    _check_port(host, port)
    _quiet_server()
    if not is_loopback(host):
        print(f"tracelens: warning: the dashboard listens on {host}, reachable from other machines; it has no "
              "login: anyone who can reach the port sees the report", file=sys.stderr)
    print(f"tracelens dashboard: {url}  (Ctrl-C to stop)", flush=True)
    if open_browser:
        threading.Timer(1.0, webbrowser.open, (url,)).start()
    app.run(host=host, port=port, debug=False, dev_tools_ui=False, dev_tools_props_check=False,
            dev_tools_hot_reload=False, use_reloader=False)


def _check_port(host: str, port: int) -> None:
    """A port another program holds (or an address this machine does not have) is the user's to change:
    one line and exit 2, not the server's own message after the URL was already printed."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as exc:
        why = "is in use (choose another with --port)" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
        raise UsageError(f"cannot listen on {host}:{port}: {why}") from None


def _quiet_server() -> None:
    """The terminal shows tracelens' one line with the URL, not Flask's banner, its development-server
    warning (a local, single-user viewer is what that server is for) or a log line per request."""
    import flask.cli    # lazy: flask comes with dash (above)

    flask.cli.show_server_banner = lambda *args, **kwargs: None
    for name in ("werkzeug", "dash", "dash.dash"):
        logging.getLogger(name).setLevel(logging.ERROR)
    # What the server refuses, one line each (dashboards/guard.py, callbacks.py).
    log = logging.getLogger("tracelens.dashboard")
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("tracelens dashboard: %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False
