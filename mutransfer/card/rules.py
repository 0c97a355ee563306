"""The transfer rules: what makes a card right for its target, applied by
:func:`mutransfer.card.make.make_card` for every caller (the CLI, the demo, the benchmarks,
a Python user).

- The target: resolved from a preset (plus overrides), a model config or an ``hf:`` config;
  never smaller than the proxy; CompleteP's rules whenever the depth changes (a plain-μP
  proxy is moved with them, and warned about); the same vocabulary unless allowed.
- What the proxy was: its architecture, tokenizer, vocabulary, context and dtype as the
  results rows (or a fit's ``proxy`` block) recorded them, checked against each other and
  against the target.

- The proxy's context is the recorded ``seq_len``; ``--seq-len`` may only repeat it. The
  target's context is ``--target-seq-len`` (or ``--set seq_len=N``), else an HF config's
  ``max_position_embeddings``, else the proxy's; a change is warned about by name.
- The proxy's architecture is the recorded ``arch``. The LR's source and the scaling fit
  must agree on it, and an ``hf:`` target must have the recorded ``model_type``: a
  mismatch is refused unless ``--allow-arch-change`` (then recorded and warned about).
"""

from __future__ import annotations

from typing import Any

from mutransfer.card.proxy import TunedProxy, recorded_proxy
from mutransfer.card.target import (
    hf_transfer_builder,
    parse_overrides,
    resolve_hf_target,
    resolve_target,
    transfer_builder,
)
from mutransfer.models.presets import PRESETS
from mutransfer.models.source import hf_shape
from mutransfer.parametrize.parametrization import Parametrization


def _parts(arch: str) -> tuple[str, str, str]:
    """(kind, family, config hash + head rule) of a results-table ``arch``:
    ``hf:llama@1a2b3c4d/keep_heads`` -> ("hf", "llama", "1a2b3c4d/keep_heads")."""
    if arch.startswith("hf:"):
        family, _, rest = arch[3:].partition("@")
        return "hf", family, rest
    if arch.startswith("builder:"):
        return "builder", arch[len("builder:"):], ""
    return "preset", arch, ""


def reconcile_proxy(args: Any, source: dict[str, Any], laws_proxy: dict[str, Any] | None,
                    preset_given: bool) -> list[str]:
    """Fill the proxy's identity into ``source`` (the LR source's record first, the scaling
    fit's where the LR source has none) and set ``args.seq_len`` and ``args.preset`` from
    it. A scaling fit of another architecture than the LR's, or a ``--seq-len`` that
    contradicts the recorded context -> ValueError naming both."""
    warnings: list[str] = []
    scaling = recorded_proxy(laws_proxy or {}, f"scaling fit {args.scaling_fit!r}") if laws_proxy else {}
    lr_arch, sc_arch = source.get("arch"), scaling.get("arch")
    if lr_arch and sc_arch and lr_arch != sc_arch:
        what = (f"the LR's rows are of architecture {lr_arch!r} but the scaling fit {args.scaling_fit!r} is "
                f"of {sc_arch!r}")
        if not args.allow_arch_change:
            raise ValueError(f"{what}: its laws were measured on another model; pass --allow-arch-change to "
                             "transfer anyway (it is recorded in the card)")
        warnings.append(f"{what} (--allow-arch-change): its batch, LR, tau and schedule laws were measured "
                        "on another model")
        source["scaling_fit_arch"] = sc_arch
    for key, value in scaling.items():
        source.setdefault(key, value)
    recorded_seq = source.pop("proxy_seq_len", None)
    if recorded_seq is not None:
        if args.seq_len is not None and int(args.seq_len) != int(recorded_seq):
            raise ValueError(f"--seq-len {args.seq_len} contradicts the proxy's context {recorded_seq} "
                             "recorded in its rows (--seq-len is the proxy's context, as measured); give the "
                             "target's context with --target-seq-len")
        args.seq_len = int(recorded_seq)
    arch = source.get("arch")
    if arch and _parts(arch)[0] == "preset" and arch in PRESETS:
        if not preset_given:
            args.preset = arch
        elif args.preset != arch:
            what = f"--preset {args.preset} contradicts the proxy's architecture {arch!r} recorded in its rows"
            if not args.allow_arch_change:
                raise ValueError(f"{what}; drop --preset, or pass --allow-arch-change to transfer anyway")
            warnings.append(f"{what} (--allow-arch-change): the card's target starts from {args.preset}")
    return warnings


