"""Fused multi-trial training: K sweep trials of one shape trained as one batched model.

A proxy of a few million parameters leaves a GPU mostly idle, and a learning-rate sweep
is dozens of such runs. Trials that share the model shape, batch size, step count and
sequence length can run as one *horizontally fused* model: every parameter is stacked
into a ``[K, ...]`` tensor, every matmul becomes one batched matmul over the member
dimension, and the K trials advance in lock step. This is HFTA (Wang et al., "Horizontally
Fused Training Array: An Effective Hardware Utilization Squeezer for Training Novel Deep
Learning Models", MLSys 2021), which reports up to 15x more trials per GPU-hour on small
models.

Exactness, member by member. Every member reproduces the unfused
:func:`mutransfer.train.train` run of its own config:

- init: each member's model is built by a :class:`mutransfer.train.Trainer` of its own
  config (same seed, same parametrization), so its initial weights are the unfused ones
  bit for bit; the weights are then stacked;
- forward: an explicit batched copy of :class:`mutransfer.models.gpt.GPT`'s forward
  (``bmm`` for the linears, one ``scaled_dot_product_attention`` over ``K*B`` sequences),
  with each member's μP forward multipliers (input/output/residual hooks of
  :meth:`Parametrization.forward_multipliers`) and attention softmax scale applied per
  member. ``torch.func.vmap`` over ``functional_call`` was tried first: on CPU it has no
  batching rule for the flash-attention kernel (a per-member loop fallback), and a
  softmax scale cannot differ per member under it, hence the explicit forward;
- data: a member's batches are a pure function of (its seed, step), as in the unfused
  run; members with different seeds get their own batches (gathered into ``[K, B, T]``),
  members that share a seed share one fetch. Held-out batches are the same for all;
- optimizer: AdamW, SGD (momentum) and Muon re-implemented over stacked tensors with the
  same float operations as ``torch.optim``'s single-tensor paths; every scalar (the
  per-group LR after the schedule and μP ``lr_mult``, weight decay, betas, eps, Adam's
  bias corrections, Muon's ``adjust_lr_fn="original"`` factor) is computed per member in
  Python doubles exactly as torch does, then applied as a ``[K]`` tensor, or as a plain
  float when all members agree (then the very same kernel runs);
- stabilizers per member: grad-norm clipping uses each member's own norm (a joint norm
  over the stacked tensors would couple the trials), divergence (non-finite loss, loss
  above ``diverge_factor x max(ln V, initial loss)``, non-finite grad norm or held-out
  loss) freezes that member only, the spike detector and the gradient-noise-scale
  estimator are the member's own, pruning through the callback freezes one member.
  A frozen member leaves the stack (its rows are dropped from every tensor), so it costs
  nothing afterwards and its result is what the unfused run reports.

On CPU the fused runs reproduce the unfused ones bit for bit in our tests (AdamW, SGD and
Muon, members at different LRs and seeds, one diverging member; the tests assert rtol
1e-5). That needs care where torch's kernels round differently from their broadcast
equivalents: ``add(x, alpha=a)`` is a fused multiply-add, ``cross_entropy``'s mean and
``grad_sq_norm``'s ``_foreach_norm`` sum in their own order, so on CPU those run once per
member with the very same kernel (a last-bit difference would otherwise flip bf16
roundings inside Muon's Newton–Schulz: 7e-5 relative loss error after 15 steps). On CUDA
they run batched: float tolerance, not bits (bf16 autocast is not bit-reproducible
across batch shapes anyway).

Not fusible (must be equal inside a group; :data:`NON_FUSIBLE_FIELDS`): the model shape
and architecture switches, the parametrization kind and optimizer kind, steps, batch
size, grad accumulation, data source, eval cadence, device and dtype. Everything else
(lr, seed, weight decay and its mode, betas, eps, momentum, multipliers, base width and
depth, depth alpha, readout init, schedule, warmup, grad clip, spike policy log/skip/off,
diverge factor, QK-clip tau, gns beta, out_dir) may differ per member.

Not supported (run such trials unfused; :func:`unsupported_reason`): the ``rollback``
spike policy (a per-member rewind of the data stream), checkpointing/resume inside a
fused group, ``torch.compile`` and multi-process (DDP) runs.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from mutransfer.data import DataConfig, TokenDataset, load_dataset
from mutransfer.models.gpt import GPT, GPTConfig, apply_rope
from mutransfer.optim import set_lr
from mutransfer.stabilizers import divergence_bound, is_diverged
from mutransfer.train import Callback, TrainConfig, Trainer, TrainResult, resolve_device

__all__ = [
    "CPU_DEFAULT_K",
    "MAX_K",
    "NON_FUSIBLE_FIELDS",
    "FusedCallback",
    "check_fusible",
    "choose_k",
    "fusion_key",
    "partition",
    "train_fused",
    "unsupported_reason",
]

#: Model fields compared after resolution against the preset (``width=None`` and
#: ``width=64`` on a width-64 preset are the same shape).
_MODEL_FIELDS = ("width", "depth", "head_dim", "seq_len", "tie_embeddings", "qk_norm",
                 "logit_softcap", "z_loss", "freeze_norm_gains")
#: Fields that must be equal across the members of one fused group.
NON_FUSIBLE_FIELDS: tuple[str, ...] = (
    "preset", *_MODEL_FIELDS, "parametrization", "optimizer", "steps", "batch_size",
    "grad_accum", "data", "data_dtype", "data_max_bytes", "data_cache", "eval_every",
    "eval_batches", "max_logit_every", "qk_clip", "device", "dtype",
)
#: K on CPU when not given: past ~16 members a CPU step is compute bound and fusion only
#: adds memory (see benchmarks/fused_sweep.py).
CPU_DEFAULT_K = 16
#: Upper bound of the automatic K on a GPU (the benchmark's largest group).
MAX_K = 64

#: ``callback(member, step, metrics) -> bool | None``: ``member`` is the index of the
#: config in the list given to :func:`train_fused`; returning True prunes that member.
FusedCallback = Callable[[int, int, dict[str, Any]], "bool | None"]


# ---- grouping ----------------------------------------------------------------------------


def _resolved(cfg: TrainConfig, name: str) -> Any:
    """The value of a non-fusible field as the run will see it."""
    if name in _MODEL_FIELDS:
        gc = cfg.model_config()
        if name == "head_dim":
            return gc.d_head
        return getattr(gc, name)
    if name == "device":
        return str(resolve_device(cfg.device))
    if name == "dtype":
        if cfg.dtype != "auto":
            return cfg.dtype
        return "bf16" if resolve_device(cfg.device).type == "cuda" else "fp32"
    return getattr(cfg, name)


def fusion_key(cfg: TrainConfig) -> tuple[Any, ...]:
    """The non-fusible fields of ``cfg`` (resolved): trials with equal keys can train as
    one fused group. Use it to partition pending sweep trials."""
    return tuple(_resolved(cfg, n) for n in NON_FUSIBLE_FIELDS)


def unsupported_reason(cfg: TrainConfig) -> str | None:
    """Why ``cfg`` cannot run fused at all (run it with :func:`mutransfer.train.train`),
    or None when it can."""
    if cfg.spike_policy == "rollback":
        return "spike_policy='rollback' rewinds one member's data stream; run it unfused"
    if cfg.resume:
        return "resume is not supported by fused training"
    if cfg.checkpoint_every:
        return "checkpoint_every > 0 is not supported by fused training"
    if cfg.compile:
        return "compile=True is not supported by fused training (it runs eager)"
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return "fused training is single-process (WORLD_SIZE > 1)"
    return None


def check_fusible(configs: Sequence[TrainConfig]) -> None:
    """Raise ValueError naming the first non-fusible field (and both values) on which
    ``configs`` differ, or the reason one of them cannot run fused."""
    if not configs:
        raise ValueError("train_fused needs at least one config")
    for i, c in enumerate(configs):
        if not isinstance(c, TrainConfig):
            raise ValueError(f"config {i} is a {type(c).__name__}, not a TrainConfig")
        why = unsupported_reason(c)
        if why is not None:
            raise ValueError(f"config {i} cannot be fused: {why}")
    first = configs[0]
    for name in NON_FUSIBLE_FIELDS:
        a = _resolved(first, name)
        for i, c in enumerate(configs[1:], start=1):
            b = _resolved(c, name)
            if a != b:
                raise ValueError(f"cannot fuse trials that differ in non-fusible field {name!r}: "
                                 f"{a!r} (config 0) vs {b!r} (config {i})")


def partition(configs: Sequence[TrainConfig], k: int | None = None) -> list[list[int]]:
    """Indices of ``configs`` grouped for fusion: equal :func:`fusion_key`, at most ``k``
    per group (``k=None``: :func:`choose_k` of the group's first config), input order kept
    inside a group. Configs that cannot run fused (:func:`unsupported_reason`) come back
    as groups of one; run those with :func:`mutransfer.train.train`."""
    _check_k(k)
    buckets: dict[tuple[Any, ...], list[int]] = {}
    singles: list[list[int]] = []
    for i, c in enumerate(configs):
        if unsupported_reason(c) is not None:
            singles.append([i])
        else:
            buckets.setdefault(fusion_key(c), []).append(i)
    out: list[list[int]] = []
    for idx in buckets.values():
        kk = k if k is not None else choose_k(configs[idx[0]])
        out.extend(idx[j:j + kk] for j in range(0, len(idx), kk))
    return out + singles


def _check_k(k: int | None) -> None:
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
        raise ValueError(f"k (members per fused group) must be an integer >= 1, got {k!r}")


def member_bytes(cfg: TrainConfig, vocab_size: int = 256) -> int:
    """A deliberately generous estimate of one member's training memory in bytes: fp32
    weights, gradients and optimizer state (4 + 4 + 8 bytes/param), plus activations kept
    for the backward (~40 bytes per token, per block and per unit of width, a little above
    Korthikanti et al. 2022's 34 for 16-bit activations without attention scores, since
    ours are fp32 outside the matmuls) and the fp32 logits with their gradient."""
    gc = cfg.model_config(vocab_size=vocab_size)
    with torch.device("meta"):
        n = GPT(gc).num_params()
    tokens = cfg.batch_size // cfg.grad_accum * gc.seq_len
    act = tokens * (40 * gc.width * gc.depth + 12 * gc.vocab_size)
    return int(16 * n + act)


def choose_k(cfg: TrainConfig, device: torch.device | str | None = None, *, headroom: float = 0.6) -> int:
    """Members per fused group when not given: :data:`CPU_DEFAULT_K` off CUDA; on CUDA,
    ``headroom`` x the free memory (``torch.cuda.mem_get_info``) over
    :func:`member_bytes`, clamped to [1, :data:`MAX_K`]."""
    dev = torch.device(device) if device is not None else resolve_device(cfg.device)
    if dev.type != "cuda":
        return CPU_DEFAULT_K
    free, _ = torch.cuda.mem_get_info(dev)
    return max(1, min(MAX_K, int(headroom * free) // max(1, member_bytes(cfg))))


# ---- the batched forward -----------------------------------------------------------------


def _bcast(s: float | torch.Tensor, t: torch.Tensor) -> float | torch.Tensor:
    """A per-member scale broadcast against a ``[K, ...]`` tensor (floats stay floats, so
    the kernel is the one the unfused hook runs)."""
    if isinstance(s, torch.Tensor):
        return s.view(-1, *([1] * (t.dim() - 1)))
    return s


def _linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """``F.linear`` per member: x ``[K, ..., in]``, w ``[K, out, in]``, b ``[K, out]``."""
    k = x.shape[0]
    x3 = x.reshape(k, -1, x.shape[-1])
    wt = w.transpose(1, 2)
    y = torch.bmm(x3, wt) if b is None else torch.baddbmm(b.unsqueeze(1), x3, wt)
    return y.view(*x.shape[:-1], w.shape[1])


def _rms_norm(x: torch.Tensor, w: torch.Tensor | None, eps: float, stacked: bool) -> torch.Tensor:
    """RMSNorm over the last dim with a per-member gain ``[K, D]`` (or a shared one)."""
    d = x.shape[-1]
    if not stacked:
        return F.rms_norm(x, (d,), w, eps)
    assert w is not None
    return F.rms_norm(x, (d,), None, eps) * w.view(w.shape[0], *([1] * (x.dim() - 2)), d)


@dataclass
class _Forward:
    """The batched GPT forward for one fused group (see the module docstring)."""

    gcfg: GPTConfig
    rope: torch.Tensor | None
    norm_buffers: dict[str, torch.Tensor]
    post: dict[str, float | torch.Tensor]
    pre: dict[str, float | torch.Tensor]
    attn_scale: dict[str, float | torch.Tensor]
    norm_eps: float = 1e-6

    def norm(self, P: dict[str, torch.Tensor], name: str, x: torch.Tensor) -> torch.Tensor:
        key = f"{name}.weight"
        if key in P:
            return _rms_norm(x, P[key], self.norm_eps, True)
        return _rms_norm(x, self.norm_buffers[key], self.norm_eps, False)

    def attention(self, P: dict[str, torch.Tensor], name: str, x: torch.Tensor,
                  track: dict[str, torch.Tensor] | None) -> torch.Tensor:
        cfg = self.gcfg
        k_, b_, t_, c_ = x.shape
        h_, d_ = cfg.heads, cfg.d_head

        def proj(n: str) -> torch.Tensor:
            y = _linear(x, P[f"{name}.{n}.weight"], P.get(f"{name}.{n}.bias"))
            return y.view(k_ * b_, t_, h_, d_).transpose(1, 2)  # KB H T D

        q, k, v = proj("c_q"), proj("c_k"), proj("c_v")
        if cfg.qk_norm:
            q = self.norm(P, f"{name}.q_norm", q.reshape(k_, b_, h_, t_, d_)).view(k_ * b_, h_, t_, d_)
            k = self.norm(P, f"{name}.k_norm", k.reshape(k_, b_, h_, t_, d_)).view(k_ * b_, h_, t_, d_)
        if self.rope is not None:
            q, k = apply_rope(q, self.rope), apply_rope(k, self.rope)
        scale = self.attn_scale[name]
        if track is not None:
            with torch.no_grad():  # per member and head: max pre-softmax logit, [K, H]
                logits = (q @ k.transpose(-2, -1)).view(k_, b_, h_, t_, t_)
                logits = logits * _bcast(scale, logits)
                causal = torch.ones(t_, t_, dtype=torch.bool, device=x.device).tril()
                track[name] = logits.masked_fill(~causal, float("-inf")).amax(dim=(1, 3, 4)).float()
        if isinstance(scale, torch.Tensor):
            y = self._sdpa_per_member(q, k, v, scale, k_)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
        y = y.transpose(1, 2).reshape(k_, b_, t_, c_)
        return _linear(y, P[f"{name}.c_proj.weight"], P.get(f"{name}.c_proj.bias"))

    @staticmethod
    def _sdpa_per_member(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: torch.Tensor,
                         n_members: int) -> torch.Tensor:
        """SDPA takes one float scale: run it once per distinct member scale (a sweep of
        ``attn_mult`` has a handful) so every member gets the unfused kernel."""
        shape = (n_members, q.shape[0] // n_members, *q.shape[1:])
        qm, km, vm = q.reshape(shape), k.reshape(shape), v.reshape(shape)
        values = scale.tolist()
        out = torch.empty_like(qm)
        for s in sorted(set(values)):
            idx = torch.tensor([i for i, x in enumerate(values) if x == s], device=q.device)
            y = F.scaled_dot_product_attention(qm[idx].flatten(0, 1), km[idx].flatten(0, 1),
                                               vm[idx].flatten(0, 1), is_causal=True, scale=s)
            out = out.index_copy(0, idx, y.view(len(idx), *shape[1:]))
        return out.flatten(0, 1)

    def logits(self, P: dict[str, torch.Tensor], idx: torch.Tensor,
               track: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        """``idx`` int64 ``[K, B, T]`` -> fp32 logits ``[K, B, T, V]``."""
        cfg = self.gcfg
        k_, b_, t_ = idx.shape
        if t_ > cfg.seq_len:
            raise ValueError(f"sequence length {t_} exceeds the model's seq_len {cfg.seq_len}")
        wte = P["wte.weight"]
        v_ = wte.shape[1]
        # One embedding over the K tables laid end to end: member i's rows start at i*V.
        offsets = (torch.arange(k_, device=idx.device) * v_).view(k_, 1, 1)
        x = F.embedding(idx + offsets, wte.reshape(k_ * v_, -1))
        x = self._post("wte", x)
        if "wpe.weight" in P:
            pos = P["wpe.weight"][:, :t_]  # = wpe(arange(T)) per member
            x = x + self._post("wpe", pos).unsqueeze(1)
        for i in range(cfg.depth):
            blk = f"blocks.{i}"
            a = self.attention(P, f"{blk}.attn", self.norm(P, f"{blk}.ln_1", x), track)
            x = x + self._post(f"{blk}.attn", a)
            h = self.norm(P, f"{blk}.ln_2", x)
            h = _linear(h, P[f"{blk}.mlp.c_fc.weight"], P.get(f"{blk}.mlp.c_fc.bias"))
            h = _linear(F.gelu(h), P[f"{blk}.mlp.c_proj.weight"], P.get(f"{blk}.mlp.c_proj.bias"))
            x = x + self._post(f"{blk}.mlp", h)
        h = self._pre("lm_head", self.norm(P, "ln_f", x))
        head = P["wte.weight"] if cfg.tie_embeddings else P["lm_head.weight"]
        logits = _linear(h, head, None).float()
        if cfg.logit_softcap is not None:
            cap = cfg.logit_softcap
            logits = cap * torch.tanh(logits / cap)
        return logits

    def losses(self, P: dict[str, torch.Tensor], idx: torch.Tensor, targets: torch.Tensor,
               track: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        """Per-member training loss ``[K]``: mean cross-entropy plus the z-loss term."""
        logits = self.logits(P, idx, track)
        return _member_losses(logits, targets, self.gcfg.z_loss)

    def _post(self, name: str, t: torch.Tensor) -> torch.Tensor:
        s = self.post.get(name)
        return t if s is None else t * _bcast(s, t)

    def _pre(self, name: str, t: torch.Tensor) -> torch.Tensor:
        s = self.pre.get(name)
        return t if s is None else t * _bcast(s, t)


def _member_losses(logits: torch.Tensor, targets: torch.Tensor, z_loss: float) -> torch.Tensor:
    """Per-member mean cross-entropy (+ z-loss) ``[K]`` of logits ``[K, B, T, V]``.

    On CPU one ``F.cross_entropy`` per member: its mean reduction sums in an order that a
    ``reduction="none"`` + ``mean(1)`` does not repeat, and the last-bit difference is
    enough to flip bf16 roundings inside Muon's Newton–Schulz (measured: 7e-5 relative
    loss error after 15 steps, against 1e-7 with the loop). On accelerators, where runs
    are not bit-reproducible anyway, one batched call.
    """
    k_, v_ = logits.shape[0], logits.shape[-1]
    if logits.device.type == "cpu":
        loss = torch.stack([F.cross_entropy(logits[i].view(-1, v_), targets[i].reshape(-1))
                            for i in range(k_)])
        if z_loss > 0:
            loss = loss + z_loss * torch.stack([torch.logsumexp(logits[i], dim=-1).pow(2).mean()
                                                for i in range(k_)])
        return loss
    ce = F.cross_entropy(logits.reshape(-1, v_), targets.reshape(-1), reduction="none")
    loss = ce.view(k_, -1).mean(1)
    if z_loss > 0:
        loss = loss + z_loss * torch.logsumexp(logits, dim=-1).pow(2).view(k_, -1).mean(1)
    return loss


_CALL_POINTS_POST = ("wte", "wpe")
_CALL_POINTS_PRE = ("lm_head",)


# ---- per-member optimizer math -------------------------------------------------------------


def _uniform(values: Sequence[float]) -> bool:
    return all(v == values[0] for v in values)


class _Scalars:
    """Per-member scalars for one step, gathered into one tensor and one device copy.

    A column whose members all agree stays a Python float, so the kernel (and its
    rounding) is exactly the single-tensor torch optimizer's; otherwise it becomes a
    ``[K]`` fp32 tensor. Python doubles are rounded to fp32 once, as torch's kernels
    round a Number argument to the tensor's dtype.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._pending: list[tuple[list[float], list[Any]]] = []

    def add(self, values: list[float]) -> list[Any]:
        box: list[Any] = [values[0], values]
        if not _uniform(values):
            self._pending.append((values, box))
        return box

    def flush(self) -> None:
        if not self._pending:
            return
        flat = [v for vals, _ in self._pending for v in vals]
        t = torch.tensor(flat, dtype=torch.float64).to(torch.float32).to(self.device, non_blocking=True)
        off = 0
        for vals, box in self._pending:
            box[0] = t[off:off + len(vals)]
            off += len(vals)
        self._pending = []


