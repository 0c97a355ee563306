"""The target side of ``mutransfer transfer``: the target model from the flags, its
parametrization (CompleteP when the depth changes) and the checks against the proxy (no
smaller target, the same vocabulary unless allowed)."""

from __future__ import annotations

import argparse
from typing import Any

from mutransfer.card.target import (
    hf_transfer_builder,
    parse_overrides,
    resolve_hf_target,
    resolve_target,
    transfer_builder,
)
from mutransfer.parametrize.parametrization import Parametrization
from mutransfer_cli._transfer_proxy import TunedProxy


def _target_rules(args: argparse.Namespace, tuned: Any, width: int, depth: int, base_width: int,
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


def target_parametrization(args: argparse.Namespace, proxy: Any, base_width: int, base_depth: int,
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


def check_vocab(args: argparse.Namespace, proxy: Any, target: Any, source: dict[str, Any]
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


def target_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The target's model fields: the ``--set`` pairs as the library reads them
    (:func:`mutransfer.card.target.parse_overrides`), plus the ``--target-width``/``--target-depth``
    shorthands and the proxy's ``--seq-len`` (the target's context unless it is set)."""
    out = parse_overrides(args.overrides)
    for flag, key in (("target_width", "width"), ("target_depth", "depth")):
        value = getattr(args, flag)
        if value is not None:
            if key in out and out[key] != value:
                raise ValueError(f"--{flag.replace('_', '-')} {value} contradicts --set {key}={out[key]}")
            out[key] = value
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
