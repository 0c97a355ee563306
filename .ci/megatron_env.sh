#!/usr/bin/env bash
# Build .venv-megatron: Python 3.12 with megatron-core 0.19.2 (its μP releases need
# Python >= 3.12; the project's own .venv is 3.11), for the test that constructs the
# Megatron export's real config objects (tests/mutransfer/card/test_export_megatron.py).
#
#   bash .ci/megatron_env.sh          # prints the interpreter's path on its last line
#   MUTRANSFER_MEGATRON_PYTHON=$(bash .ci/megatron_env.sh | tail -1) pytest tests/mutransfer/card/test_export_megatron.py
#
# PyPI serves only a CUDA build of torch for cp312 on Linux x86-64 (the CPU file on this
# machine's disk is cp311), and that build does not import without its nvidia-* libraries,
# so torch comes with its dependencies (the CUDA runtime libraries, ~4.5 GB). megatron-core
# itself needs only torch, numpy and packaging at import: its extras are not installed.
# Environment: MEGATRON_VENV (default .venv-megatron), PYTHON312 (the 3.12 interpreter).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${MEGATRON_VENV:-.venv-megatron}
stamp="$venv/.megatron-installed"
if [ ! -f "$stamp" ] || [ .ci/megatron_env.sh -nt "$stamp" ]; then
  py=${PYTHON312:-}
  if [ -z "$py" ]; then
    for c in /root/.pyenv/versions/3.12.1/bin/python3.12 python3.12; do
      # pyenv's shim is on PATH even when it refuses to run: ask the interpreter itself.
      if "$c" -c 'import sys; assert sys.version_info[:2] == (3, 12)' >/dev/null 2>&1; then py=$c; break; fi
    done
  fi
  [ -n "$py" ] || { echo "megatron_env: no Python 3.12 found (set PYTHON312)" >&2; exit 2; }
  [ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
  pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
  # PyYAML: the Megatron export is YAML (mutransfer export --out megatron.yaml)
  "${pip[@]}" install "torch==2.13.0" "numpy" "packaging>=24.2" "pyyaml"
  "${pip[@]}" install --no-deps "megatron-core==0.19.2"
  "$venv/bin/python" -c "import megatron.core, torch; print('megatron-core', megatron.core.__version__, '| torch', torch.__version__)" >&2
  touch "$stamp"
fi
# An absolute MEGATRON_VENV is printed as it is; a relative one from the repository root.
case "$venv" in
  /*) echo "$venv/bin/python" ;;
  *) echo "$PWD/$venv/bin/python" ;;
esac
