"""Hugging Face models (tiny, from configs, random init, no download) under
Parametrization with no user flags: roles, the init law measured from two builds, the
attention scale through the module's own ``scaling``, and μP passing the coordinate check
where SP fails."""

from __future__ import annotations

import math

import pytest
import torch

tf = pytest.importorskip("transformers", reason="the [engines] extra (transformers) is not installed")

from mutransfer.checks.coord_check import coord_check  # noqa: E402
from mutransfer.models.hf_tiny import hf_loss, tiny_builder  # noqa: E402
from mutransfer.parametrize.parametrization import Parametrization  # noqa: E402


def roles(pz: Parametrization) -> dict[str, str]:
    return {n: s.role for n, s in pz.specs.items()}


@pytest.mark.parametrize("tie", [False, True])
def test_llama_roles_init_and_attention(tie: bool) -> None:
    pz = Parametrization(tiny_builder("llama", tie=tie), width=128, base_width=32)
    r = roles(pz)
    assert r["model.embed_tokens.weight"] == "input"
    for proj in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                 "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"):
        assert r[f"model.layers.1.{proj}.weight"] == "hidden", proj
    assert r["model.layers.0.input_layernorm.weight"] == r["model.norm.weight"] == "vector"
    assert ("lm_head.weight" in r) != tie and r.get("lm_head.weight", "output") == "output"
    # The readout multiplier sits on lm_head whether or not it shares the embedding.
    assert pz.forward_multipliers()["hooks"] == [{"module": "lm_head", "kind": "pre", "scale": 0.25}]
    # HF's init is one std for every matrix (fan-in exponent 0): μP's hidden init is
    # rescaled by 1/sqrt(m_in), the readout by sqrt(m_in) (the default fan_in readout; mup's
    # constant readout, named, is kept).
    assert pz.init_exponents["model.layers.0.mlp.up_proj.weight"] == 0.0
    assert pz.specs["model.layers.0.mlp.up_proj.weight"].init == "scale:0.5"
    assert pz.specs["model.layers.0.mlp.down_proj.weight"].init == "scale:0.5"  # fan_in 256 over 64
    if not tie:
        assert pz.specs["lm_head.weight"].init == "scale:2"
        const = Parametrization(tiny_builder("llama", tie=tie), width=128, base_width=32, readout_init="constant")
        assert const.specs["lm_head.weight"].init == "keep"
    model = pz.build(seed=0)
    std = float(model.model.layers[0].mlp.up_proj.weight.std())
    assert std == pytest.approx(0.02 * 0.5, rel=0.05)
    assert float(model.model.embed_tokens.weight.std()) == pytest.approx(0.02, rel=0.05)
    # Head dim fixed at 16: μP's attention scale equals SP's, set on HF's own attribute.
    assert model.model.layers[0].self_attn.scaling == pytest.approx(0.25)


def test_gpt2_conv1d_tied_head_and_growing_head_dim() -> None:
    pz = Parametrization(tiny_builder("gpt2", tie=True), width=128, base_width=32)
    r = roles(pz)
    assert r["transformer.wte.weight"] == r["transformer.wpe.weight"] == "input"
    for p in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"):
        s = pz.specs[f"transformer.h.0.{p}.weight"]
        assert s.role == "hidden" and s.lr_mult == pytest.approx(1 / s.fan_in_mult), p
    # Conv1D weights are (in, out): fan_in is dim 0 (c_fc: 128 -> 512, m_in = 4).
    assert pz.specs["transformer.h.0.mlp.c_proj.weight"].fan_in_mult == 4.0
    assert "lm_head.weight" not in r
    model = pz.build(seed=0)
    # Two heads at every width: the head dim grows 16 -> 64, μP's scale is sqrt(16)/64.
    attn = model.transformer.h[0].attn
    assert attn.head_dim == 64 and attn.scaling == pytest.approx(math.sqrt(16) / 64)
    sp = Parametrization(tiny_builder("gpt2", tie=True), width=128, base_width=32, kind="sp").build(seed=0)
    assert sp.transformer.h[0].attn.scaling == pytest.approx(1 / 8)


