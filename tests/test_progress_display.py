"""While grader.check runs, Jupyter shows which case it is on and how many are left, in one output updated in place
and emptied at the end; a terminal, plain Python and a quiet check show nothing of it (issue 24, point 6)."""

import subprocess
import sys
from pathlib import Path

import pytest

from grader import progressbar

ROOT = Path(__file__).resolve().parents[1]
CHECK = "import grader; grader.setup(quiet=True); r = grader.check('causal_mask', lambda n_q, n_k, device=None: None)"


def test_a_kernel_shows_one_line_updated_per_case_and_empties_it_at_the_end():
    jupyter_client = pytest.importorskip("jupyter_client")
    km, kc = jupyter_client.manager.start_new_kernel(kernel_name="python3", cwd=str(ROOT))
    try:
        msg_id = kc.execute(CHECK)
        shown, updates = [], []
        while True:
            msg = kc.get_iopub_msg(timeout=120)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "display_data" and content.get("transient", {}).get("display_id"):
                shown.append(content)
            elif kind == "update_display_data":
                updates.append(content["data"]["text/plain"])
            elif kind == "status" and content["execution_state"] == "idle":
                break
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    assert len(shown) == 1, shown  # one output, the first case's line
    first = shown[0]["data"]["text/plain"]
    assert first.startswith("checking causal_mask: case 1 of 7 ("), first
    assert [u.split(" (")[0] for u in updates[:-1]] == [f"checking causal_mask: case {i} of 7" for i in range(2, 8)]
    assert updates[-1] == ""  # emptied: the report follows in an output of its own


def test_nothing_is_shown_outside_jupyter():
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert "causal_mask — " in out.stdout  # the report
    assert "checking causal_mask" not in out.stdout + out.stderr
    assert type(progressbar.for_check("causal_mask", quiet=False)) is progressbar.Progress  # no IPython here


def test_a_quiet_check_and_batch_grading_get_no_display():
    assert type(progressbar.for_check("causal_mask", quiet=True)) is progressbar.Progress
