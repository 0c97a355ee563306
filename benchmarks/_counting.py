"""What a training step asks of a GPU, counted on the CPU: aten kernels, host syncs, matmul
FLOPs and the bytes the other kernels move, through a ``TorchDispatchMode`` (every aten op
that runs below autograd, forward and backward alike, passes through it).

- **kernels**: aten ops that launch work; views, ``detach``, ``empty*``, scalar reads and
  the profiler's record-function markers are metadata or allocation only and are counted
  as ops, not kernels. On CUDA each kernel
  here is (at least) one launch, so the count bounds the launch overhead of eager mode.
- **host syncs**: ``aten._local_scalar_dense`` (``float(t)``, ``t.item()``, ``bool(t)``,
  ``if t:``) and ``Tensor.tolist()`` / ``Tensor.numpy()`` (on a CPU tensor they read memory
  without dispatching, so they are counted by wrapping the methods), except on tensors that
  stay on the host in a GPU run too (``host``: e.g. the optimizer's step counters, which
  torch keeps on the CPU unless ``capturable``). Each counted sync is a device-to-host copy
  that waits for the GPU's queue to drain. Sites are recorded as ``file:line`` of the first
  frame inside this project.
- **matmul FLOPs**: ``torch.utils.flop_counter``'s own formulas (mm, addmm, bmm, baddbmm,
  SDPA forward and backward: 2·M·N·K per matmul).
- **non-matmul bytes**: for every kernel without a FLOP formula, the bytes of its tensor
  inputs plus its tensor outputs (each read and each write once): what an eager,
  memory-bound elementwise or reduction kernel moves through HBM.

``cuda_like=True`` counts what a CUDA build dispatches where the CPU build decomposes:
``F.rms_norm`` is ``aten::_fused_rms_norm`` forward and ``_fused_rms_norm_backward``
backward on CUDA (one kernel each; ``native_functions.yaml``), the CPU build runs it as 6
kernels forward and 15 backward. It is counted as one kernel each way with the bytes of
those kernels' inputs and outputs (x, weight, out, the fp32 1/rms per row; backward also
the gradients); the values are the composite's, bit for bit.
"""

from __future__ import annotations

import collections
import contextlib
import sys
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry

ROOT = str(Path(__file__).resolve().parents[1])
_aten = torch.ops.aten
#: Ops that allocate or only change metadata: no kernel launch on a GPU.
_NO_KERNEL = {_aten.detach.default, _aten.empty.memory_format, _aten.empty_strided.default,
              _aten.empty_like.default, _aten.lift_fresh.default, _aten.set_.source_Storage_storage_offset,
              _aten._local_scalar_dense.default, _aten.resize_.default,
              _aten._unsafe_view.default}


def _bytes(xs: Any) -> int:
    leaves, _ = tree_flatten(xs)
    return sum(t.numel() * t.element_size() for t in leaves if isinstance(t, torch.Tensor))


def _site() -> str:
    """``file:line`` of the innermost frame in this project (not in torch, not here)."""
    here = str(Path(__file__).resolve())
    for frame in reversed(traceback.extract_stack()[:-2]):
        f = frame.filename
        # a virtual environment inside the checkout holds torch's own frames (dynamo's
        # eval_frame wraps calls once it has been used in the process): not ours
        if f.startswith(ROOT) and f != here and "site-packages" not in f:
            return f"{Path(f).relative_to(ROOT)}:{frame.lineno}"
    return "?"


