"""Fixtures of the card tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from dataclasses import fields

from mutransfer.card.build import MadeCard, assemble_card
from mutransfer.card.plan import RunPlan, plan_run
from mutransfer.card.request import ProxyPoint, RunChoices


def _titan_llama(cfg: dict[str, Any], theta: float) -> Any:
    """torchtitan's llama3 config for an HF Llama config ``cfg``, with torchtitan's own
    param_init (its model registry's: embedding std 1, heads trunc-normal dim^-1/2,
    wq/wk/wv/w1 0.02, wo/w2/w3 depth-scaled), q/k/v unfused so that a card's names fit."""
    L = pytest.importorskip("torchtitan.models.llama3", reason="torchtitan's llama3 needs triton")
    from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm

    dim, v, heads = cfg["hidden_size"], cfg["vocab_size"], cfg["num_attention_heads"]
    return L.Llama3Model.Config(
        dim=dim, vocab_size=v,
        tok_embeddings=Embedding.Config(num_embeddings=v, embedding_dim=dim, param_init=L._EMBEDDING_INIT),
        norm=RMSNorm.Config(normalized_shape=dim, param_init=L._NORM_INIT),
        lm_head=Linear.Config(in_features=dim, out_features=v, param_init=L._output_linear_init(dim)),
        layers=L._build_llama3_layers(
            fuse_qkv=False, n_layers=cfg["num_hidden_layers"], dim=dim, n_heads=heads,
            n_kv_heads=cfg["num_key_value_heads"], hidden_dim=cfg["intermediate_size"], attn_backend="flex",
            rope=ComplexRoPE.Config(dim=dim // heads, max_seq_len=64, theta=theta, scaling="none")))


@pytest.fixture
def titan_llama() -> Callable[[dict[str, Any], float], Any]:
    """The builder of torchtitan's own-init llama3 config for an HF Llama config."""
    return _titan_llama


# ---- the planner and the card's assembly with flat keywords, as the card tests write their
# cases: each keyword goes to the request object that holds it (ProxyPoint, RunChoices) and
# the rest to the function, so a misspelt keyword is still a TypeError.
#: Flat keyword -> ProxyPoint field.
PROXY = {"proxy_lr": "lr", "proxy_lr_interval": "lr_interval", "proxy_batch_tokens": "batch_tokens",
         "proxy_tokens": "tokens", "proxy_tau": "tau", "proxy_weight_decay": "weight_decay",
         "betas": "betas", "eps": "eps",
         "beta2_halflife_tokens": "beta2_halflife_tokens", "role_lr_mults": "role_lr_mults"}


def split(kw: dict[str, Any]) -> tuple[ProxyPoint, RunChoices, dict[str, Any]]:
    """(the proxy point, the run's choices, the other keywords) of flat keywords."""
    rest = dict(kw)
    proxy = {PROXY[k]: rest.pop(k) for k in list(rest) if k in PROXY}
    if "beta2" in rest:  # the planner's old beta2 keyword: the proxy's betas
        proxy["betas"] = (0.9, rest.pop("beta2"))
    run_names = {f.name for f in fields(RunChoices)}
    run = {k: rest.pop(k) for k in list(rest) if k in run_names}
    if run.get("accept_edge") is not None:
        run["accept_edge"] = tuple(run["accept_edge"])
    return ProxyPoint(**proxy), RunChoices(**run), rest


def _plan_kw(**kw: Any) -> RunPlan:
    """:func:`plan_run` on flat keywords."""
    proxy, run, rest = split(kw)
    return plan_run(proxy, run, **rest)


def _assemble_kw(pz: Any, target: Any, **kw: Any) -> MadeCard:
    """:func:`assemble_card` on flat keywords."""
    proxy, run, rest = split(kw)
    return assemble_card(pz, target, proxy, run, **rest)


@pytest.fixture
def plan_kw() -> Callable[..., RunPlan]:
    """:func:`mutransfer.card.plan.plan_run` on flat keywords."""
    return _plan_kw


@pytest.fixture
def assemble_kw() -> Callable[..., MadeCard]:
    """:func:`mutransfer.card.build.assemble_card` on flat keywords."""
    return _assemble_kw
