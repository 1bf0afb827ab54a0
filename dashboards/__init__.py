"""The overlap dashboard (``tracelens dashboard``), imported as ``tracelens.dashboards``: a Dash app over
Reports made by ``tracelens.api``. Needs the ``dashboard`` extra (``pip install 'tracelens-overlap[dashboard]'``);
nothing here is imported by the rest of tracelens.

``app.create_app`` builds the app (no app exists at import), ``layout`` the page, ``callbacks`` the
interactions as plain functions, ``serve`` runs it on 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

from .app import Run, Session, create_app, serve

__all__ = ["Run", "Session", "create_app", "serve"]
