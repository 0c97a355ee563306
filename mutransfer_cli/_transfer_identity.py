"""What the proxy was, for ``mutransfer transfer``: its architecture, tokenizer, vocabulary,
context and dtype as the results rows (or a fit's ``proxy`` block) recorded them, checked
against each other and against the target.

- The proxy's context is the recorded ``seq_len``; ``--seq-len`` may only repeat it. The
  target's context is ``--target-seq-len`` (or ``--set seq_len=N``), else an HF config's
  ``max_position_embeddings``, else the proxy's; a change is warned about by name.
- The proxy's architecture is the recorded ``arch``. The LR's source and the scaling fit
  must agree on it, and an ``hf:`` target must have the recorded ``model_type``: a
  mismatch is refused unless ``--allow-arch-change`` (then recorded and warned about).
"""

from __future__ import annotations

import argparse
from typing import Any

from mutransfer.models.presets import PRESETS
from mutransfer.models.source import hf_shape


def _parts(arch: str) -> tuple[str, str, str]:
    """(kind, family, config hash + head rule) of a results-table ``arch``:
    ``hf:llama@1a2b3c4d/keep_heads`` -> ("hf", "llama", "1a2b3c4d/keep_heads")."""
    if arch.startswith("hf:"):
        family, _, rest = arch[3:].partition("@")
        return "hf", family, rest
    if arch.startswith("builder:"):
        return "builder", arch[len("builder:"):], ""
    return "preset", arch, ""


def reconcile_proxy(args: argparse.Namespace, source: dict[str, Any], laws_proxy: dict[str, Any] | None,
                    preset_given: bool) -> list[str]:
    """Fill the proxy's identity into ``source`` (the LR source's record first, the scaling
    fit's where the LR source has none) and set ``args.seq_len`` and ``args.preset`` from
    it. A scaling fit of another architecture than the LR's, or a ``--seq-len`` that
    contradicts the recorded context -> ValueError naming both."""
    from mutransfer_cli._transfer_proxy import recorded_proxy

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


def check_arch(args: argparse.Namespace, source: dict[str, Any], target: Any) -> tuple[list[str], Any]:
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


def target_context(args: argparse.Namespace, target: Any, proxy_seq: int, set_seq: int | None
                   ) -> tuple[int, str]:
    """(the target's context, where it came from) of an ``hf:`` target:
    ``--target-seq-len`` or ``--set seq_len=N``, else the config's
    ``max_position_embeddings``, else the proxy's."""
    if args.target_seq_len is not None:
        return int(args.target_seq_len), "--target-seq-len"
    if set_seq is not None:
        return int(set_seq), "--set seq_len"
    ctx = hf_shape(target.config)[2]
    if ctx is not None:
        return int(ctx), "the config's max_position_embeddings (no --target-seq-len)"
    return int(proxy_seq), "the proxy's (the config has no max_position_embeddings)"
