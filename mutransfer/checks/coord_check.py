"""Coordinate check: do activation sizes stay constant as width (or depth) grows?

Forward hooks record the mean absolute activation (l1) of chosen modules at every step
of a few training steps, over a ladder of widths (and depths) and several seeds, all fed
the same batch. Under a correct parametrization no module's l1 grows with width after
training steps begin; under SP with Adam it grows roughly linearly (Yang et al. 2022,
TP-V §3 and Fig. 5; Yang & Hu 2021 for the coordinate-check method).

The verdict is a fitted slope: for every (module, step) we fit
log2(mean l1 over seeds) = a + slope · log2(width); a slope is out of band when it leaves
±``tol`` by more than the seeds' spread (one standard error of the per-seed slopes), and a
module fails when it is out of band at 2 or more steps or at its last step (where an
excursion cannot be told from a trend that has just begun): a
width trend persists across steps, a transient does not (one step's loss spike at one
width once decided the verdict on Gemma-2 while every module was width-stable at the
last step); such transients are listed in the JSON.

By default ``tol`` is :func:`ladder_tol` of the widths: 0.25 (a
quarter power, far below SP's ~1) plus the slope that μP's own finite-width correction
can put on that ladder, which is largest when the ladder starts small (0.42 over 32-256,
0.37 over 64-512, 0.34 over 128-1024). Without it a correct μP failed at a large LR:
a few Adam steps much larger than the init (Hugging Face's std 0.02 at lr 1e-2) move the
smallest widths furthest from the infinite-width limit, and the fitted slope over 32-256
read -0.3 to -0.4 on GPT-2, Qwen2 and Mixtral while it shrinks toward 0 as the ladder
moves up (benchmarks/hf_vanishing.py). Vanishing activations (slope <= -tol) fail too: a
layer whose output dies with width stops learning features, unless a norm divides its
scale out before anything else reads it (a post-norm block's attention and MLP: OLMo-2,
Gemma-2; their norms' outputs are judged instead). The other exception is mup's
readout (``readout_init="constant"``): TP-V's output layer (init variance 1/fan_in², or a
forward 1/m_in) makes the logits shrink like width^-1/2 at init by design (Yang et al.
2022, Table 3), and that init part fades only as the Θ(1) updates take over (on our GPT
at lr 1e-2: slopes -0.49, -0.45, -0.36, -0.26 at steps 0-3). So that readout may vanish
as fast as its init law, width^-1/2, plus ``tol``, never faster, and may never grow. The
default readout (``fan_in``) keeps SP's width-independent logits at init and gets no
allowance. Against depth (when depths
vary) only growth is checked: CompleteP scales each residual branch by 1/L on purpose
(Dey et al. 2025), so branch outputs shrink with depth while the residual stream holds.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
import torch.nn as nn

from mutransfer._io import atomic_path, atomic_write_text
from mutransfer.parametrize.parametrization import Parametrization, post_normed
from mutransfer.parametrize.rules import DEFAULT_READOUT_INIT
from mutransfer.parametrize.specs import Multipliers
from mutransfer.training.optim import build_optimizer

Batch = tuple[torch.Tensor, torch.Tensor]
LossFn = Callable[[nn.Module, Batch], torch.Tensor]


def gpt_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    return model(batch[0], batch[1])[1]


def default_modules(model: nn.Module) -> list[str]:
    """Modules worth watching: every module that owns parameters (embeddings, linears,
    norms), plus residual branches (``...attn``/``...mlp``) and blocks (the residual
    stream), which is what the mup coordinate checks plot."""
    names = []
    for name, module in model.named_modules():
        if not name:
            continue
        owns = any(True for _ in module.parameters(recurse=False))
        branch = re.fullmatch(r"(.*\.)?\d+(\.(attn|mlp))?", name) is not None
        if owns or branch:
            names.append(name)
    return names


def _depth_alias(model: nn.Module, name: str) -> str:
    """Name the last item of a ModuleList ``last`` (blocks.7 -> blocks.last), so modules
    line up across depths: the last block's residual stream is where depth blow-up shows."""
    parts, module, out = name.split("."), model, []
    for part in parts:
        child = module.get_submodule(part)
        if isinstance(module, nn.ModuleList) and part == str(len(module) - 1):
            out.append("last")
        else:
            out.append(part)
        module = child
    return ".".join(out)


