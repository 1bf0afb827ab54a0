"""The house rules of docs/architecture.md, checked on the source: which layer may import which, and who may
touch files. A new import that breaks a rule fails here, with the file and line."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "tracelens"

# Folder -> the tracelens modules (dotted, below ``tracelens``) it must never import.
FORBIDDEN = {
    "tracelens/parsers": ("analyzers", "renderers", "contract", "gate", "history_db", "cli", "collectors", "api"),
    "tracelens/analyzers": ("parsers", "renderers", "gate", "history_db", "cli", "collectors", "tools", "api"),
    # combine sees RankAnalyses only: no trace model (of the model, only the column helpers and the NCCL
    # records: test_combine_sees_no_trace), no per-rank analyzer that reads tables.
    "tracelens/analyzers/run": ("parsers", "analyzers.rank.overlap", "analyzers.rank.syncs",
                                "analyzers.rank.launch_order", "analyzers.rank.copies", "renderers", "cli"),
    "tracelens/renderers": ("analyzers", "parsers", "cli", "collectors", "tools", "api"),
    # The Report is a data definition: its notebook methods reach tracelens.notebook by name (below).
    "tracelens/contract": ("parsers", "analyzers", "renderers", "gate", "history_db", "cli", "collectors", "api",
                           "notebook", "dashboards"),
    "collectors": ("parsers", "analyzers", "renderers", "contract", "cli", "api"),
    # The CLI parses options, calls api and renders: it never reads a trace or computes a metric itself.
    "tracelens/cli": ("parsers", "analyzers"),
    # The dashboard draws Reports through api and the figures; it never reads a trace or computes a metric.
    "dashboards": ("parsers", "analyzers", "cli", "collectors", "model"),
}
# Calls and modules that touch files; analyzers see tables, never paths.
FILE_CALLS = {"open", "read_text", "read_bytes", "write_text", "write_bytes", "connect", "mmap", "iterdir", "glob",
              "rglob", "stat"}
FILE_MODULES = {"io", "gzip", "sqlite3", "mmap", "shutil", "tempfile", "pathlib", "os", "zlib"}


def _modules(folder: str, root: Path = ROOT) -> list[Path]:
    return sorted((root / folder).rglob("*.py"))


def _imports(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """(line, absolute dotted name) of every import in a module, relative imports resolved."""
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[0] in ("collectors", "dashboards"):     # installed as tracelens.collectors, tracelens.dashboards
        parts = ["tracelens", *parts]
    package = parts[:-1] if parts[-1] != "__init__" else parts[:-1]
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            mod = ".".join([*base, node.module] if node.module else base)
            out.append((node.lineno, mod))
            out += [(node.lineno, f"{mod}.{a.name}") for a in node.names]
    return out


def _violations(folder: str, banned: tuple[str, ...], root: Path = ROOT) -> list[str]:
    bad = []
    for path in _modules(folder, root):
        for line, name in _imports(path, root):
            for b in banned:
                if name == f"tracelens.{b}" or name.startswith(f"tracelens.{b}."):
                    bad.append(f"{path.relative_to(root)}:{line} imports {name}")
    return bad


@pytest.mark.parametrize("folder", sorted(FORBIDDEN))
def test_layer_imports(folder):
    assert _modules(folder), f"{folder} has no modules: update the rules"
    assert _violations(folder, FORBIDDEN[folder]) == []


def test_the_annotated_traces_are_written_not_measured():
    # annotation_files.py copies a trace and writes the events a renderer made: no analyzer, no command.
    path = PACKAGE / "annotation_files.py"
    assert [f"{path.relative_to(ROOT)}:{line} imports {name}" for line, name in _imports(path)
            for b in ("analyzers", "cli", "api") if name == f"tracelens.{b}" or name.startswith(f"tracelens.{b}.")] == []


# A parser package is used through the names its __init__ gives (docs/architecture.md): no module outside its
# folder imports one of its modules.
PACKAGES = ("tracelens/parsers/kineto", "tracelens/parsers/nsys", "tracelens/parsers/nccl")
INSTALLED = ("tracelens", "dashboards", "collectors")


def _dotted(folder: str) -> str:
    return folder.replace("/", ".")


def _surface_breaches(package: str, root: Path = ROOT) -> list[str]:
    inside = {p.stem for p in (root / package).glob("*.py")} - {"__init__"}
    dotted = _dotted(package)
    bad = []
    for folder in INSTALLED:
        for path in _modules(folder, root):
            if (root / package) in path.parents:
                continue
            for line, name in _imports(path, root):
                if name.startswith(dotted + ".") and name[len(dotted) + 1:].split(".")[0] in inside:
                    bad.append(f"{path.relative_to(root)}:{line} imports {name}")
    return bad


@pytest.mark.parametrize("package", PACKAGES)
def test_packages_are_used_through_their_surface(package):
    assert _surface_breaches(package) == []


@pytest.mark.parametrize("package", PACKAGES)
def test_a_package_surface_is_its_modules_names(package):
    # Each name resolves, and none is also a module's name: importing that module would replace the name.
    import importlib

    mod = importlib.import_module(_dotted(package))
    modules = {p.stem for p in (ROOT / package).glob("*.py")}
    assert mod.__all__ and not set(mod.__all__) & modules
    assert all(getattr(mod, name) is not None for name in mod.__all__)


def test_the_surface_rule_catches_a_module_reached_into(tmp_path):
    fake = tmp_path / "tracelens" / "parsers"
    (fake / "kineto").mkdir(parents=True)
    (fake / "kineto" / "decode.py").write_text("")
    (fake / "workers.py").write_text("from .kineto import decode_file\nfrom .kineto.decode import decode_file\n")
    assert _surface_breaches("tracelens/parsers/kineto", tmp_path) == [
        "tracelens/parsers/workers.py:2 imports tracelens.parsers.kineto.decode",
        "tracelens/parsers/workers.py:2 imports tracelens.parsers.kineto.decode.decode_file"]


def test_analyzers_never_touch_files():
    bad = []
    for path in _modules("tracelens/analyzers"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                fn = node.func
                name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else None
                if name in FILE_CALLS:
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno} calls {name}()")
        for line, name in _imports(path):
            if name.split(".")[0] in FILE_MODULES:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert bad == []


def test_the_rules_catch_a_violation(tmp_path):
    """The checker itself: a parser importing an analyzer is found, with its line."""
    fake = tmp_path / "tracelens" / "parsers"
    fake.mkdir(parents=True)
    (fake / "bad.py").write_text("from __future__ import annotations\nfrom ..analyzers import overlap\n")
    assert _violations("tracelens/parsers", FORBIDDEN["tracelens/parsers"], tmp_path) == [
        "tracelens/parsers/bad.py:2 imports tracelens.analyzers",
        "tracelens/parsers/bad.py:2 imports tracelens.analyzers.overlap"]


def test_the_cli_rule_catches_a_command_reading_traces(tmp_path):
    """A command module (one package below tracelens) that loads traces itself, lazily inside its function
    as commands import, is found: relative imports resolve from the cli package."""
    fake = tmp_path / "tracelens" / "cli"
    fake.mkdir(parents=True)
    (fake / "report.py").write_text("def report():\n    from ..parsers import load_files\n"
                                    "    from ..analyzers import combine\n    from .. import api\n")
    assert _violations("tracelens/cli", FORBIDDEN["tracelens/cli"], tmp_path) == [
        "tracelens/cli/report.py:2 imports tracelens.parsers",
        "tracelens/cli/report.py:2 imports tracelens.parsers.load_files",
        "tracelens/cli/report.py:3 imports tracelens.analyzers",
        "tracelens/cli/report.py:3 imports tracelens.analyzers.combine"]


def _outside(folder: str, allowed: set[str], root: Path = ROOT) -> list[str]:
    """Imports from ``folder`` of tracelens modules that are not ``allowed`` (dotted prefixes)."""
    return [f"{path.relative_to(root)}:{line} imports {name}" for path in _modules(folder, root)
            for line, name in _imports(path, root) if name.split(".")[0] == "tracelens"
            and not any(name == a or name.startswith(a + ".") for a in allowed)]


def test_the_model_imports_nothing_above_it():
    # The model is the floor every layer stands on (docs/architecture.md): the parsers, the analyzers and the
    # collector import it, it imports none of them (the lazy names of its __init__ come from _speed).
    assert _outside("tracelens/model", {"tracelens.model", "tracelens._speed"}) == []


def test_combine_sees_no_trace():
    # Of the model, run/ reads the column helpers (percentiles, distinct values) and the NCCL records only
    # (``from ...model import nccl_records`` names tracelens.model, then what it takes from it).
    allowed = ("tracelens.model.columns", "tracelens.model.nccl_records")
    model = [(path, line, name) for path in _modules("tracelens/analyzers/run") for line, name in _imports(path)
             if name.startswith("tracelens.model.")]
    assert model and [f"{p.relative_to(ROOT)}:{line} imports {name}" for p, line, name in model
                      if not any(name == a or name.startswith(a + ".") for a in allowed)] == []


def test_the_model_rule_catches_an_import_from_above(tmp_path):
    fake = tmp_path / "tracelens" / "model"
    fake.mkdir(parents=True)
    (fake / "table.py").write_text("from .meta import RunMeta\nfrom ..parsers import discover\n")
    assert _outside("tracelens/model", {"tracelens.model", "tracelens._speed"}, tmp_path) == [
        "tracelens/model/table.py:2 imports tracelens.parsers",
        "tracelens/model/table.py:2 imports tracelens.parsers.discover"]


def test_the_notebook_draws_through_api_and_the_renderers():
    # tracelens/notebook.py (Report._repr_html_, figure, to_pandas) reads a trace only through api (a step's
    # timeline) and draws with the renderers' figures: no parser, analyzer or Dash of its own.
    names = {name.split(".")[1] for _, name in _imports(PACKAGE / "notebook.py") if name.startswith("tracelens.")}
    assert names == {"api", "arguments", "contract", "errors", "renderers"}


def test_the_contract_names_the_notebook_module_and_nothing_else():
    # The Report's notebook methods call the module their name gives, imported when first called: the only
    # module the contract reaches that way, and one that exists (docs/architecture.md, "A Report in a
    # notebook").
    import importlib

    from tracelens import contract

    trees = [ast.parse(path.read_text(encoding="utf-8")) for path in _modules("tracelens/contract")]
    calls = [node for tree in trees for node in ast.walk(tree) if isinstance(node, ast.Call)
             and isinstance(node.func, ast.Attribute) and node.func.attr in ("import_module", "__import__")]
    assert len(calls) == 1 and ast.unparse(calls[0].args[0]) == "NOTEBOOK"
    assert contract.NOTEBOOK == "tracelens.notebook" and importlib.import_module(contract.NOTEBOOK).figure


def test_pool_workers_know_jobs_by_number_only():
    # tracelens/pool.py runs jobs it is given as functions: it imports nothing of tracelens but its errors,
    # so that it never decides what a job is (docs/architecture.md).
    names = [name for _, name in _imports(PACKAGE / "pool.py") if name.startswith("tracelens")]
    assert names and set(names) <= {"tracelens.errors", "tracelens.errors.TracelensError",
                                    "tracelens.errors.UsageError"}


# ------------------------------------------------------------------------------------------ names

def _folder_of(dotted: str, root: Path) -> Path:
    parts = dotted.split(".")
    if parts[1:2] and parts[1] in ("collectors", "dashboards"):
        parts = parts[1:]
    return root.joinpath(*parts)


def _private_imports(root: Path = ROOT) -> list[str]:
    """``from X import _name`` where ``_name`` is another module's underscore name. A package's private
    module (``from . import _version``) is a module, not a name inside one: it may be imported."""
    bad = []
    for folder in INSTALLED:
        for path in _modules(folder, root):
            rel = path.relative_to(root).with_suffix("")
            parts = ["tracelens", *rel.parts] if rel.parts[0] in ("collectors", "dashboards") else list(rel.parts)
            package = parts[:-1]
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.ImportFrom):
                    continue
                base = package[: len(package) - node.level + 1] if node.level else []
                mod = ".".join([*base, node.module] if node.module else base)
                for a in node.names:
                    if a.name.startswith("_") and not a.name.startswith("__"):
                        where = _folder_of(mod, root) / a.name
                        if not (where.with_suffix(".py").exists() or where.is_dir()):
                            bad.append(f"{path.relative_to(root)}:{node.lineno} imports {mod}.{a.name}")
    return bad


def test_no_module_imports_another_modules_private_names():
    # A name shared on purpose is public; an underscore name is its module's own.
    assert _private_imports() == []


def test_the_private_rule_catches_an_underscore_name(tmp_path):
    fake = tmp_path / "tracelens" / "parsers"
    fake.mkdir(parents=True)
    (tmp_path / "tracelens" / "_version.py").write_text("")
    (fake / "a.py").write_text("from .b import _helper, shared\nfrom .. import _version\n")
    assert _private_imports(tmp_path) == ["tracelens/parsers/a.py:1 imports tracelens.parsers.b._helper"]


def _names(root: Path = ROOT) -> dict[str, list[str]]:
    """Name -> where it is: every module and package of the installed folders (a command's module in cli/ is
    named after its command, so it may share the name of what it runs: cli/gate.py runs the gate) and every
    folder at the top of the repository."""
    out: dict[str, list[str]] = {}
    for top in sorted(root.iterdir()):
        if top.is_dir() and not top.name.startswith(".") and top.name not in ("build", "__pycache__") \
                and not top.name.endswith(".egg-info"):
            out.setdefault(top.name, []).append(top.name + "/")
    for folder in INSTALLED:
        for path in sorted((root / folder).rglob("*")):
            rel = path.relative_to(root)
            if "__pycache__" in rel.parts or rel.parts[:2] == ("tracelens", "cli"):
                continue
            if path.is_dir():
                if path != root / folder:
                    out.setdefault(path.name, []).append(f"{rel}/")
            elif path.suffix == ".py" and path.stem not in ("__init__", "__main__"):
                out.setdefault(path.stem, []).append(str(rel))
    return out


def test_one_name_per_module():
    assert {name: places for name, places in _names().items() if len(places) > 1} == {}


def test_one_name_per_class():
    classes: dict[str, list[str]] = {}
    for folder in INSTALLED:
        for path in _modules(folder):
            for node in ast.parse(path.read_text(encoding="utf-8")).body:
                if isinstance(node, ast.ClassDef):
                    classes.setdefault(node.name, []).append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert {name: places for name, places in classes.items() if len(places) > 1} == {}


def test_the_name_rule_catches_a_repeated_module(tmp_path):
    for rel in ("tracelens/timeline.py", "tracelens/renderers/timeline.py", "tracelens/cli/gate.py",
                "tracelens/gating/__init__.py", "tools/make.py", "tracelens/tools/__init__.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    repeated = {name: places for name, places in _names(tmp_path).items() if len(places) > 1}
    assert repeated == {"timeline": ["tracelens/renderers/timeline.py", "tracelens/timeline.py"],
                        "tools": ["tools/", "tracelens/tools/"]}


# ------------------------------------------------------------------------------------------ circles

def _graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the modules it imports, wherever the import stands (in a function, under TYPE_CHECKING):
    a circle broken by a late import is a circle too. ``from package import name`` is an edge to the
    module ``package.name`` when there is one, else to the package."""
    modules = {}
    for folder in INSTALLED:
        for path in _modules(folder, root):
            rel = path.relative_to(root).with_suffix("")
            parts = ["tracelens", *rel.parts] if rel.parts[0] in ("collectors", "dashboards") else list(rel.parts)
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for module, path in modules.items():
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        names = []
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package[: len(package) - node.level + 1] if node.level else []
                mod = ".".join([*base, node.module] if node.module else base)
                names += [f"{mod}.{a.name}" if f"{mod}.{a.name}" in modules else mod for a in node.names]
        graph[module] = {t for t in map(known, names) if t and t != module}
    return graph


