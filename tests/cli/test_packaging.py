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


# ------------------------------------------------------------------------------------------------ the lock

def _lock() -> dict[str, list]:
    """requirements/lock.txt as name -> [(version, marker text or None, hashes)]."""
    entries: dict[str, list] = {}
    text = (ROOT / "requirements" / "lock.txt").read_text()
    for block in text.split("\n"):
        if block and not block[0].isspace() and not block.startswith("#"):
            spec = block.rstrip(" \\")
            name_version, _, marker = spec.partition(" ; ")
            name, version = name_version.split("==")
            entries.setdefault(name.lower().replace("_", "-"), []).append([version, marker or None, 0])
        elif block.strip().startswith("--hash=sha256:"):
            entries[name.lower().replace("_", "-")][-1][2] += 1
    return entries


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_the_lock_pins_every_requirement_at_a_version_pyproject_allows(machine):
    """Each requirement of the project, its test and dashboard extras and requirements/lock.in has one entry
    in the lock for Python 3.11 on Linux on both machines, at a version its specifier allows, with hashes
    (pip's --require-hashes refuses anything else, so the lock is also complete when `make demo` passes)."""
    from packaging.markers import Marker
    from packaging.requirements import Requirement

    env = {"python_version": "3.11", "python_full_version": "3.11.7", "platform_machine": machine,
           "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix", "implementation_name": "cpython",
           "platform_python_implementation": "CPython", "extra": ""}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [*project["dependencies"], *project["optional-dependencies"]["test"],
              *project["optional-dependencies"]["dashboard"]]
    wanted += [line.split("#")[0].strip() for line in (ROOT / "requirements" / "lock.in").read_text().splitlines()
               if line.split("#")[0].strip()]
    lock = _lock()
    for text in wanted:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        name = req.name.lower().replace("_", "-")
        applies = [(v, h) for v, m, h in lock.get(name, []) if m is None or Marker(m).evaluate(env)]
        assert len(applies) == 1, (text, lock.get(name))
        (version, hashes), = applies
        assert req.specifier.contains(version, prereleases=True) and hashes, (text, version, hashes)
    assert all(h for versions in lock.values() for _, _, h in versions)


def test_make_installs_the_lock_and_the_lock_holds_the_extras_the_docs_name():
    page = " ".join((ROOT / "docs" / "dashboard.md").read_text(encoding="utf-8").split())
    assert "`make demo` installs it, with the test extra" in page and "Both need the `dashboard` extra" in page
    make = (ROOT / "Makefile").read_text()
    stamp = make.split("$(STAMP): pyproject.toml $(LOCK)", 1)[1].split("\n\n", 1)[0]
    assert "pip install --quiet --require-hashes -r $(LOCK)" in stamp
    assert "pip install --quiet --no-deps --no-build-isolation -e ." in stamp and "demo: $(STAMP)" in make
    lock = make.split("\nlock:", 1)[1].split("\n\n", 1)[0]
    assert "--extra test --extra dashboard" in lock and "--generate-hashes" in lock and "$(LOCK)" in lock
    assert {"dash", "plotly", "dash-ag-grid", "pytest-xdist", "setuptools"} <= set(_lock())
