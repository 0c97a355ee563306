"""The transfer card: the export that carries a tuned proxy to the big run.

A card is plain YAML (JSON accepted). ``schema: mutransfer.card/v2`` (written today)
holds:

- ``source``: the proxy (preset, width, depth, base width/depth, study, storage, fits);
- ``target``: the whole target architecture (``model``: its config dict and preset),
  its parameter counts, token budget, tokens per parameter and data-parallel size;
- ``parametrization``: kind, widths, depths and multipliers;
- ``optimizer``: name, absolute base LR, betas, eps, weight decay, its mode, and the
  AdamW timescale tau;
- ``schedule``: kind, warmup (steps and tokens), decay fraction and shape, total steps,
  LR floor (``lr_floor``, the end of the decay as a fraction of the peak);
- ``batch``: sequences, tokens, sequence length, data-parallel size, micro-batch per rank
  and gradient-accumulation steps (sequences = dp_size × micro_batch × grad_accum);
- ``param_groups``: per parameter the absolute LR, LR multiplier, init, weight decay, eps;
- ``forward_multipliers``, ``projected`` (values with intervals and extrapolation
  flags), ``audit`` (the held-out check) and ``provenance``.

``mutransfer.card/v1`` cards (no audit, no tau, target given as a width) still load and
apply. One validator, :func:`validate_card`, checks every field's type and range; it
runs on write (:func:`build_card`, :func:`save_card`) and on load (:func:`load_card`,
:func:`apply_card`), and every failure is one ValueError naming the field path and value.
Loading uses ``yaml.safe_load``, so nothing executes.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mutransfer._io import atomic_write_text, check_items, plain, read_json, read_yaml_mapping
from mutransfer._version import __version__
from mutransfer.card.plan import RunPlan, lr_sensitivity, plan_run
from mutransfer.card.request import ProxyPoint, RunChoices
from mutransfer.card.schema import _C, SCHEMA_V2, _filled, _is_number, validate_card
from mutransfer.card.target import PRECISION
from mutransfer.card.trust import card_warnings, trust_block
from mutransfer.parametrize.parametrization import Parametrization
from mutransfer.parametrize.specs import ROLES, WD_MODES
from mutransfer.provenance import git_revision

if TYPE_CHECKING:
    from analysis.scaling_fit import ScalingLawFit
    from mutransfer.card.target import HFTarget, TargetModel


def build_card(
    pz: Parametrization,
    *,
    lr: float,
    optimizer: Mapping[str, Any],
    schedule: Mapping[str, Any],
    batch: Mapping[str, Any],
    target: Mapping[str, Any],
    source: Mapping[str, Any] | None = None,
    projected: Mapping[str, Any] | None = None,
    audit: Mapping[str, Any] | None = None,
    provenance: Mapping[str, Any] | None = None,
    role_lr_mults: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """Assemble a v2 card for the model ``pz`` describes (built at the *target* shape).

    ``lr`` is the absolute base LR; each parameter's absolute LR, LR multiplier, weight
    decay and eps come from :meth:`Parametrization.optimizer_settings` (μP / CompleteP /
    Muon rules, times ``role_lr_mults[role]``, the per-role LR multipliers tuned at the
    proxy: TrainConfig ``lr_mult_input/output/vector``), the builder the trainer's param
    groups come from, so the card reproduces the tuned proxy at its own shape. ``optimizer``
    holds name, betas, eps, weight_decay, wd_mode and optionally tau; ``provenance`` adds
    e.g. the study name and the (credential-free) storage to the package, version, git
    revision and date.
    The result has passed :func:`validate_card`.
    """
    return validate_card(plain(_card_dict(
        pz, lr=lr, optimizer=optimizer, schedule=schedule, batch=batch, target=target, source=source,
        projected=projected, audit=audit, provenance=provenance, role_lr_mults=role_lr_mults)))


def hidden_lr_mult(pz: Parametrization, role_lr_mults: Mapping[str, float] | None = None) -> float | None:
    """The hidden matrices' Adam LR ÷ the base LR under ``pz`` (the largest over its
    hidden AdamW groups; the published laws' one LR is compared with it); None when no
    hidden matrix trains with Adam (Muon)."""
    settings = pz.optimizer_settings(1.0, weight_decay=0.0, wd_mode="coupled", eps=1e-8,
                                     role_lr_mults={str(k): v for k, v in (role_lr_mults or {}).items()})
    mults = [float(settings[s.name]["lr"]) for s in pz.specs.values()
             if s.role == "hidden" and settings[s.name]["optimizer"] == "adamw"]
    return max(mults) if mults else None


def _card_dict(
    pz: Parametrization,
    *,
    lr: float,
    optimizer: Mapping[str, Any],
    schedule: Mapping[str, Any],
    batch: Mapping[str, Any],
    target: Mapping[str, Any],
    source: Mapping[str, Any] | None = None,
    projected: Mapping[str, Any] | None = None,
    audit: Mapping[str, Any] | None = None,
    provenance: Mapping[str, Any] | None = None,
    role_lr_mults: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """:func:`build_card`'s card before validation (its caller validates it once)."""
    if not (_is_number(lr) and 0 < lr < math.inf):
        raise ValueError(f"card field optimizer.lr: must be a positive finite number, got {lr!r}")
    opt = _filled("optimizer", optimizer)
    wd, eps, wd_mode = opt["weight_decay"], opt["eps"], opt["wd_mode"]
    for key, value, low in (("weight_decay", wd, 0.0), ("eps", eps, None)):
        if not (_is_number(value) and math.isfinite(value) and (value > 0 if low is None else value >= low)):
            raise ValueError(f"card field optimizer.{key}: must be a "
                             f"{'positive' if low is None else 'non-negative'} finite number, got {value!r}")
    wd, eps = float(wd), float(eps)
    _C.choice("optimizer.wd_mode", wd_mode, WD_MODES)
    role_mults = {str(k): v for k, v in (role_lr_mults or {}).items()}
    for k, v in role_mults.items():
        if k not in ROLES:
            raise ValueError(f"card field parametrization.lr_mults: unknown role {k!r}; use one of {ROLES}")
        if not (_is_number(v) and 0 < v < math.inf):
            raise ValueError(f"card field parametrization.lr_mults.{k}: must be a positive finite number, "
                             f"got {v!r}")
    # The trainer's param groups come from the same builder: nothing here re-derives a rule.
    settings = pz.optimizer_settings(lr, weight_decay=wd, wd_mode=wd_mode, eps=eps, role_lr_mults=role_mults)
    groups = []
    for s in pz.specs.values():
        v = settings[s.name]
        groups.append({
            "name": s.name, "shape": list(s.shape), "role": s.role, "optimizer": v["optimizer"],
            "lr": v["lr"], "lr_mult": v["lr_mult"], "init": s.init, "init_std": s.init_std,
            "weight_decay": v["weight_decay"], "eps": v["eps"],
        })
    prov = {"package": "mutransfer", "version": __version__, "git_revision": git_revision(),
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    prov.update(provenance or {})
    card = {
        "schema": SCHEMA_V2,
        "source": dict(source or {}),
        "target": dict(target),
        "parametrization": {
            "kind": pz.kind, "rules": pz.optimizer, "width": pz.width, "base_width": pz.base_width,
            "depth": pz.depth, "base_depth": pz.base_depth, "depth_alpha": pz.depth_alpha,
            "readout_init": pz.readout_init, "init": pz.init,
            "multipliers": dataclasses.asdict(pz.multipliers),
            "lr_mults": {k: float(v) for k, v in role_mults.items()},
        },
        "optimizer": {"name": opt["name"], "lr": float(lr), "betas": list(opt["betas"]), "eps": eps,
                      "weight_decay": wd, "wd_mode": wd_mode, "tau": opt.get("tau")},
        "schedule": dict(schedule),
        "batch": dict(batch),
        "param_groups": groups,
        "forward_multipliers": pz.forward_multipliers(),
        "projected": dict(projected or {}),
        "audit": dict(audit) if audit else {"holdout": [], "passed": None},
        "provenance": prov,
    }
    return card


# ---- the card, made ---------------------------------------------------------------------


@dataclass(frozen=True)
class MadeCard:
    """A made card (:func:`mutransfer.card.make.make_card`) and what it was made from."""

    card: dict[str, Any]
    """The validated v2 card, ``trust`` first, ``projected.warnings`` complete."""
    plan: RunPlan
    """The target's run as projected (:func:`mutransfer.card.plan.plan_run`)."""
    laws: ScalingLawFit | None
    """The scaling laws the plan used (None: the proxy's LR moved by μP alone)."""
    n_params: int
    """The target's parameters."""
    n_params_nonembed: int
    """The target's non-embedding parameters (the N of the laws)."""
    tokens: float
    """The target's token budget."""
    width: int
    """The target's width."""
    depth: int
    """The target's depth."""
    warnings: list[str]
    """Every warning the card carries (``card["projected"]["warnings"]``)."""
    notes: list[str] = dataclasses.field(default_factory=list)
    """What the caller should say that casts no doubt on the card (e.g. the config's dtype)."""


def assemble_card(
    pz: Parametrization,
    target: TargetModel | HFTarget,
    proxy: ProxyPoint,
    run: RunChoices = RunChoices(),
    *,
    seq_len: int,
    tokens: float | None = None,
    tokens_per_param: float | None = None,
    laws: ScalingLawFit | None = None,
    weights_dtype: str = "float32",
    seq_len_from: str | None = None,
    tokenizer: str | None = None,
    vocab_change: Mapping[str, Any] | None = None,
    arch_change: Mapping[str, Any] | None = None,
    source: Mapping[str, Any] | None = None,
    projected: Mapping[str, Any] | None = None,
    audit: Mapping[str, Any] | None = None,
    provenance: Mapping[str, Any] | None = None,
    warnings: Sequence[str] = (),
) -> MadeCard:
    """The card assembled from values the transfer rules already resolved
    (:func:`mutransfer.card.make.make_card` resolves them, and is the one call to make a
    card): plan (:func:`~mutransfer.card.plan.plan_run`) → build → the card's own warnings
    (:func:`~mutransfer.card.trust.card_warnings`) → trust block
    (:func:`~mutransfer.card.trust.trust_block`), ``trust`` placed right after ``schema``
    → validated once.

    ``pz`` is the target's parametrization, ``target`` its model, ``proxy`` the proxy's
    measured point (its LR, batch, budget and the tuned settings that carry over) and
    ``run`` the run's choices. The budget is ``tokens``, else ``tokens_per_param`` × the
    target's parameters. ``projected`` holds what the proxy side measured (optionally
    ``at_edge`` and the seeds' ``sensitivity``); ``warnings`` what was found before the
    plan. Nothing is written: :func:`save_card` writes ``result.card``."""
    if (tokens is None) == (tokens_per_param is None):
        raise ValueError("give the target's token budget as tokens or tokens_per_param (one of them)")
    n_params, n_nonembed = target.n_params()
    budget = float(tokens) if tokens is not None else float(tokens_per_param) * n_params  # type: ignore[arg-type]
    width, depth = ((target.width, target.depth) if target.kind == "hf"  # type: ignore[union-attr]
                    else (target.config.width, target.config.depth))  # type: ignore[union-attr]
    plan = plan_run(proxy, run, tokens=budget, seq_len=seq_len, laws=laws, n_params=n_nonembed,
                    hidden_lr_mult=hidden_lr_mult(pz, proxy.role_lr_mults))
    wd_mode = run.wd_mode or "coupled"
    said = list(warnings) + list(plan.warnings)
    proj = dict(projected or {})
    at_edge = proj.pop("at_edge", None)
    sensitivity = proj.pop("sensitivity", None)
    proj.update(plan.projected)
    if at_edge is not None:
        proj["lr"]["at_edge"] = at_edge
    proj["lr"].update(lr_sensitivity(  # how far one seed moves the base LR
        sensitivity, laws, proxy_batch_tokens=plan.projected["proxy"]["batch_tokens"],
        proxy_tokens=plan.projected["proxy"]["tokens"], batch_tokens=plan.batch_tokens, tokens=budget))
    proj["warnings"] = said
    wsd = run.schedule == "wsd"
    betas, eps = proxy.betas, proxy.eps
    card = _card_dict(
        pz, lr=plan.lr,
        optimizer={"name": "muon" if pz.kind == "muon" else "adamw", "weight_decay": plan.weight_decay,
                   "wd_mode": wd_mode, "tau": plan.tau, "betas": [betas[0] if betas else 0.9, plan.beta2],
                   **({"eps": eps} if eps is not None else {})},
        schedule={"kind": run.schedule, "warmup_steps": plan.warmup_steps, "warmup_tokens": plan.warmup_tokens,
                  "decay_fraction": plan.decay_fraction if wsd else None,
                  "decay_shape": run.decay_shape if wsd else None, "total_steps": plan.steps,
                  "lr_floor": run.lr_floor},
        batch={"sequences": plan.batch_sequences, "tokens": plan.batch_tokens, "seq_len": seq_len,
               "dp_size": run.dp_size, "micro_batch": plan.micro_batch,
               "grad_accum": plan.batch_sequences // ((run.dp_size or 1) * plan.micro_batch),
               "rounding": plan.projected["batch_split"]["rule"]},
        target={"model": target.to_dict(), "width": width, "depth": depth,
                **({"vocab_change": dict(vocab_change)} if vocab_change else {}),
                **({"arch_change": dict(arch_change)} if arch_change else {}),
                **({"tokenizer": tokenizer} if tokenizer else {}),
                "n_params": n_params, "n_params_nonembed": n_nonembed, "tokens": budget,
                "tokens_per_param": budget / n_params, "seq_len": seq_len, "seq_len_from": seq_len_from,
                "dp_size": run.dp_size, "dtype": weights_dtype, "precision": PRECISION[weights_dtype]},
        source=source, projected=proj, audit=audit, provenance=provenance, role_lr_mults=proxy.role_lr_mults)
    card = plain(card)  # numpy scalars of a fit, as the checks below and the validator read them
    # What the assembled card says against itself, then how far to trust its values.
    said += [w for w in card_warnings(card) if w not in said]
    card["projected"]["warnings"] = said
    card["trust"] = trust_block(
        projected=card["projected"], laws=laws, proxy_lr_interval=proxy.lr_interval, proxy_lr=proxy.lr,
        proxy_batch_tokens=proxy.batch_tokens, proxy_tokens=proxy.tokens, batch_tokens=plan.batch_tokens,
        tokens=budget, steps=plan.steps, n_warnings=len(said), seq_len=seq_len)
    head = {"schema": card["schema"], "trust": card["trust"]}  # the first thing a reader sees
    card = validate_card(plain({**head, **{k: v for k, v in card.items() if k not in head}}))
    return MadeCard(card=card, plan=plan, laws=laws, n_params=n_params, n_params_nonembed=n_nonembed,
                    tokens=budget, width=int(width), depth=int(depth), warnings=said)


# ---- files ------------------------------------------------------------------------------


def save_card(card: Mapping[str, Any] | MadeCard, path: str | Path) -> Path:
    """Write a card as UTF-8 YAML (or JSON for a ``.json`` path) atomically. A
    :class:`MadeCard`'s card was validated when it was made and is written as it is; any
    other mapping is validated first."""
    import yaml

    if isinstance(card, MadeCard):
        card = card.card
    else:
        card = plain(validate_card(card))  # numpy scalars of a fit would stop YAML mid-write
    path = Path(path)
    class NoAliasDumper(yaml.SafeDumper):  # a value written twice is written out twice
        def ignore_aliases(self, data: Any) -> bool:
            return True

    text = json.dumps(card, indent=2, ensure_ascii=False) + "\n" if path.suffix == ".json" else yaml.dump(
        card, Dumper=NoAliasDumper, sort_keys=False, allow_unicode=True)
    return atomic_write_text(path, text)


#: The largest card file read (a card for a 1,000-layer model is about 1 MB): a larger one
#: is refused before it is parsed.
MAX_CARD_BYTES = 4 << 20


def load_card(path: str | Path) -> dict[str, Any]:
    """Read a card (YAML with ``yaml.safe_load``, or JSON for a ``.json`` path; v1 or
    v2) and validate it. Nothing in it executes; a file over :data:`MAX_CARD_BYTES` or
    holding more than :data:`mutransfer._io.MAX_ITEMS` list items and lines (counted on the
    bytes, in milliseconds), YAML aliases that refer to themselves or expand too far, a key
    given twice in one mapping, an unknown section or a schema tag its body contradicts is
    refused before the document is walked."""
    if not isinstance(path, (str, Path)):
        raise TypeError(f"load_card takes the card's path (str or Path), got {type(path).__name__}")
    if Path(path).suffix == ".json":
        card = read_json(path, "transfer card", max_bytes=MAX_CARD_BYTES)
        check_items(path, "transfer card")  # json parses fast; the walk of a million values does not
    else:
        card = read_yaml_mapping(path, "transfer card", max_bytes=MAX_CARD_BYTES, bound_aliases=True)
    try:
        return validate_card(card)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    except RecursionError:
        raise ValueError(f"transfer card {str(path)!r} is nested too deeply to read") from None


__all__ = ["assemble_card", "build_card", "MadeCard", "load_card", "save_card"]
