"""Dash dashboard over saved reports (``tracelens dashboard``), imported as ``tracelens.dashboards``.

Needs the ``dashboard`` extra; not part of this release.
"""