@dataclass
class CoordCheckResult:
    """Tidy records and the verdict of a coordinate check."""

    parametrization: str
    data: pd.DataFrame
    """One row per (width, depth, seed, module, step) with the l1 activation size."""
    slopes: pd.DataFrame
    """One row per (axis, depth or width held fixed, module, step) with the log2 slope."""
    tol: float
    settings: dict[str, Any] = field(default_factory=dict)
    readout_modules: tuple[str, ...] = ()
    """The readout modules whose logits μP shrinks like width^-1/2 at init (``constant``
    readouts, and readouts tied to the embedding, whose init is the input's, under any
    ``readout_init``; not the default ``fan_in`` readout; :func:`shrinking_readouts`)."""
    normalized_modules: tuple[str, ...] = ()
    """Modules whose output a post-norm block divides out (OLMo-2, Gemma-2: the attention,
    the MLP and their output projections, :func:`mutransfer.parametrize.parametrization.post_normed`):
    the model is the same function at any scale of them, so they may shrink with width; the
    norm's own output, which is what the residual stream gets, is judged as any module."""

    def lower_bounds(self) -> pd.Series:
        """Per slope row, the most negative slope allowed: -tol along width, -(1/2 + tol)
        for the :attr:`readout_modules` (a μP readout whose init shrinks its logits:
        ``constant``, a tied one, and in the audit every readout of the user's, whose law
        may be any of the allowed range), -inf for the :attr:`normalized_modules` and along
        depth (see the module docstring)."""
        s = self.slopes
        low = pd.Series(-self.tol, index=s.index, dtype=float)
        low[s["axis"] != "width"] = -math.inf
        if self.parametrization != "sp" and self.readout_modules:
            readout = (s["axis"] == "width") & s["module"].isin(self.readout_modules)
            low[readout] = -(0.5 + self.tol)
        if self.normalized_modules:
            low[s["module"].isin(self.normalized_modules)] = -math.inf
        return low

    def out_of_band(self) -> pd.DataFrame:
        """Rows (module, step) whose seed-mean slope lies outside the band by more than
        :data:`SEED_Z` standard errors of the seeds' own slopes (one seed: any excess):
        growing (slope > tol) or vanishing (slope <= the lower bound)."""
        s = self.slopes
        se = self._seed_se()
        high, low = s["slope"] - SEED_Z * se, s["slope"] + SEED_Z * se
        return s[(high > self.tol) | ((low <= self.lower_bounds()) & (s["slope"] <= self.lower_bounds()))]

    def violations(self) -> pd.DataFrame:
        """The out-of-band rows (:meth:`out_of_band`) of the modules that fail: a module
        fails when it is out of band at :data:`PERSISTENT_STEPS` (2) or more of its steps,
        or at its last step (its only trained step in a check of 1 step: no later step can
        show an excursion there passing). A width trend (SP's growth, a
        broken multiplier) holds step after step; one step's excursion (a loss spike that
        moves every activation for a step, at one width) is a transient, reported by
        :meth:`transients`, and no longer decides the verdict on its own."""
        out = self.out_of_band()
        if out.empty:
            return out
        keys = [c for c in ("axis", "depth", "width", "module") if c in out.columns]
        steps = self.slopes.groupby(keys, dropna=False)["step"].nunique()
        last = self.slopes.groupby(keys, dropna=False)["step"].max()
        need = steps.clip(upper=PERSISTENT_STEPS + 1) - 1  # 1 trained step: 1; 2+: 2
        count = out.groupby(keys, dropna=False)["step"].transform("nunique")
        idx = pd.MultiIndex.from_frame(out[keys])
        # at the last step a trend that has only just begun cannot be told from a spike (no
        # later step to show it passing): it fails, as SP's growth at a 3-step check does
        at_last = pd.Series(out["step"].to_numpy() == last.reindex(idx).to_numpy(), index=out.index)
        ends_out = at_last.groupby([out[k] for k in keys], dropna=False).transform("any").to_numpy()
        return out[(count.to_numpy() >= need.reindex(idx).to_numpy()) | ends_out]

    def transients(self) -> pd.DataFrame:
        """Out-of-band rows that did not decide the verdict (module out of band at one step)."""
        out, bad = self.out_of_band(), self.violations()
        return out.drop(index=bad.index)

    @property
    def passed(self) -> bool:
        return len(self.violations()) == 0

    def _seed_se(self) -> pd.Series:
        """Per slope row, the standard error of the slope over seeds (the per-seed slopes'
        standard deviation / sqrt(seeds)); 0 with one seed."""
        if "seed" not in self.data.columns or self.data["seed"].nunique() < 2:
            return pd.Series(0.0, index=self.slopes.index)
        per_seed = [fit_slopes(g).assign(seed=seed) for seed, g in self.data.groupby("seed")]
        ps = pd.concat([p for p in per_seed if not p.empty], ignore_index=True)
        keys = [c for c in ("axis", "depth", "width", "module", "step") if c in self.slopes.columns]
        se = ps.groupby(keys, dropna=False)["slope"].agg(lambda x: float(np.std(x, ddof=1) / np.sqrt(len(x)))
                                                          if len(x) > 1 else 0.0)
        idx = pd.MultiIndex.from_frame(self.slopes[keys])
        return pd.Series(se.reindex(idx).fillna(0.0).to_numpy(), index=self.slopes.index)

    def max_slopes(self, axis: str = "width") -> dict[str, float]:
        """Largest slope over steps, per module, along ``axis``."""
        s = self.slopes[self.slopes["axis"] == axis]
        return {str(k): float(v) for k, v in s.groupby("module")["slope"].max().items()}

    def to_json_dict(self) -> dict[str, Any]:
        transients = self.transients()
        out: dict[str, Any] = {
            "parametrization": self.parametrization,
            "passed": self.passed,
            "tol": self.tol,
            "slopes": self.max_slopes("width"),
            "worst": self.worst(),
            "verdict_rule": (f"a module fails when its slope is out of band at {PERSISTENT_STEPS}+ steps "
                             f"(or at its last step) by more than {SEED_Z:g} standard error(s) of the "
                             "seeds' slopes"),
            "transients": [{k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()}
                           for _, r in transients.iterrows()],
            "settings": self.settings,
        }
        if self.normalized_modules:  # judged for growth only: a post-norm divides their scale out
            out["normalized_modules"] = list(self.normalized_modules)
        if (self.slopes["axis"] == "depth").any():
            out["depth_slopes"] = self.max_slopes("depth")
        return out

    def worst(self) -> dict[str, Any]:
        """The row closest to (or furthest past) its bound: growing or vanishing."""
        s = self.slopes
        margin = (s["slope"] / self.tol).where(s["slope"] >= 0, s["slope"] / self.lower_bounds())
        row = s.loc[margin.idxmax()]
        return {k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()}

    def write(self, out_dir: str | Path, plot: bool = True) -> dict[str, Path]:
        """Write coord_check.csv, coord_check.json and (optionally) coord_check.png."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = {"csv": out / "coord_check.csv", "json": out / "coord_check.json"}
        with atomic_path(paths["csv"]) as tmp:
            self.data.to_csv(tmp, index=False)
        atomic_write_text(paths["json"], json.dumps(self.to_json_dict(), indent=2, default=float) + "\n")
        if plot:
            paths["png"] = self.plot(out / "coord_check.png")
        return paths

    def plot(self, path: str | Path, axis: str = "width") -> Path:
        """One panel per step: mean l1 against width (log-log), a line per module, and a
        legend naming every line."""
        import matplotlib.pyplot as plt

        fig = self.figure(axis)
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=110, format="png", bbox_inches="tight")
        plt.close(fig)
        return Path(path)

    def figure(self, axis: str = "width") -> Any:
        """The matplotlib Figure :meth:`plot` saves (the caller closes it)."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        df = self.data
        fixed = "depth" if axis == "width" else "width"
        df = df[df[fixed] == df[fixed].max()]
        mean = df.groupby([axis, "module", "step"], as_index=False)["l1"].mean()
        steps = sorted(mean["step"].unique())
        fig, axes = plt.subplots(1, len(steps), figsize=(3.2 * len(steps), 3.4), sharey=True,
                                 squeeze=False)
        for ax, step in zip(axes[0], steps):
            d = mean[mean["step"] == step]
            for module, g in d.groupby("module"):
                ax.plot(g[axis], g["l1"], marker="o", ms=3, lw=1, label=str(module))
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(f"step {step}")
            ax.set_xlabel(axis)
        axes[0][0].set_ylabel("mean |activation|")
        verdict = "passed" if self.passed else "FAILED"
        fig.suptitle(f"coord check: {self.parametrization} ({verdict}, worst slope "
                     f"{self.worst()['slope']:.2f}, tol ±{self.tol:.2f})")
        fig.tight_layout()
        # One legend for the figure, every module named; long lists wrap into columns.
        handles, labels = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, labels, fontsize=5, loc="center left", bbox_to_anchor=(1.0, 0.5),
                   ncol=max(1, math.ceil(len(labels) / 40)), title="module", title_fontsize=6)
        return fig


