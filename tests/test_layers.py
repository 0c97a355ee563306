"""The import contract: the layers of docs/architecture.md, checked on the code.

Every import of every module counts: at the top, inside functions, under
``if TYPE_CHECKING:`` (a type checker follows those too) and by module name
(``importlib.import_module("pkg.mod")`` or a lazy-export table's ``"pkg.mod"`` value). An
import may point down or sideways, never up. ``benchmarks`` and the notebooks sit beside the
CLI: they use the library (mutransfer, sweeps, analysis), never ``mutransfer_cli`` (they may run
the ``mutransfer`` command as a user does). A layer that starts a process of ours
(``[sys.executable, "-m", "pkg", ...]``) depends on that package as if it imported it: sweeps
spawns its workers with ``python -m sweeps``, never the CLI above it. No exemption. Import
cycles between modules are refused as well: a type checker has to
resolve both ends of a circle at once, and a reader cannot tell which module comes first.

Inside ``mutransfer`` the folders are floors as well (:data:`FLOORS`), and ``tests/`` mirrors the
package folders. A name has one import path, the module that defines it: only the package faces
(:data:`FACES`) hand on names they do not define, each imported from its defining module.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Bottom to top: a module may import its own layer and the ones below it.
LAYERS = ("analysis", "mutransfer", "sweeps", "mutransfer_cli")
#: Users of the library's public API, beside the CLI: everything below it, not the CLI.
CLIENTS = ("benchmarks",)
#: Modules allowed to import upward, each with its reason (``python -m mutransfer_cli`` runs
#: the CLI; the library has no entry shim into it). The CLI audit's subject is the CLI: it
#: builds its cases from the verbs' own parsers and runs ``main`` in forked children.
EXEMPT: set[tuple[str, str]] = {("benchmarks.cli_audit", "mutransfer_cli")}
#: Third-party packages a layer must never import (analysis is usable without torch).
FORBIDDEN_THIRD_PARTY = {"analysis": ("torch",)}
OURS = (*LAYERS, *CLIENTS)
_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in OURS for p in sorted((ROOT / pkg).rglob("*.py"))
            if "__pycache__" not in p.parts}


MODULES = _modules()


def _resolve(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module an ``from X import ...`` names (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


class Edge(NamedTuple):
    module: str
    """The imported module."""
    line: int
    static: bool
    """An import statement (what a type checker follows), not a module named by a string."""


def imports_of(tree: ast.AST, module: str, is_package: bool) -> Iterator[Edge]:
    """Every import in ``tree``, wherever it sits. ``from pkg import sub`` names ``pkg.sub``
    when that is one of our modules."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Edge(alias.name, node.lineno, static=True)
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(node, module, is_package)
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                yield Edge(sub if sub in MODULES else target, node.lineno, static=True)
        elif isinstance(node, (ast.List, ast.Tuple)) and module.split(".")[0] in LAYERS:
            # argv of a process of ours: [sys.executable, "-m", "pkg", ...] runs pkg
            items = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
            for flag, name in zip(items, items[1:]):
                if flag == "-m" and isinstance(name, str) and name.split(".")[0] in OURS:
                    yield Edge(name, node.lineno, static=False)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _DOTTED.match(node.value):
            # a module named as a string: importlib.import_module("sweeps.results"), or the
            # value of a lazy-export table; counted when it names one of our modules
            name = node.value if node.value in MODULES else node.value.rsplit(".", 1)[0]
            if name in MODULES:
                yield Edge(name, node.lineno, static=False)


def _notebook_code(path: Path) -> str:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    lines = []
    for cell in cells:
        if cell.get("cell_type") == "code":
            src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            # IPython magics and shell escapes are not Python
            lines += [ln for ln in src.splitlines() if not ln.lstrip().startswith(("%", "!"))]
    return "\n".join(lines)


def import_graph() -> dict[str, list[Edge]]:
    """Our module -> [(imported module, line)], every import included."""
    graph = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        graph[name] = list(imports_of(tree, name, path.name == "__init__.py"))
    return graph


GRAPH = import_graph()


def _top(module: str) -> str:
    return module.split(".", 1)[0]


def _allowed(importer: str, imported: str) -> bool:
    src, dst = _top(importer), _top(imported)
    if dst not in OURS or src == dst or (importer, dst) in EXEMPT:
        return True
    if src in CLIENTS:
        return dst in LAYERS[:-1]  # the library, never the CLI (nor another client)
    return dst in LAYERS and LAYERS.index(dst) < LAYERS.index(src)