def test_qwen2_and_mixtral_roles() -> None:
    r = roles(Parametrization(tiny_builder("qwen2"), width=128, base_width=32))
    assert r["model.layers.0.self_attn.q_proj.bias"] == "vector"
    assert r["model.layers.0.self_attn.q_proj.weight"] == "hidden"
    pz = Parametrization(tiny_builder("mixtral"), width=128, base_width=32)
    r = roles(pz)
    # Expert banks are (experts, out, in) raw tensors: hidden, fan_in the last dim.
    for bank in ("gate_up_proj", "down_proj"):
        s = pz.specs[f"model.layers.0.mlp.experts.{bank}"]
        assert s.role == "hidden" and s.fan_in_mult == 4.0 and s.init == "scale:0.5", bank
    # The router F.linear(hidden, weight (experts, hidden)) is a readout: 1/m on its input.
    assert r["model.layers.0.mlp.gate.weight"] == "output"
    hooks = {h["module"] for h in pz.forward_multipliers()["hooks"]}
    assert hooks == {"lm_head", "model.layers.0.mlp.gate", "model.layers.1.mlp.gate"}


def test_new_architectures_roles_and_attention_scale() -> None:
    for arch in ("mistral", "gemma", "gemma2", "phi3", "olmo2", "gpt_neox"):
        pz = Parametrization(tiny_builder(arch), width=128, base_width=32)
        r = roles(pz)
        assert sum(v == "input" for v in r.values()) == 1, arch
        assert [n for n, v in r.items() if v == "output"] == ["lm_head.weight"], arch
        assert sum(v == "hidden" for v in r.values()) >= 8, arch
        # every attention module found (GPT-NeoX names its head dim head_size), scale 1/sqrt(16)
        att = pz.forward_multipliers()["attention"]
        assert len(att) == 2 and all(v == pytest.approx(0.25) for v in att.values()), (arch, att)


def test_gemma_embedding_scale_is_found_and_compensated() -> None:
    """Gemma/Gemma2 multiply the embeddings by sqrt(hidden_size) in the forward: found as
    width^0.5 on the embedding and divided out relative to the base (scale (32/128)^0.5),
    so the first layer's input is the base width's sqrt(32) times the lookup at any width."""
    for arch in ("gemma", "gemma2"):
        pz = Parametrization(tiny_builder(arch), width=128, base_width=32)
        (im,) = pz.internal_multipliers
        assert im.producer == "model.embed_tokens" and im.consumer is None
        assert im.exponent == pytest.approx(0.5, abs=1e-4) and im.factor == pytest.approx(math.sqrt(32))
        hook = {"module": "model.embed_tokens", "kind": "post", "scale": 0.5}
        assert hook in pz.forward_multipliers()["hooks"]
        model = pz.build(seed=0)
        seen: dict[str, torch.Tensor] = {}

        def grab(_m: torch.nn.Module, a: tuple, kw: dict, seen: dict = seen) -> None:
            seen["x"] = a[0] if a else kw["hidden_states"]
        model.model.layers[0].register_forward_pre_hook(grab, with_kwargs=True)
        ids = torch.randint(0, 128, (2, 8))
        model(input_ids=ids)
        lookup = torch.nn.functional.embedding(ids, model.model.embed_tokens.weight)
        torch.testing.assert_close(seen["x"], lookup * math.sqrt(32))
        # SP is the model as it is
        sp = Parametrization(tiny_builder(arch), width=128, base_width=32, kind="sp")
        assert sp.internal_multipliers == ()


def test_llama_and_gpt2_have_no_width_dependent_internals() -> None:
    for arch in ("llama", "gpt2"):
        assert Parametrization(tiny_builder(arch), width=128, base_width=32).internal_multipliers == ()


class _HiddenSqrtWidth(torch.nn.Module):
    """A toy with ``x * sqrt(width)`` between two layers, outside any module."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(16, width)
        self.fc1, self.fc2 = torch.nn.Linear(width, width), torch.nn.Linear(width, width)
        self.head = torch.nn.Linear(width, 16)
        self.width = width

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(self.emb(x))
        return self.head(torch.relu(self.fc2(h * math.sqrt(self.width))))


def test_a_hidden_sqrt_width_between_modules_is_warned_with_its_module_and_exponent() -> None:
    with pytest.warns(UserWarning, match=r"'fc1' is multiplied by .* width\^0.5 before 'fc2'"):
        pz = Parametrization(_HiddenSqrtWidth, width=64, base_width=16)
    (im,) = pz.internal_multipliers
    assert (im.producer, im.consumer) == ("fc1", "fc2") and im.exponent == pytest.approx(0.5, abs=1e-4)
    # not an embedding's output: reported, not compensated
    assert all(h["module"] != "fc1" for h in pz.forward_multipliers()["hooks"])


@pytest.mark.slow
def test_gemma2_coord_check_fails_without_the_compensation(monkeypatch: pytest.MonkeyPatch) -> None:
    """The compensation is what makes Gemma2 pass: without it the residual stream grows
    like width^0.5 under μP (the slope the check reported before detection existed)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 128, (4, 33), generator=g)
    monkeypatch.setattr(Parametrization, "_absorb_internals", lambda self: None)
    mu = coord_check(tiny_builder("gemma2"), (x[:, :-1], x[:, 1:]), kind="mup", widths=(32, 64, 128),
                     steps=3, seeds=1, lr=3e-3, loss_fn=hf_loss)
    assert not mu.passed and mu.max_slopes()["model.embed_tokens"] == pytest.approx(0.5, abs=0.05)