TOL_INF = 0.25
"""The band of the fitted slope on an infinitely wide ladder: a quarter power."""
PERSISTENT_STEPS = 2
"""Steps at which a module must be out of band to fail (:meth:`CoordCheckResult.violations`):
a width trend holds step after step, a transient (one step's loss spike) does not."""
SEED_Z = 1.0
"""Standard errors of the per-seed slopes a slope must clear the band by to count as out
of band (with 2+ seeds): the seeds' own spread is not a width trend."""
FINITE_WIDTH_KAPPA = 4.5
"""κ of :func:`ladder_tol`: a correct μP's log2 activation size may sit up to κ/sqrt(width)
from its infinite-width value (1.74× at width 32, 1.10× at 1024)."""


def ladder_tol(widths: Sequence[int], tol_inf: float = TOL_INF, kappa: float = FINITE_WIDTH_KAPPA) -> float:
    """The coordinate check's default tolerance on a ladder of ``widths``.

    ``tol = tol_inf + kappa · |beta|`` with ``beta = sum_i c_i · w_i^-1/2``,
    ``c_i = (x_i - mean x) / sum_j (x_j - mean x)^2`` and ``x_i = log2 w_i``.

    Where it comes from: the check fits the ordinary least-squares slope
    ``sum_i c_i · y_i`` of ``y_i = log2 l1(w_i)``. Under a correct μP the activation size
    tends to a width-independent limit, and at finite width it deviates from it by the
    leading correction of order width^-1/2 (Tensor Programs: a width-n network's
    coordinates are their infinite-width values plus O(n^-1/2) fluctuations; Yang 2019,
    "Tensor Programs I", and for trained networks Bordelon & Pehlevan 2023, "Dynamics of
    finite width kernel and prediction fluctuations in mean field neural networks"). With
    ``y_i = a + kappa · w_i^-1/2`` the fitted slope is ``kappa · beta`` instead of 0: the
    allowance. It is largest on short ladders that start small (|beta| = 0.038 over 32-256,
    0.027 over 64-512, 0.019 over 128-1024) and tends to 0 as the ladder moves up, so the
    band tends to ``tol_inf``; one width gives ``tol_inf``.

    Constants: ``tol_inf`` 0.25 (the band this check always had). ``kappa`` 4.5, set
    between what a correct model needs and what the check must still catch: tiny Hugging
    Face GPT-2 under μP at lr 1e-2 (3 Adam steps on one batch, 1 seed) reads -0.40 over
    32-256, which needs kappa >= 4.1 (= (0.40 - 0.25) / 0.038); a width^0.5 law (Gemma2's
    uncompensated embedding scale, 0.495 over 32-128) must fail, which needs kappa < 5.5
    (= (0.495 - 0.25) / 0.044); the audit's broken variants (0.56 and up over 32-256) fail
    up to kappa 8.2. The measured amplitude agrees: |log2 l1(w) - log2 l1(1024)| · sqrt(w)
    reaches 4-6 at widths 32-64 on GPT-2, Qwen2 and Mixtral with 3 seeds (6-8 with one,
    seed noise included; ``python -m benchmarks.hf_vanishing --seeds 3``).

    Scope: the finite-width correction grows with the Adam step against the init (lr /
    init std at the base width: 0.5 for Hugging Face's std 0.02 at lr 1e-2; 0.06 for our
    GPT at lr 1e-2). Far beyond 0.5 (our GPT at lr 1e-1: -0.49 over 32-256) the smallest
    widths leave the limit further than this allows and the check fails: start the ladder
    at 64 or lower the LR.
    """
    ws = np.array(sorted({int(w) for w in widths}), dtype=float)
    if not (math.isfinite(tol_inf) and tol_inf > 0 and math.isfinite(kappa) and kappa >= 0):
        raise ValueError(f"tol_inf must be > 0 and kappa >= 0, got tol_inf={tol_inf!r}, kappa={kappa!r}")
    if len(ws) and ws.min() < 1:
        raise ValueError(f"widths must be positive, got {list(widths)}")
    if len(ws) < 2:
        return float(tol_inf)
    x = np.log2(ws)
    c = (x - x.mean()) / float(((x - x.mean()) ** 2).sum())
    return float(tol_inf + kappa * abs(float((c * ws**-0.5).sum())))