def _violations(graph: dict[str, list[Edge]]) -> list[str]:
    out = []
    for importer, targets in graph.items():
        for imported, line, _ in targets:
            if not _allowed(importer, imported):
                out.append(f"{MODULES[importer].relative_to(ROOT)}:{line}: {importer} imports {imported}")
            banned = FORBIDDEN_THIRD_PARTY.get(_top(importer), ())
            if _top(imported) in banned:
                out.append(f"{MODULES[importer].relative_to(ROOT)}:{line}: {importer} imports {imported}")
    return sorted(set(out))


@pytest.mark.parametrize("layer", OURS)
def test_imports_point_down_only(layer: str) -> None:
    graph = {m: t for m, t in GRAPH.items() if _top(m) == layer}
    assert graph, f"no modules found under {layer}/"
    assert _violations(graph) == []


def test_notebooks_use_the_library_not_the_cli() -> None:
    bad = []
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        tree = ast.parse(_notebook_code(nb), filename=str(nb))
        bad += [f"{nb.name}:{line}: imports {m}" for m, line, _ in imports_of(tree, "notebook", False)
                if _top(m) == "mutransfer_cli" or _top(m) in CLIENTS]
    assert bad == []


def _spawned(tree: ast.AST) -> Iterator[tuple[str, int]]:
    """``python -m NAME`` argv lists in ``tree``: (NAME, line), for NAME under our packages."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.List, ast.Tuple)):
            items = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
            for flag, name in zip(items, items[1:]):
                if flag == "-m" and isinstance(name, str) and name.split(".")[0] in OURS:
                    yield name, node.lineno


def test_every_process_we_start_names_a_runnable_module() -> None:
    """``[sys.executable, "-m", NAME]`` in the code and the notebooks names a module that
    ``python -m`` can run (a package with ``__main__.py`` or a module file): a renamed or
    removed entry is caught here, not by a user's failing command."""
    def runnable(name: str) -> bool:
        path = ROOT.joinpath(*name.split("."))
        return (path / "__main__.py").is_file() or path.with_suffix(".py").is_file()

    sources = [(str(p.relative_to(ROOT)), p.read_text(encoding="utf-8")) for p in MODULES.values()]
    sources += [(nb.name, _notebook_code(nb)) for nb in sorted((ROOT / "notebooks").glob("*.ipynb"))]
    sources += [(str(p.relative_to(ROOT)), p.read_text(encoding="utf-8"))
                for p in sorted((ROOT / "tests").rglob("*.py"))]
    bad = [f"{where}:{line}: python -m {name}" for where, src in sources
           for name, line in _spawned(ast.parse(src)) if not runnable(name)]
    assert bad == []


def test_the_checker_sees_every_kind_of_import() -> None:
    """Known answers: each spelling of an upward import is caught, a downward one is not."""
    src = (
        "from __future__ import annotations\n"
        "from typing import TYPE_CHECKING\n"
        "import analysis\n"                        # down: allowed
        "if TYPE_CHECKING:\n"
        "    from sweeps.results import status\n"   # up, for the type checker only
        "def f():\n"
        "    import mutransfer_cli\n"              # up, inside a function
        "    return importlib.import_module('sweeps.results')\n"  # up, by name
        "from . import schema\n"                   # sideways, relative
    )
    tree = ast.parse(src)
    found = sorted({e.module for e in imports_of(tree, "mutransfer.card.build", False)})
    assert found == ["__future__", "analysis", "mutransfer.card.schema", "mutransfer_cli", "sweeps.results",
                     "typing"]
    graph = {"mutransfer.card.build": list(imports_of(tree, "mutransfer.card.build", False))}
    assert sorted(v.split(":")[1] + " " + v.rsplit(" imports ", 1)[1] for v in _violations(graph)) == [
        "5 sweeps.results", "7 mutransfer_cli", "8 sweeps.results"]
    assert not _allowed("mutransfer.__main__", "mutransfer_cli")  # no entry shim into the CLI
    assert not _allowed("mutransfer.cli_shim", "mutransfer_cli")
    assert not _allowed("benchmarks.fit_speed", "mutransfer_cli._common")
    assert _allowed("benchmarks.fit_speed", "sweeps")
    # a process of ours started by argv counts too: sweeps spawning the CLI (as its workers
    # once did) is an upward dependency; a benchmark running the command as a user does is not
    spawn = ast.parse('cmd = [sys.executable, "-m", "mutransfer_cli", "sweep", "worker"]\n')
    assert [e.module for e in imports_of(spawn, "sweeps.worker", False)] == ["mutransfer_cli"]
    assert _violations({"sweeps.worker": list(imports_of(spawn, "sweeps.worker", False))})
    assert [e.module for e in imports_of(spawn, "benchmarks.gpu", False)] == []