class StepCounter(TorchDispatchMode):
    """Count kernels, host syncs, matmul FLOPs and non-matmul bytes while active.

    ``host(t) -> bool``: tensors that would live on the host in a GPU run (their scalar
    reads are not device syncs). Counts accumulate until :meth:`reset`.
    """

    def __init__(self, host: Callable[[torch.Tensor], bool] | None = None, *, cuda_like: bool = False) -> None:
        super().__init__()
        self.host = host or (lambda t: False)
        self.cuda_like = cuda_like
        self.muted = False
        self.reset()

    def reset(self) -> None:
        self.ops = 0
        self.kernels = 0
        self.matmul_flops = 0
        self.nonmatmul_bytes = 0
        self.syncs = 0
        self.sync_sites: collections.Counter[str] = collections.Counter()
        self.by_op: collections.Counter[str] = collections.Counter()

    def snapshot(self) -> dict[str, Any]:
        return {"aten_ops": self.ops, "kernels": self.kernels, "host_syncs": self.syncs,
                "matmul_flops": self.matmul_flops, "nonmatmul_bytes": self.nonmatmul_bytes,
                "sync_sites": dict(self.sync_sites)}

    def _sync(self) -> None:
        self.syncs += 1
        self.sync_sites[_site()] += 1

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.muted:
            return out
        self.ops += 1
        if func is _aten._local_scalar_dense.default:
            if not self.host(args[0]):
                self._sync()
            return out
        if func in _NO_KERNEL or func.is_view or func.namespace == "profiler":
            return out
        self.kernels += 1
        self.by_op[str(func.overloadpacket.__name__)] += 1
        packet = func.overloadpacket
        if packet in flop_registry:
            self.matmul_flops += int(flop_registry[packet](*args, **kwargs, out_val=out))
        else:
            self.nonmatmul_bytes += _bytes((args, kwargs)) + _bytes(out)
        return out

    @contextlib.contextmanager
    def counting(self) -> Iterator[StepCounter]:
        """This mode, plus ``Tensor.tolist``/``Tensor.numpy`` counted as syncs."""
        saved = {name: getattr(torch.Tensor, name) for name in ("tolist", "numpy")}
        counter = self

        def wrap(name: str) -> Callable[..., Any]:
            orig = saved[name]

            def method(t: torch.Tensor, *a: Any, **k: Any) -> Any:
                if t.numel() and not counter.host(t) and not torch._C._is_torch_function_mode_enabled():
                    counter._sync()
                return orig(t, *a, **k)
            return method

        for name in saved:
            setattr(torch.Tensor, name, wrap(name))
        rms_norm = torch.nn.functional.rms_norm
        if self.cuda_like:
            torch.nn.functional.rms_norm = self._fused_rms_norm(rms_norm)  # type: ignore[assignment]
        try:
            with self:
                yield self
        finally:
            for name, fn in saved.items():
                setattr(torch.Tensor, name, fn)
            torch.nn.functional.rms_norm = rms_norm  # type: ignore[assignment]

    def kernel(self, name: str, nbytes: int) -> None:
        """Count one kernel of ``nbytes`` that this build does not dispatch as one."""
        self.ops += 1
        self.kernels += 1
        self.by_op[name] += 1
        self.nonmatmul_bytes += nbytes

    def _fused_rms_norm(self, composite: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        counter = self

        class FusedRMSNorm(torch.autograd.Function):
            @staticmethod
            def forward(ctx: Any, x: torch.Tensor, shape: Any, w: torch.Tensor | None, eps: float | None) -> Any:
                counter.muted = True
                try:
                    with torch.enable_grad():
                        xd = x.detach().requires_grad_(x.requires_grad)
                        wd = None if w is None else w.detach().requires_grad_(w.requires_grad)
                        y = composite(xd, shape, wd, eps)
                finally:
                    counter.muted = False
                ctx.graph = (xd, wd, y)
                rows = x.numel() // max(1, x.shape[-1])
                counter.kernel("_fused_rms_norm", _bytes((x, w, y)) + 4 * rows)
                return y.detach()

            @staticmethod
            def backward(ctx: Any, g: torch.Tensor) -> Any:
                xd, wd, y = ctx.graph
                ins = [t for t in (xd, wd) if t is not None and t.requires_grad]
                counter.muted = True
                try:
                    grads = torch.autograd.grad(y, ins, g) if ins else ()
                finally:
                    counter.muted = False
                rows = xd.numel() // max(1, xd.shape[-1])
                counter.kernel("_fused_rms_norm_backward", _bytes((g, xd, wd, grads)) + 4 * rows)
                it = iter(grads)
                gx = next(it) if xd.requires_grad else None
                gw = next(it) if wd is not None and wd.requires_grad else None
                return gx, None, gw, None

        def rms_norm(x: torch.Tensor, shape: Any, weight: torch.Tensor | None = None,
                     eps: float | None = None) -> torch.Tensor:
            return FusedRMSNorm.apply(x, shape, weight, eps)

        return rms_norm


def optimizer_host_tensors(optimizers: Any) -> Callable[[torch.Tensor], bool]:
    """``host`` for :class:`StepCounter`: the step counters in the optimizers' state (a CPU
    tensor per parameter in a GPU run unless ``capturable``/``fused``)."""
    opts = getattr(optimizers, "optimizers", None) or list(optimizers if isinstance(optimizers, (list, tuple))
                                                            else [optimizers])

    def host(t: torch.Tensor) -> bool:
        if t.dim() != 0:
            return False
        for o in opts:
            for st in o.state.values():
                s = st.get("step")
                if s is t:
                    return True
        return False

    return host


if __name__ == "__main__":  # pragma: no cover - a quick look: python -m benchmarks._counting
    with StepCounter().counting() as c:
        x = torch.randn(4, 4)
        float((x @ x).sum())
    print(c.snapshot(), file=sys.stderr)
