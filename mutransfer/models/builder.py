"""A user's model builder: ``module:function``, ``function(width, depth) -> nn.Module``.

:func:`load_builder` imports it (the current directory is importable, as for ``python -m``),
:func:`call_builder` builds its model at a width and depth and probes it with one forward,
:func:`contain_builder` first runs both in a child process when the CLI asks
(:mod:`mutransfer.contain`), and :func:`logits_of` finds the logits in any model's output.
Each failure of the user's code is a ValueError naming ``module:function``.
:func:`mutransfer.models.source.parse_model` names a builder, and
:func:`mutransfer.models.source.build_model` builds one through :func:`call_builder`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn as nn

from mutransfer.contain import BUILD_TIMEOUT_ENV, UserCodeError, build_timeout, run_child
from mutransfer.entry import load_entry

__all__ = ["call_builder", "check_builder", "contain_builder", "load_builder", "logits_of"]


def load_builder(spec: str) -> Any:
    """The function ``spec`` (``module:function``) names, imported; else ValueError naming it."""
    try:
        return load_entry(spec)
    except ValueError as exc:
        why = str(exc).replace(f"entry point {spec!r}", "").strip(": ")
        raise UserCodeError(f"model builder {spec!r}: {why}") from None


def logits_of(output: Any, name: str = "the model") -> torch.Tensor:
    """The logits in a model's output: the tensor itself, its ``.logits`` (transformers),
    or the first item of a tuple (our GPT's ``(logits, loss)``); else ValueError naming ``name``."""
    if isinstance(output, torch.Tensor):
        return output
    logits = getattr(output, "logits", None)
    if isinstance(logits, torch.Tensor):
        return logits
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        return output[0]
    raise UserCodeError(f"{name} returned {type(output).__name__}, not logits: return a [B, T, V] tensor "
                     "or an output with .logits")


def call_builder(spec: str, width: int, depth: int, vocab_size: int | None = None) -> nn.Module:
    """The model of the builder ``spec`` at ``width`` and ``depth``, probed with one forward
    of two tokens (unless built on the meta device): a builder that raises, exits, returns no
    module or no [B, T, V] logits is a ValueError naming ``spec``, not a crash mid-run."""
    contain_builder(spec, width, depth)  # the first build runs in a child first (CLI)
    fn = load_builder(spec)
    try:
        model = fn(width, depth)
    except SystemExit as exc:  # not an Exception: it would end the verb with its code, silently
        raise UserCodeError(f"model builder {spec!r} called sys.exit({exc.code!r}) at width={width}, "
                         f"depth={depth}; a builder must return the model") from None
    except Exception as exc:  # noqa: BLE001 - the user's code failing is their input
        raise UserCodeError(f"model builder {spec!r} raised {type(exc).__name__} at width={width}, "
                         f"depth={depth}: {exc}") from None
    if not isinstance(model, nn.Module):
        raise UserCodeError(f"model builder {spec!r} returned {type(model).__name__}, "
                         "not an nn.Module")
    _probe(spec, model, vocab_size)
    return model


def _probe(spec: str, model: nn.Module, vocab_size: int | None) -> None:
    p = next(iter(model.parameters()), None)
    if p is None or p.device.type == "meta":
        return
    x = torch.zeros(1, 2, dtype=torch.long, device=p.device)
    was = model.training
    try:
        with torch.no_grad():
            out = model(x)
    except Exception as exc:  # noqa: BLE001
        raise UserCodeError(f"model builder {spec!r}: its model fails on token ids [1, 2]: "
                         f"{type(exc).__name__}: {exc}") from None
    finally:
        model.train(was)
    logits = logits_of(out, f"model builder {spec!r}")
    if logits.dim() != 3 or tuple(logits.shape[:2]) != (1, 2) or (
            vocab_size is not None and logits.shape[-1] < vocab_size):
        want = f"[1, 2, {vocab_size or 'V'}]"
        raise UserCodeError(f"model builder {spec!r}: logits of token ids [1, 2] have shape "
                         f"{list(logits.shape)}, not {want}")


# ---- a builder's first import and build, contained (mutransfer.contain) -------------------

_CHECKED: set[tuple[str, int | None, int | None]] = set()


def contain_builder(spec: str, width: int | None = None, depth: int | None = None) -> None:
    """When :data:`BUILD_TIMEOUT_ENV` is set (the CLI sets it): :func:`check_builder`, once
    per process for the import and once for the first build of ``spec``. Else nothing."""
    timeout = build_timeout()
    key = (spec, None, None) if width is None else (spec, -1, -1)
    if timeout is None or key in _CHECKED:
        return
    check_builder(spec, width, depth, timeout=timeout)
    _CHECKED.add(key)


def check_builder(spec: str, width: int | None, depth: int | None, *, timeout: float) -> None:
    """Import the builder ``spec`` (``module:function``) and, with ``width``, build its model
    once at ``width``/``depth``, in a child process, before this process runs it: a builder
    that exits (``sys.exit``, ``os._exit``), hangs past ``timeout`` s or raises is one
    ValueError naming it and what it did."""
    at = "at import" if width is None else f"building its model at width={width}, depth={depth}"
    out = run_child(_build_once, {"spec": spec, "width": width, "depth": depth}, timeout)
    if out.kind == "timeout":
        raise UserCodeError(f"model builder {spec!r} did not finish {at} within {timeout:g} s; it was "
                         f"stopped (set {BUILD_TIMEOUT_ENV}=SECONDS if it is only slow)")
    if out.kind == "ended":
        raise UserCodeError(f"model builder {spec!r} ended the process (exit code {out.exit_code}) {at}")
    kind, text = out.value
    if kind == "exit":
        raise UserCodeError(f"model builder {spec!r} called sys.exit({text}) {at}; a builder must "
                         "return the model")
    if kind == "error":
        raise UserCodeError(text)


def _build_once(options: Mapping[str, Any]) -> list[Any]:
    spec = options["spec"]
    try:
        load_builder(spec)
        if options["width"] is not None:
            call_builder(spec, int(options["width"]), int(options["depth"]))
    except SystemExit as exc:
        return ["exit", repr(exc.code)]
    except ValueError as exc:  # ours: already names the builder
        return ["error", str(exc).splitlines()[0] if str(exc) else "ValueError"]
    except BaseException as exc:  # noqa: BLE001 - any failure of user code is reported
        first = f"{type(exc).__name__}: {exc}".splitlines()[0]
        return ["error", f"model builder {spec!r} raised {first}"]
    return ["ok", ""]
