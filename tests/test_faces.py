"""The package faces hold no traps: a public name is the object its defining module defines,
never a module, and never the name of one of the package's own submodules.

A face name that is also a submodule changes meaning with import order: once any module of
the subpackage ``pkg.sub`` is imported, the import system sets ``pkg.sub`` to that subpackage,
hiding a function of the same name (``from pkg import sub; sub(...)`` -> "'module' object is
not callable"); the other way round, ``import pkg.sub as m`` hands back the function. So the
test first imports every module of every package, then looks at each face.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("analysis", "mutransfer", "sweeps", "mutransfer_cli")
#: Optional engines (``pip install '.[engines]'``, ``'.[umup]'``): a module that cannot be
#: imported only because one of these is missing is skipped, not failed. Its name is still
#: checked against the faces (it is a file of ours whether or not it imports).
OPTIONAL = {"torchtitan", "megatron", "transformers", "accelerate", "triton", "unit_scaling"}
#: Face names that are documented as modules (none today).
DOCUMENTED_MODULES: set[str] = set()
#: The loader machinery a lazy face imports: not names of the face.
MACHINERY = {"mutransfer._lazy", "mutransfer._siblings"}


def _all_modules() -> tuple[dict[str, bool], list[str]]:
    """Every module of our packages (name -> is a package), each imported once here
    (``__main__`` modules are listed, not run), and the ones skipped for a missing engine."""
    found: dict[str, bool] = {}
    skipped: list[str] = []
    for top in PACKAGES:
        pkg = importlib.import_module(top)
        found[top] = True
        for info in pkgutil.walk_packages(pkg.__path__, f"{top}.", onerror=lambda name: None):
            found[info.name] = info.ispkg
            if info.name.rsplit(".", 1)[-1] == "__main__":
                continue
            try:
                importlib.import_module(info.name)
            except ImportError as exc:
                if (exc.name or "").split(".")[0] not in OPTIONAL:
                    raise
                skipped.append(f"{info.name} (needs {exc.name})")
    return found, skipped


MODULES, SKIPPED = _all_modules()


def _source(package: str) -> ast.Module:
    path = Path(sys.modules[package].__file__ or "")
    return ast.parse(path.read_text(encoding="utf-8"))


def defining_modules(package: str) -> dict[str, str]:
    """Face name -> the module it comes from: the lazy table's entry where the face loads
    lazily, else the face's own ``from X import name``."""
    tree = _source(package)
    for node in tree.body:
        if isinstance(node, ast.Assign) and "lazy_exports" in ast.unparse(node.value):
            table = ast.literal_eval(node.value.args[1])  # type: ignore[attr-defined]
            lazy = {name: module for module, names in table.items() for name in names}
            break
    else:
        lazy = {}
    imported: dict[str, str] = {}
    for node in tree.body:  # module level only: the TYPE_CHECKING block of a lazy face is under an If
        stmts = [node, *(node.body if isinstance(node, ast.If) else [])]
        for stmt in stmts:
            if isinstance(stmt, ast.ImportFrom) and stmt.level == 0 and stmt.module \
                    and stmt.module.split(".")[0] in PACKAGES and stmt.module not in MACHINERY:
                for alias in stmt.names:
                    imported[alias.asname or alias.name] = stmt.module
    return {**imported, **lazy}


FACES = sorted(m for m, is_pkg in MODULES.items() if is_pkg and hasattr(sys.modules.get(m), "__all__"))


def test_every_face_is_found() -> None:
    assert {"analysis", "mutransfer", "sweeps"} <= set(FACES)
    assert all(s.split(" ", 1)[0] in MODULES for s in SKIPPED)


@pytest.mark.parametrize("face", FACES)
def test_no_face_name_is_a_submodule(face: str) -> None:
    """``pkg.name`` is either a name of the face or a module of the package, never both."""
    names = sys.modules[face].__all__
    assert [f"{face}.{n}" for n in names if f"{face}.{n}" in MODULES] == []


@pytest.mark.parametrize("face", FACES)
def test_each_face_name_is_its_defining_modules_object(face: str) -> None:
    """After every module was imported: ``getattr(face, name)`` is no module (unless documented
    as one) and is the very object the module named by the face's table or import defines."""
    package = sys.modules[face]
    where = defining_modules(face)
    assert sorted(where) == sorted(package.__all__)
    bad = []
    for name in package.__all__:
        value = getattr(package, name)
        if isinstance(value, types.ModuleType) and f"{face}.{name}" not in DOCUMENTED_MODULES:
            bad.append(f"{face}.{name} is the module {value.__name__}")
        elif value is not getattr(importlib.import_module(where[name]), name):
            bad.append(f"{face}.{name} is not {where[name]}.{name}")
    assert bad == []
