#!/usr/bin/env bash
# Set up the course on Colab, ModelScope or any machine that already has Python (3.10 or newer).
#
#   bash colab_setup.sh                    # uses python3; PYTHON=/path/to/python bash colab_setup.sh for another one
#
# - torch: an installed torch is kept as it is, never reinstalled or upgraded (Colab and ModelScope ship a CUDA
#   build matched to their driver). Only where there is none is torch installed (the CPU build where nvidia-smi
#   finds no GPU).
# - triton: installed only when missing, at the version torch pins for this platform. When an installed pair does
#   not match, the script prints the pip command that fixes it and changes nothing.
# - the rest of the course's dependencies, read from pyproject.toml ([project] dependencies: numpy, matplotlib,
#   ipywidgets, tqdm), and setuptools, to install the grader offline: installed when missing. Not jupyterlab, which
#   that list also names for the README's install: this script runs where a Jupyter is already open (Colab,
#   ModelScope, the kernel of a notebook opened on its own), so it only says how to get one where it finds none.
# - the grader package: installed editable from this checkout, unless `import grader` already finds this checkout.
# - pip's index: the one the platform configured (PIP_INDEX_URL or a pip.conf: ModelScope and many machines in
#   China set a mirror) is used as it is and printed; the script never passes another index, except PyTorch's CPU
#   index for torch on a machine with no GPU and no index configured.
# Safe to run twice: a second run installs nothing. Every step prints what it found and what it did.
#
# Python is only ever called in two ways, `$PYTHON -c "$probe" COMMAND ARGS...` (questions, answered on stdout)
# and `$PYTHON -m pip install ...`, so that tests/test_colab_setup.py can replace it by a fake.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
py="${PYTHON:-python3}"
case "$py" in  # an absolute path: the probes run from /, and the messages name the exact interpreter
  */*) py="$(cd "$(dirname "$py")" && pwd)/$(basename "$py")" ;;
  *) py="$(command -v "$py")" || { echo "colab_setup.sh: $py not found (set PYTHON=/path/to/python)" >&2; exit 1; } ;;
esac

probe='
import importlib.metadata as md, importlib.util, os, sys
cmd, args = sys.argv[1], sys.argv[2:]
if cmd == "missing":  # the modules of args that are not installed
    print(" ".join(m for m in args if importlib.util.find_spec(m) is None))
elif cmd == "version":  # the installed version of a distribution; exit status 1 when it is not installed
    try:
        print(md.version(args[0]))
    except md.PackageNotFoundError:
        sys.exit(1)
elif cmd == "triton-pin":  # "DIST VERSION" when torch pins triton (DIST==VERSION) on this platform, else nothing
    try:
        from packaging.requirements import Requirement
    except ImportError:
        from pip._vendor.packaging.requirements import Requirement
    try:
        requires = md.requires("torch") or []
    except md.PackageNotFoundError:
        requires = []
    for line in requires:
        req = Requirement(line)
        pins = [s.version for s in req.specifier if s.operator in ("==", "===")]
        if "triton" in req.name and pins and (req.marker is None or req.marker.evaluate({"extra": ""})):
            print(req.name, pins[0])
            break
elif cmd == "deps":  # the [project] dependencies of pyproject.toml at args[0] but torch, triton and jupyterlab
    import re
    text = open(args[0], encoding="utf-8").read()
    try:
        import tomllib
        deps = tomllib.loads(text)["project"]["dependencies"]
    except ImportError:  # Python 3.10: the one list, read by hand
        deps = re.findall(r"\"([^\"]+)\"", re.search(r"^dependencies\s*=\s*\[(.*?)\]", text, re.M | re.S).group(1))
    names = [re.match(r"[A-Za-z0-9._-]+", d).group(0) for d in deps]
    print(" ".join(n for n in names if n not in ("torch", "triton", "jupyterlab")))  # each also names its module
elif cmd == "pip-index":  # "URL<TAB>WHERE" of the index pip is configured to use; nothing for the default (PyPI)
    import configparser
    if os.environ.get("PIP_INDEX_URL"):
        print(os.environ["PIP_INDEX_URL"] + "\tPIP_INDEX_URL")
        sys.exit()
    home = os.path.expanduser("~")
    files = [os.environ.get("PIP_CONFIG_FILE", ""), os.path.join(sys.prefix, "pip.conf"),
             os.path.join(os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config"), "pip", "pip.conf"),
             os.path.join(home, ".pip", "pip.conf"), "/etc/pip.conf", "/etc/xdg/pip/pip.conf"]
    for f in files:  # the most specific first, as pip lets it override the others
        conf = configparser.ConfigParser()
        try:
            if not f or not conf.read(f):
                continue
        except configparser.Error:
            continue
        for section in ("install", "global"):
            if conf.has_option(section, "index-url"):
                print(conf.get(section, "index-url").strip() + "\t" + f)
                sys.exit()
elif cmd == "grader-root":  # the folder `import grader` would load the course from; exit status 1 when none
    spec = importlib.util.find_spec("grader")
    if spec is None or not spec.origin:
        sys.exit(1)
    print(os.path.dirname(os.path.dirname(spec.origin)))
'
# From / so that a folder in the current directory (this checkout's grader/, say) does not answer for an install.
ask() { (cd / && "$py" -c "$probe" "$@"); }
pip_install() {  # pip_install WHAT PIP-ARGUMENTS...
  local what="$1"
  shift
  echo "  \$ $py -m pip install -q $*"
  "$py" -m pip install -q "$@"
  installed="$installed $what"
}
installed=""

if [ -n "${COLAB_RELEASE_TAG:-}${COLAB_GPU:-}${COLAB_BACKEND_VERSION:-}" ]; then
  platform=Colab
elif [ -n "${MODELSCOPE_ENVIRONMENT:-}" ] || [ -d /mnt/workspace ]; then
  # ModelScope's cloud containers set MODELSCOPE_ENVIRONMENT (the modelscope library reads it; its Studio
  # spaces set "studio"), and its notebook instances keep the persistent workspace in /mnt/workspace.
  platform=ModelScope
else
  platform="this machine"
fi
echo "setting up the FlashAttention course on $platform with $py"

# pip's index: whatever the platform configured (ModelScope and many machines in China set a mirror), never another.
IFS=$'\t' read -r index index_from <<<"$(ask pip-index)" || true
if [ -n "${index:-}" ]; then
  echo "pip index: $index (from $index_from)"
else
  echo "pip index: pip's default (PyPI); set PIP_INDEX_URL or a pip.conf to use a mirror"
fi

# torch: keep whatever is there.
if [ -z "$(ask missing torch)" ]; then
  echo "torch $(ask version torch): installed, kept as it is"
elif [ "$(uname -s)" = Linux ] && ! nvidia-smi -L >/dev/null 2>&1 && [ -n "${index:-}" ]; then
  echo "torch: not installed; no NVIDIA driver here. Installing torch from the configured index (its Linux torch may"
  echo "  be the large CUDA build; the CPU build is at https://download.pytorch.org/whl/cpu)"
  pip_install torch torch
elif [ "$(uname -s)" = Linux ] && ! nvidia-smi -L >/dev/null 2>&1; then
  echo "torch: not installed; no NVIDIA driver here, so the CPU build (the course runs on the Triton interpreter)"
  pip_install torch torch --index-url https://download.pytorch.org/whl/cpu
else
  echo "torch: not installed, installing it"
  pip_install torch torch
fi

# triton: the version torch pins, when it pins one (CUDA builds do; CPU builds don't).
read -r pin_dist pin_version <<<"$(ask triton-pin)" || true
triton_dist="${pin_dist:-triton}"
if ! triton_version="$(ask version "$triton_dist")"; then
  if [ -n "${pin_version:-}" ]; then
    echo "triton: not installed; torch pins $triton_dist==$pin_version, installing that"
    pip_install "$triton_dist" "$triton_dist==$pin_version"
  elif [ "$(uname -s)" != Linux ]; then
    echo "triton: not installed, and triton publishes wheels for Linux only. Run the course on Colab, ModelScope,"
    echo "  Linux or WSL (Windows)."
  else
    echo "triton: not installed and torch pins none (a CPU build of torch), installing the latest"
    pip_install triton triton
  fi
elif [ -n "${pin_version:-}" ] && [ "$triton_version" != "$pin_version" ]; then
  echo "triton $triton_version: MISMATCH. torch $(ask version torch) was built for $triton_dist==$pin_version;"
  echo "  kernels may fail to compile or crash. This script leaves it as it is; to fix it, run"
  echo "    $py -m pip install $triton_dist==$pin_version"
  echo "  and restart the kernel."
else
  echo "triton $triton_version: installed, kept as it is${pin_version:+ (the version torch pins)}"
fi

# The rest of the course's dependencies (pyproject.toml's list), and setuptools to install the grader offline.
deps="$(ask deps "$here/pyproject.toml")"
# shellcheck disable=SC2086  # module names, split on purpose
missing="$(ask missing $deps setuptools)"
if [ -n "$missing" ]; then
  echo "missing: $missing, installing"
  # shellcheck disable=SC2086
  pip_install "$missing" $missing
else
  echo "${deps// /, }: already installed"
fi

if [ "$(ask grader-root 2>/dev/null || true)" = "$here" ]; then
  echo "grader: installed from $here"
else
  echo "grader: installing it from $here (editable: edits to the checkout take effect on a kernel restart)"
  pip_install grader --no-deps --no-build-isolation -e "$here"
fi

case "$platform" in
  Colab) echo "Colab: widgets need Colab's custom widget manager; each notebook's first cell turns it on" ;;
  *) if [[ "$installed " == *" ipywidgets "* ]]; then
       echo "ipywidgets was just installed: reload the Jupyter page in your browser so that widgets show"
     fi ;;
esac
if [ "$platform" = "this machine" ] && [ "$(ask missing jupyterlab notebook)" = "jupyterlab notebook" ]; then
  echo "no Jupyter for $py: to open the notebooks, $py -m pip install jupyterlab &&" \
    "$py -m jupyter lab $here/notebooks/"
fi
if [ -n "$installed" ]; then
  echo "done: installed$installed"
else
  echo "done: everything was already installed, nothing changed"
fi
echo "next: open notebooks/00_setup.ipynb"