#: The default Adam LR of the check on a model that is not ours, as a share of its init:
#: ``lr = LR_PER_INIT_STD × init std`` (:func:`default_lr`). The finite-width correction the
#: check allows for grows with the first steps' size against the init (:func:`ladder_tol`);
#: at lr 1e-2 a Hugging Face model (std 0.02: the step is half the init) failed a correct μP
#: on real shapes (Llama-3.2-1B's at 16 layers +0.82, at 2 layers -0.50; Qwen2.5-0.5B's
#: -0.39). At 0.1 × std, 2e-3 for std 0.02, μP passes and SP fails on six families at their
#: released shapes (``benchmarks/hf_coord_default.py``, results/hf_coord_default.json). Our
#: presets keep 1e-2 (their init is ~6× larger: the same share).
LR_PER_INIT_STD = 0.1


def init_std(model: nn.Module) -> float:
    """The median standard deviation of a model's weight matrices (every parameter of two
    or more dimensions) at init: the scale its first Adam steps are measured against."""
    stds = [float(p.detach().float().std()) for p in model.parameters() if p.dim() >= 2 and p.numel() > 1]
    stds = [s for s in stds if math.isfinite(s) and s > 0]
    if not stds:
        raise ValueError("the model has no weight matrix with a nonzero init to scale the LR to; give --lr")
    return float(np.median(stds))


