"""What every engine exporter shares: the card's schedule in steps, its AdamW groups, and
the checks of a model and of emitted field names against an engine."""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import torch.nn as nn

#: What a Hugging Face family's decoder has that the torchtitan llama3 and Megatron GPTModel
#: exports do not build: the reason beside a refusal of its ``model_type``.
HF_FAMILY_TRAITS: dict[str, str] = {
    "gemma2": "soft-capped attention and logits, norms after attention and MLP, embeddings x sqrt(hidden)",
    "gemma3_text": "norms after attention and MLP, q/k norms, embeddings x sqrt(hidden)",
    "phi3": "fused qkv_proj and gate_up_proj, sliding-window attention",
    "olmo2": "q/k RMSNorm over the whole projection, norms after attention and MLP",
}


def family_traits(model_type: str) -> str:
    """`` (its TRAITS)`` for a family in :data:`HF_FAMILY_TRAITS`, else nothing."""
    traits = HF_FAMILY_TRAITS.get(model_type)
    return f" ({traits})" if traits else ""


def _lr_floor(schedule: Mapping[str, Any]) -> float:
    """The LR floor of a validated card's schedule (a fraction of the peak)."""
    return float(schedule["lr_floor"])


def _steps(card: Mapping[str, Any]) -> tuple[int, int, int]:
    """(total, warmup, decay) steps of the card's schedule."""
    s = card["schedule"]
    total = int(s.get("total_steps") or 0)
    if total < 1:
        raise ValueError(f"the card's schedule has no total_steps ({s.get('total_steps')!r})")
    warmup = int(s.get("warmup_steps") or 0)
    kind = s.get("kind")
    frac = float(s.get("decay_fraction", 1.0 if kind in ("cosine", "linear") else 0.2))
    decay = total - warmup if kind in ("cosine", "linear") else round(frac * total)
    return total, warmup, decay


def _groups(card: Mapping[str, Any]) -> list[dict[str, Any]]:
    groups = list(card["param_groups"])
    bad = [g["name"] for g in groups if g["optimizer"] not in ("adamw", "adam")]
    if bad:
        raise ValueError(f"parameter {bad[0]} uses optimizer {groups[0].get('optimizer')!r}; the "
                         f"engine exports cover AdamW cards only")
    return groups


def check_model(model: nn.Module, card: Mapping[str, Any]) -> None:
    """The card's parameters are the model's, name by name and shape by shape."""
    params = {n: list(p.shape) for n, p in model.named_parameters()}
    card_shapes = {g["name"]: list(g["shape"]) for g in card["param_groups"]}
    extra = sorted(set(params) - set(card_shapes))
    missing = sorted(set(card_shapes) - set(params))
    if extra or missing:
        raise ValueError(f"the card does not match the model: the model has {extra[:3]} that the card "
                         f"lacks, the card has {missing[:3]} that the model lacks")
    for name, shape in params.items():
        if shape != card_shapes[name]:
            raise ValueError(f"the card does not match the model: parameter {name} has shape {shape}, "
                             f"the card says {card_shapes[name]}")


def check_fields(engine: str, section: str, emitted: Mapping[str, Any], available: set[str] | frozenset[str],
                 version: str) -> None:
    """An emitted field the installed engine lacks is an error naming it."""
    missing = sorted(set(emitted) - set(available))
    if missing:
        raise ValueError(f"{engine} {section} field(s) {missing} are not in the installed {version}")


