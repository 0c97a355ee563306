"""FIT.json, the document of a scaling fit: writing it and the one reader of it.

:class:`ScalingDocument` is the half of :class:`~analysis.ScalingLawFit` that turns a
fit into its JSON document (:meth:`~ScalingDocument.to_dict`, the output of ``mutransfer
fit scaling``) and back (:meth:`~ScalingDocument.from_dict`). The reader takes older and
hand-written fits too (only the laws and the measured ranges are required) and names the
field when one is bad; everything that reads a FIT.json (the card's run plan included)
goes through it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ._fitted import check_is_fitted
from ._io import finite_or_none as _num
from .schedule import ScheduleRules

__all__ = ["ScalingDocument", "edge_flags"]


def _fmt_pair(p: tuple[float, float] | None) -> list[float | None] | None:
    return None if p is None else [_num(p[0]), _num(p[1])]


# ---- reading fields, each error naming its field ------------------------------------------
def _field(doc: Mapping[str, Any], path: str, where: str, *, positive: bool = False,
           optional: bool = False) -> float | None:
    obj: Any = doc
    for key in path.split("."):
        obj = obj.get(key) if isinstance(obj, Mapping) else None
    if obj is None and optional:
        return None
    if not isinstance(obj, (int, float)) or isinstance(obj, bool) or not math.isfinite(obj) or (
            positive and obj <= 0):
        kind = "a positive finite number" if positive else "a finite number"
        raise ValueError(f"{where}: field {path} must be {kind}, got {obj!r}")
    return float(obj)


def _pair(obj: Any) -> tuple[float, float] | None:
    """``[lo, hi]`` or ``{"lo": .., "hi": ..}`` -> (lo, hi); anything else -> None."""
    if isinstance(obj, Mapping):
        obj = [obj.get("lo"), obj.get("hi")]
    if (isinstance(obj, (list, tuple)) and len(obj) == 2 and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in obj)):
        return float(min(obj)), float(max(obj))
    return None


def _open_pair(obj: Any) -> tuple[float, float] | None:
    """``[lo, hi]`` where null is an open side (-inf, inf), as :meth:`to_dict` writes tau's."""
    if isinstance(obj, (list, tuple)) and len(obj) == 2 and any(v is not None for v in obj):
        lo, hi = obj
        if all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in obj):
            return (-math.inf if lo is None else float(lo)), (math.inf if hi is None else float(hi))
    return _pair(obj)


def _exp_ci(section: Mapping[str, Any], name: str) -> tuple[float, float] | None:
    ci = section.get("ci")
    if not isinstance(ci, Mapping):
        return None
    exps = ci.get("exponents")
    return _pair(ci.get(name)) or (_pair(exps.get(name)) if isinstance(exps, Mapping) else None)


def _read_misfit(obj: Any, where: str, path: str = "lr.misfit", n: int = 3) -> dict[str, Any] | None:
    """The LR law's ``misfit`` section (None when absent: an older FIT.json, whose band is
    the bootstrap's alone); one ValueError names a bad field."""
    if obj is None:
        return None
    if not isinstance(obj, Mapping):
        raise ValueError(f"{where}: {path} must be a mapping, got {obj!r}")
    sd, dof = obj.get("sd_log"), obj.get("dof")
    if not (isinstance(sd, (int, float)) and not isinstance(sd, bool) and math.isfinite(sd) and sd >= 0):
        raise ValueError(f"{where}: {path}.sd_log must be a finite number >= 0, got {sd!r}")
    if not (isinstance(dof, int) and not isinstance(dof, bool) and dof >= 0):
        raise ValueError(f"{where}: {path}.dof must be an integer >= 0, got {dof!r}")
    return {"sd_log": float(sd), "dof": dof, "cov_log": _cov(obj.get("cov_log"), n)}


def _coefs(obj: Any, n: int) -> np.ndarray | None:
    if (isinstance(obj, list) and len(obj) == n and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in obj)):
        return np.asarray(obj, dtype=float)
    return None


