"""Our sibling packages are ours: a user's ``analysis.py`` or ``sweeps.py`` (or a folder of
that name) that comes first on ``sys.path`` is named in one line, not met later as
"No module named 'analysis.baselines'; 'analysis' is not a package".

``analysis`` and ``sweeps`` are top-level packages installed beside ``mutransfer`` (the same
parent folder); docs/architecture.md says why they stay there. The check asks the import
system where a name resolves (the ``sys.modules`` entry once imported, else the finders of
``sys.meta_path``, as ``importlib.util.find_spec`` does for a top-level name) and scans nothing.
It imports nothing, so ``import mutransfer`` stays quick.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import Any

__all__ = ["ShadowedPackageError", "check_siblings", "shadowing"]

#: The folder that holds our packages: mutransfer's own folder's parent.
_HOME = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class ShadowedPackageError(ImportError):
    """A package of ours resolves to someone else's file or folder; ``shadowing`` is its path."""

    def __init__(self, package: str, shadowing: str) -> None:
        kind = "folder" if os.path.isdir(shadowing) else "file"
        super().__init__(f"mutransfer: {shadowing} shadows mutransfer's own {package!r} package "
                         f"(it comes first on sys.path); rename that {kind}", name=package, path=shadowing)
        self.shadowing = shadowing


def _spec(name: str) -> Any:
    module = sys.modules.get(name)
    if module is not None:
        return getattr(module, "__spec__", None)
    for finder in sys.meta_path:  # importlib.util.find_spec(name) for a top-level name, unimported
        find = getattr(finder, "find_spec", None)
        spec = find(name, None) if find is not None else None
        if spec is not None:
            return spec
    return None


def shadowing(name: str) -> str | None:
    """The file or folder that ``import name`` gives when it is not our package ``name`` beside
    ``mutransfer``; None when it is ours, or when nothing of that name is found at all (the
    import then fails on its own)."""
    spec = _spec(name)
    if spec is None:
        return None
    locations = list(spec.submodule_search_locations or ())
    if spec.origin and spec.has_location:
        where = os.path.dirname(spec.origin) if locations else spec.origin  # a package: its folder
    elif locations:
        where = locations[0]  # a namespace package: a folder without __init__.py
    else:
        return None  # built or set in memory: no file to name
    ours = os.path.join(_HOME, name)
    if os.path.normcase(os.path.realpath(where)) == os.path.normcase(os.path.realpath(ours)):
        return None
    return where


def check_siblings(names: Iterable[str]) -> None:
    """Raise :class:`ShadowedPackageError` for the first of ``names`` that is not ours."""
    for name in names:
        where = shadowing(name)
        if where is not None:
            raise ShadowedPackageError(name, where)
