#!/usr/bin/env bash
# Set up (or refresh) the project's virtual environment. Idempotent and quick on re-runs.
#
#   bash install.sh                 # .venv with a CPU or CUDA torch as found, mup, test tools
#
# Environment:
#   MUTRANSFER_VENV   where the venv lives (default: .venv)
#   PYTHON            interpreter that creates it (default: python3, must be >= 3.10)
#   TORCH_SPEC        torch requirement when no torch >= 2.9 is present (default: torch==2.13.0)
#   MUTRANSFER_ENGINES=0  skip transformers/accelerate/torchtitan (the engine tests then skip)
#   TORCH_INDEX_URL   index to take torch from, e.g. PyTorch's CPU-only wheel index on a
#                     machine without a GPU (plain PyPI serves a CUDA build on Linux x86-64)
set -euo pipefail
cd "$(dirname "$0")"
venv=${MUTRANSFER_VENV:-.venv}
py=${PYTHON:-python3}
stamp="$venv/.mutransfer-installed"

if [ -f "$stamp" ] && [ "$stamp" -nt pyproject.toml ] && [ "$stamp" -nt install.sh ]; then
  exit 0
fi
[ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)

# torch first and on its own, so nothing below can swap in a different (CUDA) build.
if ! "$venv/bin/python" - <<'PY' 2>/dev/null
import sys, torch
major, minor = (int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
sys.exit(0 if (major, minor) >= (2, 9) else 1)
PY
then
  if [ -n "${TORCH_INDEX_URL:-}" ]; then
    "${pip[@]}" install --index-url "$TORCH_INDEX_URL" "${TORCH_SPEC:-torch==2.13.0}"
  else
    "${pip[@]}" install "${TORCH_SPEC:-torch==2.13.0}"
  fi
fi
# [track]: tensorboard, wandb and optuna-dashboard, which the tracking and dashboard tests read
# back (none of them asks for torch, so the one above stays)
"${pip[@]}" install -e ".[test,track]"
# The real engines the HF-model and exporter tests run against (the pins of pyproject's
# [engines] extra). torchtitan's metadata pulls datasets, wandb, tensorboard and more; its
# config and optimizer code import only the few packages named here, so --no-deps.
# MUTRANSFER_ENGINES=0 skips them (those tests then skip, saying why).
if [ "${MUTRANSFER_ENGINES:-1}" != 0 ]; then
  "${pip[@]}" install "transformers==5.24.0" "accelerate==1.15.0"
  # triton: torchtitan's llama3 model code imports it (the μP converter's oracle test builds it)
  "${pip[@]}" install --no-deps "torchtitan==0.3.0" "tyro==1.0.17" "spmd_types==0.2.3" \
    "torch_checkpointing==0.1.1" "einops==0.8.2" "docstring_parser==0.18.0" "typeguard==4.6.1" \
    "triton==3.9.0"
fi
# mup's metadata asks for torchvision and seaborn; at run time it imports only torch,
# numpy, pandas and yaml, all of which we already have. --no-deps keeps torch untouched.
"${pip[@]}" install --no-deps "mup==1.0.0"
"$venv/bin/python" -c "import torch, mup, mutransfer; print('mutransfer', mutransfer.__version__, '| torch', torch.__version__, '| cuda', torch.cuda.is_available())"
touch "$stamp"