def documented_layers() -> tuple[str, ...]:
    """The order stated in docs/architecture.md's Layers section, one line:
    ``Layers, bottom to top: analysis → mutransfer → sweeps → mutransfer_cli``."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("\n## Layers", 1)[1].split("\n## ", 1)[0]
    lines = [ln for ln in section.splitlines() if ln.strip().startswith("Layers, bottom to top:")]
    assert len(lines) == 1, "docs/architecture.md: the Layers section states the order in one line"
    order = lines[0].split(":", 1)[1]
    return tuple(p.strip(" `.") for p in order.split("→"))


def test_documented_layers_are_the_enforced_ones() -> None:
    assert documented_layers() == LAYERS


#: The floors inside ``mutransfer``, bottom to top: a module imports its own floor and the ones
#: below, never one above. ``mutransfer`` holds the package's own small modules (``_io``,
#: ``provenance``, ``contain``, ``entry``...); the face (``mutransfer/__init__.py``) sits above all.
FLOORS = ("mutransfer", "mutransfer.models", "mutransfer.parametrize", "mutransfer.training",
          "mutransfer.checks", "mutransfer.card")


def floor(module: str) -> int:
    """The floor of a module under ``mutransfer`` (the face: above every floor)."""
    if module == "mutransfer":
        return len(FLOORS)
    sub = ".".join(module.split(".")[:2])
    return FLOORS.index(sub) if sub in FLOORS else 0


def _floor_violations(graph: dict[str, list[Edge]]) -> list[str]:
    out = []
    for importer, targets in graph.items():
        if _top(importer) != "mutransfer":
            continue
        for imported, line, _ in targets:
            if _top(imported) == "mutransfer" and floor(imported) > floor(importer):
                out.append(f"{importer}:{line}: {FLOORS[floor(importer)]} imports {imported}")
    return sorted(set(out))


def test_mutransfer_floors_point_down_only() -> None:
    assert _floor_violations(GRAPH) == []
    assert {m.rsplit(".", 1)[0] for m in MODULES if _top(m) == "mutransfer" and m.count(".") >= 2} \
        <= {*FLOORS, "mutransfer.card.engines"}, "a new folder under mutransfer/ needs its floor"


def test_the_floor_check_known_answers() -> None:
    g = {"mutransfer.parametrize.rules": [Edge("mutransfer.card.plan", 3, static=True),
                                          Edge("mutransfer._io", 4, static=True)],
         "mutransfer.card.engines.hf": [Edge("mutransfer.training.schedules", 5, static=True)],
         "mutransfer.checks.audit": [Edge("mutransfer", 6, static=True)]}
    assert _floor_violations(g) == [
        "mutransfer.checks.audit:6: mutransfer.checks imports mutransfer",
        "mutransfer.parametrize.rules:3: mutransfer.parametrize imports mutransfer.card.plan"]


def documented_floors() -> tuple[str, ...]:
    """The floors stated in docs/architecture.md's Layers section, one line:
    ``Floors of mutransfer, bottom to top: mutransfer → mutransfer.models → ...``."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("\n## Layers", 1)[1].split("\n## ", 1)[0]
    head = "Floors of mutransfer, bottom to top:"
    lines = [ln for ln in section.splitlines() if ln.strip().startswith(head)]
    assert len(lines) == 1, "docs/architecture.md: the Layers section states mutransfer's floors in one line"
    return tuple(p.strip(" `.") for p in lines[0].split(":", 1)[1].split("→"))


def test_documented_floors_are_the_enforced_ones() -> None:
    assert documented_floors() == FLOORS