def default_lr(model: nn.Module, optimizer: str = "adamw") -> float:
    """The check's LR for a model that is not ours: ``LR_PER_INIT_STD × init_std(model)``
    (2e-3 for Hugging Face's std 0.02) for Adam and Muon, 0.1 for SGD."""
    if optimizer == "sgd":
        return 0.1
    return float(f"{LR_PER_INIT_STD * init_std(model):.2g}")  # 2e-3, not 2.0004e-3


def _slope(x: np.ndarray, y: np.ndarray) -> float:
    lx, ly = np.log2(x), np.log2(np.maximum(y, 1e-30))
    return float(np.polyfit(lx, ly, 1)[0])


def fit_slopes(data: pd.DataFrame) -> pd.DataFrame:
    """log2 slope of the seed-mean l1 against width (per depth) and against depth (per
    width), for each module and step."""
    mean = data.groupby(["width", "depth", "module", "step"], as_index=False)["l1"].mean()
    rows = []
    for axis, fixed in (("width", "depth"), ("depth", "width")):
        if mean[axis].nunique() < 2:
            continue
        for (f, module, step), g in mean.groupby([fixed, "module", "step"]):
            # Only modules present at every point of the ladder: blocks.6 exists only at
            # depth >= 7, and a 2-point slope from the deep end is noise, not a trend.
            if g[axis].nunique() < mean[axis].nunique():
                continue
            rows.append({"axis": axis, fixed: f, "module": module, "step": step,
                         "slope": _slope(g[axis].to_numpy(float), g["l1"].to_numpy(float))})
    return pd.DataFrame(rows)


