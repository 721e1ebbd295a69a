"""colab_setup.sh against fake python/pip/git: what it installs, and what it leaves alone, on each platform.

The fake `python3` answers the script's two command forms (`python3 -c "$probe" COMMAND ARGS...` and
`python3 -m pip install ...`) from a scenario file, records every call, and lets `pip install` change the scenario
the way pip would, so that a second run sees what the first installed. Fake `pip` and `git` record calls that the
script must never make. The last test runs the script's probe code on the real interpreter.
"""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from grader import config
from grader.notebooks import repo_root

ROOT = repo_root()
SCRIPT = ROOT / "colab_setup.sh"
CUDA_TORCH = "2.11.0+cu130"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")

FAKE_PYTHON = textwrap.dedent("""\
    #!{python}
    # A fake Python for colab_setup.sh: answers its probes from the scenario in $FAKE_STATE, logs to $FAKE_LOG.
    import json, os, sys

    state_path = os.environ["FAKE_STATE"]
    state = json.load(open(state_path))
    args = sys.argv[1:]
    with open(os.environ["FAKE_LOG"], "a") as log:
        log.write(json.dumps(["python"] + args[2:] if args[:1] == ["-c"] else ["python"] + args) + "\\n")

    def save():
        json.dump(state, open(state_path, "w"))

    if args[:1] == ["-c"] and len(args) >= 3:
        cmd, rest = args[2], args[3:]
        if cmd == "missing":
            print(" ".join(m for m in rest if m not in state["modules"]))
        elif cmd == "version":
            if rest[0] not in state["versions"]:
                sys.exit(1)
            print(state["versions"][rest[0]])
        elif cmd == "triton-pin":
            if "torch" in state["modules"] and state.get("pin"):
                print("triton", state["pin"])
        elif cmd == "deps":  # pyproject.toml's list, as the real probe reads it (test_probes_on_the_real_interpreter)
            print(" ".join(state.get("deps", ["numpy", "matplotlib", "ipywidgets", "tqdm"])))
        elif cmd == "pip-index":  # the real probe's answer is tested in test_the_pip_index_probe
            if state.get("pip_index"):
                print(state["pip_index"])
            elif os.environ.get("PIP_INDEX_URL"):
                print(os.environ["PIP_INDEX_URL"] + "\tPIP_INDEX_URL")
        elif cmd == "grader-root":
            if not state.get("grader_root"):
                sys.exit(1)
            print(state["grader_root"])
        else:
            sys.exit("fake python: unknown probe " + cmd)
    elif args[:3] == ["-m", "pip", "install"]:
        if state.get("offline"):
            sys.exit("ERROR: Could not find a version that satisfies the requirement (no network)")
        words, skip = [], False
        for a in args[3:]:
            if skip:
                skip = False
            elif a == "--index-url":
                skip = True
            elif not a.startswith("-"):
                words.append(a)
        if "-e" in args:
            state["grader_root"] = words[-1]
        else:
            for w in words:
                name, _, version = w.partition("==")
                state["modules"].append(name)
                if name == "torch":
                    state["versions"]["torch"] = state["torch_wheel"]["version"]
                    state["pin"] = state["torch_wheel"]["pin"]
                    if state["pin"]:  # pip installs the triton torch requires along with it
                        state["modules"].append("triton")
                        state["versions"]["triton"] = state["pin"]
                elif name == "triton":
                    state["versions"]["triton"] = version or "3.9.0"
        save()
    else:
        sys.exit("fake python: unexpected call " + repr(args))
    """)

RECORDER = textwrap.dedent("""\
    #!/usr/bin/env bash
    # A fake {name}: the script must never call it. Records the call and fails.
    printf '%s\\n' "$(printf '["{name}"'; for a in "$@"; do printf ', "%s"' "$a"; done; printf ']')" >> "$FAKE_LOG"
    exit 1
    """)


def make_fake_pip(folder: Path) -> None:
    """A package `pip` in folder that records `python -m pip ...` to $FAKE_LOG instead of installing.

    Put folder on PYTHONPATH. It needs its __init__.py: a folder without one is a namespace package, which loses to
    the real pip in site-packages.
    """
    (folder / "pip").mkdir(parents=True)
    (folder / "pip" / "__init__.py").write_text("FAKE = True\n")
    (folder / "pip" / "__main__.py").write_text(
        "import json, os, sys\nopen(os.environ['FAKE_LOG'], 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n")