ARCHS = [("llama", False), ("llama", True), ("qwen2", False), ("gpt2", True), ("mixtral", False),
         ("mistral", False), ("gemma", False), ("gemma2", False), ("phi3", False), ("olmo2", False),
         ("gpt_neox", False)]


@pytest.mark.slow
@pytest.mark.parametrize(("arch", "tie"), ARCHS)
def test_mup_passes_and_sp_fails_the_coord_check(arch: str, tie: bool) -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 128, (4, 33), generator=g)
    kw = dict(widths=(32, 64, 128, 256), steps=3, seeds=1, lr=3e-3, loss_fn=hf_loss)
    builder = tiny_builder(arch, tie=tie)
    mu = coord_check(builder, (x[:, :-1], x[:, 1:]), kind="mup", **kw)
    sp = coord_check(builder, (x[:, :-1], x[:, 1:]), kind="sp", **kw)
    assert mu.passed, mu.violations()
    assert not sp.passed and sp.slopes["slope"].max() > 1.0


def test_the_audit_reports_a_hidden_multiplier_between_modules() -> None:
    from mutransfer.checks.audit import audit

    res = audit(_HiddenSqrtWidth, lambda m: torch.optim.AdamW(m.parameters(), lr=1e-3), widths=(16, 32, 64),
                coord_check=False)
    (row,) = [r for r in res.rows if r.role == "internal"]
    assert row.name == "fc1 -> fc2" and row.verdict == "n/a"
    assert row.found["mult"] == pytest.approx(0.5, abs=1e-4)
    assert "fc1 -> fc2" in res.table()


# ---- the lr 1e-2 "vanishing": a finite-width effect, not a rule error -----------------------------


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randint(0, 128, (4, 33), generator=torch.Generator().manual_seed(0))
    return x[:, :-1], x[:, 1:]


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["gpt2", "qwen2"])
@pytest.mark.parametrize("lr", [3e-3, 1e-2])
def test_correct_mup_passes_at_both_lrs_and_sp_fails(arch: str, lr: float) -> None:
    """At lr 1e-2 the 32-256 ladder reads slopes of -0.3 to -0.4 on a correct μP (the
    smallest widths leave the infinite-width limit first); the ladder tolerance (0.42 over
    32-256) allows that finite-width bias, and SP's growth (slope > 1) still fails."""
    kw = dict(widths=(32, 64, 128, 256), steps=3, seeds=2, lr=lr, loss_fn=hf_loss)
    builder = tiny_builder(arch, tie=arch == "gpt2")
    mu = coord_check(builder, _batch(), kind="mup", **kw)
    assert mu.tol == pytest.approx(0.4207, abs=1e-4)
    assert mu.passed, mu.violations()
    sp = coord_check(builder, _batch(), kind="sp", **kw)
    assert not sp.passed and sp.slopes["slope"].max() > 1.0


def test_conv1d_rules_match_mup_on_gpt2() -> None:
    """Conv1D's transposed weight (in, out) in the rules: every GPT-2 Conv1D gets the hidden
    role and mup's Adam LR (set_base_shapes + MuAdam on the same model), and the same
    model rebuilt with nn.Linear (weight (out, in)) gets the same spec row by row (role,
    fan multipliers, LR, init), so the lr 1e-2 vanishing does not come from Conv1D."""
    mup = pytest.importorskip("mup")

    def _conv1d_as_linear(model: torch.nn.Module) -> None:
        for module in list(model.modules()):
            for child_name, child in list(module.named_children()):
                if type(child).__name__ == "Conv1D":
                    lin = torch.nn.Linear(*child.weight.shape, device=child.weight.device)
                    lin.weight = torch.nn.Parameter(child.weight.detach().t().clone())
                    lin.bias = torch.nn.Parameter(child.bias.detach().clone())
                    setattr(module, child_name, lin)

    builder = tiny_builder("gpt2", tie=True)
    pz = Parametrization(builder, width=128, base_width=32)
    model = builder(128)
    # no MuReadout in a stock GPT-2 (its tied head is checked elsewhere): skip that assert
    mup.set_base_shapes(model, builder(32), delta=builder(64), rescale_params=False, do_assert=False)
    mup_lr = {}
    for g in mup.MuAdam(model.parameters(), lr=1.0).param_groups:
        for p in g["params"]:
            mup_lr[id(p)] = g["lr"]
    for name, p in model.named_parameters():
        if ".h." in name and name.endswith(("c_attn.weight", "c_fc.weight", "c_proj.weight")):
            spec = pz.specs[name]
            assert spec.role == "hidden" and spec.lr_mult == pytest.approx(mup_lr[id(p)]) == 0.25, name
            assert p.infshape.fanin_fanout_mult_ratio() == spec.fan_in_mult / spec.fan_out_mult == 1.0

    def linear_builder(width: int) -> torch.nn.Module:
        m = builder(width)
        _conv1d_as_linear(m)
        return m

    lin = Parametrization(linear_builder, width=128, base_width=32)
    for name, spec in pz.specs.items():
        other = lin.specs[name]
        assert (other.role, other.lr_mult, other.init, other.fan_in_mult, other.fan_out_mult) == (
            spec.role, spec.lr_mult, spec.init, spec.fan_in_mult, spec.fan_out_mult), name