def _b(s: Any, like: torch.Tensor) -> Any:
    return _bcast(s, like)


def _add_scaled(y: torch.Tensor, x: torch.Tensor, box: list[Any], inplace: bool = True) -> torch.Tensor:
    """``y.add_(x, alpha=a)`` with a per-member ``a``.

    torch's ``add`` with ``alpha`` is a fused multiply-add on CPU (one rounding), which
    ``y + a * x`` (two roundings) does not reproduce; on CPU we therefore run the very
    same kernel once per member. Elsewhere one broadcast ``y + a * x``.
    """
    a = box[0]
    if not isinstance(a, torch.Tensor):
        return y.add_(x, alpha=a) if inplace else y.add(x, alpha=a)
    if y.device.type == "cpu":
        out = y if inplace else y.clone()
        for i, ai in enumerate(box[1]):
            out[i].add_(x[i], alpha=ai)
        return out
    return y.add_(_b(a, x) * x) if inplace else y + _b(a, x) * x


def _adamw_step(p: torch.Tensor, g: torch.Tensor, st: dict[str, torch.Tensor], sc: dict[str, Any]) -> None:
    """torch.optim.AdamW's single-tensor step (``_single_tensor_adam`` with decoupled
    weight decay, not capturable), per member."""
    if sc["decay"] is not None:
        p.mul_(_b(sc["decay"][0], p))
    m, v = st["exp_avg"], st["exp_avg_sq"]
    m.lerp_(g, _b(sc["w1"][0], m))
    v.mul_(_b(sc["beta2"][0], v))
    c = sc["c2"][0]
    if isinstance(c, torch.Tensor):
        v.addcmul_(_b(c, g) * g, g)  # addcmul's kernel: self + (value * t1) * t2
    else:
        v.addcmul_(g, g, value=c)
    denom = (v.sqrt() / _b(sc["bc2_sqrt"][0], v)).add_(_b(sc["eps"][0], v))
    ss = sc["neg_step_size"][0]
    if isinstance(ss, torch.Tensor):
        p.add_(_b(ss, m) * m / denom)  # addcdiv's kernel: self + value * t1 / t2
    else:
        p.addcdiv_(m, denom, value=ss)


