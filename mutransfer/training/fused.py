"""Fused multi-trial training: K sweep trials of one shape trained as one batched model.

A proxy of a few million parameters leaves a GPU mostly idle, and a learning-rate sweep
is dozens of such runs. Trials that share the model shape, batch size, step count and
sequence length can run as one *horizontally fused* model: every parameter is stacked
into a ``[K, ...]`` tensor, every matmul becomes one batched matmul over the member
dimension, and the K trials advance in lock step. This is HFTA (Wang et al., "Horizontally
Fused Training Array: An Effective Hardware Utilization Squeezer for Training Novel Deep
Learning Models", MLSys 2021), which reports up to 15x more trials per GPU-hour on small
models.

Nothing of the training is re-implemented here; every member is a
:class:`mutransfer.training.trainer.Trainer` of its own config, and the group only shares the
forward and backward:

- init: each member's Trainer builds its model as the unfused run does (same seed, same
  parametrization), so the initial weights are the unfused ones bit for bit; they are
  then stacked, and each member's Parameters become views of their rows;
- forward: :class:`mutransfer.models.gpt.GPT`'s own forward with the member dimension
  (a GPT skeleton holding the stacked tensors). Each member's μP forward multipliers
  (:meth:`Parametrization.forward_multipliers`) are installed on it as hooks whose scale
  is a ``[K]`` tensor (a float when all members agree), the attention scales as ``[K]``
  ``softmax_scale`` data;
- data: a member's batches are a pure function of (its seed, step), as in the unfused
  run; members with different seeds get their own batches (gathered into ``[K, B, T]``),
  members that share a seed share one fetch. Held-out batches are the same for all;
- after the backward every member's gradients are views of the stacked gradient, and
  each member runs the unfused per-step decision (:meth:`Trainer.decide`: divergence,
  spike policy, grad-norm clipping with its own norm, GNS), its own ``torch.optim``
  optimizer on those views, and QK-clip (:func:`mutransfer.training.optim.qk_clip`). Only Muon's
  Newton–Schulz is batched over the members (:func:`mutransfer.training.optim.muon_step_batched`).
  When every member defers its host reads (:meth:`Trainer.deferred`), each clips and steps
  at once and the group reads all members' numbers in one transfer per logging step
  (:meth:`FusedGroup.flush`), where each member's decision then runs in step order;
- a member that diverges or is pruned leaves the stack (its rows are dropped from every
  tensor), so it costs nothing afterwards and its result is what the unfused run reports.

On CPU the fused runs reproduce the unfused ones to the last bit in our tests (AdamW,
SGD and Muon, members at different LRs and seeds, one diverging member; the tests assert
rtol 1e-5). On CUDA the batched kernels sum in other orders: float tolerance, not bits
(bf16 autocast is not bit-reproducible across batch shapes anyway).

Not fusible (must be equal inside a group; :data:`NON_FUSIBLE_FIELDS`, derived from each
config section's ``PER_MEMBER`` fields, :mod:`mutransfer.training.config`): the model shape and
architecture switches, the parametrization kind and optimizer kind, QK-clip on/off, steps,
batch size, grad accumulation, data source, eval cadence, device and dtype. Everything else
(lr, seed, weight decay and its mode, betas, eps, momentum, multipliers, base width and
depth, depth alpha, readout init, schedule, warmup, grad clip, spike policy log/skip/off,
diverge factor, QK-clip tau, gns beta, out_dir) may differ per member.

WSD branching of a fused group (one stacked trunk, each member's own cooldowns) is
:func:`mutransfer.training.fused_wsd.train_fused_wsd_branches`.

``compile`` (equal across a group) compiles the stacked forward, and through AOTAutograd
its backward: one graph for the whole group (its per-member scales are data, so members
with other LRs, multipliers or attention scales share it), one more for evaluation, one
more each time a member leaves the stack (K changes). On CPU with the ``aot_eager``
backend the compiled group's numbers equal the uncompiled group's (tests/mutransfer/
training/test_fused_compile.py). The rest of a step stays eager: each member's decision
(divergence, spikes, clipping) is host logic over its own numbers, and each member's own
``torch.optim`` optimizer steps its views of the stack; compiled, every optimizer instance
would be a graph of its own (dynamo guards on the optimizer object), K graphs per group, past the
recompile limit of a sweep worker by the second group. A fallback to eager is reported as
for an unfused run (:mod:`mutransfer.training.compile_watch`).

Not supported (run such trials unfused; :func:`unsupported_reason`): the ``rollback``
spike policy (a per-member rewind of the data stream), checkpointing/resume inside a
fused group and multi-process (DDP) runs.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn as nn

from mutransfer.models.gpt import GPT
from mutransfer.models.gpt_layers import member_scale
from mutransfer.training.compile_watch import CompileWatch, compile_model
from mutransfer.training.config import TrainConfig
from mutransfer.training.data import DataConfig, TokenDataset, load_dataset
from mutransfer.training.device import flush_denormals
from mutransfer.training.fusion import check_fusible, check_k, choose_k
from mutransfer.training.noise_scale import grad_sq_norm
from mutransfer.training.optim import attention_modules, muon_step_batched, qk_clip, set_lr
from mutransfer.training.stabilizers import clip_grad_norm
from mutransfer.training.train_result import TrainResult
from mutransfer.training.trainer import SYNC_EVERY, Callback, Trainer, Verdict, eval_rows, sequence_losses

__all__ = ["FusedCallback", "train_fused"]


#: ``callback(member, step, metrics) -> bool | None``: ``member`` is the index of the
#: config in the list given to :func:`train_fused`; returning True prunes that member.
FusedCallback = Callable[[int, int, dict[str, Any]], "bool | None"]


# ---- the fused group ---------------------------------------------------------------------


def _per_member(values: Sequence[float], device: torch.device) -> float | torch.Tensor:
    """One scale per member: a float when all agree (so the unfused kernel runs), else a
    ``[K]`` fp32 tensor (doubles rounded once, as torch rounds a Number argument)."""
    if all(v == values[0] for v in values):
        return float(values[0])
    return torch.tensor(values, dtype=torch.float64).to(torch.float32).to(device)


def _layout(trainer: Trainer) -> list[tuple[str, list[str]]]:
    """Which optimizer class holds which parameters (by name): members must agree. How
    each member splits them into param groups is its own business."""
    names = {id(p): n for n, p in trainer.raw_model.named_parameters()}
    return [(type(o).__name__, sorted(names[id(p)] for g in o.param_groups for p in g["params"]))
            for o in trainer.opt.optimizers]


class _Member:
    """One trial inside a fused group: its own Trainer (model built from its seed,
    parametrization, optimizer, schedule, stabilizers, history) and its forward
    multipliers as data."""

    def __init__(self, index: int, trainer: Trainer) -> None:
        self.index, self.trainer, self.cfg = index, trainer, trainer.cfg
        fm = trainer.pz.forward_multipliers()
        self.hooks = {(h["module"], h["kind"]): float(h["scale"]) for h in fm["hooks"]}
        self.params = dict(trainer.raw_model.named_parameters())


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
        callbacks = list(callbacks) if callbacks is not None else [None] * len(configs)
        self.data = data = data if data is not None else open_data(configs[0])
        # Each member's Trainer builds its model exactly as the unfused run does.
        self.members = [_Member(i, Trainer(c, data=data, callback=cb))
                        for i, (c, cb) in enumerate(zip(configs, callbacks))]
        t0 = self.members[0].trainer
        self.device, self.amp_dtype, self.seq_len = t0.device, t0.amp_dtype, t0.seq_len
        model0 = t0.raw_model
        if type(model0) is not GPT:
            raise ValueError(f"fused training knows the GPT forward only, not {type(model0).__name__}")
        self.names = [n for n, p in model0.named_parameters() if p.requires_grad]
        for m in self.members[1:]:
            if _layout(m.trainer) != _layout(t0):
                raise ValueError(f"config {m.index} builds different parameters or optimizers than "
                                 "config 0: not fusible")
        # Muon's parameters by optimizer position, paired across members by name.
        ids = {id(p): n for n, p in model0.named_parameters()}
        self._muon_names = {i: [ids[id(p)] for g in o.param_groups for p in g["params"]]
                            for i, o in enumerate(t0.opt.optimizers) if isinstance(o, torch.optim.Muon)}
        # The skeleton: a GPT without storage that will hold the stacked [K, ...] tensors.
        # Where each parameter sits (a tied matrix sits in two modules).
        with torch.device("meta"):
            self.model = GPT(model0.cfg)
        self._slots: dict[str, list[tuple[nn.Module, str]]] = {n: [] for n in self.names}
        for mname, mod in model0.named_modules():
            for leaf, p in mod._parameters.items():
                if p is not None and ids[id(p)] in self._slots:
                    self._slots[ids[id(p)]].append((self.model.get_submodule(mname), leaf))
        for bname, buf in model0.named_buffers():  # rope, frozen norm gains: shared
            mname, _, leaf = bname.rpartition(".")
            self.model.get_submodule(mname)._buffers[leaf] = buf
        self.attn = attention_modules(self.model)
        # Compiled: the stacked forward (and its backward) is one graph for the whole group.
        # The max logit is then measured on every step, as the unfused trainer does: a flag
        # that changes from step to step would be a guard (two graphs).
        self.forward_model: nn.Module = self.model
        self.compile_watch: CompileWatch | None = None
        self._measure_always = t0._measure_always
        if configs[0].run.compile:
            self.forward_model = compile_model(self.model)
            self.compile_watch = CompileWatch(f"{t0.source.model_id} (fused group of {len(configs)})")
            for m in self.members:  # each member's result reports the group's fallback
                m.trainer.compile_watch = self.compile_watch
        self.alive = list(self.members)
        self._scales: dict[tuple[str, str], float | torch.Tensor] = {}
        self._install_hooks()
        self._restack([[m.params[n].detach() for m in self.alive] for n in self.names])
        self._val: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        self.step = 0  # every alive member's Trainer.step (members advance in lock step)

    # ---- the stack -----------------------------------------------------------------------

    def _install_hooks(self) -> None:
        """Every member's forward multipliers as hooks on the skeleton; the scale is read
        at call time from ``self._scales`` (refreshed when members leave). A ``[K]``
        scale would promote bf16 activations to fp32: the result is cast back, as the
        unfused hook's ``x * float`` keeps its dtype."""
        modules = dict(self.model.named_modules())
        keys = sorted({k for m in self.members for k in m.hooks})
        for mname, kind in keys:
            if mname not in modules:
                raise ValueError(f"fused forward has no module {mname!r} to put a multiplier on")
            key = (mname, kind)
            if kind == "pre":
                def pre(_m: nn.Module, args: tuple[Any, ...], key: tuple[str, str] = key) -> tuple[Any, ...]:
                    x = args[0]
                    return ((x * member_scale(self._scales[key], x)).to(x.dtype), *args[1:])

                modules[mname].register_forward_pre_hook(pre)
            else:
                def post(_m: nn.Module, _a: Any, out: torch.Tensor,
                         key: tuple[str, str] = key) -> torch.Tensor:
                    return (out * member_scale(self._scales[key], out)).to(out.dtype)

                modules[mname].register_forward_hook(post)
            self._scales[key] = 1.0

    def _restack(self, rows: list[list[torch.Tensor]]) -> None:
        """Stack ``rows`` (per parameter, one tensor per alive member) into the skeleton,
        point every alive member's Parameters at their rows, and set the per-member
        scales of the alive members."""
        self.P: dict[str, nn.Parameter] = {}
        with torch.no_grad():
            for n, r in zip(self.names, rows):
                self.P[n] = nn.Parameter(torch.stack(r))
                for mod, leaf in self._slots[n]:
                    mod._parameters[leaf] = self.P[n]
            for j, m in enumerate(self.alive):
                for n in self.names:
                    m.params[n].data = self.P[n].detach()[j]
        for key in self._scales:
            self._scales[key] = _per_member([m.hooks.get(key, 1.0) for m in self.alive], self.device)
        for aname, a in self.attn:
            scales = [float(m.trainer.raw_model.get_submodule(aname).softmax_scale) for m in self.alive]
            a.softmax_scale = _per_member(scales, self.device)

    def _drop(self, leaving: set[int]) -> None:
        """Remove members (positions in the stack) from every stacked tensor."""
        if not leaving:
            return
        with torch.no_grad():
            for j in leaving:  # its final weights, as a copy so the stack can be freed
                m = self.alive[j]
                for n in self.names:
                    m.params[n].data = self.P[n].detach()[j].clone()
                for opt in m.trainer.opt.optimizers:
                    opt.state.clear()  # its optimizer state is no longer needed
        keep = [j for j in range(len(self.alive)) if j not in leaving]
        self.alive = [self.alive[j] for j in keep]
        if self.alive:
            self._restack([[self.P[n].detach()[j] for j in keep] for n in self.names])

    def readmit(self, members: Sequence[_Member]) -> None:
        """Make ``members`` (in order) the stack again, each with its Trainer's current
        weights (members that left are back, as after :meth:`Trainer.restore`); their
        optimizer state stays theirs. They must all be at one step."""
        steps = {m.trainer.step for m in members}
        if len(steps) > 1:
            raise ValueError(f"members to restack are at different steps {sorted(steps)}")
        self.alive = list(members)
        if self.alive:
            self._restack([[m.params[n].detach() for m in self.alive] for n in self.names])
            self.step = steps.pop()

    def _grads_to_members(self) -> None:
        """Each alive member's ``.grad`` becomes a view of its row of the stacked gradient."""
        for j, m in enumerate(self.alive):
            for n in self.names:
                g = self.P[n].grad
                m.params[n].grad = None if g is None else g[j]

    # ---- pieces of a step ----------------------------------------------------------------

    def _batches(self, split: str, step: int, micro: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
        """``[K, B, T]`` inputs and targets: member j's batch of its own seed (one fetch
        per distinct seed)."""
        b = self.configs[0].run.batch_size
        cache: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        for m in self.alive:
            if m.cfg.run.seed not in cache:
                cache[m.cfg.run.seed] = self.data.get_batch(split, step, b, self.seq_len, m.cfg.run.seed,
                                                            micro=micro, device=self.device)
        if len(cache) == 1:
            x, y = next(iter(cache.values()))
            k = len(self.alive)
            return x.unsqueeze(0).expand(k, *x.shape), y.unsqueeze(0).expand(k, *y.shape)
        return (torch.stack([cache[m.cfg.run.seed][0] for m in self.alive]),
                torch.stack([cache[m.cfg.run.seed][1] for m in self.alive]))

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.amp_dtype)

    def _optimizer_step(self, stepping: list[_Member]) -> None:
        """Each stepping member's own torch optimizers on its views; Muon's Newton–Schulz
        batched over the members."""
        for m in stepping:
            for o in m.trainer.opt.optimizers:
                if not isinstance(o, torch.optim.Muon):
                    o.step()
        for i, names in self._muon_names.items() if stepping else ():
            muon_step_batched([m.trainer.opt.optimizers[i] for m in stepping],
                              [[m.params[n] for n in names] for m in stepping])

    @torch.no_grad()
    def evaluate(self) -> list[float]:
        """Each member's held-out loss (the unfused :meth:`Trainer.evaluate`: mean CE over
        the ``eval_sequences`` sequences of the fixed held-out set, no z-loss, summed per
        sequence in set order)."""
        cfg = self.configs[0]
        if self._val is None:
            self._val = self.data.eval_batches(cfg.run.eval_sequences, self.seq_len,
                                               eval_rows(cfg, self.seq_len), device=self.device)
        for _, a in self.attn:
            a.track_max_logit = False
        k = len(self.alive)
        per_seq = []
        for x, y in self._val:
            with self._autocast():
                logits, _ = self.forward_model(x.unsqueeze(0).expand(k, *x.shape))
            per_seq.append(sequence_losses(logits, y.unsqueeze(0).expand(k, *y.shape)))
        total = torch.cat(per_seq, dim=1).double().sum(dim=1)
        return [t / cfg.run.eval_sequences for t in total.tolist()]

    # ---- the loop ------------------------------------------------------------------------

    def train_step(self, step: int) -> None:
        """One step of every member still in the stack: one forward and backward for all,
        then each member's own decision (:meth:`Trainer.decide`) and optimizer."""
        cfg0 = self.configs[0]
        n = cfg0.run.grad_accum
        t0 = time.perf_counter()
        at_forward = list(self.alive)
        mults = [m.trainer.schedule(step) for m in at_forward]
        for m, mult in zip(at_forward, mults):
            set_lr(m.trainer.opt, mult)
        track = self.members[0].trainer._track(step)
        for _, a in self.attn:
            a.track_max_logit = track or self._measure_always
        max_logits: dict[str, torch.Tensor] = {}
        losses = []
        g_small: list[torch.Tensor] | None = None
        if self.compile_watch is not None:
            self.compile_watch.begin()
        for i in range(n):
            x, y = self._batches("train", step, (i, n))
            with self._autocast():
                _, loss_K = self.forward_model(x, y)
            # d(sum_k loss_k / n)/d loss_k = 1/n: each member gets exactly the gradient of
            # its own (loss / n).backward(); members share no parameters.
            (loss_K / n).sum().backward()
            losses.append(loss_K.detach().float())
            for name, a in self.attn if track else ():
                s = a.max_logit.detach().float()
                max_logits[name] = torch.maximum(max_logits[name], s) if name in max_logits else s
            if i == 0 and n >= 2:  # |G_small|^2 of one micro-batch, per member
                self._grads_to_members()
                g_small = [grad_sq_norm(m.trainer.params, scale=n) for m in at_forward]
        if self.compile_watch is not None:
            self.compile_watch.end(forwards=n)
        if all(m.trainer.deferred() for m in at_forward):
            self._deferred_step(step, at_forward, mults, torch.stack(losses).mean(0), max_logits, g_small, t0)
            return
        loss_vals = torch.stack(losses).mean(0).tolist()
        ml_vals = (torch.stack([s.amax(1) for s in max_logits.values()]).amax(0).tolist()
                   if max_logits else None)
        self._grads_to_members()
        recs: list[dict[str, Any]] = []
        verdicts: list[Verdict] = []
        for j, m in enumerate(at_forward):
            rec: dict[str, Any] = {"step": step + 1, "loss": loss_vals[j], "lr": m.cfg.optim.lr * mults[j]}
            if ml_vals is not None:
                rec["max_attn_logit"] = ml_vals[j]
            recs.append(rec)
            verdicts.append(m.trainer.decide(rec, loss_vals[j], g_small[j] if g_small else None))
        stepping = [j for j, v in enumerate(verdicts) if v == "step"]
        self._optimizer_step([at_forward[j] for j in stepping])
        if cfg0.optim.qk_clip and max_logits:
            for j in stepping:
                m = at_forward[j]
                recs[j]["qk_clipped_heads"] = qk_clip(m.trainer.raw_model, m.cfg.optim.qk_clip_tau,
                                                      {name: s[j] for name, s in max_logits.items()})
        for m in at_forward:
            m.trainer.opt.zero_grad(set_to_none=True)
        for p in self.P.values():
            p.grad = None
        for m, rec, v in zip(at_forward, recs, verdicts):
            m.trainer.advance(v)
            m.trainer._finish_record(rec, t0)
        diverged = {j for j, v in enumerate(verdicts) if v == "diverged"}
        for j in diverged:
            at_forward[j].trainer.write_metrics()
        self._drop(diverged)

    def _deferred_step(self, step: int, at_forward: list[_Member], mults: list[float], loss_K: torch.Tensor,
                       max_logits: dict[str, torch.Tensor], g_small: list[torch.Tensor] | None,
                       t0: float) -> None:
        """The rest of a step whose members all defer their host reads
        (:meth:`Trainer.deferred`): each member clips with its own norm and steps; the
        numbers stay on the device until :meth:`flush` reads the whole group's at once."""
        ml_K = torch.stack([s.amax(1) for s in max_logits.values()]).amax(0) if max_logits else None
        self._grads_to_members()
        norms = [clip_grad_norm(m.trainer.params, m.cfg.stabilizers.grad_clip or None) for m in at_forward]
        self._optimizer_step(at_forward)
        for m in at_forward:
            m.trainer.opt.zero_grad(set_to_none=True)
        for p in self.P.values():
            p.grad = None
        for j, (m, mult) in enumerate(zip(at_forward, mults)):
            rec: dict[str, Any] = {"step": step + 1, "loss": None, "lr": m.cfg.optim.lr * mult}
            m.trainer.defer(rec, loss_K[j], norms[j], g_small[j] if g_small else None,
                            None if ml_K is None else ml_K[j])
            m.trainer.advance("step")
            m.trainer._finish_record(rec, t0)

    def flush(self) -> None:
        """Read every alive member's queued numbers on the host in one transfer (one sync for
        the group, not one per member), settle them (:meth:`Trainer.settle`), and drop the
        members that diverged."""
        waiting = [m for m in self.alive if m.trainer._pending]
        if not waiting:
            return
        parts = [m.trainer.pending_tensors() for m in waiting]
        flat = [t for ts in parts for t in ts]
        values = torch.cat(flat).tolist() if flat else []
        start = 0
        for m, ts in zip(waiting, parts):
            m.trainer.settle(values[start:start + len(ts)])
            start += len(ts)
        diverged = {j for j, m in enumerate(self.alive) if m.trainer.diverged}
        for j in diverged:
            self.alive[j].trainer.write_metrics()
        self._drop(diverged)

    def _eval_and_callbacks(self) -> None:
        """Evaluate every member, then its own :meth:`Trainer.record_eval` (divergence on
        the held-out loss, the callback); members that stop leave the stack."""
        leaving = {j for j, (m, val) in enumerate(zip(self.alive, self.evaluate()))
                   if m.trainer.record_eval(val)}
        for j in leaving:
            self.alive[j].trainer.write_metrics()
        self._drop(leaving)

    def run_until(self, stop_step: int) -> None:
        """Train the members in the stack up to ``stop_step``, as :meth:`Trainer.run_until`
        does each of them: evaluate every ``eval_every`` steps and at ``stop_step`` when it
        is the end of the run (``total_steps``), both read from the members' Trainers (as
        WSD branching sets them); members that diverge or are pruned leave the stack."""
        with flush_denormals(self.device):
            while self.alive and self.step < stop_step:
                self.train_step(self.step)
                self.step += 1
                t = self.alive[0].trainer if self.alive else None
                every = t.cfg.run.eval_every if t is not None else 0
                if (self.step == stop_step or self.step % SYNC_EVERY == 0
                        or (every and self.step % every == 0)):
                    self.flush()
                if not self.alive:
                    break
                t = self.alive[0].trainer
                every, final = t.cfg.run.eval_every, self.step == stop_step == t.total_steps
                if (every and self.step % every == 0) or final:
                    self._eval_and_callbacks()
                if every and self.step % every == 0:
                    for m in self.alive:
                        m.trainer.write_metrics()

    def run(self) -> list[TrainResult]:
        """Train every member to ``steps`` (or until it diverges or is pruned); one
        TrainResult per config, in order, as :func:`mutransfer.training.train.train` returns it."""
        self.run_until(self.configs[0].run.steps)
        self._drop(set(range(len(self.alive))))  # detach everyone's final weights
        results = []
        for m in self.members:
            m.trainer.write_metrics()
            m.trainer.close()
            results.append(m.trainer.result())
        return results