def assert_pip_is_fake(env: dict) -> None:
    """Refuse to go on unless `python -m pip` under env is the fake: a real install would rewire this venv."""
    r = subprocess.run([sys.executable, "-c", "import pip; print(getattr(pip, 'FAKE', False))"], env=env,
                       capture_output=True, text=True, cwd="/")
    if r.stdout.strip() != "True":
        pytest.fail(f"python -m pip would run the real pip here: {r.stdout}{r.stderr}")


class Machine:
    """A temp directory with fake executables first on PATH and a scenario for the fake Python."""

    def __init__(self, tmp: Path, env_vars: dict, gpu: bool, system: str = "Linux", **state):
        self.bin, self.log, self.state = tmp / "bin", tmp / "calls.jsonl", tmp / "state.json"
        self.bin.mkdir()
        self.python = self.bin / "python3"
        self.python.write_text(FAKE_PYTHON.format(python=sys.executable))
        for name in ("pip", "pip3", "git"):
            (self.bin / name).write_text(RECORDER.format(name=name))
        # a driver or none: a stub either way, so that a real nvidia-smi elsewhere on PATH does not count
        (self.bin / "nvidia-smi").write_text(
            "#!/usr/bin/env bash\necho 'GPU 0: NVIDIA H200 (UUID: GPU-0)'\n" if gpu else
            "#!/usr/bin/env bash\necho \"NVIDIA-SMI has failed: it couldn't communicate with the NVIDIA driver\"\n"
            "exit 9\n")
        if system != "Linux":
            (self.bin / "uname").write_text(f"#!/usr/bin/env bash\necho {system}\n")
        for f in self.bin.iterdir():
            f.chmod(0o755)
        state.setdefault("grader_root", None)
        state.setdefault("torch_wheel", {"version": "2.13.0+cpu", "pin": None})
        self.state.write_text(json.dumps(state))
        keep = {k: v for k, v in os.environ.items()
                if not k.startswith(("COLAB_", "MODELSCOPE_", "PYTHON", config.REPO.name))}
        self.env = {**keep, **env_vars, "PATH": f"{self.bin}:/usr/bin:/bin",
                    "FAKE_LOG": str(self.log), "FAKE_STATE": str(self.state)}

    def run(self, ok=True):
        """Run the real colab_setup.sh; returns (stdout, the calls it made)."""
        self.log.write_text("")
        r = subprocess.run(["bash", str(SCRIPT)], env=self.env, capture_output=True, text=True, timeout=60,
                           cwd=self.bin.parent)
        if not ok:
            assert r.returncode != 0, r.stdout
            return r.stdout + r.stderr, []
        assert r.returncode == 0, r.stdout + r.stderr
        assert not r.stderr, r.stderr
        calls = [json.loads(line) for line in self.log.read_text().splitlines()]
        return r.stdout, calls

    def installs(self, calls):
        """The pip installs among the calls, each as its argument list after `install -q`."""
        assert not [c for c in calls if c[0] != "python"], "the script called pip or git directly"
        return [c[5:] for c in calls if c[1:4] == ["-m", "pip", "install"]]


GRADER_INSTALL = ["--no-deps", "--no-build-isolation", "-e", str(ROOT)]
ALL_DEPS = ["torch", "triton", "numpy", "matplotlib", "ipywidgets", "tqdm", "setuptools"]


@pytest.fixture
def machine(tmp_path):
    def make(env_vars=None, gpu=True, **state):
        return Machine(tmp_path, env_vars or {}, gpu, **state)
    return make