def _sgd_step(p: torch.Tensor, g: torch.Tensor, st: dict[str, torch.Tensor], sc: dict[str, Any]) -> None:
    """torch.optim.SGD's single-tensor step (dampening 0), per member. A zero-initialized
    momentum buffer gives ``0·mu + g = g`` on the first step, torch's ``clone(g)``."""
    if sc["wd"] is not None:
        g = _add_scaled(g, p, sc["wd"], inplace=False)
    if "momentum_buffer" in st:
        buf = st["momentum_buffer"]
        buf.mul_(_b(sc["momentum"][0], buf)).add_(g)
        g = _add_scaled(g, buf, sc["momentum"], inplace=False) if sc["nesterov"] else buf
    _add_scaled(p, g, sc["neg_lr"])


def newton_schulz_batched(g: torch.Tensor, coefficients: tuple[float, float, float], steps: int,
                          eps: Any) -> torch.Tensor:
    """``torch.optim._muon._zeropower_via_newtonschulz`` over a stack of matrices
    ``[K, A, B]`` (bf16 iterations, each matrix normalized by its own Frobenius norm)."""
    a, b, c = coefficients
    x = g.bfloat16()
    tall = g.size(-2) > g.size(-1)
    if tall:
        x = x.mT
    norm = torch.linalg.vector_norm(x, dim=(-2, -1))
    norm = norm.clamp(min=eps) if not isinstance(eps, torch.Tensor) else torch.maximum(norm, eps.to(norm))
    x = x / norm.view(-1, 1, 1)
    for _ in range(steps):
        gram = x @ x.mT
        update = torch.baddbmm(gram, gram, gram, beta=b, alpha=c)
        x = torch.baddbmm(x, update, x, beta=a)
    return x.mT if tall else x