def record_activations(model: nn.Module, opt: Any, batch: Any,
                       loss_fn: Callable[[nn.Module, Any], torch.Tensor],
                       watched: Sequence[str], steps: int) -> list[tuple[int, str, float, float]]:
    """Train ``steps`` steps on ``batch`` and return (step, module, l1, loss) for every
    watched module before each update and after the last (step 0 is the init)."""
    current: dict[str, float] = {}
    handles = []
    for name in watched:
        def hook(_m: nn.Module, _a: Any, out: Any, name: str = name) -> None:
            t = out[0] if isinstance(out, tuple) else out
            current[name] = float(t.detach().abs().float().mean())
        handles.append(model.get_submodule(name).register_forward_hook(hook))
    out: list[tuple[int, str, float, float]] = []
    try:
        for step in range(steps + 1):
            current.clear()
            if step < steps:
                loss = loss_fn(model, batch)
                loss.backward()
                opt.step()
                opt.zero_grad()
            else:
                with torch.no_grad():
                    loss = loss_fn(model, batch)
            out.extend((step, name, l1, float(loss.detach())) for name, l1 in current.items())
    finally:
        for h in handles:
            h.remove()
    return out


def coord_check(
    builder: Callable[..., nn.Module],
    batch: Batch | Callable[[], Batch],
    *,
    kind: str = "mup",
    widths: Sequence[int] = (64, 128, 256, 512),
    base_width: int | None = None,
    depths: Sequence[int] | None = None,
    base_depth: int | None = None,
    depth_alpha: float = 1.0,
    steps: int = 5,
    seeds: int | Sequence[int] = 3,
    optimizer: str = "adamw",
    lr: float = 1e-2,
    multipliers: Multipliers | None = None,
    rules: Sequence[tuple[str, str]] = (),
    readout_init: str = DEFAULT_READOUT_INIT,
    loss_fn: LossFn = gpt_loss,
    modules: Callable[[nn.Module], list[str]] = default_modules,
    tol: float | None = None,
    progress: Callable[[], None] | None = None,
    adapt_lr: bool = False,
) -> CoordCheckResult:
    """Run the check. ``builder(width)`` (or ``builder(width, depth)`` when ``depths`` is
    given) builds a model; ``batch`` is the single (inputs, targets) batch fed at every
    step and width. Records l1 before each of ``steps`` updates and after the last, so
    step 0 is the init. ``rules`` are the Parametrization's ordered ``(regex, role)``
    overrides, for models whose roles cannot all be inferred. ``readout_init`` is the
    Parametrization's; under ``fan_in`` (the default) the readout's logits keep SP's
    width-independent init scale, so the readout gets no allowance for vanishing; under
    ``constant`` they shrink as width^-1/2 at init and may (see :meth:`lower_bounds`).
    ``tol`` None (the default) is :func:`ladder_tol` of ``widths``.

    ``adapt_lr``: when the run itself is unstable at ``lr`` (:func:`unstable`: a non-finite
    activation or loss, or a loss that ends above its init at some width and seed), the
    check is run again at ``lr`` / :data:`LR_BACKOFF`, up to :data:`MAX_BACKOFFS` times;
    ``settings["lr_lowered"]`` records each lowering and why, and ``settings["lr"]`` is
    the LR the verdict was taken at. An unstable run says nothing about width-stability:
    its coordinates move with the instability, not with width. Without it, a non-finite
    activation is an error naming the module."""
    widths = sorted({int(w) for w in widths})
    if len(widths) < 2 and not (depths and len(set(depths)) >= 2):
        raise ValueError(f"a coordinate check needs at least 2 widths (or depths), got {widths}")
    # a count (seeds 0..n-1) or the seeds themselves, as the CLI's --n-seeds / --seeds
    seed_list = list(range(seeds)) if isinstance(seeds, int) else [int(x) for x in seeds]
    if steps < 1 or not seed_list:
        raise ValueError(f"steps must be >= 1 and there must be a seed, got steps={steps}, seeds={seeds}")
    if not (math.isfinite(lr) and lr > 0):
        raise ValueError(f"learning rate must be a positive finite number, got {lr!r}")
    if tol is not None and not (math.isfinite(tol) and tol > 0):
        raise ValueError(f"tol must be a positive finite number, got {tol!r}")
    tol_rule = "fixed" if tol is not None else f"ladder: {TOL_INF} + {FINITE_WIDTH_KAPPA} |beta(widths)|"
    tol = ladder_tol(widths) if tol is None else float(tol)
    base_width = base_width or widths[0]
    depth_list: list[int | None] = sorted({int(d) for d in depths}) if depths else [None]
    if depths:
        base_depth = base_depth or min(d for d in depth_list if d is not None)
    lowered: list[dict[str, Any]] = []
    while True:
        data, readouts, normalized = _measure(
            builder, batch, kind=kind, widths=widths, base_width=base_width, depth_list=depth_list,
            base_depth=base_depth, depth_alpha=depth_alpha, steps=steps, seed_list=seed_list,
            optimizer=optimizer, lr=lr, multipliers=multipliers, rules=rules, readout_init=readout_init,
            loss_fn=loss_fn, modules=modules, progress=progress)
        why = unstable(data) if adapt_lr else None
        if why is None or len(lowered) >= MAX_BACKOFFS:
            break
        lowered.append({"lr": lr, "why": why, "to": lr / LR_BACKOFF})
        lr /= LR_BACKOFF
    bad = data[~np.isfinite(data["l1"])]
    if len(bad):
        r = bad.iloc[0]
        raise ValueError(f"non-finite activation in {r['module']} at width {r['width']}, step "
                         f"{r['step']}: lower the learning rate (lr={lr})")
    settings = {"widths": widths, "depths": [d for d in depth_list if d], "steps": steps,
                "seeds": seeds, "optimizer": optimizer, "lr": lr, "base_width": base_width,
                "base_depth": base_depth, "depth_alpha": depth_alpha,
                "rules": [list(r) for r in rules], "readout_init": readout_init, "tol_rule": tol_rule}
    if adapt_lr:
        settings["lr_lowered"] = lowered
        if lowered and unstable(data):
            settings["unstable"] = unstable(data)
    return CoordCheckResult(kind, data, fit_slopes(data), tol, settings, tuple(sorted(readouts)),
                            tuple(sorted(normalized)))