def member_callbacks(callback: FusedCallback | Sequence[Callback | None] | None, n: int
                     ) -> list[Callback | None]:
    """Per-member callbacks with the unfused signature ``fn(step, metrics)`` from one
    ``fn(member, step, metrics)``, a sequence of ``n`` callbacks, or None."""
    if callback is None:
        return [None] * n
    if callable(callback):
        fn = callback

        def bind(i: int) -> Callback:
            return lambda step, metrics: fn(i, step, metrics)

        return [bind(i) for i in range(n)]
    callbacks = list(callback)
    if len(callbacks) != n:
        raise ValueError(f"got {len(callbacks)} callbacks for {n} configs")
    return callbacks


def open_data(cfg: TrainConfig) -> TokenDataset:
    """The dataset of ``cfg``'s run section (every member of a group shares it)."""
    r = cfg.run
    return load_dataset(DataConfig(source=r.data, dtype=r.data_dtype, max_bytes=r.data_max_bytes,
                                   cache_dir=r.data_cache))


def train_fused(
    configs: Sequence[TrainConfig],
    *,
    k: int | None = None,
    callback: FusedCallback | Sequence[Callback | None] | None = None,
    data: TokenDataset | None = None,
    events: list[dict[str, Any]] | None = None,
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
            metrics :func:`mutransfer.training.train.train` passes; True prunes that member only.
        data: an open dataset to use instead of loading ``configs[0].data``.
        events: a list to append what happened to: ``{"event": "out_of_memory", "k",
            "retry_k", "first_member"}`` when a group ran out of memory and its members
            were retried in groups of half the size (a group of one re-raises).

    The fusion idea is HFTA (Wang et al., MLSys 2021); see the module docstring for what
    is exact and what is not supported.
    """
    check_k(k)
    configs = list(configs)
    check_fusible(configs)
    callbacks = member_callbacks(callback, len(configs))
    data = data if data is not None else open_data(configs[0])
    kk = k if k is not None else choose_k(configs[0], vocab_size=data.vocab_size)
    results: list[TrainResult] = []
    start = 0
    while start < len(configs):
        chunk = configs[start:start + kk]
        group: FusedGroup | None = None
        try:
            group = FusedGroup(chunk, callbacks=callbacks[start:start + kk], data=data)
            results.extend(group.run())
        except torch.OutOfMemoryError:
            if kk == 1:
                raise
            # The whole group starts over at half the size: its members' runs are pure
            # functions of their configs, so nothing of the failed attempt is kept.
            event = {"event": "out_of_memory", "k": kk, "retry_k": kk // 2, "first_member": start}
            warnings.warn(f"fused group of {kk} ran out of memory; retrying its members in groups of "
                          f"{kk // 2}", RuntimeWarning, stacklevel=2)
            if events is not None:
                events.append(event)
            kk //= 2
        else:
            start += len(chunk)
        finally:
            group = None
            if configs[0].run.device != "cpu" and torch.cuda.is_available():
                torch.cuda.empty_cache()  # the next group sees the memory this one freed
    return results
