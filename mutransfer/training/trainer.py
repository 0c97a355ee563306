"""One proxy training run, step by step: :class:`Trainer` builds the parametrized proxy, its
param groups (``Parametrization.param_groups``), its schedule and stabilizers, and runs,
evaluates, checkpoints and resumes it (:mod:`mutransfer.training.train`: the contract)."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import os
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F

from mutransfer.models.builder import logits_of
from mutransfer.models.gpt import GPT, GPTConfig
from mutransfer.models.source import build_model
from mutransfer.parametrize.parametrization import Parametrization
from mutransfer.parametrize.specs import Multipliers
from mutransfer.training.checkpoint import (
    check_resume,
    get_rng_state,
    load_checkpoint,
    save_checkpoint,
    set_rng_state,
    state_dict_error,
)
from mutransfer.training.compile_watch import CompileWatch, compile_model
from mutransfer.training.config import TrainConfig
from mutransfer.training.data import DataConfig, TokenDataset, load_dataset
from mutransfer.training.device import dist_env, flush_denormals, resolve_device
from mutransfer.training.model_section import ModelShape
from mutransfer.training.noise_scale import NoiseScaleEstimator, grad_sq_norm
from mutransfer.training.optim import attention_modules, build_optimizer, qk_clip, set_lr
from mutransfer.training.schedules import Schedule, make_schedule
from mutransfer.training.stabilizers import (
    SpikeDetector,
    clip_grad_norm,
    divergence_bound,
    is_diverged,
)
from mutransfer.training.train_result import TrainResult, write_metrics

Callback = Callable[[int, dict[str, Any]], "bool | None"]


#: What :meth:`Trainer.decide` makes of a step.
Verdict = Literal["step", "skip", "rollback", "diverged"]


#: Tokens per held-out chunk at least: eval keeps no activations for a backward pass, so a
#: chunk of this many tokens costs no more memory than a small training micro-batch, and
#: scoring a batch-1 run's set one sequence at a time is avoided.
EVAL_CHUNK_TOKENS = 2048

#: Steps between host reads of the loop's numbers (loss, gradient norm, GNS, max logit) when
#: no decision before the next step needs them (:meth:`Trainer.deferred`). A host read
#: waits for the device's queue to drain, so reading two scalars every step leaves a GPU
#: idle between steps; nanoGPT and torchtitan read only on logging steps too. The loop
#: also reads before every evaluation, checkpoint and the end of ``run_until``.
SYNC_EVERY = 10


def eval_rows(cfg: TrainConfig, seq_len: int, world: int = 1) -> int:
    """Sequences per held-out chunk on one rank: the training micro-batch's rows, or
    :data:`EVAL_CHUNK_TOKENS` worth of sequences if that is more. Only memory depends on it."""
    micro = cfg.run.batch_size // (world * cfg.run.grad_accum)
    return max(1, micro, EVAL_CHUNK_TOKENS // seq_len)


def sequence_losses(logits_BTV: torch.Tensor, targets_BT: torch.Tensor) -> torch.Tensor:
    """Each sequence's mean cross-entropy in nats/token, ``float32 [B]`` (leading dims of
    ``logits_BTV`` other than the last two are kept: ``[K, B, T, V] -> [K, B]``)."""
    V = logits_BTV.shape[-1]
    ce = F.cross_entropy(logits_BTV.float().reshape(-1, V), targets_BT.reshape(-1), reduction="none")
    return ce.view(targets_BT.shape).mean(-1)


def base_sizes(cfg: TrainConfig, gcfg: GPTConfig | ModelShape) -> tuple[int, int]:
    """(base width, base depth) of a run of ``cfg`` on ``gcfg`` (a GPTConfig, or any
    model's :class:`~mutransfer.training.model_section.ModelShape`): as set, else the model's own as given
    (the preset's, an hf: config's; a builder's: the preset's), or the run's if smaller."""
    (own_width, own_depth), pz = cfg.model.own_shape(), cfg.parametrization
    return (pz.base_width or min(own_width, gcfg.width), pz.base_depth or min(own_depth, gcfg.depth))


class GPTBuilder:
    """``builder(width, depth)`` of our GPT at ``cfg`` with that width and depth. Builders of
    configs that differ only in width and depth compare (and hash) equal, so the
    parametrization's base and delta models (:meth:`Parametrization._measure_real`) are
    built once for all trials of one model, the members of a fused group first of all."""

    def __init__(self, cfg: GPTConfig) -> None:
        self.cfg = cfg
        self._key = tuple((f.name, getattr(cfg, f.name)) for f in dataclasses.fields(cfg)
                          if f.name not in ("width", "depth"))

    def __call__(self, width: int, depth: int) -> torch.nn.Module:
        return GPT(self.cfg.replace(width=width, depth=depth))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GPTBuilder) and other._key == self._key

    def __hash__(self) -> int:
        return hash(self._key)


