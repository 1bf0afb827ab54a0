"""Every package folder is listed in pyproject (an unlisted one would be missing from the wheel)."""

import pytest

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11; the check is the same on 3.10 CI-less installs

from conftest import ROOT


def test_every_package_is_listed():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(cfg["packages"])
    mapped = cfg["package-dir"]
    found = set()
    for init in ROOT.glob("**/__init__.py"):
        rel = init.parent.relative_to(ROOT)
        if rel.parts[0] in ("tests", ".venv", "build") or rel.parts[0].startswith("."):
            continue
        top = rel.parts[0]
        prefix = next((k for k, v in mapped.items() if v == top), top)
        found.add(".".join((prefix, *rel.parts[1:])))
    assert found == listed


def test_public_api():
    import tracelens
    assert callable(tracelens.load) and callable(tracelens.analyze)
    import tracelens.collectors
    import tracelens.dashboards  # noqa: F401
