#!/usr/bin/env bash
# Set up the course on Colab, ModelScope or any machine that already has Python.
# Installs only what is missing, never replaces a torch that is already there, installs the grader package.
# Safe to run twice.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
py="${PYTHON:-python3}"

have() { "$py" -c "import $1" >/dev/null 2>&1; }

if have torch; then
  echo "torch: keeping the installed $("$py" -c 'import torch; print(torch.__version__)')"
else
  echo "torch: not found, installing it"
  "$py" -m pip install -q torch
fi

if have triton; then
  echo "triton: keeping the installed $("$py" -c 'import triton; print(triton.__version__)')"
else
  echo "triton: not found, installing it"
  "$py" -m pip install -q triton
fi

missing=()
for mod in numpy matplotlib ipywidgets tqdm; do
  have "$mod" || missing+=("$mod")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  "$py" -m pip install -q "${missing[@]}"
fi

if "$py" -c "import grader, pathlib, sys; sys.exit(0 if pathlib.Path(grader.__file__).resolve().parent.parent == pathlib.Path('$here') else 1)" >/dev/null 2>&1; then
  echo "grader: already installed from $here"
else
  echo "grader: installing from $here"
  "$py" -m pip install -q --no-deps -e "$here"
fi
echo "ready: open notebooks/00_setup.ipynb"