def test_colab_keeps_its_matching_pair_and_installs_only_the_grader(machine):
    m = machine({"COLAB_RELEASE_TAG": "release-colab_20261120-060058_RC00"},
                modules=list(ALL_DEPS), versions={"torch": CUDA_TORCH, "triton": "3.6.0"}, pin="3.6.0")
    out, calls = m.run()
    assert m.installs(calls) == [GRADER_INSTALL]
    assert "on Colab" in out
    assert f"torch {CUDA_TORCH}: installed, kept as it is" in out
    assert "triton 3.6.0: installed, kept as it is (the version torch pins)" in out
    assert "custom widget manager" in out
    assert "no Jupyter" not in out  # Colab's frontend is its own
    assert "done: installed grader" in out

    out, calls = m.run()  # a second run installs nothing
    assert m.installs(calls) == []
    assert f"grader: installed from {ROOT}" in out
    assert "nothing changed" in out


def test_modelscope_without_triton_gets_the_version_torch_pins(machine):
    m = machine({"MODELSCOPE_ENVIRONMENT": "dsw"}, modules=["torch", "numpy", "matplotlib", "tqdm", "setuptools"],
                versions={"torch": CUDA_TORCH}, pin="3.6.0")
    out, calls = m.run()
    assert "on ModelScope" in out
    assert m.installs(calls) == [["triton==3.6.0"], ["ipywidgets"], GRADER_INSTALL]
    assert not any("torch" in a for args in m.installs(calls) for a in args), "torch must never be reinstalled"
    assert "triton: not installed; torch pins triton==3.6.0, installing that" in out
    assert "reload the Jupyter page" in out  # JupyterLab loads the new widget extension on a reload

    out, calls = m.run()
    assert m.installs(calls) == []
    assert "triton 3.6.0: installed, kept as it is (the version torch pins)" in out
    assert "nothing changed" in out


MIRROR_INDEX = "https://mirrors.aliyun.com/pypi/simple/"


def test_modelscope_uses_the_index_the_platform_configured_and_says_so(machine):
    m = machine({"MODELSCOPE_ENVIRONMENT": "dsw", "PIP_INDEX_URL": MIRROR_INDEX},
                modules=["torch", "numpy", "matplotlib", "tqdm", "setuptools"], versions={"torch": CUDA_TORCH},
                pin="3.6.0")
    out, calls = m.run()
    assert f"pip index: {MIRROR_INDEX} (from PIP_INDEX_URL)" in out
    assert m.installs(calls) == [["triton==3.6.0"], ["ipywidgets"], GRADER_INSTALL]  # no --index-url of its own


def test_without_an_index_configured_pips_default_is_named(machine):
    m = machine(modules=list(ALL_DEPS), versions={"torch": CUDA_TORCH, "triton": "3.6.0"}, pin="3.6.0",
                grader_root=str(ROOT))
    out, _ = m.run()
    assert "pip index: pip's default (PyPI)" in out


def test_a_configured_index_is_never_replaced_by_pytorchs(machine):
    """No torch, no GPU, a mirror in pip.conf: torch comes from the mirror, not from download.pytorch.org."""
    m = machine(gpu=False, modules=[], versions={}, pip_index=f"{MIRROR_INDEX}\t/etc/pip.conf")
    out, calls = m.run()
    assert f"pip index: {MIRROR_INDEX} (from /etc/pip.conf)" in out
    assert m.installs(calls)[0] == ["torch"]
    assert not any("--index-url" in args for args in m.installs(calls))
    assert "may" in out and "CUDA build" in out  # it says what that can cost


def test_the_pip_index_probe(tmp_path):
    """The real probe: PIP_INDEX_URL first, then a pip.conf's [install] or [global] index-url, else nothing."""
    probe = _probe_code()
    conf = tmp_path / "pip.conf"
    conf.write_text(f"[global]\nindex-url = {MIRROR_INDEX}\n")
    base = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    home = tmp_path / "home"
    home.mkdir()
    ask = lambda env: subprocess.run([sys.executable, "-c", probe, "pip-index"], env={**base, "HOME": str(home),
                                     **env}, capture_output=True, text=True, timeout=60).stdout.strip()
    assert ask({"PIP_CONFIG_FILE": str(conf)}) == f"{MIRROR_INDEX}\t{conf}"
    assert ask({"PIP_CONFIG_FILE": str(conf), "PIP_INDEX_URL": "https://x.example/simple"}) == \
        "https://x.example/simple\tPIP_INDEX_URL"
    (home / ".pip").mkdir()
    (home / ".pip" / "pip.conf").write_text("[install]\nindex-url = https://y.example/simple\n")
    assert ask({}).startswith("https://y.example/simple\t")