@pytest.mark.parametrize("arch, mlp_input", [("olmo2", "mlp"), ("gemma2", "pre_feedforward_layernorm")])
def test_a_post_norm_blocks_residual_multiplier_goes_after_its_norms(arch: str, mlp_input: str) -> None:
    """OLMo-2 and Gemma-2 add norm(attn(x)) and norm(mlp(h)) to the residual stream:
    CompleteP's branch multiplier goes on those norms. Known answer: with it at s on
    layer 0's ``post_attention_layernorm``, the stream's update before the MLP is s times
    the plain one (1e-5); on ``self_attn`` (where pre-norm blocks take it) the norm
    divides it out and the update is the plain one (what the default used to do)."""
    from mutransfer.models.hf_tiny import tiny_config
    from mutransfer.parametrize.layers import install_forward_multipliers

    def build(width: int, depth: int) -> torch.nn.Module:
        # eps 1e-12: at HF's 0.02 init a tiny model's attention output has a mean square
        # below the default 1e-6, where the norm is still nearly linear in its input
        return tf.AutoModelForCausalLM.from_config(tiny_config(arch, width, depth=depth, rms_norm_eps=1e-12))

    pz = Parametrization(build, width=64, base_width=32, kind="completep", depth=4, base_depth=2)
    assert pz.branch_modules == tuple(f"model.layers.{i}.{n}" for i in range(4)
                                      for n in ("post_attention_layernorm", "post_feedforward_layernorm"))
    hooks = {h["module"]: h["scale"] for h in pz.forward_multipliers()["hooks"] if h["kind"] == "post"}
    assert hooks["model.layers.3.post_feedforward_layernorm"] == pytest.approx(0.5)  # (4/2)^-1
    assert pz.specs["model.layers.0.post_attention_layernorm.weight"].in_residual_branch
    # what the coordinate check may see shrink (the norms divide it out); a pre-norm Llama has none
    from mutransfer.parametrize.parametrization import post_normed

    assert post_normed(build(32, 1)) == ("model.layers.0.mlp", "model.layers.0.mlp.down_proj",
                                         "model.layers.0.self_attn", "model.layers.0.self_attn.o_proj")
    assert post_normed(tf.AutoModelForCausalLM.from_config(tiny_config("llama", 32, depth=1))) == ()

    def update(where: str | None) -> torch.Tensor:
        torch.manual_seed(0)
        model = build(64, 4).eval()
        if where is not None:
            install_forward_multipliers(model, [{"module": f"model.layers.0.{where}", "kind": "post",
                                                 "scale": 0.5}], {})
        seen: dict[str, torch.Tensor] = {}

        def keep(key: str):
            def hook(_m: torch.nn.Module, args: tuple, kwargs: dict) -> None:
                seen[key] = args[0] if args else kwargs["hidden_states"]
            return hook

        layer = model.model.layers[0]
        layer.register_forward_pre_hook(keep("x"), with_kwargs=True)
        layer.get_submodule(mlp_input).register_forward_pre_hook(keep("h"), with_kwargs=True)
        with torch.no_grad():
            model(torch.randint(0, 128, (2, 8), generator=torch.Generator().manual_seed(1)))
        return seen["h"] - seen["x"]

    plain = update(None)
    assert plain.abs().max() > 0.1
    torch.testing.assert_close(update("post_attention_layernorm"), 0.5 * plain, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(update("self_attn"), plain, rtol=1e-4, atol=1e-4)