#: How much :func:`coord_check`'s ``adapt_lr`` lowers an unstable run's LR each time, and
#: how many times at most (so 4^3 = 64x below the asked LR).
LR_BACKOFF = 4.0
MAX_BACKOFFS = 3
#: A loss this much above its init value at the last step is an unstable run.
UNSTABLE_LOSS_RISE = 1.05


def unstable(data: pd.DataFrame) -> str | None:
    """Why a coordinate-check run is unstable at its smallest width, or None: a non-finite
    activation or loss, or a seed whose loss after its last update is more than
    :data:`UNSTABLE_LOSS_RISE` × its loss at init (the updates made the fit to the one
    batch worse: the LR is past the edge of stability for the model itself). Only the
    smallest width (and depth) is judged: there every parametrization is the same model,
    so instability there is the LR's; instability that appears only wider is the width
    effect the check exists to find (SP's), and lowering the LR for it would hide it."""
    data = data[(data["width"] == data["width"].min()) & (data["depth"] == data["depth"].min())]
    if not np.isfinite(data["l1"]).all() or not np.isfinite(data["loss"]).all():
        r = data[~(np.isfinite(data["l1"]) & np.isfinite(data["loss"]))].iloc[0]
        return f"non-finite activation or loss at width {r['width']}, step {r['step']} ({r['module']})"
    per = data.groupby(["width", "depth", "seed", "step"])["loss"].first().unstack("step")
    first, last = per[per.columns.min()], per[per.columns.max()]
    rise = (last / first).sort_values(ascending=False)
    if len(rise) and rise.iloc[0] > UNSTABLE_LOSS_RISE:
        w, d, sd = rise.index[0]
        return (f"the loss rose from {first[rise.index[0]]:.3g} at init to {last[rise.index[0]]:.3g} at width {w}"
                + (f", depth {d}" if d else "") + f", seed {sd}")
    return None