def build_parametrization(cfg: TrainConfig, gcfg: GPTConfig | ModelShape,
                          vocab_size: int | None = None) -> Parametrization:
    """The parametrization a run of ``cfg`` trains its ``gcfg`` model under (the
    trainer's, and ``mutransfer fold``'s to rebuild a checkpoint's model). A ``source``
    model (``gcfg`` its ModelShape) is built by :func:`mutransfer.models.source.build_model`
    at ``vocab_size``."""
    builder: Callable[[int, int], torch.nn.Module]
    if isinstance(gcfg, GPTConfig):
        builder = GPTBuilder(gcfg)
    else:
        source = cfg.model.model_source()

        def source_builder(width: int, depth: int) -> torch.nn.Module:
            return build_model(source, width, depth, vocab_size=vocab_size)

        builder = source_builder

    pz = cfg.parametrization
    base_width, base_depth = base_sizes(cfg, gcfg)
    return Parametrization(
        builder, width=gcfg.width, base_width=base_width,
        kind=pz.kind, optimizer="sgd" if cfg.optim.name == "sgd" else "adam",
        depth=gcfg.depth, base_depth=base_depth,
        depth_alpha=pz.depth_alpha, multipliers=Multipliers(*pz.mults), readout_init=pz.readout_init)


class Trainer:
    """The training loop as an object, for :func:`train`, WSD branching and tests.

    ``Trainer(cfg).run()`` is ``train(cfg)``. ``run_until(step)`` trains up to a step;
    :meth:`snapshot` / :meth:`restore` copy the full state in memory; :meth:`state_dict`
    is what checkpoints hold.
    """

    def __init__(self, cfg: TrainConfig, *, callback: Callback | None = None, progress: bool = False,
                 data: TokenDataset | None = None) -> None:
        self.cfg, self.callback = cfg, callback
        self.t_start = time.perf_counter()
        if cfg.run.threads is not None:
            torch.set_num_threads(cfg.run.threads)
        self.rank, self.world, local_rank = dist_env()
        self._own_pg = False
        if self.world > 1 and not torch.distributed.is_initialized():
            backend = "nccl" if torch.cuda.is_available() and cfg.run.device in ("auto", "cuda") else "gloo"
            torch.distributed.init_process_group(backend=backend)
            self._own_pg = True
        dev = resolve_device(cfg.run.device)
        if dev.type == "cuda" and self.world > 1:
            dev = torch.device("cuda", local_rank)
            torch.cuda.set_device(dev)
        self.device = dev
        dtype = cfg.run.dtype if cfg.run.dtype != "auto" else ("bf16" if dev.type == "cuda" else "fp32")
        if dev.type == "cuda":
            # TF32 (10-bit mantissa) for the fp32 matmuls left outside bf16 autocast; a run
            # that asked for fp32 gets fp32 (the flag is process-wide: a sweep worker's
            # earlier bf16 trial must not carry it into an fp32 one).
            torch.backends.cuda.matmul.allow_tf32 = dtype == "bf16"
            torch.backends.cudnn.allow_tf32 = dtype == "bf16"
        self.amp_dtype = torch.bfloat16 if dtype == "bf16" else None

        run = cfg.run
        self.data = data if data is not None else load_dataset(DataConfig(
            source=run.data, dtype=run.data_dtype, max_bytes=run.data_max_bytes, cache_dir=run.data_cache))
        # A preset trains our GPT (its own loss, z-loss, softcap, attention); any other
        # model is trained on cross-entropy of its logits (:meth:`_logits`).
        self.source = cfg.model.model_source()
        self.builtin = cfg.model.builtin
        self.gcfg: GPTConfig | ModelShape = (cfg.model_config(vocab_size=self.data.vocab_size)
                                             if self.builtin else cfg.model.shape())
        self.seq_len = self.gcfg.seq_len
        for split in ("train", "val"):
            n = self.data.n_tokens(split)
            if self.seq_len + 1 > n:
                raise ValueError(f"seq_len={self.seq_len} is longer than the data: the {split} split of "
                                 f"{cfg.run.data!r} has {n} tokens (needs seq_len + 1)")
        if cfg.run.batch_size % (self.world * cfg.run.grad_accum):
            raise ValueError(f"batch_size={cfg.run.batch_size} is not divisible by world_size × grad_accum = "
                             f"{self.world} × {cfg.run.grad_accum}")

        self.pz = build_parametrization(cfg, self.gcfg, vocab_size=self.data.vocab_size)
        self.raw_model = self.pz.build(seed=cfg.run.seed, device=dev)
        opt = cfg.optim
        groups = self.pz.param_groups(self.raw_model, opt.lr, weight_decay=opt.weight_decay,
                                      wd_mode=opt.wd_mode, eps=opt.eps,
                                      role_lr_mults=cfg.parametrization.lr_mults)
        beta2 = opt.adam_beta2(cfg.run.batch_size * self.seq_len)
        self.opt = build_optimizer(groups, opt.name, betas=(opt.beta1, beta2),
                                   momentum=opt.momentum, muon_momentum=opt.muon_momentum)
        self.params = [p for p in self.raw_model.parameters() if p.requires_grad]
        model: torch.nn.Module = self.raw_model
        if self.world > 1:
            from torch.nn.parallel import DistributedDataParallel as DDP

            model = DDP(model, device_ids=[dev.index] if dev.type == "cuda" else None)
        self.ddp_model = model
        self.model = compile_model(model) if cfg.run.compile else model
        # compiled: is every step's forward a compiled graph? (compile_watch)
        self.compile_watch = (CompileWatch(self.source.model_id, split_graphs=self.world > 1)
                              if cfg.run.compile else None)
        self.attn = attention_modules(self.raw_model)
        self._measure_always = bool(cfg.run.compile and self.attn and (
            cfg.optim.qk_clip or cfg.run.max_logit_every > 0))
        self.schedule: Schedule = make_schedule(cfg.schedule_config())
        self.total_steps = cfg.run.steps

        # Running state (all of it is in state_dict()).
        self.step = 0
        self.data_offset = 0  # data step = step + data_offset (rollback skips batches)
        self.tokens = 0
        self.initial_loss: float | None = None
        self.history: list[dict[str, Any]] = []
        self.evals: list[tuple[int, float]] = []
        self.spikes: list[int] = []
        self.rollbacks: list[tuple[int, int]] = []
        self.gns = NoiseScaleEstimator(beta=cfg.run.gns_beta)
        stab = cfg.stabilizers
        self.detector = SpikeDetector(window=stab.spike_window, threshold=stab.spike_threshold,
                                      min_history=min(10, stab.spike_window))
        self.ring: deque[dict[str, Any]] = deque(maxlen=2)
        # Stepped records whose numbers are still on the device (:meth:`flush`).
        self._pending: list[tuple[dict[str, Any], dict[str, torch.Tensor | None], int, int]] = []
        self._settled_norm: float | None = None
        self.diverged = False
        self.pruned = False
        self.train_time = 0.0
        self.progress = None
        if progress and self.rank == 0 and sys.stderr.isatty():
            from tqdm import tqdm

            self.progress = tqdm(total=cfg.run.steps, desc="train", leave=False, file=sys.stderr)
        if cfg.output.resume:
            self.load_state_dict(load_checkpoint(cfg.output.resume, map_location=dev))

    # ---- one step ------------------------------------------------------------------------

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.amp_dtype)

    def _track(self, step: int) -> bool:
        cfg = self.cfg
        every = cfg.run.max_logit_every
        return bool(self.attn) and (cfg.optim.qk_clip or (every > 0 and step % every == 0))

    def _logits(self, x: torch.Tensor, model: torch.nn.Module | None = None) -> torch.Tensor:
        """Logits [B, T, V] of token ids ``x`` (a source model's soft-capped here)."""
        model = self.model if model is None else model
        if self.builtin:
            return model(x)[0]
        logits = logits_of(model(x), f"model {self.source.model_id!r}")
        cap = self.cfg.model.logit_softcap
        return cap * torch.tanh(logits / cap) if cap else logits

    def _loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The training loss of one micro-batch: our GPT's own, or cross-entropy (plus
        z-loss, coef·mean(logsumexp²), PaLM §5) from a source model's logits."""
        if self.builtin:
            return self.model(x, y)[1]
        logits = self._logits(x).float()
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))
        z = self.cfg.model.z_loss
        return loss + z * torch.logsumexp(logits, dim=-1).pow(2).mean() if z else loss

    def train_step(self, *, defer: bool = False) -> dict[str, Any]:
        """Run one optimizer step (or a skip/rollback) and return its history record.

        A :meth:`deferred` run reads the step's numbers on the host only at :meth:`flush`:
        with ``defer`` the record's loss (and norm, GNS, max logit) stay None until the loop
        flushes; without it this step flushes at its end (one host read)."""
        cfg, step = self.cfg, self.step
        t0 = time.perf_counter()
        if cfg.stabilizers.spike_policy == "rollback" and step % cfg.stabilizers.rollback_every == 0 and (
                not self.ring or self.ring[-1]["step"] != step):
            self.ring.append(self.snapshot())
        mult = self.schedule(step)
        set_lr(self.opt, mult)
        n = cfg.run.grad_accum
        dstep = step + self.data_offset
        track = self._track(step)
        # Compiled, a flag that changes from step to step is a guard: two graphs per model
        # (four with a second parametrization...), and past dynamo's recompile limit a
        # sweep worker's later trials run eager. So under compile the max logit is
        # measured on every step (one extra score matmul per layer) and read on the
        # tracked ones only.
        measure = track or self._measure_always
        for _, m in self.attn:
            m.track_max_logit = measure
        max_logits: dict[str, torch.Tensor] = {}
        losses = []
        g_small = None
        rec: dict[str, Any]
        if self.compile_watch is not None:
            self.compile_watch.begin()
        for i in range(n):
            x, y = self.data.get_batch("train", dstep, cfg.run.batch_size, self.seq_len, cfg.run.seed,
                                       micro=(i, n),
                                       rank=self.rank, world_size=self.world, device=self.device)
            sync = self.world > 1 and i < n - 1
            ctx = self.ddp_model.no_sync() if sync else contextlib.nullcontext()  # type: ignore[operator]
            with ctx:
                with self._autocast():
                    loss = self._loss(x, y)
                (loss / n).backward()
            losses.append(loss.detach().float())
            if track:
                for name, m in self.attn:
                    if m.max_logit is not None:
                        s = m.max_logit.detach().float()
                        max_logits[name] = torch.maximum(max_logits[name], s) if name in max_logits else s
            if i == 0 and n >= 2:
                # |G_small|^2 of one micro-batch (local to this rank under DDP: no_sync).
                g_small = grad_sq_norm(self.params, scale=n)
        if self.compile_watch is not None:
            self.compile_watch.end(forwards=n)
        loss_t = torch.stack(losses).mean()
        if self.world > 1:
            torch.distributed.all_reduce(loss_t)
            loss_t /= self.world
            if g_small is not None:
                torch.distributed.all_reduce(g_small)
                g_small /= self.world
        if self.deferred():
            rec = {"step": step + 1, "loss": None, "lr": cfg.optim.lr * mult}
            ml = torch.stack([s.max() for s in max_logits.values()]).max() if max_logits else None
            gn = clip_grad_norm(self.params, cfg.stabilizers.grad_clip or None)
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
            self.defer(rec, loss_t, gn, g_small, ml)
            self.advance("step")
            rec = self._finish_record(rec, t0)
            if not defer:
                self.flush()
            return rec
        loss_v = float(loss_t)
        rec = {"step": step + 1, "loss": loss_v, "lr": cfg.optim.lr * mult}
        if max_logits:
            rec["max_attn_logit"] = max(float(s.max()) for s in max_logits.values())
        verdict = self.decide(rec, loss_v, g_small)
        if verdict == "rollback":
            self.opt.zero_grad(set_to_none=True)
            return self._rollback(rec, t0)
        if verdict == "step":
            self.opt.step()
            if cfg.optim.qk_clip and max_logits:
                rec["qk_clipped_heads"] = qk_clip(self.raw_model, cfg.optim.qk_clip_tau, max_logits)
        self.opt.zero_grad(set_to_none=True)
        self.advance(verdict)
        return self._finish_record(rec, t0)

    def decide(self, rec: dict[str, Any], loss_v: float, g_small: torch.Tensor | float | None) -> Verdict:
        """The stabilizers' verdict on one step whose gradients are in place; shared by
        :meth:`train_step` and every member of a fused group (:mod:`mutransfer.training.fused`).

        In order: divergence (loss; :func:`divergence_bound`), the spike policy, the
        gradient norm and its clipping (Pascanu et al. 2013), divergence again (a
        non-finite norm), and the gradient-noise-scale update from ``g_small`` (the
        squared norm of one micro-batch's gradient). Records go into ``rec``. Returns
        ``"step"`` (take the optimizer step), ``"skip"`` (drop it, the batch is spent),
        ``"rollback"`` or ``"diverged"``.
        """
        stab = self.cfg.stabilizers
        verdict = self._loss_verdict(rec, loss_v, self.step)
        if verdict is not None:
            return verdict
        # The norm before clipping is also |G_big| for the noise scale: one pass, not two.
        # A deferred step (:meth:`settle`) clipped already and gives its norm here.
        gn = self._settled_norm
        if gn is None:
            gn = float(clip_grad_norm(self.params, stab.grad_clip or None))
        return self._norm_verdict(rec, gn, None if g_small is None else float(g_small))

    def _loss_verdict(self, rec: dict[str, Any], loss_v: float, step: int) -> Verdict | None:
        """The loss's part of :meth:`decide` for the step at 0-based ``step``: divergence,
        then the spike policy; None when the step goes on to its gradient norm."""
        stab = self.cfg.stabilizers
        if self.initial_loss is None and math.isfinite(loss_v):
            self.initial_loss = loss_v
        bound = divergence_bound(stab.diverge_factor, self.data.vocab_size, self.initial_loss)
        if is_diverged(loss_v, bound):
            self.diverged = True
            return "diverged"
        if stab.spike_policy != "off" and self.detector.is_spike(loss_v):
            self.spikes.append(step + 1)
            rec["spike"] = True
            if stab.spike_policy == "rollback" and self.ring and len(self.rollbacks) < stab.max_rollbacks:
                return "rollback"
            if stab.spike_policy in ("skip", "rollback"):
                rec["skipped"] = True
                return "skip"
        else:
            self.detector.update(loss_v)
        return None

    def _norm_verdict(self, rec: dict[str, Any], gn: float, g_small: float | None) -> Verdict:
        """The gradient norm's part of :meth:`decide`: divergence on a non-finite norm, then
        the noise-scale update."""
        cfg = self.cfg
        rec["grad_norm"] = gn
        if not math.isfinite(gn):
            self.diverged = True
            return "diverged"
        if g_small is not None and math.isfinite(g_small):
            b_small = cfg.run.batch_size // (self.world * cfg.run.grad_accum)
            rec["gns"] = self.gns.update(g_small, gn * gn, b_small, cfg.run.batch_size)
        return "step"

    # ---- deferred host reads ---------------------------------------------------------------

    def deferred(self) -> bool:
        """Whether this run's steps can go on before their numbers are read on the host:
        nothing decided before the next step depends on them (the spike policy is ``off``
        or ``log``, no QK-clip). The loss and gradient norm are then read in one batch at
        :meth:`flush`, the stabilizers' bookkeeping (initial loss, spike window, GNS) runs
        there in step order, and a divergence found there is reported as the unfused
        loop reports it: the run stops at the diverged step (``step``, ``tokens`` and the
        history end there), only its weights have taken the steps up to the flush."""
        stab = self.cfg.stabilizers
        return stab.spike_policy in ("off", "log") and not self.cfg.optim.qk_clip

    def defer(self, rec: dict[str, Any], loss: torch.Tensor, grad_norm: torch.Tensor,
              g_small: torch.Tensor | None, max_logit: torch.Tensor | None) -> None:
        """Queue a stepped record whose numbers are still on the device (before
        :meth:`advance`: it remembers the step and token count to roll back to)."""
        vals = {"loss": loss, "grad_norm": grad_norm, "g_small": g_small, "max_attn_logit": max_logit}
        self._pending.append((rec, vals, self.step, self.tokens))

    def pending_tensors(self) -> list[torch.Tensor]:
        """The queued numbers, flat, as 1-element float64 tensors (exact for fp32 values)."""
        return [t.detach().reshape(1).double() for _, vals, _, _ in self._pending
                for t in vals.values() if t is not None]

    def settle(self, values: list[float]) -> None:
        """Fill the queued records from ``values`` (:meth:`pending_tensors` read on the
        host) and run each one's stabilizer bookkeeping in step order; at a divergence the
        run stops there."""
        pending, self._pending = self._pending, []
        it = iter(values)
        for rec, vals, step, tokens in pending:
            got = {k: (None if t is None else next(it)) for k, t in vals.items()}
            rec["loss"] = got["loss"]
            if got["max_attn_logit"] is not None:
                rec["max_attn_logit"] = got["max_attn_logit"]
            # decide() as at that step (it reads self.step), with the norm already taken
            now, self.step, self._settled_norm = self.step, step, got["grad_norm"]
            try:
                verdict = self.decide(rec, got["loss"], got["g_small"])
            finally:
                self.step, self._settled_norm = now, None
            if verdict == "diverged":
                self.diverged = True
                self.step, self.tokens, rec["tokens"] = step, tokens, tokens
                last = max(i for i, h in enumerate(self.history) if h is rec)
                self.history = self.history[: last + 1]
                return

    def flush(self) -> None:
        """Read every queued number on the host in one transfer and settle them."""
        if self._pending:
            ts = self.pending_tensors()
            self.settle(torch.cat(ts).tolist() if ts else [])

    def advance(self, verdict: Verdict) -> None:
        """Count a finished step: a skipped one consumes its batch but trains no tokens."""
        if verdict in ("step", "skip"):
            self.step += 1
        if verdict == "step":
            self.tokens += self.cfg.run.batch_size * self.seq_len

    def _finish_record(self, rec: dict[str, Any], t0: float) -> dict[str, Any]:
        self.train_time += time.perf_counter() - t0
        rec["tokens"] = self.tokens
        rec["wall_s"] = round(time.perf_counter() - self.t_start, 4)
        for key in ("grad_norm", "gns", "max_attn_logit"):  # every record has every column
            rec.setdefault(key, None)
        self.history.append(rec)
        return rec

    def _rollback(self, rec: dict[str, Any], t0: float) -> dict[str, Any]:
        """PaLM's remedy (Chowdhery et al. 2022, §5.1): restore a snapshot from before the
        spike and skip the batches between it and the spike, spike included."""
        spike_step, spike_dstep = self.step, self.step + self.data_offset
        snap = self.ring[0]
        history, spikes, rollbacks = self.history, self.spikes, self.rollbacks
        self.restore(snap)
        self.spikes, self.rollbacks = spikes, rollbacks
        self.rollbacks.append((spike_step + 1, self.step))
        self.data_offset = spike_dstep + 1 - self.step
        self.ring.clear()
        self.ring.append(self.snapshot())
        rec["rollback_to"] = self.step
        self.train_time += time.perf_counter() - t0
        self.history = history[: snap["n_history"]]
        return rec

    # ---- eval ----------------------------------------------------------------------------

    @torch.no_grad()
    def evaluate(self) -> float:
        """Mean held-out cross-entropy (no z-loss) over the ``eval_sequences`` sequences of
        the fixed held-out set (:meth:`~mutransfer.training.data.TokenDataset.eval_offsets`): the
        same sequences for every batch size, seed and trial, so runs are compared on the
        same data. Each sequence's mean CE is computed, then the per-sequence losses are
        summed in set order in float64, so how the set is chunked does not change it."""
        cfg = self.cfg
        for _, m in self.attn:
            m.track_max_logit = False
        self.raw_model.eval()
        per_seq = []
        for x, y in self.data.eval_batches(cfg.run.eval_sequences, self.seq_len,
                                           eval_rows(cfg, self.seq_len, self.world),
                                           rank=self.rank, world_size=self.world, device=self.device):
            with self._autocast():
                logits = self._logits(x, self.raw_model)
            per_seq.append(sequence_losses(logits, y))
        self.raw_model.train()
        total = (torch.cat(per_seq).double().sum() if per_seq
                 else torch.zeros((), dtype=torch.float64, device=self.device))
        if self.world > 1:
            torch.distributed.all_reduce(total)
        return float(total) / cfg.run.eval_sequences

    def _eval_and_callback(self) -> bool:
        """Evaluate, record, call the callback; True when the run should stop."""
        return self.record_eval(self.evaluate())

    def record_eval(self, val: float) -> bool:
        """Record a held-out loss and call the callback; True when the run should stop
        (a non-finite loss, or the callback prunes). Shared with fused members."""
        self.evals.append((self.step, val))
        if not math.isfinite(val):
            self.diverged = True
            return True
        stop = False
        if self.callback is not None and self.rank == 0:
            lr = self.history[-1]["lr"] if self.history else self.cfg.optim.lr
            # "trainer": this trainer, read-only, for callbacks that log its history
            # (:class:`mutransfer.training.tracking.TrackingCallback`)
            metrics = {"step": self.step, "val_loss": val, "train_loss": self.recent_train_loss(),
                       "tokens": self.tokens, "lr": lr,
                       "wall_s": time.perf_counter() - self.t_start, "trainer": self}
            stop = bool(self.callback(self.step, metrics))
        if self.world > 1:
            flag = torch.tensor([1.0 if stop else 0.0], device=self.device)
            torch.distributed.broadcast(flag, 0)
            stop = bool(flag.item())
        if stop:
            self.pruned = True
        return stop

    def recent_train_loss(self, k: int = 10) -> float:
        """Mean training loss over the last ``k`` recorded finite losses."""
        self.flush()
        vals = [h["loss"] for h in self.history[-k:] if math.isfinite(h["loss"])]
        return sum(vals) / len(vals) if vals else float("nan")

    # ---- loop ----------------------------------------------------------------------------

    def run_until(self, stop_step: int) -> bool:
        """Train until ``self.step == stop_step`` (evaluating, checkpointing and writing
        metrics on the way). Returns False when the run ended early (diverged/pruned)."""
        with flush_denormals(self.device):  # denormals made high-LR CPU steps up to 2x slower
            return self._run_until(stop_step)

    def _run_until(self, stop_step: int) -> bool:
        cfg = self.cfg
        while self.step < stop_step:
            before = self.step
            rec = self.train_step(defer=True)
            at_end = self.step == stop_step
            final = at_end and stop_step == self.total_steps
            every, ckpt = cfg.run.eval_every, cfg.output.checkpoint_every
            if (at_end or self.step % SYNC_EVERY == 0 or (every and self.step % every == 0)
                    or (ckpt and self.step % ckpt == 0)):
                self.flush()
            if self.progress is not None:
                self.progress.update(self.step - self.progress.n)
                if rec["loss"] is not None:
                    self.progress.set_postfix(loss=f"{rec['loss']:.3f}", refresh=False)
            if self.diverged:
                self.write_metrics()
                return False
            if self.step <= before:  # a rollback: nothing finished this iteration
                continue
            if (cfg.run.eval_every and self.step % cfg.run.eval_every == 0) or final:
                if self._eval_and_callback():
                    self._maybe_checkpoint(force=True)
                    self.write_metrics()
                    return False
            self._maybe_checkpoint(force=final)
            if cfg.run.eval_every and self.step % cfg.run.eval_every == 0:
                self.write_metrics()
        return True

    def run(self) -> TrainResult:
        """Train to ``cfg.run.steps`` (or until diverged/pruned) and return the result."""
        try:
            self.run_until(self.total_steps)
            if not self.diverged and not self.pruned and (not self.evals or self.evals[-1][0] != self.step):
                self._eval_and_callback()
            self.write_metrics()
            return self.result()
        finally:
            self.close()

    def close(self) -> None:
        """Close the progress bar and a process group this trainer started."""
        if self.progress is not None:
            self.progress.close()
            self.progress = None
        if self._own_pg and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
            self._own_pg = False

    def result(self) -> TrainResult:
        """The TrainResult of the run so far."""
        self.flush()
        cfg = self.cfg
        worst = math.log(self.data.vocab_size)
        if self.initial_loss is not None and math.isfinite(self.initial_loss):
            worst = max(worst, self.initial_loss)
        if self.diverged:
            loss = train_loss = worst
        else:
            loss = self.evals[-1][1] if self.evals else worst
            train_loss = self.recent_train_loss()
            train_loss = train_loss if math.isfinite(train_loss) else worst
        model = self.raw_model
        if isinstance(model, GPT):
            n_params, n_nonembed, flops = (model.num_params(), model.num_params(non_embedding=True),
                                           model.flops_per_token())
        else:
            n_params, n_nonembed = self._count_params(model)
            # Kaplan et al. 2020 Table 1 without the attention term: 6·N_nonembed.
            flops = 6 * n_nonembed
        return TrainResult(
            config=cfg, arch=self.source.model_id, parametrization=cfg.parametrization.kind,
            width=self.gcfg.width, depth=self.gcfg.depth, n_params=n_params, n_params_nonembed=n_nonembed,
            tokens=self.tokens, steps=self.total_steps, steps_done=self.step, batch_size=cfg.run.batch_size,
            seq_len=self.seq_len, lr=cfg.optim.lr, seed=cfg.run.seed, loss=loss, train_loss=train_loss,
            gns=self.gns.value, wall_s=time.perf_counter() - self.t_start, diverged=self.diverged,
            pruned=self.pruned and not self.diverged,
            stop_reason="diverged" if self.diverged else ("pruned" if self.pruned else "completed"),
            history=list(self.history), evals=list(self.evals), spikes=list(self.spikes),
            rollbacks=list(self.rollbacks), flops_per_token=flops,
            tokens_per_s=self.tokens / self.train_time if self.train_time > 0 else 0.0,
            device=str(self.device), tokenizer=self.data.tokenizer, vocab_size=int(self.data.vocab_size),
            compute_dtype="bf16" if self.amp_dtype is not None else "fp32",
            compile_fallback=self.compile_watch.fallback if self.compile_watch is not None else None)

    def _count_params(self, model: torch.nn.Module) -> tuple[int, int]:
        """(all, non-embedding) parameters of a source model, tied ones once: the
        non-embedding count drops the input-role (embedding) parameters (Kaplan's N)."""
        seen: set[int] = set()
        total = nonembed = 0
        for name, p in model.named_parameters():
            if id(p) in seen:
                continue
            seen.add(id(p))
            total += p.numel()
            spec = self.pz.specs.get(name)
            if spec is None or spec.role != "input":
                nonembed += p.numel()
        return total, nonembed

    # ---- state ---------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything a resume needs (tensors, numbers, strings, lists, dicts only)."""
        self.flush()
        return {
            "model": self.raw_model.state_dict(), "optimizer": self.opt.state_dict(),
            "step": self.step, "data_offset": self.data_offset, "tokens": self.tokens,
            "initial_loss": self.initial_loss, "gns": self.gns.state_dict(),
            "spike": self.detector.state_dict(), "history": self.history,
            "evals": [list(e) for e in self.evals], "spikes": self.spikes,
            "rollbacks": [list(r) for r in self.rollbacks], "rng": get_rng_state(),
            "config": self.cfg.to_flat(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` (a model mismatch, or a config change outside
        :data:`mutransfer.training.checkpoint.RESUMABLE_FIELDS`, raises ValueError)."""
        check_resume(state.get("config"), self.cfg.to_flat(), int(state.get("step", 0)))
        try:
            self.raw_model.load_state_dict(state["model"])
            self.opt.load_state_dict(state["optimizer"])
        except (RuntimeError, KeyError, ValueError) as exc:
            msg = state_dict_error(exc)
            raise ValueError(f"checkpoint does not fit this model/optimizer: {msg}") from None
        self._pending = []
        self.step, self.data_offset = int(state["step"]), int(state["data_offset"])
        self.tokens = int(state.get("tokens", self.step * self.cfg.run.batch_size * self.seq_len))
        self.initial_loss = state.get("initial_loss")
        if "gns" in state:
            self.gns.load_state_dict(state["gns"])
        if "spike" in state:
            self.detector.load_state_dict(state["spike"])
        self.history = [dict(h) for h in state.get("history", [])]
        self.evals = [(int(s), float(v)) for s, v in state.get("evals", [])]
        self.spikes = list(state.get("spikes", []))
        self.rollbacks = [(int(a), int(b)) for a, b in state.get("rollbacks", [])]
        if "rng" in state:
            set_rng_state(state["rng"])
        if self.progress is not None:
            self.progress.update(self.step)

    def snapshot(self) -> dict[str, Any]:
        """An in-memory deep copy of the state (for rollback and WSD branches). The model's
        tensors are cloned one by one: a fused member's parameters are views of ``[K, ...]``
        stacks (:mod:`mutransfer.training.fused`), and the deepcopy of a view copies its whole stack."""
        state = {k: v for k, v in self.state_dict().items() if k not in ("rng", "model")}
        snap = copy.deepcopy(state)
        model = self.raw_model.state_dict()
        snap["model"] = type(model)((k, v.detach().clone()) for k, v in model.items())
        snap["model"]._metadata = copy.deepcopy(getattr(model, "_metadata", {}))
        snap["n_history"] = len(self.history)
        return snap

    def restore(self, snap: Mapping[str, Any]) -> None:
        """Restore a :meth:`snapshot` (the snapshot stays reusable)."""
        self.load_state_dict(copy.deepcopy(dict(snap)))

    def _maybe_checkpoint(self, force: bool = False) -> None:
        cfg = self.cfg
        if not (cfg.output.out_dir and cfg.output.checkpoint_every) or self.rank != 0:
            return
        if force or self.step % cfg.output.checkpoint_every == 0:
            save_checkpoint(Path(cfg.output.out_dir) / "checkpoint.pt", self.state_dict())

    def write_metrics(self, path: str | os.PathLike[str] | None = None) -> Path | None:
        """Write the per-step history (JSONL or CSV, atomically; non-finite values become
        null/empty, never NaN) to ``path`` or ``out_dir/metrics.<format>``."""
        self.flush()
        cfg = self.cfg
        if path is None:
            if not cfg.output.out_dir or self.rank != 0:
                return None
            path = Path(cfg.output.out_dir) / f"metrics.{cfg.output.metrics_format}"
        return write_metrics(self.history, path, fmt="csv" if str(path).endswith(".csv") else "jsonl")
