"""What reaches the callbacks: every request to ``/_dash-update-component`` is checked before Dash reads it.

Dash parses the body with ``request.get_json()`` and indexes into it unchecked: a body that is JSON ``null``
or ``[]``, names no registered callback, or holds other inputs than the callback's raised in Dash itself (an
HTTP 500 with a traceback in the log), and JSON nested 100,000 deep overflowed the parser's stack. Here a
body larger than :data:`MAX_BODY`, nested deeper than :data:`MAX_DEPTH`, not JSON, or not the shape of a
call of a registered callback (its outputs, inputs and state, in order) is answered with a 4xx and one line
in the server's log. Then each value is checked against the kind the page's component sends (``VALUES``): a
list where a run's index goes is no update (204, as a callback answers :class:`Invalid`), before any callback
runs, where it once reached the callback and failed there. What a value of the right kind must also be (a run
or step that is there) is each callback's to check (:mod:`.callbacks`): one the page never sends raises
:class:`Invalid`, quoted in its message by :func:`shown`.
"""

from __future__ import annotations

import logging
import re
import reprlib

from tracelens.arguments import COUNT, INTEGER, TEXT, TEXTS, of_type, optional

MAX_BODY = 1 << 20      # bytes; the page's largest call (a findings filter, a click) is under 2 KB
MAX_DEPTH = 32          # JSON levels; a call's body nests 8 deep (body, inputs, input, click, points, ...)
UPDATE = "_dash-update-component"

NO_UPDATE = 204         # what Dash answers a callback that makes no update: for a value the page never sends

log = logging.getLogger("tracelens.dashboard")

_CLICK = optional(of_type("an object", dict))
# (component, property) -> the kind of value the page sends for it (tracelens.arguments' kinds): every input
# and state of a callback the server runs is here (tests/dashboard/test_callbacks.py checks it).
VALUES = {
    ("run", "value"): COUNT,                                      # an index into the runs
    ("step", "value"): optional(INTEGER) | of_type("'all'", str, test=lambda v: v == "all"),
    ("strip-step", "value"): INTEGER | of_type("'all' or 'none'", str, test=lambda v: v in ("all", "none")),
    ("sort", "value"): optional(TEXT),
    ("metric", "value"): optional(TEXT),
    ("severity", "value"): optional(TEXTS),
    ("find-text", "value"): optional(TEXT),
    ("culprit-link", "n_clicks"): optional(COUNT),
    ("heatmap", "clickData"): _CLICK,
    ("outliers", "clickData"): _CLICK,
    ("history", "clickData"): _CLICK,
    ("findings", "cellClicked"): _CLICK,
}

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


class Invalid(ValueError):
    """A value the page itself never sends (a run, rank or step that is not there, a value of the wrong type):
    only a crafted request holds one. A callback answers it with no update."""


def shown(value, most: int = 40) -> str:
    """A value from a request, as a message may quote it: its repr, cut short."""
    text = reprlib.repr(value)
    return text if len(text) <= most else text[:most] + "..."


def install(app) -> None:
    """Check every callback request of ``app`` (a Dash app whose callbacks are registered)."""
    from flask import request   # lazy: flask comes with dash, after the reports (dashboards/app.py)

    server = app.server
    server.config["MAX_CONTENT_LENGTH"] = MAX_BODY
    path = app.config.routes_pathname_prefix + UPDATE

    @server.before_request
    def _guard():
        if request.path != path or request.method != "POST":
            return None         # anything else is Flask's and Dash's to answer (404, 405)
        refused = check(request, app.callback_map)
        if refused is None:
            return None
        status, why = refused
        if status == NO_UPDATE:     # a well-formed call of a value the page never sends: as Invalid, no log line
            return server.response_class(status=NO_UPDATE)
        log.warning("refused %s %s from %s: %d %s", request.method, request.path, request.remote_addr, status, why)
        return server.response_class(why + "\n", status=status, mimetype="text/plain")


def check(request, callbacks: dict) -> tuple[int, str] | None:
    """(status, why) when the request is refused, else None."""
    from werkzeug.exceptions import RequestEntityTooLarge  # lazy: as flask above

    if request.content_length is not None and request.content_length > MAX_BODY:
        return 413, f"body of {request.content_length:,} bytes, more than {MAX_BODY >> 20} MiB"
    if not request.is_json:
        return 415, "body is not JSON (Content-Type: application/json)"
    try:
        data = request.get_data(cache=True)
    except RequestEntityTooLarge:
        return 413, f"body of more than {MAX_BODY >> 20} MiB"
    if depth(data) > MAX_DEPTH:
        return 400, f"JSON nested deeper than {MAX_DEPTH} levels"
    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        return 400, "body is not a JSON object" if body is not None or data.strip() == b"null" else "body is not JSON"
    return _call(body, callbacks)


def depth(data: bytes) -> int:
    """How deep the arrays and objects of JSON text ``data`` nest (strings left out), read without parsing it:
    text nested deeper than the parser's stack must never reach the parser."""
    brackets = _STRING.sub(b'""', data).translate(None, _NOT_BRACKETS)
    level = most = 0
    for b in brackets:
        if b in (0x5B, 0x7B):      # [ {
            level += 1
            if level > most:
                most = level
        else:
            level -= 1
    return most


def _call(body: dict, callbacks: dict) -> tuple[int, str] | None:
    """Whether ``body`` is a call of a registered callback: ``output`` names one, and ``outputs``, ``inputs``,
    ``state`` and ``changedPropIds`` are those of its declaration."""
    output = body.get("output")
    cb = served(callbacks).get(output) if isinstance(output, str) else None
    if cb is None:
        return 400, "no such callback"
    declared = cb["output"] if isinstance(cb["output"], (list, tuple)) else [cb["output"]]
    outputs = [(o.component_id, o.component_property) for o in declared]
    given = body.get("outputs")
    given = given if isinstance(given, list) else [given]
    if len(given) != len(outputs) or any(_key(g) != o for g, o in zip(given, outputs)):
        return 400, "outputs are not the callback's"
    for part in ("inputs", "state"):
        want = [(i["id"], i["property"]) for i in cb[part]]
        items = body.get(part, [] if not want else None)
        if not isinstance(items, list) or [_key(i) for i in items] != want:
            return 400, f"{part} are not the callback's"
    changed = body.get("changedPropIds", [])
    names = {f"{i}.{p}" for i, p in ((i["id"], i["property"]) for i in cb["inputs"])}
    if not isinstance(changed, list) or any(not isinstance(c, str) or c not in names for c in changed):
        return 400, "changedPropIds are not the callback's inputs"
    for item in [*body.get("inputs", []), *body.get("state", [])]:
        kind = VALUES.get(_key(item))
        if kind is not None and not kind.fits(item.get("value")):
            return NO_UPDATE, f"{item['id']}.{item['property']} is {shown(item.get('value'))}, not {kind.wants}"
    return None


def served(callbacks: dict) -> dict:
    """The callbacks of ``callbacks`` (an app's ``callback_map``) that the server runs. A clientside one runs in
    the browser and has no function here: Dash would answer a call of it with an HTTP 500."""
    return {output: cb for output, cb in callbacks.items() if "callback" in cb}


def _key(item) -> tuple | None:
    """(id, property) of an output, input or state in a request; None when it is not one."""
    if not isinstance(item, dict):
        return None
    ident, prop = item.get("id"), item.get("property")
    return (ident, prop) if isinstance(ident, str) and isinstance(prop, str) else None