def _muon_step(p: torch.Tensor, g: torch.Tensor, st: dict[str, torch.Tensor], sc: dict[str, Any]) -> None:
    """torch.optim.Muon's single-tensor step, per member: EMA momentum (``lerp``), Nesterov
    ``g.lerp(buf, mu)``, Newton–Schulz per member matrix, decoupled weight decay, and the
    ``adjust_lr_fn`` factor folded into ``neg_adj_lr``."""
    buf = st["momentum_buffer"]
    buf.lerp_(g, _b(sc["w_mom"][0], buf))
    update = g.lerp(buf, _b(sc["momentum"][0], g)) if sc["nesterov"] else buf
    update = newton_schulz_batched(update, sc["ns_coefficients"], sc["ns_steps"], sc["eps"][0])
    p.mul_(_b(sc["decay"][0], p))
    _add_scaled(p, update, sc["neg_adj_lr"])


_STEP_FNS = {"adamw": _adamw_step, "sgd": _sgd_step, "muon": _muon_step}


def _muon_adjusted_lr(lr: float, fn: str | None, shape: Sequence[int]) -> float:
    """torch.optim._muon._adjust_lr, copied so its float arithmetic is the same."""
    a, b = shape[:2]
    if fn is None or fn == "original":
        ratio = math.sqrt(max(1, a / b))
    elif fn == "match_rms_adamw":
        ratio = 0.2 * math.sqrt(max(a, b))
    else:
        ratio = 1.0
    return lr * ratio