def check_arch(args: Any, source: dict[str, Any], target: Any) -> tuple[list[str], Any]:
    """(warnings, the card's ``target.arch_change`` or None) for the recorded proxy
    architecture against the target. Another HF ``model_type``, an ``hf:`` proxy for a
    preset target or a preset proxy for another preset: refused unless
    ``--allow-arch-change``. The same ``model_type`` from another config.json, or a
    built-in preset proxy for an HF target: warned about."""
    arch = source.get("arch")
    if not arch:
        return [], None
    kind, family, rest = _parts(str(arch))
    if target.kind == "hf":
        t_id = target.source.model_id
        t_kind, t_family, t_rest = _parts(t_id)
    else:
        t_id = args.target_preset or args.preset
        t_kind, t_family, t_rest = "preset", t_id, ""
    if (kind, family, rest) == (t_kind, t_family, t_rest):
        return [], None
    refused = kind == t_kind and family != t_family or kind == "hf" and t_kind != "hf"
    if kind == "preset" and t_kind == "preset" and args.target_preset:
        refused = False  # a preset target named on purpose (--target-preset)
    what = f"the proxy's architecture {arch!r} (its rows) is not the target's {t_id!r}"
    if refused and not args.allow_arch_change:
        raise ValueError(f"{what}: the LR and laws were measured on another model; pass --allow-arch-change "
                         "to transfer anyway (it is recorded in the card)")
    if refused:
        why = "(--allow-arch-change): the LR and laws were measured on another model"
    elif kind == t_kind == "hf":
        why = ("(the same model_type from another config.json, or another head rule): check that only "
               "width, depth, vocabulary and context differ")
    else:
        why = "(a built-in proxy for another implementation): μP carries the LR by role, not by module"
    return [f"{what} {why}"], {"proxy": str(arch), "target": t_id, "allowed": bool(refused)}


def target_context(args: Any, target: Any, proxy_seq: int, set_seq: int | None
                   ) -> tuple[int, str]:
    """(the target's context, where it came from) of an ``hf:`` target:
    ``--target-seq-len`` or ``--set seq_len=N``, else the context the config says it was
    pretrained at, ``rope_scaling.original_max_position_embeddings`` (Llama 3.1+ configs carry
    the extended 131,072 in ``max_position_embeddings`` and the 8,192 of pretraining there),
    else ``max_position_embeddings``, else the proxy's."""
    if args.target_seq_len is not None:
        return int(args.target_seq_len), "--target-seq-len"
    if set_seq is not None:
        return int(set_seq), "--set seq_len"
    ctx, whence = pretraining_context(target.config)
    if ctx is not None:
        return ctx, whence
    return int(proxy_seq), "the proxy's (the config has no max_position_embeddings)"


def pretraining_context(config: Any) -> tuple[int | None, str]:
    """(the context a transformers config says its model was pretrained at, where it came
    from): ``rope_scaling.original_max_position_embeddings`` where present (Llama 3.1+
    carry the extended 131,072 in ``max_position_embeddings``), else
    ``max_position_embeddings``; (None, "") when the config has neither."""
    scaling = getattr(config, "rope_scaling", None) or getattr(config, "rope_parameters", None)
    original = scaling.get("original_max_position_embeddings") if isinstance(scaling, dict) else None
    if isinstance(original, int) and not isinstance(original, bool) and original > 0:
        return original, ("the config's rope_scaling.original_max_position_embeddings, its pretraining "
                          "context (no --target-seq-len)")
    ctx = hf_shape(config)[2]
    if ctx is not None:
        return int(ctx), "the config's max_position_embeddings (no --target-seq-len)"
    return None, ""


def _target_rules(args: Any, tuned: Any, width: int, depth: int, base_width: int,
                  base_depth: int) -> tuple[str, dict[str, Any], list[str]]:
    """(kind, depth keywords, warnings) for a target of ``width`` x ``depth``; a target
    smaller than the proxy is refused."""
    if base_width > width:
        raise ValueError(f"the target is smaller than the proxy: base width {base_width} is larger "
                         f"than the target width {width}")
    if depth < base_depth:
        raise ValueError(f"the target is smaller than the proxy: target depth {depth} is below "
                         f"the proxy's depth {base_depth}")
    kind, warnings = depth_rules(args.parametrization, base_depth, depth)
    depth_kw: dict[str, Any] = {"depth": depth, "base_depth": base_depth} if kind == "completep" else {}
    if tuned is not None and kind == "completep" and args.parametrization == "completep":
        depth_kw["depth_alpha"] = tuned.depth_alpha
    return kind, depth_kw, warnings


