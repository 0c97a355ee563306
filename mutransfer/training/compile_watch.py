"""Does a compiled run stay compiled? ``torch.compile`` falls back to eager without an
error: past dynamo's recompile limit (``torch._dynamo.config.recompile_limit``, 8) a
function's later calls run eager for the rest of the process, and a graph break splits a
forward into several graphs with eager code between them. In a sweep worker, which trains
one trial after another in one process, a fallback turned 76-101 s compiled trials into
1.3 s eager ones, unseen (measured on CPU over 6 widths).

So the model is compiled through one process-wide backend (:data:`BACKEND` behind a
counter, :func:`compile_model`): every call of a compiled graph is counted, and a
:class:`CompileWatch` per run compares the count before and after each training step. A
step whose forward ran no compiled graph ran eager; more graph calls than forwards are a
graph break. Either is warned about once per process (one line: the model and the
reason) and recorded on the run (``TrainResult.compile_fallback``, the sweep trial's
``compile_fallback`` user attr). Dynamo's own counters
(``torch._dynamo.utils.counters``, which ``torch._dynamo.explain`` reads) give the reason.

One backend object for the whole process matters: dynamo guards every cached graph on the
backend that compiled it, so a new backend per run would recompile every run and spend
the recompile budget a width ladder needs.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["BACKEND", "CompileWatch", "compile_model"]

#: The backend that compiles the graphs (torch.compile's default). Tests set ``"eager"``:
#: dynamo guards, recompiles and falls back the same whatever compiles the graphs.
BACKEND = "inductor"


class _CountingBackend:
    """A dynamo backend: compiles each graph with ``inner``; counts the graphs and their calls."""

    def __init__(self, inner: str) -> None:
        self.inner = inner
        self.calls = 0
        self.graphs = 0
        self.__name__ = f"counting_{inner}"  # dynamo names a backend by it in its logs

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        from torch._dynamo import lookup_backend

        compiled = lookup_backend(self.inner)(gm, example_inputs)
        self.graphs += 1

        def run(*args: Any) -> Any:
            self.calls += 1
            return compiled(*args)

        return run


_BACKENDS: dict[str, _CountingBackend] = {}
_warned = False


def _backend() -> _CountingBackend:
    if BACKEND not in _BACKENDS:
        _BACKENDS[BACKEND] = _CountingBackend(BACKEND)
    return _BACKENDS[BACKEND]


def compile_model(model: torch.nn.Module) -> torch.nn.Module:
    """``torch.compile(model)`` through the process's counting backend (:data:`BACKEND`)."""
    return torch.compile(model, backend=_backend())  # type: ignore[return-value]


def _dynamo_reports() -> tuple[dict[str, int], dict[str, int]]:
    """Dynamo's (graph breaks, unsupported) counters: message -> count."""
    from torch._dynamo.utils import counters

    return dict(counters["graph_break"]), dict(counters["unimplemented"])


def _first_line(msg: str) -> str:
    return msg.strip().splitlines()[0] if msg.strip() else "unknown"


class CompileWatch:
    """One compiled run's check that its training steps run compiled graphs.

    Call :meth:`begin` before a step's forward passes and :meth:`end` after them with the
    number of forward passes. :attr:`fallback` is None, or the first reason found.
    ``split_graphs``: the forward is meant to run as several graphs (DDP: dynamo splits it
    at the gradient buckets), so only dynamo's own graph-break count tells a break.
    """

    def __init__(self, model_name: str, *, split_graphs: bool = False) -> None:
        self.model_name, self.split_graphs = model_name, split_graphs
        self.fallback: str | None = None
        self._calls = 0
        self._breaks, self._unsupported = _dynamo_reports()

    def begin(self) -> None:
        self._calls = _backend().calls

    def end(self, forwards: int) -> None:
        if self.fallback is not None:
            return
        ran = _backend().calls - self._calls
        if ran == 0:
            self._fell_back(self._eager_reason())
        elif ran > forwards or self.split_graphs:
            breaks, _ = _dynamo_reports()
            new = [m for m, n in breaks.items() if n > self._breaks.get(m, 0)]
            if self.split_graphs and not new:
                return
            why = f": {_first_line(new[0])}" if new else ""
            self._fell_back(f"graph break (the forward ran as {ran / forwards:g} graphs with eager code "
                            f"between them){why}")

    def _eager_reason(self) -> str:
        import torch._dynamo.config as dynamo_config

        _, unsupported = _dynamo_reports()
        for msg in unsupported:
            if "recompile limit" in msg:
                kind = ("accumulated_recompile_limit" if "accumulated_recompile_limit" in msg
                        else "recompile_limit")
                return (f"dynamo hit torch._dynamo.config.{kind}={getattr(dynamo_config, kind)} (each new "
                        "width, parametrization or multiplier adds graphs), so the forward runs eager for "
                        "the rest of this process")
        return "no compiled graph ran: dynamo skipped the forward"

    def _fell_back(self, reason: str) -> None:
        global _warned
        self.fallback = reason
        if not _warned:
            _warned = True
            warnings.warn(f"torch.compile fell back to eager for model {self.model_name}: {reason}",
                          RuntimeWarning, stacklevel=4)
