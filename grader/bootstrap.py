"""What every notebook's first cell runs once the course is on disk: install what is missing, then grader.setup().

The cell itself (rendered by grader/tools/build.py) does only what has to happen before this package can be
imported: where `import grader` fails, it clones the course next to the notebook, unless the notebook sits in a
checkout, and puts that folder on sys.path. Then it calls start(), which runs the course's colab_setup.sh unless
a fresh Python already imports grader from this very folder.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .messages import catalogue

if TYPE_CHECKING:
    from .environment import Environment

T = catalogue("bootstrap", {
    "setup_failed": ("{script} failed (exit status {status}); its output is above",
                     "{script} 运行失败（退出码 {status}）；它的输出就在上面"),
})

ROOT = Path(__file__).resolve().parent.parent

_PROBE = ("import importlib.util as u, os; s = u.find_spec('grader'); "
          "print(os.path.dirname(os.path.dirname(s.origin)) if s and s.origin else '')")


def installed_root() -> Path | None:
    """The course folder a fresh Python (this interpreter, started from /) imports grader from; None if none."""
    r = subprocess.run([sys.executable, "-c", _PROBE], cwd="/", capture_output=True, text=True, timeout=60)
    found = r.stdout.strip()
    return Path(found).resolve() if r.returncode == 0 and found else None


def run_setup_script(root: Path = ROOT) -> None:
    """Run root/colab_setup.sh for this interpreter, showing its output as it comes; raise if it fails."""
    proc = subprocess.Popen(["bash", str(root / "colab_setup.sh")], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env={**os.environ, "PYTHON": sys.executable})
    for line in proc.stdout:
        print(line, end="", flush=True)
    if proc.wait():
        raise RuntimeError(T("setup_failed", script=root / "colab_setup.sh", status=proc.returncode))
    importlib.invalidate_caches()  # what it installed becomes importable in this running kernel


def start(quiet: bool = False, lang: str | None = None) -> Environment:
    """Install what is missing (only where this checkout is not the installed course), turn on Colab's widget
    manager on Colab, then grader.setup(lang=lang): the GPU, or the Triton interpreter."""
    if installed_root() != ROOT:
        run_setup_script(ROOT)
    if "google.colab" in sys.modules:  # Colab draws widgets only through its custom widget manager
        from google.colab import output

        output.enable_custom_widget_manager()
    import grader

    return grader.setup(quiet=quiet, lang=lang)