def _measure(builder: Callable[..., nn.Module], batch: Batch | Callable[[], Batch], *, kind: str,
             widths: list[int], base_width: int, depth_list: list[int | None], base_depth: int | None,
             depth_alpha: float, steps: int, seed_list: list[int], optimizer: str, lr: float,
             multipliers: Multipliers | None, rules: Sequence[tuple[str, str]], readout_init: str,
             loss_fn: LossFn, modules: Callable[[nn.Module], list[str]],
             progress: Callable[[], None] | None) -> tuple[pd.DataFrame, set[str], set[str]]:
    """One run of the check at ``lr``: (the coordinates, the readouts that may shrink, the
    modules a norm follows)."""
    rule_set = "sgd" if optimizer == "sgd" else "adam"
    get_batch = batch if callable(batch) else (lambda: batch)
    records: list[dict[str, Any]] = []
    readouts: set[str] = set()
    normalized: set[str] = set()
    for depth in depth_list:
        for width in widths:
            pz = Parametrization(
                builder, width=width, base_width=min(base_width, width), kind=kind,
                optimizer=rule_set, depth=depth, base_depth=base_depth if depth else None,
                depth_alpha=depth_alpha, multipliers=multipliers, rules=rules,
                readout_init=readout_init)
            for seed in seed_list:
                model = pz.build(seed=seed)
                readouts.update(_depth_alias(model, n) if depth else n for n in shrinking_readouts(pz))
                normalized.update(_depth_alias(model, n) if depth else n for n in post_normed(model))
                opt = build_optimizer(pz.param_groups(model, lr), optimizer)
                watched = modules(model)
                alias = {n: _depth_alias(model, n) if depth else n for n in watched}
                for step, name, l1, loss in record_activations(model, opt, get_batch(), loss_fn,
                                                               watched, steps):
                    records.append({"width": width, "depth": depth or 0, "seed": seed,
                                    "module": alias[name], "step": step, "l1": l1, "loss": loss})
                if progress is not None:
                    progress()
    return pd.DataFrame(records), readouts, normalized


def shrinking_readouts(pz: Parametrization) -> tuple[str, ...]:
    """The readout modules whose logits μP shrinks like width^-1/2 at init: every readout
    under ``readout_init`` ``constant`` (or ``zero``), and under ``fan_in`` those tied to the
    embedding (their matrix is the input's, whose init must not grow with width, so the
    fan-in law cannot reach them and they keep the constant readout's shrink)."""
    if pz.kind == "sp":
        return ()
    if pz.readout_init != "fan_in":
        return pz.readout_modules
    return tuple(m for m in pz.readout_modules
                 if not any(pz.specs[p].role == "output" for p in pz._params_of_module.get(m, ())))


__all__ = ["FINITE_WIDTH_KAPPA", "TOL_INF", "CoordCheckResult", "coord_check", "default_modules",
           "default_lr", "fit_slopes", "gpt_loss", "init_std", "ladder_tol", "record_activations",
           "shrinking_readouts"]