# ---- the fused group ---------------------------------------------------------------------


class _Member:
    """One trial inside a fused group: its own Trainer (model built from its seed,
    parametrization, param groups, schedule, spike detector, GNS estimator, history)."""

    def __init__(self, index: int, trainer: Trainer) -> None:
        self.index = index
        self.trainer = trainer
        self.cfg = trainer.cfg
        self.opt_steps = 0  # optimizer steps taken (Adam's bias-correction count)
        self.group_of: dict[str, dict[str, Any]] = {}
        self.kind_of: dict[str, str] = {}
        for opt in trainer.opt.optimizers:
            kind = {"AdamW": "adamw", "SGD": "sgd", "Muon": "muon"}.get(type(opt).__name__)
            if kind is None:
                raise ValueError(f"fused training has no per-member math for {type(opt).__name__}")
            for g in opt.param_groups:
                if g.get("maximize") or g.get("amsgrad") or g.get("dampening", 0.0):
                    raise ValueError("fused training supports neither maximize, amsgrad nor dampening")
                for name in g["names"]:
                    self.group_of[name] = g
                    self.kind_of[name] = kind


class FusedGroup:
    """K fusible trials trained in lock step; :meth:`run` returns their TrainResults.

    ``train_fused`` is the usual entry point; this class is public for tests and for a
    sweep runner that wants to drive the group itself.
    """

    def __init__(self, configs: Sequence[TrainConfig], *, indices: Sequence[int] | None = None,
                 callbacks: Sequence[Callback | None] | None = None,
                 data: TokenDataset | None = None) -> None:
        check_fusible(configs)
        self.configs = list(configs)
        self.indices = list(indices) if indices is not None else list(range(len(configs)))
        self.callbacks = list(callbacks) if callbacks is not None else [None] * len(configs)
        cfg0 = configs[0]
        self.t_start = time.perf_counter()
        if data is None:
            data = load_dataset(DataConfig(source=cfg0.data, dtype=cfg0.data_dtype,
                                           max_bytes=cfg0.data_max_bytes, cache_dir=cfg0.data_cache))
        self.data = data
        # Each member's Trainer builds its model exactly as the unfused run does (seeded
        # init, parametrization, param groups); we only take its pieces.
        self.members = [_Member(i, Trainer(c, data=data)) for i, c in enumerate(configs)]
        t0 = self.members[0].trainer
        self.device = t0.device
        self.amp_dtype = t0.amp_dtype
        self.gcfg = t0.gcfg
        self.seq_len = t0.seq_len
        model0 = t0.raw_model
        if type(model0) is not GPT:
            raise ValueError(f"fused training knows the GPT forward only, not {type(model0).__name__}")
        names = [n for n, p in model0.named_parameters() if p.requires_grad]
        self.names = names
        for m in self.members:
            mine = [n for n, p in m.trainer.raw_model.named_parameters() if p.requires_grad]
            if mine != names:
                raise ValueError(f"config {m.index} builds different parameters than config 0")
            for n in names:
                if m.kind_of[n] != self.members[0].kind_of[n]:
                    raise ValueError(f"parameter {n} is on {m.kind_of[n]} in config {m.index} but on "
                                     f"{self.members[0].kind_of[n]} in config 0: not fusible")
        self.kind = {n: self.members[0].kind_of[n] for n in names}
        # Stack the members' initial weights; each member's own Parameter then becomes a
        # view of its row, so the K separate copies are freed and each member's model
        # always shows its current weights.
        with torch.no_grad():
            self.P: dict[str, torch.Tensor] = {}
            for n in names:
                rows = [dict(m.trainer.raw_model.named_parameters())[n].detach() for m in self.members]
                self.P[n] = torch.stack(rows).requires_grad_(True)
        self.state: dict[str, dict[str, torch.Tensor]] = {n: self._new_state(n) for n in names}
        self.alive = list(self.members)
        self._alias()
        self._forward = self._build_forward()
        self._val: list[tuple[torch.Tensor, torch.Tensor]] | None = None

    # ---- setup ---------------------------------------------------------------------------

    def _new_state(self, name: str) -> dict[str, torch.Tensor]:
        p, kind = self.P[name], self.kind[name]
        if kind == "adamw":
            return {"exp_avg": torch.zeros_like(p, requires_grad=False),
                    "exp_avg_sq": torch.zeros_like(p, requires_grad=False)}
        if kind == "muon":
            return {"momentum_buffer": torch.zeros_like(p, requires_grad=False)}
        if any(m.group_of[name].get("momentum", 0.0) for m in self.members):
            return {"momentum_buffer": torch.zeros_like(p, requires_grad=False)}
        return {}

    def _alias(self) -> None:
        with torch.no_grad():
            for j, m in enumerate(self.alive):
                params = dict(m.trainer.raw_model.named_parameters())
                for n in self.names:
                    params[n].data = self.P[n].detach()[j]

    def _build_forward(self) -> _Forward:
        members = self.alive
        fms = [m.trainer.pz.forward_multipliers() for m in members]
        post: dict[str, list[float]] = {}
        pre: dict[str, list[float]] = {}
        for j, fm in enumerate(fms):
            for h in fm["hooks"]:
                table = post if h["kind"] == "post" else pre
                table.setdefault(h["module"], [1.0] * len(members))[j] = float(h["scale"])
        branches = {f"blocks.{i}.{b}" for i in range(self.gcfg.depth) for b in ("attn", "mlp")}
        for name in post:
            if name not in branches and name not in _CALL_POINTS_POST:
                raise ValueError(f"fused forward has no place for a multiplier after module {name!r}")
        for name in pre:
            if name not in _CALL_POINTS_PRE:
                raise ValueError(f"fused forward has no place for a multiplier before module {name!r}")
        attn_names = [f"blocks.{i}.attn" for i in range(self.gcfg.depth)]
        attn: dict[str, list[float]] = {a: [] for a in attn_names}
        for m in members:
            mods = dict(m.trainer.raw_model.named_modules())
            for a in attn_names:
                attn[a].append(float(mods[a].softmax_scale))

        def col(values: list[float]) -> float | torch.Tensor:
            if _uniform(values):
                return values[0]
            return torch.tensor(values, dtype=torch.float64).to(torch.float32).to(self.device)

        model0 = members[0].trainer.raw_model
        buffers = {n: b for n, b in model0.named_buffers() if n.endswith(".weight") or n == "weight"}
        rope = model0.rope if model0.rope.numel() else None
        return _Forward(self.gcfg, rope, buffers, {k: col(v) for k, v in post.items()},
                        {k: col(v) for k, v in pre.items()}, {k: col(v) for k, v in attn.items()})

    # ---- pieces of a step ----------------------------------------------------------------

    def _batches(self, split: str, step: int, micro: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
        """``[K, B, T]`` inputs and targets: member j's batch of its own seed (one fetch
        per distinct seed)."""
        b = self.configs[0].batch_size
        cache: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        xs, ys = [], []
        for m in self.alive:
            seed = m.cfg.seed
            if seed not in cache:
                cache[seed] = self.data.get_batch(split, step, b, self.seq_len, seed, micro=micro,
                                                  device=self.device)
            xs.append(cache[seed][0])
            ys.append(cache[seed][1])
        if len(cache) == 1:
            x, y = next(iter(cache.values()))
            k = len(self.alive)
            return x.unsqueeze(0).expand(k, *x.shape), y.unsqueeze(0).expand(k, *y.shape)
        return torch.stack(xs), torch.stack(ys)

    def _autocast(self) -> Any:
        import contextlib

        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.amp_dtype)

    def _sq_norms(self, scale: float = 1.0) -> torch.Tensor:
        """Per-member squared gradient norm ``[K]`` (fp32), as grad_sq_norm per member."""
        k = len(self.alive)
        grads = [self.P[n].grad for n in self.names if self.P[n].grad is not None]
        if self.device.type == "cpu":
            # grad_sq_norm's own reduction (one _foreach_norm, stack, square, sum) per
            # member: a batched norm sums in another order, and a last-bit change of the
            # clip coefficient is enough to flip bf16 roundings in Muon.
            sq = torch.stack([torch.stack(list(torch._foreach_norm([g[i] for g in grads], 2,
                                                                    dtype=torch.float32))).square().sum()
                              for i in range(k)])
        else:
            norms = [torch.linalg.vector_norm(g.reshape(k, -1), dim=1, dtype=torch.float32) for g in grads]
            sq = torch.stack(norms).square().sum(0)
        return sq * float(scale) ** 2

    def _drop(self, leaving: set[int]) -> None:
        """Remove members (positions in the stack) from every stacked tensor."""
        if not leaving:
            return
        keep_pos = [j for j in range(len(self.alive)) if j not in leaving]
        # Members that leave keep their final weights in their own model (a copy, so the
        # big stacked tensor can be freed).
        with torch.no_grad():
            for j in leaving:
                params = dict(self.alive[j].trainer.raw_model.named_parameters())
                for n in self.names:
                    params[n].data = self.P[n].detach()[j].clone()
        self.alive = [self.alive[j] for j in keep_pos]
        if not self.alive:
            return
        idx = torch.tensor(keep_pos, device=self.device)
        with torch.no_grad():
            for n in self.names:
                old = self.P[n]
                new = old.detach().index_select(0, idx).requires_grad_(True)
                if old.grad is not None:
                    new.grad = old.grad.index_select(0, idx)
                self.P[n] = new
                self.state[n] = {s: t.index_select(0, idx) for s, t in self.state[n].items()}
        self._alias()
        self._forward = self._build_forward()

    def _scalars(self, sc: _Scalars, name: str) -> dict[str, Any]:
        kind = self.kind[name]
        gs = [m.group_of[name] for m in self.alive]
        lrs = [float(g["lr"]) for g in gs]
        wds = [float(g["weight_decay"]) for g in gs]
        out: dict[str, Any] = {}
        if kind == "adamw":
            b1 = [float(g["betas"][0]) for g in gs]
            b2 = [float(g["betas"][1]) for g in gs]
            steps = [float(m.opt_steps + 1) for m in self.alive]
            out["decay"] = sc.add([1 - lr * wd for lr, wd in zip(lrs, wds)]) if any(wds) else None
            out["w1"] = sc.add([1 - b for b in b1])
            out["beta2"] = sc.add(b2)
            out["c2"] = sc.add([1 - b for b in b2])
            out["bc2_sqrt"] = sc.add([(1 - b ** s) ** 0.5 for b, s in zip(b2, steps)])
            out["eps"] = sc.add([float(g["eps"]) for g in gs])
            out["neg_step_size"] = sc.add([-(lr / (1 - b ** s)) for lr, b, s in zip(lrs, b1, steps)])
        elif kind == "sgd":
            out["wd"] = sc.add(wds) if any(wds) else None
            out["momentum"] = sc.add([float(g.get("momentum", 0.0)) for g in gs])
            nest = {bool(g.get("nesterov", False)) for g in gs}
            if len(nest) > 1:
                raise ValueError("members differ in SGD nesterov: not fusible")
            out["nesterov"] = nest.pop()
            out["neg_lr"] = sc.add([-lr for lr in lrs])
        else:
            mom = [float(g["momentum"]) for g in gs]
            shape = tuple(self.P[name].shape[1:])
            for key in ("nesterov", "ns_coefficients", "ns_steps", "adjust_lr_fn"):
                if len({repr(g[key]) for g in gs}) > 1:
                    raise ValueError(f"members differ in Muon {key}: not fusible")
            out["nesterov"], out["ns_steps"] = bool(gs[0]["nesterov"]), int(gs[0]["ns_steps"])
            out["ns_coefficients"] = tuple(gs[0]["ns_coefficients"])
            out["w_mom"] = sc.add([1 - mu for mu in mom])
            out["momentum"] = sc.add(mom)
            out["eps"] = sc.add([float(g["eps"]) for g in gs])
            out["decay"] = sc.add([1 - lr * wd for lr, wd in zip(lrs, wds)])
            out["neg_adj_lr"] = sc.add([-_muon_adjusted_lr(lr, g["adjust_lr_fn"], shape)
                                        for lr, g in zip(lrs, gs)])
        return out

    @torch.no_grad()
    def _optimizer_step(self, skipped: set[int]) -> None:
        """One optimizer step of every member in the stack, except ``skipped`` positions
        (a spike skip: their rows are restored afterwards, their step count unchanged)."""
        sc = _Scalars(self.device)
        per_name = {n: self._scalars(sc, n) for n in self.names}
        sc.flush()
        saved: dict[str, list[torch.Tensor]] = {}
        if skipped:
            sidx = torch.tensor(sorted(skipped), device=self.device)
            for n in self.names:
                saved[n] = [self.P[n].index_select(0, sidx).clone()] + [
                    t.index_select(0, sidx).clone() for t in self.state[n].values()]
        for n in self.names:
            p = self.P[n]
            if p.grad is None:
                continue
            _STEP_FNS[self.kind[n]](p.data, p.grad, self.state[n], per_name[n])
        if skipped:
            for n in self.names:
                tensors = [self.P[n].data, *self.state[n].values()]
                for t, s in zip(tensors, saved[n]):
                    t.index_copy_(0, sidx, s)
        for j, m in enumerate(self.alive):
            if j not in skipped:
                m.opt_steps += 1

    @torch.no_grad()
    def _qk_clip(self, max_logits: dict[str, torch.Tensor], skipped: set[int]) -> list[int]:
        """QK-clip (MuonClip, Kimi K2 §2.1) per member and head: rows of W_q and W_k of a
        head whose max logit S exceeds tau are scaled by sqrt(tau / S)."""
        taus = torch.tensor([m.cfg.qk_clip_tau for m in self.alive], dtype=torch.float64)
        taus = taus.to(torch.float32).to(self.device)
        d = self.gcfg.d_head
        clipped = [0] * len(self.alive)
        for name, s in max_logits.items():
            over = s > taus[:, None]
            for j in skipped:  # a skipped member took no step, hence no clip
                over[j] = False
            if not bool(over.any()):
                continue
            gamma = torch.where(over, taus[:, None] / s, torch.ones_like(s))
            row = gamma.sqrt().repeat_interleave(d, dim=1)  # [K, C]
            for lin in ("c_q", "c_k"):
                self.P[f"{name}.{lin}.weight"].mul_(row[:, :, None])
                if f"{name}.{lin}.bias" in self.P:
                    self.P[f"{name}.{lin}.bias"].mul_(row)
            for j, c in enumerate(over.sum(1).tolist()):
                clipped[j] += int(c)
        return clipped

    @torch.no_grad()
    def evaluate(self) -> list[float]:
        """Each member's held-out loss (the unfused :meth:`Trainer.evaluate`: mean CE over
        ``eval_batches`` fixed val batches, no z-loss)."""
        cfg = self.configs[0]
        if self._val is None:
            self._val = [self.data.get_batch("val", b, cfg.batch_size, self.seq_len, 0, device=self.device)
                         for b in range(cfg.eval_batches)]
        k = len(self.alive)
        total = torch.zeros(k, device=self.device)
        for x, y in self._val:
            with self._autocast():
                logits = self._forward.logits(self.P, x.unsqueeze(0).expand(k, *x.shape))
            total += _member_losses(logits.float(), y.unsqueeze(0).expand(k, *y.shape), 0.0)
        return [t / cfg.eval_batches for t in total.tolist()]

    # ---- the loop ------------------------------------------------------------------------

    def _finish(self, m: _Member, rec: dict[str, Any], dt: float) -> None:
        """Trainer._finish_record for one member (the step's wall time is shared)."""
        tr = m.trainer
        tr.train_time += dt
        rec["tokens"] = tr.tokens
        rec["wall_s"] = round(time.perf_counter() - tr.t_start, 4)
        rec.setdefault("gns", None)
        tr.history.append(rec)

    def _select(self, t: torch.Tensor, before: list[_Member]) -> torch.Tensor:
        """Rows of a ``[K_before, ...]`` tensor for the members still alive."""
        if len(before) == len(self.alive):
            return t
        pos = {id(m): j for j, m in enumerate(before)}
        idx = torch.tensor([pos[id(m)] for m in self.alive], device=t.device)
        return t.index_select(0, idx)

    def train_step(self, step: int) -> None:
        """One step of every member still in the stack (the unfused Trainer.train_step,
        member by member; policies ``skip`` and ``log`` as there)."""
        cfg0 = self.configs[0]
        n, bsz = cfg0.grad_accum, cfg0.batch_size
        t0 = time.perf_counter()
        mults = {}
        for m in self.alive:
            mults[id(m)] = m.trainer.schedule(step)
            set_lr(m.trainer.opt, mults[id(m)])
        every = cfg0.max_logit_every
        track = self.gcfg.depth > 0 and (cfg0.qk_clip or (every > 0 and step % every == 0))
        at_forward = list(self.alive)
        max_logits: dict[str, torch.Tensor] = {}
        losses = []
        g_small: torch.Tensor | None = None
        for i in range(n):
            x, y = self._batches("train", step, (i, n))
            tr: dict[str, torch.Tensor] | None = {} if track else None
            with self._autocast():
                lk = self._forward.losses(self.P, x, y, tr)
            # d(sum_j loss_j / n)/d loss_j = 1/n: each member gets exactly the gradient of
            # its own (loss / n).backward(); members share no parameters.
            (lk / n).sum().backward()
            losses.append(lk.detach().float())
            for name, s in (tr or {}).items():
                max_logits[name] = torch.maximum(max_logits[name], s) if name in max_logits else s
            if i == 0 and n >= 2:
                g_small = self._sq_norms(scale=n)
        loss_vals = torch.stack(losses).mean(0).tolist()
        ml_vals = (torch.stack([s.amax(1) for s in max_logits.values()]).amax(0).tolist()
                   if max_logits else None)
        gsm_vals = g_small.tolist() if g_small is not None else None
        recs: dict[int, dict[str, Any]] = {}
        skipped: set[int] = set()
        leaving: set[int] = set()
        for j, m in enumerate(at_forward):
            trn, lv = m.trainer, loss_vals[j]
            if trn.initial_loss is None and math.isfinite(lv):
                trn.initial_loss = lv
            rec: dict[str, Any] = {"step": step + 1, "loss": lv, "lr": m.cfg.lr * mults[id(m)]}
            if ml_vals is not None:
                rec["max_attn_logit"] = ml_vals[j]
            recs[id(m)] = rec
            bound = divergence_bound(m.cfg.diverge_factor, self.data.vocab_size, trn.initial_loss)
            if is_diverged(lv, bound):
                trn.diverged = True
                leaving.add(j)
                continue
            if m.cfg.spike_policy != "off" and trn.detector.is_spike(lv):
                trn.spikes.append(step + 1)
                rec["spike"] = True
                if m.cfg.spike_policy == "skip":
                    rec["skipped"] = True
                    skipped.add(id(m))
            else:
                trn.detector.update(lv)
        self._drop(leaving)
        done_early = [m for m in at_forward if m.trainer.diverged]
        if self.alive:
            sq = self._sq_norms()
            norm = sq.sqrt()
            clips = [float(m.cfg.grad_clip or 0.0) for m in self.alive]
            if any(c > 0 for c in clips):
                # clip_grads_with_norm_: coef = max_norm / (norm + 1e-6) is computed by
                # torch as reciprocal(norm + 1e-6) * max_norm, then clamped to 1.
                if _uniform(clips):
                    coef = (norm + 1e-6).reciprocal() * clips[0]
                else:
                    ct = torch.tensor(clips, dtype=torch.float64).to(torch.float32).to(self.device)
                    coef = torch.where(ct > 0, (norm + 1e-6).reciprocal() * ct, torch.ones_like(norm))
                coef = torch.clamp(coef, max=1.0)
                with torch.no_grad():
                    for name in self.names:
                        g = self.P[name].grad
                        if g is not None:
                            g.mul_(_bcast(coef, g))
            sq_vals, norm_vals = sq.tolist(), norm.tolist()
            pos0 = {id(m): j for j, m in enumerate(at_forward)}
            leaving = set()
            for j, m in enumerate(self.alive):
                if id(m) in skipped:
                    continue
                rec, gn = recs[id(m)], norm_vals[j]
                rec["grad_norm"] = gn
                if not math.isfinite(gn):
                    m.trainer.diverged = True
                    leaving.add(j)
                    done_early.append(m)
                    continue
                if gsm_vals is not None and math.isfinite(gsm_vals[pos0[id(m)]]):
                    rec["gns"] = m.trainer.gns.update(gsm_vals[pos0[id(m)]], sq_vals[j], bsz // n, bsz)
            self._drop(leaving)
        if self.alive:
            skip_pos = {j for j, m in enumerate(self.alive) if id(m) in skipped}
            self._optimizer_step(skip_pos)
            if cfg0.qk_clip and max_logits:
                ml = {k: self._select(v, at_forward) for k, v in max_logits.items()}
                for j, c in enumerate(self._qk_clip(ml, skip_pos)):
                    if j not in skip_pos:
                        recs[id(self.alive[j])]["qk_clipped_heads"] = c
            for name in self.names:
                self.P[name].grad = None
        dt = time.perf_counter() - t0
        for m in self.alive:
            m.trainer.step = step + 1
            if id(m) not in skipped:
                m.trainer.tokens += bsz * self.seq_len
        for m in at_forward:
            self._finish(m, recs[id(m)], dt)
        for m in done_early:
            m.trainer.write_metrics()

    def _eval_and_callbacks(self, step: int) -> None:
        vals = self.evaluate()
        leaving = set()
        for j, (m, val) in enumerate(zip(self.alive, vals)):
            trn = m.trainer
            trn.evals.append((step, val))
            if not math.isfinite(val):
                trn.diverged = True
                leaving.add(j)
                continue
            cb = self.callbacks[m.index]
            if cb is not None:
                metrics = {"step": step, "val_loss": val, "train_loss": trn.recent_train_loss(),
                           "tokens": trn.tokens, "lr": trn.history[-1]["lr"] if trn.history else m.cfg.lr,
                           "wall_s": time.perf_counter() - trn.t_start}
                if cb(step, metrics):
                    trn.pruned = True
                    leaving.add(j)
        for j in leaving:
            self.alive[j].trainer.write_metrics()
        self._drop(leaving)

    def run(self) -> list[TrainResult]:
        """Train every member to ``steps`` (or until it diverges or is pruned); one
        TrainResult per config, in order, as :func:`mutransfer.train.train` returns it."""
        cfg0 = self.configs[0]
        total = cfg0.steps
        step = 0
        while step < total and self.alive:
            self.train_step(step)
            step += 1
            if self.alive and ((cfg0.eval_every and step % cfg0.eval_every == 0) or step == total):
                self._eval_and_callbacks(step)
            if cfg0.eval_every and step % cfg0.eval_every == 0:
                for m in self.alive:
                    m.trainer.write_metrics()
        self._drop(set(range(len(self.alive))))  # detach everyone's final weights
        results = []
        for m in self.members:
            m.trainer.write_metrics()
            m.trainer.close()
            results.append(m.trainer.result())
        return results


def train_fused(
    configs: Sequence[TrainConfig],
    *,
    k: int | None = None,
    callback: FusedCallback | Sequence[Callback | None] | None = None,
    data: TokenDataset | None = None,
) -> list[TrainResult]:
    """Train ``configs`` as fused groups of up to ``k`` members; one TrainResult each,
    in the order given, equal (to float tolerance on CPU) to ``train(cfg)`` per config.

    Args:
        configs: trials that agree on every field of :data:`NON_FUSIBLE_FIELDS`
            (ValueError names the first field that differs, with both values) and can
            run fused (:func:`unsupported_reason`). Use :func:`partition` first for a
            mixed list.
        k: members per group (>= 1; ValueError otherwise). None: :func:`choose_k` (16 on
            CPU; on CUDA from free memory against :func:`member_bytes`).
        callback: either ``fn(member, step, metrics)`` with ``member`` the config's index
            in ``configs``, or a sequence of per-config callbacks with the unfused
            signature ``fn(step, metrics)``. Called after every evaluation with the
            metrics :func:`mutransfer.train.train` passes; True prunes that member only.
        data: an open dataset to use instead of loading ``configs[0].data``.

    The fusion idea is HFTA (Wang et al., MLSys 2021); see the module docstring for what
    is exact and what is not supported.
    """
    _check_k(k)
    configs = list(configs)
    check_fusible(configs)
    if callback is None:
        callbacks: list[Callback | None] = [None] * len(configs)
    elif callable(callback):
        fn = callback

        def bind(i: int) -> Callback:
            return lambda step, metrics: fn(i, step, metrics)

        callbacks = [bind(i) for i in range(len(configs))]
    else:
        callbacks = list(callback)
        if len(callbacks) != len(configs):
            raise ValueError(f"got {len(callbacks)} callbacks for {len(configs)} configs")
    kk = k if k is not None else choose_k(configs[0])
    if data is None:
        c0 = configs[0]
        data = load_dataset(DataConfig(source=c0.data, dtype=c0.data_dtype, max_bytes=c0.data_max_bytes,
                                       cache_dir=c0.data_cache))
    results: list[TrainResult] = []
    for start in range(0, len(configs), kk):
        chunk = configs[start:start + kk]
        group = FusedGroup(chunk, callbacks=callbacks[start:start + kk], data=data)
        results.extend(group.run())
    return results