def target_parametrization(args: Any, proxy: Any, base_width: int, base_depth: int,
                           tuned: TunedProxy | None = None) -> tuple[Any, Any, list[str]]:
    """The target model, its Parametrization (CompleteP when the depth changes; the tuned
    proxy's forward multipliers and readout init) and any warning; a target smaller than
    the proxy is refused."""
    extra = {"multipliers": tuned.multipliers, "readout_init": tuned.readout_init} if tuned else {}
    if args.model is not None:
        hft = resolve_hf_target(args.model, args.head_rule)
        kind, depth_kw, warnings = _target_rules(args, tuned, hft.width, hft.depth, base_width, base_depth)
        pz = Parametrization(hf_transfer_builder(hft), width=hft.width, base_width=base_width, kind=kind,
                             **depth_kw, **extra)
        return hft, pz, warnings
    overrides = target_overrides(args)
    width = overrides.get("width")
    if isinstance(width, (int, float)) and width < base_width:  # before the config rejects it
        raise ValueError(f"the target is smaller than the proxy: base width {base_width} is larger "
                         f"than the target width {width:g}")
    target = resolve_target(proxy, preset=args.target_preset, overrides=overrides,
                            model_config=args.model_config, proxy_preset=args.preset)
    cfg = target.config
    kind, depth_kw, warnings = _target_rules(args, tuned, cfg.width, cfg.depth, base_width, base_depth)
    pz = Parametrization(transfer_builder(target, proxy), width=cfg.width, base_width=base_width,
                         kind=kind, **depth_kw, **extra)
    return target, pz, warnings


def check_vocab(args: Any, proxy: Any, target: Any, source: dict[str, Any]
                ) -> dict[str, Any] | None:
    """The proxy's vocabulary (the results table's ``vocab_size`` column, else the proxy
    model's) against the target's: a change alters the embedding and readout the LR was
    tuned with, so it is refused unless ``--allow-vocab-change`` (then it is recorded)."""
    if "proxy_vocab_size" not in source and str(source.get("arch") or "").startswith(("hf:", "builder:")):
        return None  # older rows of a non-preset proxy, without the column: no preset's vocab to assume
    proxy_vocab = source.get("proxy_vocab_size", getattr(proxy, "vocab_size", None))
    target_vocab = target.vocab_size if target.kind == "hf" else getattr(target.config, "vocab_size", None)
    if proxy_vocab is None or target_vocab is None or int(proxy_vocab) == int(target_vocab):
        return None
    where = "the results table's vocab_size" if "proxy_vocab_size" in source else "the proxy model's"
    if not args.allow_vocab_change:
        tok = f" (tokenizer {source['tokenizer']!r})" if source.get("tokenizer") else ""
        raise ValueError(f"the target's vocabulary {target_vocab} differs from the proxy's {proxy_vocab} "
                         f"({where}{tok}): the LR was tuned with another embedding and readout; pass "
                         "--allow-vocab-change to transfer anyway (it is recorded in the card)")
    return {"proxy": int(proxy_vocab), "target": int(target_vocab), "allowed": True, "proxy_from": where,
            **({"tokenizer": source["tokenizer"]} if source.get("tokenizer") else {})}


def target_overrides(args: Any) -> dict[str, Any]:
    """The target's model fields: the request's overrides as the library reads them
    (:func:`mutransfer.card.target.parse_overrides`), its ``target_seq_len`` and the proxy's
    context (the target's unless it is set)."""
    out = parse_overrides(args.overrides)
    if getattr(args, "target_seq_len", None) is not None:
        out["seq_len"] = args.target_seq_len
    if args.seq_len is not None and args.model_config is None:
        out.setdefault("seq_len", args.seq_len)
    return out


def depth_rules(kind: str, base_depth: int, depth: int) -> tuple[str, list[str]]:
    """The parametrization for the target: CompleteP whenever the depth changes. A proxy
    tuned under plain μP is moved with CompleteP's rules too, with a warning (its LR was
    tuned without depth transfer); Muon has no depth rules here."""
    if depth == base_depth:
        return kind, []
    if kind == "completep":
        return kind, []
    if kind == "muon":
        raise ValueError(f"the depth changes from {base_depth} to {depth}, but the muon "
                         "parametrization has no depth rules; tune the proxy with -p completep")
    return "completep", [
        f"the proxy was tuned under plain muP (no depth transfer) at depth {base_depth}; the target "
        f"has depth {depth}, so CompleteP's rules (Dey et al. 2025) move the per-parameter LRs, but "
        "the base LR was not tuned under them: confirm with a depth sweep under -p completep"]