def _circles(root: Path = ROOT) -> list[list[str]]:
    """The groups of modules that reach each other through their imports (Tarjan's strongly connected
    components), each sorted."""
    graph, index, low, stack, on, out = _graph(root), {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while not group or group[-1] != v:
                group.append(stack.pop())
                on.discard(group[-1])
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circles():
    # Two modules that need each other's names have a third below both that holds them (docs/architecture.md).
    assert _circles() == []


def test_the_circle_rule_sees_a_late_import(tmp_path):
    fake = tmp_path / "collectors"
    fake.mkdir()
    (fake / "runner.py").write_text("from .manifest import write_manifest\n")
    (fake / "manifest.py").write_text("def f():\n    from .runner import split_launcher\n")
    (fake / "agent.py").write_text("from . import runner\n")
    assert _circles(tmp_path) == [["tracelens.collectors.manifest", "tracelens.collectors.runner"]]


def test_the_wording_imports_only_the_contract():
    # analyzers/wording/ only formats what the analyzers measured: of tracelens, it imports the report's
    # Diagnosis and its own modules, never the thresholds, the interval algebra or an analyzer (each family
    # imports the shared base only: tests/unit/test_wording.py).
    assert _outside("tracelens/analyzers/wording", {"tracelens.analyzers.wording", "tracelens.contract",
                                                     "tracelens.units"}) == []
