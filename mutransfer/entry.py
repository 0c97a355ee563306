"""Loading a user's ``module:function`` entry point (a model or optimizer builder)."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import Any


def load_entry(spec: str) -> Callable[..., Any]:
    """``module:function`` -> the function; one clear error naming ``spec`` otherwise.
    The current directory is importable, as for ``python -m``."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"entry point {spec!r} is not of the form module:function")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except SystemExit as exc:  # not an Exception: it would end the caller with its code, silently
        raise ValueError(f"entry point {spec!r} called sys.exit({exc.code!r}) at import") from None
    except Exception as exc:  # noqa: BLE001 - any import failure is the user's input
        raise ValueError(f"entry point {spec!r} cannot be imported: {type(exc).__name__}: {exc}") from None
    fn = module
    for part in attr.split("."):
        if not hasattr(fn, part):
            raise ValueError(f"entry point {spec!r}: module {module_name!r} has no attribute {attr!r}")
        fn = getattr(fn, part)
    if not callable(fn):
        raise ValueError(f"entry point {spec!r} is not callable")
    return fn  # type: ignore[return-value]
