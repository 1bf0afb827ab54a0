"""Every package folder is listed in pyproject (an unlisted one would be missing from the wheel), and the
wheel holds no test code."""

import ast
import importlib.util

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


def _package_modules(cfg) -> dict[str, list]:
    """Listed package -> the .py files setuptools puts in the wheel for it (its folder, not subfolders)."""
    mapped = cfg["package-dir"]
    out = {}
    for pkg in cfg["packages"]:
        top = next((k for k in mapped if pkg == k or pkg.startswith(k + ".")), None)
        folder = ROOT / mapped[top] / pkg[len(top) + 1:].replace(".", "/") if top else ROOT / pkg.replace(".", "/")
        out[pkg] = sorted(folder.glob("*.py"))
    return out


def test_no_test_generator_in_the_package():
    # The synthetic trace generator is a test fixture (tests/fixtures/synth, used by the tests, bench/ and
    # scripts/make_samples.py): no installed module may be it, or import it.
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    modules = _package_modules(cfg)
    assert all(modules.values()), "a listed package has no modules: update the mapping above"
    bad = []
    for pkg, paths in modules.items():
        for path in paths:
            if "synth" in path.stem:
                bad.append(f"{pkg}.{path.stem} ships a trace generator")
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
                bad += [f"{path.relative_to(ROOT)}:{node.lineno} imports {n}" for n in names
                        if n.split(".")[0] in ("fixtures", "tests", "conftest") or n.startswith("tracelens.synth")]
    assert bad == []
    assert importlib.util.find_spec("tracelens.synth") is None


def test_public_api():
    import tracelens
    assert callable(tracelens.load) and callable(tracelens.analyze)
    import tracelens.collectors
    import tracelens.dashboards  # noqa: F401