class Drops:
    """What an export may leave out: only the fields named with ``--drop FIELD``.

    :meth:`cannot` is called wherever an engine cannot express a card field: without a
    ``--drop`` for it, one ValueError names the field and the flag; with it, the field is
    recorded (``export["dropped"]``) and a warning says so. :meth:`check_used` refuses a
    ``--drop`` that named nothing the export met (a typo must not pass silently), unless
    the field is one the engine may drop (``known``) and this card simply needs none:
    that is a note (:attr:`notes`), so one command serves every card."""

    def __init__(self, engine: str, allowed: Iterable[str] = (), known: Iterable[str] = ()) -> None:
        self.engine = engine
        self.allowed = tuple(dict.fromkeys(str(f) for f in allowed))
        self.known = frozenset(known)
        self.dropped: list[dict[str, str]] = []
        self.notes: list[str] = []

    def cannot(self, field: str, why: str) -> None:
        if field not in self.allowed:
            raise ValueError(f"the {self.engine} export cannot carry card field {field}: {why}; "
                             f"pass --drop {field} to export without it")
        if all(d["field"] != field for d in self.dropped):
            self.dropped.append({"field": field, "why": why})
            warnings.warn(f"{self.engine} export: dropped card field {field} ({why})", stacklevel=3)

    def check_used(self) -> None:
        unused = [f for f in self.allowed if all(d["field"] != f for d in self.dropped)]
        # A field this engine can drop that this card does not need dropped (a card without
        # weight decay, a μP card's eps the export now carries): nothing is lost, so the
        # same command works on every card; the export says so in a note.
        for f in [f for f in unused if f in self.known]:
            self.notes.append(f"--drop {f}: nothing dropped, the {self.engine} export carries this "
                              f"card's {f}")
            unused.remove(f)
        if unused:
            raise ValueError(f"--drop {unused[0]}: the {self.engine} export carries that field (or the "
                             "card has no such field); nothing to drop")


class BatchSplit(NamedTuple):
    """The global batch as data-parallel ranks × micro-batch × gradient-accumulation steps."""

    sequences: int
    dp_size: int
    micro_batch: int
    grad_accum: int


def split_batch(card: Mapping[str, Any], dp_size: int | None = None,
                micro_batch: int | None = None) -> BatchSplit:
    """Split the card's global batch (sequences) over ``dp_size`` ranks (default: the
    card's ``batch.dp_size``, else 1) in micro-batches of ``micro_batch`` sequences per
    rank (default: the card's ``batch.micro_batch``, else the whole per-rank share, no
    accumulation): accumulation = sequences / (dp × micro). A split that does not divide
    the batch is a ValueError naming both numbers."""
    batch = card["batch"]
    seqs = int(batch["sequences"])
    dp = int(dp_size if dp_size is not None else batch.get("dp_size") or 1)
    if dp < 1:
        raise ValueError(f"dp_size must be >= 1, got {dp}")
    if seqs % dp:
        raise ValueError(f"the card's batch of {seqs} sequences does not split over dp_size {dp}")
    micro = micro_batch if micro_batch is not None else batch.get("micro_batch")
    micro = int(micro) if micro is not None else seqs // dp
    if micro < 1:
        raise ValueError(f"micro_batch must be >= 1, got {micro}")
    if seqs % (dp * micro):
        raise ValueError(f"the card's batch of {seqs} sequences is not a multiple of dp_size {dp} × "
                         f"micro_batch {micro} = {dp * micro}")
    return BatchSplit(seqs, dp, micro, seqs // (dp * micro))


def decay_note(entries: Iterable[tuple[str, float, float]], lead: str) -> str:
    """One note on weight decay from ``(name, peak lr, λ)`` per parameter: each distinct
    (λ, LR) with how many parameters take it and η·λ, the fraction of a weight one step at
    the peak LR removes (torch AdamW: ``p -= lr·λ·p``). An engine's λ reads as nonsense
    beside its LR (HF's ``weight_decay`` 5.06, Megatron's 40.5) until the product is shown:
    under μP the decay is per group and η·λ is what is kept across widths."""
    by: dict[tuple[float, float], list[str]] = {}
    for name, lr, wd in entries:
        by.setdefault((float(wd), float(lr)), []).append(name)
    parts = [f"{len(names)} param(s) e.g. {names[0]}: λ {wd:.4g} at lr {lr:.3g}, η·λ {lr * wd:.3g} per step"
             for (wd, lr), names in sorted(by.items(), key=lambda kv: -len(kv[1]))]
    return f"weight decay: {lead}; per-step decay η·λ at the peak LR: " + "; ".join(parts)
