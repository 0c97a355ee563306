"""Muon over a stack of fused members (mutransfer.training.optim.muon_step_batched): an oracle
test against torch.optim.Muon stepping each member alone."""

from __future__ import annotations

import pytest
import torch

from mutransfer.training.optim import muon_step_batched, newton_schulz_batched


def test_newton_schulz_batched_is_torchs_per_matrix() -> None:
    from torch.optim._muon import DEFAULT_A, DEFAULT_B, DEFAULT_C, EPS, _zeropower_via_newtonschulz

    torch.manual_seed(0)
    coeffs = (DEFAULT_A, DEFAULT_B, DEFAULT_C)
    for shape in ((4, 8, 12), (3, 12, 8)):  # wide and tall (transposed inside)
        g = torch.randn(shape)
        got = newton_schulz_batched(g, coeffs, 5, EPS)
        for i in range(shape[0]):
            want = _zeropower_via_newtonschulz(g[i], coeffs, 5, EPS)
            torch.testing.assert_close(got[i], want, rtol=0, atol=0)


@pytest.mark.parametrize("nesterov", [True, False])
def test_muon_step_batched_matches_torch_muon_per_member(nesterov: bool) -> None:
    """Members at different LRs, weight decays, momenta and adjust_lr_fn factors (a wide
    and a tall matrix): four steps of the batched step equal torch.optim.Muon's."""
    torch.manual_seed(1)
    hyper = [dict(lr=0.02, weight_decay=0.0, momentum=0.95), dict(lr=0.1, weight_decay=0.1, momentum=0.9),
             dict(lr=0.005, weight_decay=0.01, momentum=0.5)]
    init = [[torch.randn(8, 12), torch.randn(16, 8)] for _ in hyper]
    grads = [[[torch.randn(8, 12), torch.randn(16, 8)] for _ in hyper] for _ in range(4)]

    def make(params: list[torch.Tensor], h: dict) -> torch.optim.Muon:
        return torch.optim.Muon(params, nesterov=nesterov, adjust_lr_fn="original", **h)

    ref_p = [[p.clone() for p in ps] for ps in init]
    ref = [make(ps, h) for ps, h in zip(ref_p, hyper)]
    # The fused layout: one stack per parameter, each member's tensors views of it.
    stacks = [torch.stack([ps[i] for ps in init]) for i in range(2)]
    got_p = [[torch.nn.Parameter(stacks[i][j]) for i in range(2)] for j in range(len(hyper))]
    for j, ps in enumerate(got_p):
        for i, p in enumerate(ps):
            p.data = stacks[i][j]
    got = [make(ps, h) for ps, h in zip(got_p, hyper)]
    for step_grads in grads:
        for j, gs in enumerate(step_grads):
            for p, q, g in zip(ref_p[j], got_p[j], gs):
                p.grad, q.grad = g.clone(), g.clone()
            ref[j].step()
        muon_step_batched(got)
        for j in range(len(hyper)):
            for p, q in zip(ref_p[j], got_p[j]):
                torch.testing.assert_close(q.detach(), p.detach(), rtol=0, atol=0)
    # The stacks were updated in place through the members' views.
    torch.testing.assert_close(stacks[0][1], ref_p[1][0].detach(), rtol=0, atol=0)
    assert set(got[0].state[got_p[0][0]]) == {"momentum_buffer"}


def test_muon_step_batched_refuses_members_that_differ_in_the_iteration() -> None:
    ps = [torch.nn.Parameter(torch.randn(4, 4)) for _ in range(2)]
    for p in ps:
        p.grad = torch.randn(4, 4)
    opts = [torch.optim.Muon([ps[0]], ns_steps=5), torch.optim.Muon([ps[1]], ns_steps=3)]
    with pytest.raises(ValueError, match="ns_steps"):
        muon_step_batched(opts)


def test_muon_step_batched_pairs_parameters_not_groups() -> None:
    """Members may split their parameters into param groups differently (a μP multiplier
    that coincides at one width merges two groups); the step pairs them by the given
    order and still equals torch.optim.Muon per member."""
    torch.manual_seed(2)
    shapes = [(8, 12), (16, 8)]
    init = [[torch.randn(s) for s in shapes] for _ in range(2)]
    grads = [[torch.randn(s) for s in shapes] for _ in range(2)]
    ref_p = [[p.clone() for p in ps] for ps in init]
    got_p = [[torch.nn.Parameter(p.clone()) for p in ps] for ps in init]
    ref = [torch.optim.Muon(ps, lr=0.05, adjust_lr_fn="original") for ps in ref_p]
    # member 0: one group; member 1: two groups, listed in the opposite order
    got = [torch.optim.Muon(got_p[0], lr=0.05, adjust_lr_fn="original"),
           torch.optim.Muon([{"params": [got_p[1][1]]}, {"params": [got_p[1][0]]}], lr=0.05,
                            adjust_lr_fn="original")]
    for j in range(2):
        for p, q, g in zip(ref_p[j], got_p[j], grads[j]):
            p.grad, q.grad = g.clone(), g.clone()
        ref[j].step()
    muon_step_batched(got, [got_p[0], got_p[1]])
    for j in range(2):
        for p, q in zip(ref_p[j], got_p[j]):
            torch.testing.assert_close(q.detach(), p.detach(), rtol=0, atol=0)