def cycles(graph: dict[str, list[Edge]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted; only
    import statements count (a type checker does not follow a module named by a string)."""
    edges = {m: sorted({e.module for e in es if e.static and e.module in graph and e.module != m})
             for m, es in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:  # recursion depth is bounded by the module count (~200)
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(out)


def test_cycle_finder_known_answers() -> None:
    def g(**edges: str) -> dict[str, list[Edge]]:
        return {m: [Edge(t, 1, static=True) for t in ts] for m, ts in edges.items()}

    assert cycles(g(a="b", b="c", c="a", d="a", e="e")) == [["a", "b", "c"]]
    assert cycles(g(a="b", b="")) == []
    assert cycles({"a": [Edge("b", 1, static=False)], "b": [Edge("a", 1, static=True)]}) == []


@pytest.mark.parametrize("layer", OURS)
def test_no_import_cycles(layer: str) -> None:
    found = [c for c in cycles(GRAPH) if any(_top(m) == layer for m in c)]
    assert found == [], "import cycles (every import counted, TYPE_CHECKING ones too)"


# ---- one import path per name ----------------------------------------------------------------

#: The package faces: the only modules that hand on names they do not define.
FACES = ("mutransfer", "sweeps", "analysis")


def _top_level_imports(tree: ast.Module) -> Iterator[ast.ImportFrom]:
    """``from X import ...`` at module level, or under a module-level ``if``/``try`` that is
    not ``if TYPE_CHECKING:`` (those run at import time too)."""
    def walk(body: list[ast.stmt]) -> Iterator[ast.ImportFrom]:
        for node in body:
            if isinstance(node, ast.ImportFrom):
                yield node
            elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
                yield from walk(node.body)
                yield from walk(node.orelse)
            elif isinstance(node, ast.Try):
                yield from walk(node.body)
                for handler in node.handlers:
                    yield from walk(handler.body)
    yield from walk(tree.body)


def _used_names(tree: ast.AST) -> set[str]:
    """Names a module reads: every ``Name`` node, and the words of quoted annotations."""
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    for n in ast.walk(tree):
        spots = []
        if isinstance(n, ast.arg) and n.annotation is not None:
            spots.append(n.annotation)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.returns is not None:
            spots.append(n.returns)
        elif isinstance(n, (ast.AnnAssign, ast.Subscript)):
            spots.append(n.annotation if isinstance(n, ast.AnnAssign) else n.slice)
        for spot in spots:
            for c in ast.walk(spot):
                if isinstance(c, ast.Constant) and isinstance(c.value, str):
                    used.update(re.findall(r"[A-Za-z_]\w*", c.value))
    return used


def _dunder_all(tree: ast.Module) -> list[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__"
                                                for t in node.targets):
            return list(ast.literal_eval(node.value))
    return []


def reexports(tree: ast.Module, module: str, is_package: bool) -> list[str]:
    """Names ``module`` imports from one of our modules and hands on: listed in its
    ``__all__``, or imported and never used (an import kept only so that another module can
    take the name from here). Submodules (``from pkg import sub``) are not names."""
    all_, used = set(_dunder_all(tree)), _used_names(tree)
    out = []
    for node in _top_level_imports(tree):
        target = _resolve(node, module, is_package)
        if _top(target) not in OURS:
            continue
        for alias in node.names:
            local = alias.asname or alias.name
            if f"{target}.{alias.name}" in MODULES and local not in all_:
                continue
            if local in all_ or local not in used:
                out.append(f"{local} (from {target})")
    return out


def test_only_the_package_faces_re_export() -> None:
    """A name has one import path: the module that defines it (and, for the public API, its
    package face). A sibling module handing on another module's name is refused."""
    bad = []
    for name, path in MODULES.items():
        if name in FACES:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        bad += [f"{path.relative_to(ROOT)}: {r}" for r in reexports(tree, name, path.name == "__init__.py")]
    assert bad == []


def test_the_reexport_check_known_answers() -> None:
    src = ("from __future__ import annotations\n"
           "from typing import TYPE_CHECKING\n"
           "from mutransfer._io import plain, atomic_path\n"       # plain used, atomic_path handed on
           "from analysis._io import check_size as cs\n"           # imported, never used
           "from sweeps.storage import Storage\n"                  # listed in __all__
           "if TYPE_CHECKING:\n"
           "    from mutransfer.card.schema import validate_card\n"  # for the type checker: not counted
           "__all__ = ['f', 'Storage']\n"
           "def f(x: 'Sized') -> None:\n"
           "    plain(x)\n")
    got = reexports(ast.parse(src), "sweeps.some", False)
    assert got == ["atomic_path (from mutransfer._io)", "cs (from analysis._io)",
                   "Storage (from sweeps.storage)"]


def _defines(module: str, name: str) -> bool:
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
            if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(n, ast.Name) and n.id == name for t in targets for n in ast.walk(t)):
            return True
    return False


#: What a face imports to work, not names it hands on: the lazy loader and the check that
#: ``analysis`` and ``sweeps`` are ours (mutransfer._siblings).
FACE_MACHINERY = ("mutransfer._lazy", "mutransfer._siblings")


@pytest.mark.parametrize("face", FACES)
def test_a_face_imports_each_name_from_its_defining_module(face: str) -> None:
    """A face's names are explicit imports (under ``TYPE_CHECKING`` where the face loads
    lazily) from the module that defines each; its ``__all__`` lists exactly those, and a lazy
    face's table holds the same pairs (so "go to definition" is one hop, and the table
    cannot drift from what a type checker sees)."""
    tree = ast.parse(MODULES[face].read_text(encoding="utf-8"))
    imported: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and _top(_resolve(node, face, True)) in OURS \
                and node.module not in FACE_MACHINERY:
            for alias in node.names:
                imported[alias.asname or alias.name] = _resolve(node, face, True)
    assert sorted(_dunder_all(tree)) == sorted(imported)
    assert [f"{m}.{n}" for n, m in sorted(imported.items()) if not _defines(m, n)] == []
    lazy = [n for n in tree.body if isinstance(n, ast.Assign) and "lazy_exports" in ast.unparse(n.value)]
    if lazy:
        table = ast.literal_eval(lazy[0].value.args[1])  # type: ignore[attr-defined]
        pairs = {name: module for module, names in table.items() for name in names}
        eager = {n: m for n, m in imported.items() if m not in table and n not in pairs}
        assert {**pairs, **eager} == imported


def test_the_0_1_0_aliases_stay_gone() -> None:
    """``ScalingLaws`` (ScalingLawFit's alias), ``ci=``/``interval=`` (``level``'s old
    spellings), ``--min-lr-ratio`` (``--lr-floor``), ``sweep export`` (``sweep results``) and
    ``apply`` beside ``apply_card`` were removed at 0.1.0 and stay removed."""
    bad = []
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id == "ScalingLaws":
                bad.append(f"{name}:{node.lineno}: ScalingLaws")
            if _top(name) == "analysis" and isinstance(node, ast.arguments):
                args = [*node.posonlyargs, *node.args, *node.kwonlyargs]
                bad += [f"{name}:{a.lineno}: argument {a.arg}=" for a in args if a.arg in ("ci", "interval")]
            if isinstance(node, ast.Constant) and node.value == "--min-lr-ratio":
                bad.append(f"{name}:{node.lineno}: --min-lr-ratio")
            if (name == "mutransfer_cli.sweep" and isinstance(node, ast.Call)
                    and getattr(node.func, "attr", "") == "add_parser" and node.args
                    and getattr(node.args[0], "value", None) == "export"):
                bad.append(f"{name}:{node.lineno}: sweep export")
            if isinstance(node, (ast.FunctionDef, ast.Assign)) and name == "mutransfer.card.apply" and (
                    getattr(node, "name", None) == "apply" or "apply =" in ast.unparse(node)[:8]):
                bad.append(f"{name}:{node.lineno}: apply")
    assert bad == []


def test_tests_mirror_the_packages() -> None:
    """Each folder of tests holds the tests of the package folder of the same path
    (tests/mutransfer/card/ tests mutransfer/card/): a new folder of either side has its twin."""
    folders = {p.parent.relative_to(ROOT / "tests") for p in (ROOT / "tests").rglob("test_*.py")}
    folders.discard(Path("."))
    assert sorted(str(f) for f in folders if not (ROOT / f / "__init__.py").is_file()) == []
    packages = {p.parent.relative_to(ROOT) for pkg in OURS for p in (ROOT / pkg).rglob("__init__.py")}
    untested = sorted(str(p) for p in packages if p not in folders and p.name not in ("engines",))
    assert untested == [], "a package folder without its tests/ folder"