def _read_form(lr: Mapping[str, Any], where: str) -> tuple[str, dict[str, Any] | None, dict[str, Any] | None]:
    """(``lr.form``, the surge section as the fit holds it, the choice) of a FIT.json; a
    document without ``form`` (written before the surge form) is the power law."""
    form = lr.get("form", "power")
    if form not in ("power", "surge"):
        raise ValueError(f"{where}: field lr.form must be 'power' or 'surge', got {form!r}")
    sec = lr.get("surge")
    surge = None
    if sec is not None:
        if not isinstance(sec, Mapping) or _coefs(sec.get("coef_log"), 4) is None:
            raise ValueError(f"{where}: field lr.surge.coef_log must be 4 finite numbers "
                             f"[m0, m1, p0, p1], got {sec.get('coef_log') if isinstance(sec, Mapping) else sec!r}")
        misfit = _read_misfit(sec.get("misfit"), where, "lr.surge.misfit", 4) or {
            "sd_log": 0.0, "dof": 0, "cov_log": np.zeros((4, 4))}
        surge = {"coef_log": _coefs(sec["coef_log"], 4), "cov_log": _cov(sec.get("cov_log"), 4),
                 "misfit": misfit}
        ci = sec.get("ci_log")
        if isinstance(ci, list) and len(ci) == 4 and all(_pair(c) is not None for c in ci):
            surge["ci"] = [list(_pair(c)) for c in ci]
    if form == "surge" and surge is None:
        raise ValueError(f"{where}: field lr.form is 'surge' but lr.surge (its coefficients) is missing")
    sc = lr.get("form_scores")
    choice = None
    if isinstance(sc, Mapping):  # as the fit holds it: the scores apart from how they were made
        choice = {"form": form, "criterion": sc.get("criterion"), "peak_shown": sc.get("peak_shown"),
                  "scores": {f: sc.get(f) if isinstance(sc.get(f), (int, float)) else None
                             for f in ("power", "surge")}}
    return form, surge, choice


def _cov(obj: Any, n: int) -> np.ndarray:
    """An n×n finite covariance matrix as written, else zeros (no band)."""
    if (isinstance(obj, list) and len(obj) == n and all(
            isinstance(r, list) and len(r) == n and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in r)
            for r in obj)):
        return np.asarray(obj, dtype=float)
    return np.zeros((n, n))


def edge_flags(doc: Mapping[str, Any]) -> dict[str, Any]:
    """Where a fit's optima are only bounds, from FIT.json's ``budgets[i].edge``,
    ``bracketing`` and ``bracketed`` (each optional: older fits lack the last two):
    ``batch_bounds`` and ``lr_bounds`` (each entry the field that says so and its budget)
    and ``batch_edges`` = (budgets whose best batch sat at the grid's edge, budgets)."""
    batch: list[str] = []
    lr: list[str] = []

    def at(row: Mapping[str, Any]) -> str:
        t = row.get("tokens")
        return f" (budget {t:.3g} tokens)" if isinstance(t, (int, float)) and not isinstance(t, bool) else ""

    budgets = doc.get("budgets")
    rows_b = []
    if isinstance(budgets, Sequence) and not isinstance(budgets, (str, bytes)):
        rows_b = [b for b in budgets if isinstance(b, Mapping)]
        for i, b in enumerate(budgets):
            if isinstance(b, Mapping) and b.get("edge"):
                batch.append(f"budgets[{i}].edge {b['edge']!r}{at(b)}")
    rows = doc.get("bracketing")
    if isinstance(rows, Sequence) and not isinstance(rows, (str, bytes)):
        for i, r in enumerate(rows):
            if not isinstance(r, Mapping):
                continue
            for key, out in (("batch", batch), ("lr", lr)):
                sec = r.get(key)
                if isinstance(sec, Mapping) and sec.get("bracketed") is False:
                    edge = sec.get("edge")
                    out.append(f"bracketing[{i}].{key}.bracketed false"
                               f"{f' (edge {edge!r})' if isinstance(edge, str) and edge else ''}{at(r)}")
    overall = doc.get("bracketed")
    if isinstance(overall, Mapping):
        for key, out in (("batch", batch), ("lr", lr)):
            if overall.get(key) is False and not out:
                out.append(f"bracketed.{key} false")
    return {"batch_bounds": tuple(batch), "lr_bounds": tuple(lr),
            "batch_edges": (sum(1 for b in rows_b if b.get("edge")), len(rows_b))}