def test_a_mismatched_pair_is_reported_with_the_fix_and_left_alone(machine):
    m = machine({"MODELSCOPE_ENVIRONMENT": "dsw"}, modules=list(ALL_DEPS),
                versions={"torch": CUDA_TORCH, "triton": "3.5.1"}, pin="3.6.0", grader_root=str(ROOT))
    out, calls = m.run()
    assert m.installs(calls) == []
    assert "triton 3.5.1: MISMATCH" in out
    assert f"torch {CUDA_TORCH} was built for triton==3.6.0" in out
    assert f"    {m.python} -m pip install triton==3.6.0\n" in out  # the exact command, with this interpreter


def test_a_machine_without_torch_or_gpu_gets_the_cpu_build_and_triton(machine):
    m = machine(gpu=False, modules=[], versions={})
    out, calls = m.run()
    assert "on this machine" in out
    assert m.installs(calls) == [
        ["torch", "--index-url", "https://download.pytorch.org/whl/cpu"],
        ["triton"],  # a CPU torch pins none; the interpreter needs one
        ["numpy", "matplotlib", "ipywidgets", "tqdm", "setuptools"],
        GRADER_INSTALL,
    ]
    assert "no NVIDIA driver here, so the CPU build" in out
    assert "done: installed torch triton numpy matplotlib ipywidgets tqdm setuptools grader" in out

    out, calls = m.run()
    assert m.installs(calls) == []
    assert "torch 2.13.0+cpu: installed, kept as it is" in out
    assert "nothing changed" in out


def test_a_gpu_machine_without_torch_gets_torch_with_its_own_triton(machine):
    m = machine(gpu=True, modules=list(ALL_DEPS[2:]), versions={}, grader_root=str(ROOT),
                torch_wheel={"version": CUDA_TORCH, "pin": "3.6.0"})
    out, calls = m.run()
    assert m.installs(calls) == [["torch"]]  # pip brings the pinned triton along
    assert "triton 3.6.0: installed, kept as it is (the version torch pins)" in out


def test_the_frontend_is_never_installed_and_a_machine_without_one_is_told_how(machine):
    """jupyterlab is in pyproject's list for the README's install; here a Jupyter is the platform's (or absent)."""
    m = machine(gpu=False, modules=[], versions={})
    out, calls = m.run()
    assert not any("jupyter" in a for args in m.installs(calls) for a in args)
    assert f"no Jupyter for {m.python}: to open the notebooks, {m.python} -m pip install jupyterlab && " \
           f"{m.python} -m jupyter lab {ROOT}/notebooks/" in out
    for jupyter in ("jupyterlab", "notebook"):  # either one opens the notebooks
        m.state.write_text(json.dumps({**json.loads(m.state.read_text()), "modules": [*ALL_DEPS, jupyter]}))
        out, calls = m.run()
        assert "no Jupyter" not in out and m.installs(calls) == [], out


def test_grader_from_another_checkout_is_replaced_by_this_one(machine):
    m = machine(modules=list(ALL_DEPS), versions={"torch": "2.13.0+cpu", "triton": "3.9.0"},
                grader_root="/somewhere/else")
    out, calls = m.run()
    assert m.installs(calls) == [GRADER_INSTALL]
    assert "triton 3.9.0: installed, kept as it is\n" in out  # a CPU torch pins no triton: nothing to compare


def test_no_triton_install_where_there_are_no_wheels(machine):
    m = machine(gpu=False, system="Darwin", modules=["torch", *ALL_DEPS[2:]], versions={"torch": "2.13.0"},
                grader_root=str(ROOT))
    out, calls = m.run()
    assert m.installs(calls) == []
    assert "triton publishes wheels for Linux only" in out


def test_a_failed_install_stops_the_script(machine):
    m = machine({"MODELSCOPE_ENVIRONMENT": "dsw"}, modules=["torch"], versions={"torch": CUDA_TORCH}, pin="3.6.0",
                offline=True)
    out, _ = m.run(ok=False)
    assert "pip install -q triton==3.6.0" in out and "no network" in out
    assert "done:" not in out


