"""The GPT forward's member dimension: a model holding K stacked parameter sets computes
what the K plain models compute, member by member, to the last bit on CPU."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from mutransfer.models.gpt import GPT, GPTConfig


def _stacked(models: list[GPT]) -> GPT:
    """A GPT whose parameters are the models' parameters stacked along a new dim 0."""
    with torch.device("meta"):
        out = GPT(models[0].cfg)
    params = [dict(m.named_parameters()) for m in models]
    name_of = {id(p): n for n, p in models[0].named_parameters()}
    stacks = {n: nn.Parameter(torch.stack([ps[n].detach() for ps in params])) for n in params[0]}
    for mname, mod in models[0].named_modules():
        for leaf, p in mod._parameters.items():
            if p is not None:  # a tied matrix gets the same stack in both of its modules
                out.get_submodule(mname)._parameters[leaf] = stacks[name_of[id(p)]]
    for bname, buf in models[0].named_buffers():
        mname, _, leaf = bname.rpartition(".")
        out.get_submodule(mname)._buffers[leaf] = buf
    return out


OTHER_ARCH = dict(pos_emb="learned", tie_embeddings=True, qk_norm=True, bias=True, logit_softcap=20.0,
                  z_loss=1e-3)


@pytest.mark.parametrize("arch", [dict(), OTHER_ARCH])
def test_stacked_forward_equals_each_plain_model(arch: dict) -> None:
    cfg = GPTConfig(vocab_size=64, seq_len=16, width=32, depth=2, head_dim=8, **arch)
    models = []
    for seed, scale in zip((0, 1, 2), (0.5, 0.125, 0.3)):
        torch.manual_seed(seed)
        m = GPT(cfg)
        for block in m.blocks:
            block.attn.softmax_scale = scale  # μP-style per-member attention scales
        models.append(m)
    big = _stacked(models)
    for block in big.blocks:  # per-member scales are data: a [K] tensor
        block.attn.softmax_scale = torch.tensor([0.5, 0.125, 0.3])
        block.attn.track_max_logit = True
    for m in models:
        for block in m.blocks:
            block.attn.track_max_logit = True
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, 64, (3, 4, 16), generator=g)
    tgt = torch.randint(0, 64, (3, 4, 16), generator=g)
    logits, losses = big(idx, tgt)
    assert logits.shape == (3, 4, 16, 64) and losses.shape == (3,)
    losses.sum().backward()
    for k, m in enumerate(models):
        lk, loss = m(idx[k], tgt[k])
        loss.backward()
        assert torch.equal(logits[k], lk)
        assert torch.equal(losses[k], loss)
        assert torch.equal(big.blocks[1].attn.max_logit[k], m.blocks[1].attn.max_logit)
        for name, p in m.named_parameters():  # each member's gradient is its own
            stacked = big.get_parameter(name)
            assert torch.equal(stacked.grad[k], p.grad), name