def _check_laws(d: Any, where: str) -> None:
    """The fields every reader needs: the laws (exponents within ±10) and the measured
    ranges; one ValueError naming the bad field."""
    if not isinstance(d, Mapping):
        raise ValueError(f"{where} must hold a JSON object, got {type(d).__name__}")
    if d.get("kind", "scaling") != "scaling" or not isinstance(d.get("lr"), Mapping):
        raise ValueError(f"{where} is not the output of `mutransfer fit scaling` "
                         f"(not a scaling fit document: kind {d.get('kind')!r}, no lr law)")
    for section in ("lr", "batch", "measured"):
        if not isinstance(d.get(section), Mapping):
            raise ValueError(f"{where}: field {section} is missing or not an object")
    for path in ("lr.exponents.batch_tokens", "lr.exponents.tokens", "batch.exponents.tokens"):
        e = _field(d, path, where) or 0.0
        if abs(e) > 10:  # real ones lie within +-1; 1e3 overflows D^b
            raise ValueError(f"{where}: field {path} must lie in [-10, 10], got {e!r}")
    _field(d, "lr.coef", where, positive=True)
    _field(d, "batch.coef", where, positive=True)
    for axis in ("tokens", "batch_tokens"):
        r = _pair(d["measured"].get(axis))
        if r is None or r[0] <= 0:
            raise ValueError(f"{where}: field measured.{axis} must be [min, max] of positive "
                             f"numbers, got {d['measured'].get(axis)!r}")


def _read_decay(d: Mapping[str, Any], where: str) -> tuple[float | None, tuple[float, float] | None]:
    dec = d.get("decay_fraction")
    value = None
    if isinstance(dec, Mapping):
        value = _field(d, "decay_fraction.value", where, optional=True)
    elif dec is not None:
        value = _field(d, "decay_fraction", where)
    if value is not None and not 0 <= value <= 1:
        raise ValueError(f"{where}: field decay_fraction must lie in [0, 1], got {value!r}")
    return value, (_pair(dec.get("ci")) if isinstance(dec, Mapping) else None)


