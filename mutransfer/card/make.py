"""The one call that makes a transfer card: :func:`make_card` on a :class:`TransferRequest`.

``mutransfer transfer`` resolves its flags and files into a request and calls it; so do the
demo, the card-regret benchmark and a Python user. Every transfer rule is applied here
(:mod:`mutransfer.card.rules`): the depth rules (CompleteP whenever the depth changes),
the vocabulary, the architecture and the context checks against what the proxy's rows
recorded, and the held-out audit's verdict (:func:`analysis.holdout.audit_verdict`).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from analysis.holdout import AUDIT_KEYS, audit_verdict
from mutransfer._io import read_json
from mutransfer.card.build import MadeCard, assemble_card
from mutransfer.card.plan import read_scaling_fit
from mutransfer.card.proxy import proxy_optimum, read_proxy_config, tuned_proxy
from mutransfer.card.request import ProxyPoint, RunChoices, check_int
from mutransfer.card.rules import check_arch, check_vocab, reconcile_proxy, target_context, target_parametrization
from mutransfer.card.target import PRECISION, config_dtype, parse_overrides, resolve_target
from mutransfer.models.presets import DEFAULT_PRESET, PRESETS, get_preset
from mutransfer.models.source import HEAD_RULES
from mutransfer.parametrize.specs import KINDS
from mutransfer.redact import mask_url

if TYPE_CHECKING:
    from analysis.scaling_fit import ScalingLawFit

__all__ = ["TransferRequest", "make_card", "read_audit"]


@dataclass(frozen=True)
class TransferRequest:
    """Everything a transfer card is made from: where the proxy's LR comes from, what the
    proxy was, the target, its budget and the run's choices. The fields are the meanings of
    ``mutransfer transfer``'s flags (``mutransfer transfer --help``); files are given by path."""

    # ---- where the proxy's base LR comes from (one of results, fit, lr, proxy_config)
    results: str | None = None
    """A results table (CSV/Parquet) of an LR sweep: the optimum of the widest width."""
    fit: str | None = None
    """An optimum JSON of ``mutransfer fit optimum``."""
    group: str | None = None
    """With ``fit``: the group to take, ``KEY=VALUE[,KEY=VALUE]``."""
    lr: float | None = None
    """A base LR given as is."""
    lr_interval: tuple[float | None, float | None] | None = None
    """With ``lr``: its interval (None for an open side)."""
    proxy_widths: tuple[int, ...] = ()
    """With ``lr``: the widths at which μP's optimum was measured (a ladder run apart), so the
    card says how far past the widest its target lies."""
    proxy_config: str | None = None
    """The tuned proxy's training config (TrainConfig YAML/JSON): its multipliers, readout
    init, betas, eps and weight-decay timescale carry over."""
    # ---- the proxy
    preset: str | None = None
    """The proxy's preset, as the sweep used (None: the rows', the proxy config's, else the default)."""
    proxy_overrides: Mapping[str, Any] = field(default_factory=dict)
    """The proxy's model fields where they differ from its preset's (e.g. ``head_dim``: μP's
    attention scale is anchored at the proxy's head dim)."""
    parametrization: str | None = None
    """mup | completep | muon (None: the proxy config's, else mup)."""
    base_width: int | None = None
    """The sweep's base width (None: the smallest width in the results)."""
    base_depth: int | None = None
    """The depth the proxy was tuned at (None: the rows', else the preset's)."""
    seq_len: int | None = None
    """The proxy's context as measured (None: the rows', else the preset's)."""
    proxy_batch_tokens: float | None = None
    """The batch (tokens) the proxy's LR was tuned at (None: from the results)."""
    proxy_tokens: float | None = None
    """The token budget the proxy's LR was tuned at (None: from the results)."""
    # ---- the target
    target_preset: str | None = None
    """The preset the target starts from (None: the proxy's)."""
    overrides: Mapping[str, Any] = field(default_factory=dict)
    """Target model fields (width, depth, n_head, head_dim, d_ff, seq_len, vocab_size, ...)."""
    model_config: str | None = None
    """A target model config file (YAML/JSON mapping of model fields)."""
    model: str | None = None
    """The full-size target as a local transformers config, ``hf:PATH``."""
    head_rule: str = "keep_head_dim"
    """With ``model``: how the scaled-down proxy's heads follow width."""
    tokenizer: str | None = None
    """The target's tokenizer (recorded; warned about when it differs from the proxy's)."""
    weights_dtype: str = "float32"
    """The target's weights: float32 (mixed precision) or bfloat16."""
    allow_vocab_change: bool = False
    """Accept a target vocabulary other than the proxy's (recorded in the card)."""
    target_seq_len: int | None = None
    """The target's context (None: an HF config's pretraining context, else the proxy's)."""
    allow_arch_change: bool = False
    """Accept a proxy of another architecture than the target's (recorded and warned about)."""
    tokens: float | None = None
    """The target's training tokens (or ``tokens_per_param``)."""
    tokens_per_param: float | None = None
    """The target's training tokens per parameter, all parameters counted."""
    # ---- the projection
    scaling_fit: str | ScalingLawFit | None = None
    """The laws of ``mutransfer fit scaling`` (FIT.json path, or the fitted object)."""
    audit: str | Mapping[str, Any] | None = None
    """The held-out audit (AUDIT.json path, or its document) recorded in the card."""
    run: RunChoices = field(default_factory=RunChoices)
    """The run's choices: schedule, batch, weight decay, warmup, decay, extrapolation limit."""
    # ---- provenance
    study: str | None = None
    """The sweep's study name (None: the results' single study)."""
    storage: str | None = None
    """The sweep's storage (recorded without credentials)."""

    def __post_init__(self) -> None:
        self._check_types()
        if not (self.results or self.fit or self.lr is not None or self.proxy_config):
            raise ValueError("give the proxy's LR: results, fit, lr or proxy_config")
        given = [n for n in ("results", "fit", "lr") if getattr(self, n) is not None]
        if len(given) > 1:
            raise ValueError(f"give one source of the proxy's LR, not {' and '.join(given)}")
        if (self.tokens is None) == (self.tokens_per_param is None):
            raise ValueError("give the target's token budget as tokens or tokens_per_param (one of them)")
        for name in ("tokens", "tokens_per_param", "lr", "proxy_batch_tokens", "proxy_tokens"):
            v = getattr(self, name)
            if v is not None and not (isinstance(v, (int, float)) and not isinstance(v, bool)
                                      and math.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be a positive finite number, got {v!r}")
        if self.weights_dtype not in PRECISION:
            raise ValueError(f"weights_dtype must be one of {', '.join(PRECISION)}, got {self.weights_dtype!r}")
        if self.group and not self.fit:
            raise ValueError("group only goes with fit")
        if (self.lr_interval is not None or self.proxy_widths) and self.lr is None:
            raise ValueError("lr_interval and proxy_widths only go with lr")
        if self.run.accept_edge and self.scaling_fit is None:
            raise ValueError(f"accept_edge {self.run.accept_edge[0]} needs a scaling fit: there is no fit "
                             "whose edge it would accept")


    def _check_types(self) -> None:
        """Every field by type (and the integers by range) before any rule reads it: a
        TypeError or ValueError naming the field."""
        for name in ("results", "fit", "group", "proxy_config", "preset", "parametrization", "target_preset",
                     "model_config", "model", "tokenizer", "study", "storage"):
            v = getattr(self, name)
            if v is not None and not isinstance(v, (str, Path)):
                raise TypeError(f"{name} must be a string (a path or a name) or None, got "
                                f"{type(v).__name__} {v!r}")
        for name in ("base_width", "base_depth", "seq_len", "target_seq_len"):
            check_int(name, getattr(self, name))
            if getattr(self, name) is not None:  # a numpy integer read from a table: a plain int
                object.__setattr__(self, name, int(getattr(self, name)))
        for name in ("allow_vocab_change", "allow_arch_change"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be True or False, got {getattr(self, name)!r}")
        for name in ("overrides", "proxy_overrides"):
            if not isinstance(getattr(self, name), Mapping):
                raise TypeError(f"{name} must be a mapping of model fields, got {getattr(self, name)!r}")
        if not isinstance(self.run, RunChoices):
            raise TypeError(f"run must be a RunChoices, got {type(self.run).__name__}")
        if self.head_rule not in HEAD_RULES:
            raise ValueError(f"head_rule must be one of {', '.join(HEAD_RULES)}, got {self.head_rule!r}")
        iv = self.lr_interval
        if iv is not None:
            if isinstance(iv, (str, bytes)) or not isinstance(iv, Sequence) or len(iv) != 2:
                raise TypeError(f"lr_interval must be a pair (lo, hi), None for an open side, got {iv!r}")
            for v in iv:
                if v is not None and not (isinstance(v, numbers.Real) and not isinstance(v, bool)
                                          and math.isfinite(v) and v > 0):
                    raise ValueError(f"lr_interval must hold positive finite numbers or None, got {iv!r}")
        if isinstance(self.proxy_widths, (str, bytes)) or not isinstance(self.proxy_widths, Sequence):
            raise TypeError(f"proxy_widths must be a sequence of widths, got {self.proxy_widths!r}")
        for w in self.proxy_widths:
            check_int("proxy_widths", w, none=False)
        object.__setattr__(self, "proxy_widths", tuple(int(w) for w in self.proxy_widths))


def _flags(req: TransferRequest) -> SimpleNamespace:
    """The request as the rules read it: one namespace in the names of ``transfer``'s flags,
    whose open fields the rules fill (the proxy's preset, context, parametrization)."""
    ns = SimpleNamespace(**{f.name: getattr(req, f.name) for f in fields(req)
                            if f.name not in ("run", "lr_interval", "proxy_overrides", "proxy_widths")})
    run = req.run
    ns.overrides = list(parse_overrides(list(dict(req.overrides).items())).items())
    ns.batch_size, ns.batch_tokens = run.batch_sequences, run.batch_tokens
    ns.wd_mode, ns.accept_edge, ns.batch_rule = run.wd_mode, list(run.accept_edge), run.batch_rule
    ns.scaling_fit = req.scaling_fit if isinstance(req.scaling_fit, (str, Path)) else (
        "the given scaling fit" if req.scaling_fit is not None else None)
    return ns


def make_card(req: TransferRequest) -> MadeCard:
    """The card for ``req``'s target, every transfer rule applied, validated once.

    1. The proxy's base LR and interval (its results, fit, LR or tuned config), what its
       rows recorded (architecture, tokenizer, vocabulary, context, dtype) reconciled with
       the scaling fit's.
    2. The target: its model, and its parametrization under the depth rules (CompleteP
       whenever the depth changes; a plain-μP proxy moved with them is warned about).
    3. The checks against the proxy: architecture, vocabulary, context.
    4. The audit's verdict, then the plan and the card (:func:`assemble_card`).

    A request the rules refuse is one ValueError naming the field and the value."""
    args = _flags(req)
    tuned = read_proxy_config(args) if req.proxy_config else None
    preset_given = args.preset is not None
    args.preset = args.preset or DEFAULT_PRESET
    args.parametrization = args.parametrization or "mup"
    if args.parametrization not in KINDS or args.parametrization == "sp":
        raise ValueError(f"parametrization {args.parametrization!r} does not transfer; use mup, "
                         "completep or muon")
    only_seq = all(k == "seq_len" for k, _ in args.overrides)
    if req.model is not None and (req.model_config or req.target_preset or not only_seq):
        raise ValueError("model names the whole target; it does not take model_config, target_preset or "
                         "overrides other than seq_len (edit the config.json instead)")
    set_seq = dict(args.overrides).get("seq_len")
    if req.target_seq_len is not None and set_seq is not None and set_seq != req.target_seq_len:
        raise ValueError(f"target_seq_len {req.target_seq_len} contradicts the override seq_len={set_seq}")
    if req.proxy_overrides and tuned:
        raise ValueError("proxy_overrides contradicts proxy_config: the tuned config names the proxy's shape")
    proxy = tuned.model if tuned else _proxy_model(args.preset, req.proxy_overrides)
    lr, lr_ci, projected, source, widths, proxy_b, proxy_d = proxy_optimum(
        args, args.seq_len or getattr(proxy, "seq_len", 1), tuned)
    if req.lr_interval is not None:
        lr_ci = list(req.lr_interval)
    if req.proxy_widths and not widths:
        widths = [float(w) for w in req.proxy_widths]
    laws = req.scaling_fit if req.scaling_fit is None or not isinstance(req.scaling_fit, (str, Path)) else (
        read_scaling_fit(req.scaling_fit))
    # what the rows recorded about the proxy (arch, tokenizer, vocab, context, dtype), never a preset's
    warnings = reconcile_proxy(args, source, getattr(laws, "proxy_", None), preset_given)
    if not tuned:
        proxy = _proxy_model(args.preset, req.proxy_overrides)  # the target starts from the proxy
    if args.seq_len is not None and hasattr(proxy, "seq_len"):
        proxy = proxy.replace(seq_len=args.seq_len)
    proxy_seq = args.seq_len or getattr(proxy, "seq_len", 1)
    if tuned is None and source.get("proxy_settings"):
        tuned = tuned_proxy(source["proxy_settings"], lr=lr, model=proxy, batch_tokens=proxy_b,
                            tokens=proxy_d, args=args, origin=f"--results {req.results}")
    wd_mode = args.wd_mode or "coupled"
    base_width = args.base_width or (int(min(widths)) if widths else proxy.width)
    base_depth = args.base_depth or source.pop("proxy_depth", None) or proxy.depth
    source.pop("proxy_depth", None)

    target, pz, depth_warnings = target_parametrization(args, proxy, base_width, base_depth, tuned)
    warnings += depth_warnings
    notes: list[str] = []
    said = config_dtype(target.config) if target.kind == "hf" else None
    if said is not None and said != req.weights_dtype:  # a real config's torch_dtype: bfloat16
        # said out loud, not a card warning: it casts no doubt on the card's numbers
        notes.append(f"the target config's torch_dtype is {said}; the card builds {req.weights_dtype} weights "
                     f"({PRECISION[req.weights_dtype]}); pass --weights-dtype {said} for {said} weights")
    cfg = target.config
    arch_warnings, arch_change = check_arch(args, source, target)
    warnings += arch_warnings
    vocab_change = check_vocab(args, proxy, target, source)
    if target.kind == "hf":
        seq_len, seq_from = target_context(args, target, int(proxy_seq), set_seq)
    else:
        seq_len = getattr(cfg, "seq_len", 1)
        seq_from = "--target-seq-len" if req.target_seq_len else "the target model's seq_len"
    audit = None
    if req.audit is not None:
        audit = read_audit(req.audit) if isinstance(req.audit, (str, Path)) else _audit_doc(req.audit, "audit")
    study = req.study or source.pop("study", None)
    source.pop("study", None)
    storage = mask_url(req.storage) if req.storage else None
    is_preset = not source.get("arch") or source["arch"] in PRESETS
    source.update({"preset": args.preset if is_preset else None,
                   "width": int(max(widths)) if widths else base_width,
                   "depth": base_depth, "base_width": base_width, "base_depth": base_depth,
                   "seq_len": int(proxy_seq),
                   **({"proxy_widths": sorted(int(w) for w in widths)} if widths else {}),
                   "parametrization": args.parametrization, "study": study, "storage": storage})
    for name in ("scaling_fit", "audit", "proxy_config"):
        value = getattr(req, name)
        if isinstance(value, (str, Path)):
            source[name] = str(value)
    point = ProxyPoint(
        lr=lr, lr_interval=lr_ci, batch_tokens=req.proxy_batch_tokens or proxy_b,
        tokens=req.proxy_tokens or proxy_d, tau=tuned.tau if tuned else None,
        weight_decay=tuned.weight_decay if tuned else None,
        betas=tuple(tuned.betas) if tuned else None, eps=tuned.eps if tuned else None,
        beta2_halflife_tokens=getattr(tuned, "beta2_halflife_tokens", None) if tuned else None,
        role_lr_mults=tuned.lr_mults if tuned else {})
    made = assemble_card(
        pz, target, point, replace(req.run, wd_mode=wd_mode), seq_len=seq_len, seq_len_from=seq_from,
        tokens=req.tokens, tokens_per_param=req.tokens_per_param, laws=laws, weights_dtype=req.weights_dtype,
        tokenizer=req.tokenizer, vocab_change=vocab_change, arch_change=arch_change, source=source,
        projected=projected, audit=audit, provenance={"study": study, "storage": storage}, warnings=warnings)
    return replace(made, notes=notes)


def _proxy_model(preset: str, overrides: Mapping[str, Any]) -> Any:
    """The proxy's model config: its preset's, with ``overrides`` (checked as a target's)."""
    cfg = get_preset(preset)
    if not overrides:
        return cfg
    return resolve_target(cfg, overrides=dict(overrides), proxy_preset=preset).config


def _audit_doc(doc: Any, where: str) -> dict[str, Any]:
    """The audit to record: a list of rows (``analysis.holdout_audit``), or an object with
    ``holdout`` (rows) and optionally ``passed``; without ``passed`` the verdict is
    :func:`analysis.holdout.audit_verdict`'s on the rows."""
    rows = doc.get("holdout", doc.get("rows")) if isinstance(doc, Mapping) else doc
    if not isinstance(rows, Sequence) or isinstance(rows, str) or not rows or not all(
            isinstance(r, Mapping) for r in rows):
        raise ValueError(f"{where} holds no audit rows (a list, or {{\"holdout\": [...]}})")
    for i, r in enumerate(rows):
        missing = [k for k in AUDIT_KEYS if k not in r]
        if missing:
            raise ValueError(f"{where}: row {i} lacks {missing} (rows of "
                             f"analysis.holdout_audit have {', '.join(AUDIT_KEYS)})")
        for key in ("lr_ratio", "batch_ratio", "loss_gap", "pred_lr", "meas_lr"):
            v = r.get(key)
            if v is not None and not (isinstance(v, (int, float)) and not isinstance(v, bool)
                                      and math.isfinite(v)):
                raise ValueError(f"{where}: row {i} field {key} must be a finite number "
                                 f"or null, got {v!r}")
    passed = doc.get("passed") if isinstance(doc, Mapping) else None
    if passed is None:
        passed = audit_verdict(rows)
    return {"holdout": [dict(r) for r in rows], "passed": passed}


def read_audit(path: str | Path) -> dict[str, Any]:
    """The held-out audit to record, read from ``AUDIT.json`` (``sweep scaling --holdout``)."""
    return _audit_doc(read_json(path, "audit file"), f"audit file {str(path)!r}")
