"""FSDP2 (``torch.distributed.fsdp.fully_shard``) on 2 CPU processes (gloo): roles come
from global shapes, param groups, hooks and attention scales survive sharding, and a few
μP steps equal the unsharded run to 1e-5."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

WORKER = textwrap.dedent("""
    import json, sys
    import torch, torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from mutransfer.models.gpt import GPT, GPTConfig
    from mutransfer.training.optim import build_optimizer
    from mutransfer.parametrize.specs import Multipliers
    from mutransfer.parametrize.parametrization import Parametrization

    CFG = GPTConfig(width=64, depth=2, head_dim=16, seq_len=16, vocab_size=64)

    def run(shard):
        pz = Parametrization(lambda w: GPT(CFG.replace(width=w)), width=64, base_width=16, kind="mup",
                             multipliers=Multipliers(input=2.0, output=0.5, attention=1.5))
        model = pz.build(seed=0)
        if shard:
            mesh = init_device_mesh("cpu", (dist.get_world_size(),))
            for block in model.blocks:
                fully_shard(block, mesh=mesh)
            fully_shard(model, mesh=mesh)
        groups = pz.param_groups(model, 1e-2, weight_decay=0.1)
        opt = build_optimizer(groups, "adamw")
        idx = torch.randint(0, 64, (4, 16), generator=torch.Generator().manual_seed(0))
        losses = []
        for _ in range(4):
            loss = model(idx, idx)[1]
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(float(loss.detach()))
        wte = dict(model.named_parameters())["wte.weight"]
        return {"losses": losses,
                "groups": sorted([n, g["lr"], g["weight_decay"], g["role"]]
                                 for g in groups for n in g["names"]),
                "shapes": {n: list(p.shape) for n, p in model.named_parameters()},
                "local_wte": list(wte.to_local().shape) if shard else list(wte.shape),
                "hooks": list(model._mutransfer_hooks),
                "lm_head_pre_hooks": len(model.lm_head._forward_pre_hooks),
                "softmax_scale": model.blocks[0].attn.softmax_scale,
                "roles": {n: s.role for n, s in pz.specs.items()}}

    dist.init_process_group("gloo")
    out = run(True)
    if dist.get_rank() == 0:
        json.dump({"sharded": out, "single": run(False)}, open(sys.argv[1], "w"))
    dist.destroy_process_group()
""")


@pytest.mark.slow
def test_fully_shard_two_gloo_processes_match_one(tmp_path) -> None:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    out = tmp_path / "fsdp.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.getcwd()}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(script), str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-5000:]
    r = json.loads(out.read_text())
    sharded, single = r["sharded"], r["single"]
    # Each rank holds half of wte, yet every shape, role and group is the global one.
    assert sharded["local_wte"] == [32, 64] and sharded["shapes"]["wte.weight"] == [64, 64]
    assert sharded["shapes"] == single["shapes"] and sharded["roles"] == single["roles"]
    assert sharded["groups"] == single["groups"]
    assert {g[1] for g in sharded["groups"]} == {1e-2, 1e-2 / 4}  # μP: hidden at lr / m
    assert sharded["hooks"] == single["hooks"] == ["post:wte:2", "pre:lm_head:0.125"]
    assert sharded["lm_head_pre_hooks"] >= 1 and sharded["softmax_scale"] == single["softmax_scale"] == 0.375
    assert sharded["losses"] == pytest.approx(single["losses"], abs=1e-5, rel=0)
    assert single["losses"][-1] < single["losses"][0] - 0.1  # it trained