def _read_loso(d: Mapping[str, Any], where: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """(the ``sensitivity`` section as written, each refit's laws) of a FIT.json."""
    sens = d.get("sensitivity")
    if sens is None:
        return None, []
    if not isinstance(sens, Mapping) or not isinstance(sens.get("loso", []), list):
        raise ValueError(f"{where}: field sensitivity must be an object with a list sensitivity.loso")
    n = sens.get("n_seeds", 0)
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ValueError(f"{where}: field sensitivity.n_seeds must be an integer >= 0, got {n!r}")
    fits = []
    for i, f in enumerate(sens.get("loso") or []):
        f = f if isinstance(f, Mapping) else {}
        w = f"{where}: sensitivity.loso[{i}]"
        a, b = _field(f, "lr.exponents.batch_tokens", w), _field(f, "lr.exponents.tokens", w)
        lc, bc = _field(f, "lr.coef", w, optional=True), _field(f, "batch.coef", w, optional=True)
        g = _field(f, "batch.exponents.tokens", w, optional=True)
        sg = f.get("lr_surge")
        fits.append({"seed": f.get("seed"), "tau": f.get("tau"),
                     "lr_surge_log": _coefs(sg.get("coef_log"), 4) if isinstance(sg, Mapping) else None,
                     "lr_coef_log": np.array([math.log(lc) if lc else math.nan, a, b]),
                     "batch_coef_log": np.array([math.log(bc) if bc else math.nan,
                                                 math.nan if g is None else g])})
    return dict(sens), fits


def _read_noise(d: Mapping[str, Any], where: str) -> dict[str, Any] | None:
    """The optional ``noise_scale`` section (the B_simple(D) law); a bad one names its field."""
    n = d.get("noise_scale")
    if n is None:
        return None
    if not isinstance(n, Mapping):
        raise ValueError(f"{where}: noise_scale must be a mapping or null, got {type(n).__name__}")
    _field({"noise_scale": n}, "noise_scale.coef", where, positive=True)
    _field({"noise_scale": n}, "noise_scale.exponent", where)
    mt = _pair(n.get("measured_tokens"))
    if mt is None or not all(math.isfinite(v) and v > 0 for v in mt):
        raise ValueError(f"{where}: noise_scale.measured_tokens must be two positive numbers, got "
                         f"{n.get('measured_tokens')!r}")
    return dict(n)


class ScalingDocument:
    """FIT.json of a :class:`~analysis.ScalingLawFit` (see the module docstring)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe document (the ``mutransfer fit scaling`` output; see from_dict)."""
        check_is_fitted(self, "params_")
        p, c = self.params_, self.ci_
        tau_v = p.get("tau")
        tau: dict[str, Any] = {
            "value": _num(tau_v), "ci": _fmt_pair(c.get("tau")),
            "weight_decay": _num(self.weight_decay_) if self.weight_decay_ is not None else None,
            "at": {k: _num(v) for k, v in self.tau_at_.items()} if self.tau_at_ else None,
            "formula": "tau = batch_tokens / (lr · weight_decay · tokens)",
            "source": getattr(self, "tau_source_", None) if tau_v is not None else None,
            "by_tokens": [{k: _fmt_pair(v) if k == "ci" else v if k in ("edge", "weight_decays") else _num(v)
                           for k, v in r.items()} for r in getattr(self, "tau_by_tokens_", [])],
            "reference": "Wang & Aitchison 2024; Bergsma et al. 2025 (Power Lines)",
        }
        out: dict[str, Any] = {
            "kind": "scaling", "method": self.method, "band": self.band,
            "level": self.level, "n_boot": self.n_boot,
            "lr": {"coef": _num(p["lr_coef"]),
                   "exponents": {"batch_tokens": _num(p["lr_exp_batch"]),
                                 "tokens": _num(p["lr_exp_tokens"])},
                   "ci": {"coef": _fmt_pair(c.get("lr_coef")),
                          "batch_tokens": _fmt_pair(c.get("lr_exp_batch")),
                          "tokens": _fmt_pair(c.get("lr_exp_tokens"))},
                   "cov_log": self.cov_lr_.tolist(), "law": self._lr_law(),
                   "n_points": int(self.n_lr_points_), "misfit": self._misfit_doc(),
                   **self._form_doc()},
            "batch": {"coef": _num(p["batch_coef"]),
                      "exponents": {"tokens": _num(p["batch_exp_tokens"])},
                      "ci": {"coef": _fmt_pair(c.get("batch_coef")),
                             "tokens": _fmt_pair(c.get("batch_exp_tokens"))},
                      "cov_log": self.cov_batch_.tolist(), "law": self._batch_law(),
                      "n_points": int(self.n_batch_points_)},
            "tau": tau,
            "noise_scale": getattr(self, "noise_", None),
            "warmup": {**{k: v for k, v in self.rules.to_dict().items() if k != "decay_fraction"},
                       "rule": "warmup_tokens = per_param·N (else fraction·D), at most "
                               "max_fraction·D, whole steps",
                       "source": "Porian et al. 2024"},
            "decay_fraction": {"value": self.rules.decay_fraction, "schedule": "wsd",
                               "source": "Hägele et al. 2024"},
            "reference": {k: _num(v) for k, v in self.reference_.items()},
            "measured": dict(self.measured_),
            "n_rows": int(self.n_rows_), "n_in_band": int(self.n_in_band_),
            "n_excluded": int(self.n_excluded_), "n_diverged": int(self.n_diverged_),
            "warnings": list(self.warnings_),
            "sensitivity": self._sensitivity_doc if hasattr(self, "_sensitivity_doc")
            else self.sensitivity_dict(),
        }
        if hasattr(self, "cells_"):
            out["cells"] = [{k: (_num(v) if isinstance(v, (float, np.floating, int, np.integer))
                                 and not isinstance(v, bool) else v)
                             for k, v in r.items()} for r in self.cells_.to_dict("records")]
            out["budgets"] = [{k: (_num(v) if isinstance(v, (float, np.floating)) else v)
                               for k, v in r.items()} for r in self.budgets_.to_dict("records")]
            br = self.bracketing()
            out["bracketing"] = [
                {"tokens": _num(r["tokens"]),
                 "batch": {"bracketed": bool(r["batch_bracketed"]), "edge": r["batch_edge"],
                           "opt": _num(r["batch_opt"])},
                 "lr": {"bracketed": bool(r["lr_bracketed"]), "edge_cells": int(r["lr_edge_cells"]),
                        "edges": [{"batch_tokens": _num(b), "edge": e} for b, e in r["lr_edges"]]}}
                for r in br.to_dict("records")]
            out["bracketed"] = {"batch": bool(br["batch_bracketed"].all()),
                                "lr": bool(br["lr_bracketed"].all())}
        return out

    @classmethod
    def from_dict(cls, d: Any, where: str = "scaling fit") -> Any:
        """Rebuild a fit from :meth:`to_dict` output (FIT.json): laws, bands, tau, rules,
        reference, sensitivity and the edge flags; the one reader of FIT.json.

        Only ``lr`` (coef, exponents), ``batch`` (coef, exponent) and ``measured`` (the
        ranges of tokens and batch_tokens) are required; an older or hand-written fit may
        lack the rest (no covariance: intervals from the exponents' ``ci``; no ``warmup``
        or ``decay_fraction``: :meth:`warmup_tokens` and ``decay_fraction`` are None).
        ``where`` names the document in errors; one ValueError names the bad field."""
        _check_laws(d, where)
        lr, bt = d["lr"], d["batch"]
        level = d.get("level", 0.9)
        level = float(level) if isinstance(level, (int, float)) and 0 < level < 1 else 0.9
        method = d.get("method", "optima")
        w = d.get("warmup") if isinstance(d.get("warmup"), Mapping) else {}
        dec, dec_ci = _read_decay(d, where)
        try:
            rules = ScheduleRules(**{k: w[k] for k in ("per_param", "fraction", "max_fraction", "min_steps")
                                     if k in w}, **({"decay_fraction": dec} if dec and dec < 1 else {}))
        except (TypeError, ValueError):
            rules = None  # the plan reads the section itself and names a bad field
        self = cls(band=d.get("band", 0.0025), n_boot=d.get("n_boot", 0), level=level,
                   method=method if method in ("optima", "band") else "optima", rules=rules)
        self.source_ = where
        self.warmup_ = dict(w)
        self.decay_fraction_, self.decay_fraction_ci_ = dec, dec_ci
        self.lr_coef_log_ = np.array([math.log(lr["coef"]), lr["exponents"]["batch_tokens"],
                                      lr["exponents"]["tokens"]], dtype=float)
        self.batch_coef_log_ = np.array([math.log(bt["coef"]), bt["exponents"]["tokens"]], dtype=float)
        self.cov_lr_, self.cov_batch_ = _cov(lr.get("cov_log"), 3), _cov(bt.get("cov_log"), 2)
        self.lr_misfit_ = _read_misfit(lr.get("misfit"), where)
        self.lr_form_, self.lr_surge_, self.lr_form_choice_ = _read_form(lr, where)
        self.n_lr_points_, self.n_batch_points_ = lr.get("n_points", 0), bt.get("n_points", 0)
        self.boot_lr_, self.boot_batch_ = np.empty((0, 3)), np.empty((0, 2))
        self._read_params(d)
        self.reference_ = dict(d.get("reference") or {})
        self.measured_ = dict(d["measured"])
        self.n_rows_, self.n_in_band_ = d.get("n_rows", 0), d.get("n_in_band", 0)
        self.n_excluded_, self.n_diverged_ = d.get("n_excluded", 0), d.get("n_diverged", 0)
        self.warnings_ = list(d.get("warnings", []))
        self.sensitivity_ = {}  # kept as written, in _sensitivity_doc
        sens, self.loso_fits_ = _read_loso(d, where)
        if sens is not None:
            self._sensitivity_doc = sens
            self.seeds_ = tuple(sens.get("seeds") or ())
            self.n_seeds_ = sens.get("n_seeds", 0)
        self._read_tau(d, where)
        self.noise_ = _read_noise(d, where)
        self.flags_ = edge_flags(d)
        self.budget_optima_ = [dict(b) for b in d.get("budgets") or [] if isinstance(b, Mapping)]
        return self

    def _form_doc(self) -> dict[str, Any]:
        """``lr.form``, ``lr.form_scores`` and ``lr.surge`` (:mod:`analysis.lr_surge`)."""
        ch = getattr(self, "lr_form_choice_", None)
        sg = getattr(self, "lr_surge_", None)
        out: dict[str, Any] = {"form": self.lr_form, "form_scores": None, "surge": None}
        if ch:
            out["form_scores"] = {"criterion": ch.get("criterion"), "peak_shown": ch.get("peak_shown"),
                                  **{k: _num(v) for k, v in (ch.get("scores") or {}).items()}}
        if sg is not None:
            m0, m1, p0, p1 = (float(v) for v in sg["coef_log"])
            m = sg["misfit"]
            out["surge"] = {
                "law": self._surge_law(), "coef_log": [_num(v) for v in sg["coef_log"]],
                "eta_max": {"coef": _num(math.exp(m0)), "exponent_tokens": _num(m1)},
                "batch_peak": {"coef": _num(math.exp(p0)), "exponent_tokens": _num(p1)},
                "ci_log": sg.get("ci"), "cov_log": np.asarray(sg["cov_log"], dtype=float).tolist(),
                "misfit": {"sd_log": _num(m["sd_log"]), "dof": int(m["dof"]),
                           "cov_log": np.asarray(m["cov_log"], dtype=float).tolist()},
                "reference": "Li et al. 2024, Surge Phenomenon in Optimal Learning Rate and Batch Size Scaling"}
        return out

    def _misfit_doc(self) -> dict[str, Any] | None:
        m = getattr(self, "lr_misfit_", None)
        if not m:
            return None
        return {"sd_log": _num(m["sd_log"]), "dof": int(m["dof"]),
                "cov_log": np.asarray(m["cov_log"], dtype=float).tolist(),
                "how": "residual variance of the cell optima about the law (prediction band: "
                       "x(C_boot + C_misfit)x + sd_log^2, Student's t at dof)"}

    def _read_params(self, d: Mapping[str, Any]) -> None:
        cl, cb = self.lr_coef_log_, self.batch_coef_log_
        self.params_ = {"lr_coef": float(np.exp(cl[0])), "lr_exp_batch": float(cl[1]),
                        "lr_exp_tokens": float(cl[2]), "batch_coef": float(np.exp(cb[0])),
                        "batch_exp_tokens": float(cb[1]), "tau": None}
        self.ci_ = {}
        names = {"lr": {"coef": "lr_coef", "batch_tokens": "lr_exp_batch", "tokens": "lr_exp_tokens"},
                 "batch": {"coef": "batch_coef", "tokens": "batch_exp_tokens"}}
        for sec, m in names.items():
            for k, name in m.items():
                ci = d[sec].get("ci") if isinstance(d[sec].get("ci"), Mapping) else {}
                v = _pair(ci.get(k)) if k == "coef" else _exp_ci(d[sec], k)
                if v is not None:
                    self.ci_[name] = v

    def _read_tau(self, d: Mapping[str, Any], where: str) -> None:
        t = d.get("tau") if isinstance(d.get("tau"), Mapping) else {}
        self.weight_decay_ = t.get("weight_decay")
        self.tau_at_ = t.get("at")
        self.params_["tau"] = _field({"tau": t}, "tau.value", where, positive=True, optional=True)
        self.tau_source_ = t.get("source")
        self.tau_by_tokens_ = [dict(r) for r in t.get("by_tokens") or []]
        ci = _open_pair(t.get("ci"))
        if ci is not None:
            self.ci_["tau"] = ci

    def sensitivity_dict(self) -> dict[str, Any]:
        """The ``sensitivity`` section of :meth:`to_dict`: the LOSO spread of each value
        and each refit's laws (empty ``values`` and ``loso`` with fewer than 2 seeds)."""
        return {
            "method": "leave-one-seed-out", "n_seeds": len(getattr(self, "seeds_", ())),
            "seeds": [str(s) for s in getattr(self, "seeds_", ())],
            "values": {k: sp.to_dict() for k, sp in self.sensitivity_.items()},
            "loso": [{"seed": str(f["seed"]),
                      "lr": {"coef": _num(math.exp(f["lr_coef_log"][0])),
                             "exponents": {"batch_tokens": _num(f["lr_coef_log"][1]),
                                           "tokens": _num(f["lr_coef_log"][2])}},
                      "batch": {"coef": _num(math.exp(f["batch_coef_log"][0])),
                                "exponents": {"tokens": _num(f["batch_coef_log"][1])}},
                      "tau": _num(f["tau"]),
                      **({"lr_surge": {"coef_log": [_num(v) for v in f["lr_surge_log"]]}}
                         if f.get("lr_surge_log") is not None else {})} for f in self.loso_fits_],
        }

