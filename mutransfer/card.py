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
:func:`apply`), and every failure is one ValueError naming the field path and value.
Loading uses ``yaml.safe_load``, so nothing executes.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mutransfer import __version__
from mutransfer._io import atomic_write_text, check_size, plain, read_text, read_yaml_mapping
from mutransfer.card_apply import Applied, LambdaLRList, apply, apply_card, apply_init
from mutransfer.card_schema import (
    _C,
    SCHEMA,
    SCHEMA_V1,
    SCHEMA_V2,
    SCHEMAS,
    _is_number,
    check_init,
    schedule_config,
    validate_card,
)
from mutransfer.parametrization import ROLES, WD_MODES, Parametrization
from mutransfer.provenance import git_revision


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
    if not (_is_number(lr) and 0 < lr < math.inf):
        raise ValueError(f"card field optimizer.lr: must be a positive finite number, got {lr!r}")
    wd = optimizer.get("weight_decay", 0.0)
    eps = optimizer.get("eps", 1e-8)
    for key, value, low in (("weight_decay", wd, 0.0), ("eps", eps, None)):
        if not (_is_number(value) and math.isfinite(value) and (value > 0 if low is None else value >= low)):
            raise ValueError(f"card field optimizer.{key}: must be a "
                             f"{'positive' if low is None else 'non-negative'} finite number, got {value!r}")
    wd, eps = float(wd), float(eps)
    wd_mode = optimizer.get("wd_mode", "coupled")
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
        "optimizer": {"name": optimizer.get("name", "adamw"), "lr": float(lr),
                      "betas": list(optimizer.get("betas", (0.9, 0.95))), "eps": eps,
                      "weight_decay": wd, "wd_mode": wd_mode, "tau": optimizer.get("tau")},
        "schedule": dict(schedule),
        "batch": dict(batch),
        "param_groups": groups,
        "forward_multipliers": pz.forward_multipliers(),
        "projected": dict(projected or {}),
        "audit": dict(audit) if audit else {"holdout": [], "passed": None},
        "provenance": prov,
    }
    return validate_card(plain(card))


# ---- files ------------------------------------------------------------------------------


def save_card(card: Mapping[str, Any], path: str | Path) -> Path:
    """Validate, then write YAML (or JSON for a ``.json`` path) atomically."""
    import yaml

    card = plain(validate_card(card))  # numpy scalars of a fit would stop YAML mid-write
    path = Path(path)
    class NoAliasDumper(yaml.SafeDumper):  # a value written twice is written out twice
        def ignore_aliases(self, data: Any) -> bool:
            return True

    text = json.dumps(card, indent=2) + "\n" if path.suffix == ".json" else yaml.dump(
        card, Dumper=NoAliasDumper, sort_keys=False)
    return atomic_write_text(path, text)


#: The largest card file read (a card for a 1,000-layer model is about 1 MB): a larger one
#: is refused before it is parsed.
MAX_CARD_BYTES = 4 << 20


def load_card(path: str | Path) -> dict[str, Any]:
    """Read a card (YAML with ``yaml.safe_load``, or JSON for a ``.json`` path; v1 or
    v2) and validate it. Nothing in it executes; a file over :data:`MAX_CARD_BYTES`, YAML
    aliases that refer to themselves or expand too far, an unknown section or a schema tag
    its body contradicts is refused before
    the document is walked."""
    if Path(path).suffix == ".json":
        card = _read_json(path)
    else:
        card = read_yaml_mapping(path, "transfer card", max_bytes=MAX_CARD_BYTES, bound_aliases=True)
    try:
        return validate_card(card)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    except RecursionError:
        raise ValueError(f"transfer card {str(path)!r} is nested too deeply to read") from None


def _read_json(path: str | Path) -> Any:
    # JSON, not YAML: YAML 1.1 would read JSON's 1e-08 as a string.
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"transfer card {str(p)!r} does not exist")
    check_size(p, "transfer card", MAX_CARD_BYTES)
    try:
        return json.loads(read_text(p, "transfer card"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"transfer card {str(p)!r} is not valid JSON: {exc}") from None
    except RecursionError:
        raise ValueError(f"transfer card {str(p)!r} is nested too deeply to read") from None


__all__ = ["SCHEMA", "SCHEMAS", "SCHEMA_V1", "SCHEMA_V2", "Applied", "LambdaLRList", "apply", "apply_init",
           "apply_card", "build_card", "check_init", "git_revision", "load_card", "save_card",
           "schedule_config", "validate_card"]