def test_python_can_be_chosen(machine):
    m = machine(modules=list(ALL_DEPS), versions={"torch": CUDA_TORCH, "triton": "3.6.0"}, pin="3.6.0",
                grader_root=str(ROOT))
    other = m.bin / "kernel-python"
    shutil.copy(m.python, other)
    m.python.unlink()
    m.env["PYTHON"] = str(other)
    out, calls = m.run()
    assert f"with {other}" in out and calls and m.installs(calls) == []


def test_probes_on_the_real_interpreter(tmp_path):
    """The script's probe code itself, on this Python, with torch's metadata faked to pin a triton it lacks."""
    site = tmp_path / "site"
    for name, version, requires in [
        ("torch", "2.11.0", ['triton==3.6.0; platform_system == "Linux"', 'numpy; extra == "numpy"']),
        ("triton", "3.5.1", []),
    ]:
        info = site / f"{name}-{version}.dist-info"
        info.mkdir(parents=True)
        meta = [f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}"] + [f"Requires-Dist: {r}" for r in requires]
        (info / "METADATA").write_text("\n".join(meta) + "\n")
    make_fake_pip(site)
    log = tmp_path / "pip.jsonl"
    log.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COLAB_", "MODELSCOPE_"))}
    # the fake metadata first, then whatever this Python already finds through PYTHONPATH
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH", "")]))
    env.update(PYTHON=sys.executable, PYTHONPATH=path, FAKE_LOG=str(log))
    assert_pip_is_fake(env)
    r = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    if sys.platform == "linux":
        assert "triton 3.5.1: MISMATCH. torch 2.11.0 was built for triton==3.6.0" in r.stdout
        assert f"{sys.executable} -m pip install triton==3.6.0" in r.stdout
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    installed_here = Path(__import__("grader").__file__).resolve().parent.parent == ROOT
    assert calls == ([] if installed_here else [["install", "-q", *GRADER_INSTALL]]), r.stdout


def _probe_code() -> str:
    text = SCRIPT.read_text(encoding="utf-8")
    return text.split("\nprobe='", 1)[1].split("\n'\n", 1)[0]


@pytest.mark.parametrize("tomllib", [True, False], ids=["tomllib", "python-3.10"])
def test_the_dependencies_come_from_pyproject(tomllib, tmp_path):
    """colab_setup.sh has no package list of its own: it installs pyproject.toml's, less torch and triton (which it
    treats apart), by names that are also the modules' names. Without tomllib (Python 3.10) it reads the same."""
    import re

    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    block = re.search(r"^dependencies\s*=\s*\[(.*?)\]", text, re.M | re.S).group(1)
    wanted = [re.match(r"[A-Za-z0-9._-]+", d).group(0) for d in re.findall(r'"([^"]+)"', block)]
    # less the frontend, which the README's install brings and this script leaves to the platform
    assert wanted[:2] == ["torch", "triton"] and "jupyterlab" in wanted
    wanted.remove("jupyterlab")
    assert ALL_DEPS[:-1] == wanted  # the fake's scenarios use the same
    probe = _probe_code() if tomllib else "import sys; sys.modules['tomllib'] = None\n" + _probe_code()
    r = subprocess.run([sys.executable, "-c", probe, "deps", str(ROOT / "pyproject.toml")], capture_output=True,
                       text=True, cwd="/")
    assert r.returncode == 0 and r.stdout.split() == wanted[2:], r.stdout + r.stderr
    import importlib.util

    assert all(importlib.util.find_spec(m) for m in wanted), "a dependency whose module has another name"
    # a new dependency reaches the script without editing it
    (tmp_path / "pyproject.toml").write_text(text.replace('"tqdm",', '"tqdm",\n    "einops>=0.7",'))
    r = subprocess.run([sys.executable, "-c", probe, "deps", str(tmp_path / "pyproject.toml")], capture_output=True,
                       text=True, cwd="/")
    assert r.stdout.split() == [*wanted[2:], "einops"], r.stdout + r.stderr
