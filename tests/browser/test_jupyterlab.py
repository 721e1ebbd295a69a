"""The course in a real browser: JupyterLab in headless Chromium runs notebook 03 through its menus.

For the learner notebook (notebooks/) and the instructor notebook (solutions/) of 03_tiled_attention: open it,
Run → Run All Cells, wait for every cell, save it, and check that the grader's report is on the page (PASSED in
the solution, NOT ATTEMPTED in the learner's), that the visualisers render as live widgets (not the static fallback)
and redraw when the tile walker's step slider is dragged, and that no cell failed except the learner stubs'
NotImplementedError. Screenshots go to $FA_COURSE_SCREENSHOTS or tests/browser/screenshots/.

Needs the `playwright` package (the course's dev extra: `pip install -e ".[dev]"`) and a Chromium: the first
of $FA_COURSE_CHROMIUM, Debian's /usr/bin/chromium (`apt install chromium`), a chromium on PATH, and Playwright's
own download (`python -m playwright install chromium`). Without them the tests skip and say which is missing.
JupyterLab serves a temporary copy of the two notebooks, with temporary Jupyter config, data, runtime, settings and
workspace folders, so nothing in the repository or in ~/.jupyter is touched.
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from grader import config

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = "03_tiled_attention.ipynb"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
RUN_TIMEOUT_S = 150  # all cells of one notebook, interpreter on 2 cores included


def _playwright_chromium() -> str | None:
    """Where `python -m playwright install chromium` puts its browser (None when playwright cannot say)."""
    try:
        from playwright.sync_api import sync_playwright

        with sync_playwright() as p:
            return p.chromium.executable_path
    except Exception:  # noqa: BLE001 - no driver, no browser: the caller skips
        return None


def _system_chromium() -> list[str | None]:
    return [config.CHROMIUM.value(), "/usr/bin/chromium", shutil.which("chromium"), shutil.which("chromium-browser")]


def _chromium() -> str | None:
    """The first of $FA_COURSE_CHROMIUM, the system's Chromium and Playwright's download that is an executable."""
    def usable(c):
        return bool(c) and os.path.isfile(c) and os.access(c, os.X_OK)

    for c in _system_chromium():
        if usable(c):
            return c
    c = _playwright_chromium()  # starts Playwright's driver: only asked when there is no system Chromium
    return c if usable(c) else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def chromium():
    if config.SKIP_BROWSER.enabled():
        pytest.skip(f"{config.SKIP_BROWSER.name} is set")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.skip('the playwright package is not installed (pip install -e ".[dev]" installs it)')
    try:
        import ipywidgets  # noqa: F401
        import jupyterlab  # noqa: F401
    except ImportError:
        pytest.skip("jupyterlab or ipywidgets is not installed")
    path = _chromium()
    if path is None:
        pytest.skip(f"no Chromium executable: `apt install chromium` (Debian), `python -m playwright install "
                    f"chromium`, or set {config.CHROMIUM.name}")
    return path


@pytest.fixture(scope="module")
def screenshots():
    folder = config.SCREENSHOTS.path() or Path(__file__).parent / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def lab(chromium, tmp_path_factory):
    """JupyterLab on a free local port, token off, serving a temporary copy of notebook 03 (learner + solution)."""
    tmp = tmp_path_factory.mktemp("lab")
    root = tmp / "course"
    for sub in ("notebooks", "solutions"):
        (root / sub).mkdir(parents=True)
        shutil.copy(ROOT / sub / NOTEBOOK, root / sub / NOTEBOOK)
    settings = tmp / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text(json.dumps({"fetchNews": "false",
                                                                           "checkForUpdates": False}))
    env = dict(os.environ)
    for var in (config.STATIC_VISUALS.name, "MPLBACKEND"):  # the learner's setup: live widgets, inline plots
        env.pop(var, None)
    env.update(JUPYTER_CONFIG_DIR=str(tmp / "config"), JUPYTER_DATA_DIR=str(tmp / "data"),
               JUPYTER_RUNTIME_DIR=str(tmp / "runtime"), IPYTHONDIR=str(tmp / "ipython"),
               **{config.PROGRESS.name: str(tmp / "progress.json")})
    port = _free_port()
    log = open(tmp / "lab.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", "--ip=127.0.0.1", f"--port={port}",
         "--ServerApp.port_retries=0", "--IdentityProvider.token=", "--ServerApp.password=",
         f"--ServerApp.root_dir={root}", f"--LabApp.user_settings_dir={tmp / 'settings'}",
         f"--LabApp.workspaces_dir={tmp / 'workspaces'}"],
        cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/status", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.time() > deadline:
                log.flush()
                pytest.fail("JupyterLab did not start:\n" + (tmp / "lab.log").read_text()[-3000:])
            time.sleep(0.3)
        yield dict(url=url, root=root, log=tmp / "lab.log")
    finally:
        proc.terminate()  # the server shuts its kernels down on SIGTERM
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the session this test started: the server and its kernels
            proc.wait(timeout=10)
        log.close()


@pytest.fixture(scope="module")
def browser(chromium):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        yield b
        b.close()


# ---------------------------------------------------------------------------------------------- page helpers
NB = ".jp-NotebookPanel:not(.lm-mod-hidden)"


def _prompts(page) -> list[str]:
    return page.eval_on_selector_all(f"{NB} .jp-CodeCell .jp-InputArea-prompt", "els => els.map(e => e.textContent)")


def _status(page) -> str | None:
    return page.eval_on_selector(f"{NB} .jp-Notebook-ExecutionIndicator", "e => e.getAttribute('data-status')")


def _sessions(url: str) -> list[dict]:
    try:
        with urllib.request.urlopen(f"{url}/api/sessions", timeout=5) as r:
            return json.loads(r.read())
    except (OSError, ValueError):
        return []


def _menu(page, menu: str, item: str) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{re.escape(menu)}$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{re.escape(item)}$")).click()


def _accept_dialog(page) -> bool:
    """Accept a modal dialog (on a cold server JupyterLab may ask which kernel to start: the default is right)."""
    dialog = page.locator(".jp-Dialog")
    if dialog.count() and dialog.first.is_visible():
        dialog.first.locator(".jp-mod-accept").first.click()
        time.sleep(0.5)
        return True
    return False


def _wait_until(cond, timeout_s: float, what: str, page=None, shot=None):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if page is not None:
            _accept_dialog(page)
        value = cond()
        if value:
            return value
        time.sleep(0.5)
    if page is not None and shot is not None:
        page.screenshot(path=str(shot))
    pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}")


def _shot(locator, path: Path) -> None:
    for _ in range(2):  # the notebook re-lays out cells as they come into view: scroll, settle, scroll again
        locator.scroll_into_view_if_needed()
        time.sleep(0.4)
    locator.screenshot(path=str(path))


@pytest.mark.parametrize("folder", ["solutions", "notebooks"])
def test_notebook_runs_in_jupyterlab(folder, lab, browser, screenshots):
    t0 = time.time()
    tag = f"03-{'solution' if folder == 'solutions' else 'learner'}"
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page_errors, console = [], []
    page.on("pageerror", lambda e: page_errors.append(str(e)))
    page.on("console", lambda m: console.append(f"{time.time() - t0:5.1f}s {m.type}: {m.text[:300]}"))
    try:
        # Open the folder, wait for the launcher's kernel cards (the kernel specs have loaded: opening a notebook
        # before that makes JupyterLab ask which kernel to start), then open the notebook from the file browser.
        page.goto(f"{lab['url']}/lab/tree/{folder}?reset", timeout=60_000)
        page.wait_for_selector(".jp-LauncherCard", timeout=60_000)
        page.locator(".jp-DirListing-item", has_text=NOTEBOOK).dblclick()
        page.wait_for_selector(f"{NB} .jp-Cell", timeout=60_000)
        # On a cold server JupyterLab may start a kernel and at once replace it by another: wait until the
        # notebook's session has kept one idle kernel for a while, or Run All goes to the kernel being shut down.
        seen = []

        def settled():
            kernels = [x["kernel"] for x in _sessions(lab["url"]) if x["path"].endswith(f"{folder}/{NOTEBOOK}")]
            seen.append(kernels[0]["id"] if len(kernels) == 1 and kernels[0]["execution_state"] == "idle" else None)
            return len(seen) >= 4 and seen[-1] is not None and len(set(seen[-4:])) == 1 and _status(page) == "idle"

        _wait_until(settled, 60, "the notebook's kernel to start and settle", page, screenshots / f"{tag}-FAIL.png")
        page.keyboard.press("Control+b")  # hide the file browser: more room for the notebook
        print(f"{tag}: kernel idle at {time.time() - t0:.0f} s")

        # Run → Run All Cells, then wait until every code cell has an execution count and the kernel is idle.
        def started():
            return any(re.fullmatch(r"\[(\*|\d+)\]:", p.strip()) for p in _prompts(page))

        for attempt in range(2):
            _menu(page, "Run", "Run All Cells")
            try:
                _wait_until(started, 20, "the first cell to start", page)
                break
            except pytest.fail.Exception:
                print(f"{tag}: Run All Cells did not start a cell (attempt {attempt + 1}) at {time.time() - t0:.0f} s")
                page.screenshot(path=str(screenshots / f"{tag}-runall-{attempt}.png"))
                print("\n".join(console[-40:]))
                if attempt:
                    raise
        n_cells = sum(c["cell_type"] == "code" for c in json.loads((ROOT / folder / NOTEBOOK).read_text())["cells"])

        def finished():
            prompts = _prompts(page)  # cells far below the viewport may be attached to the page late
            return (len(prompts) == n_cells and all(re.fullmatch(r"\[\d+\]:", p.strip()) for p in prompts)
                    and _status(page) == "idle")

        _wait_until(finished, RUN_TIMEOUT_S, "Run All Cells to finish", page, screenshots / f"{tag}-FAIL.png")
        ran_s = time.time() - t0

        # The grader's report is on the page.
        text = page.eval_on_selector(NB, "e => e.textContent")
        assert "graded on" in text
        if folder == "solutions":
            assert "PASSED" in text and "NOT ATTEMPTED" not in text
        else:
            assert "NOT ATTEMPTED" in text and "PASSED" not in text
        report = page.locator(f"{NB} .jp-OutputArea-output", has_text="graded on").first
        _shot(report, screenshots / f"{tag}-report.png")

        # The visualisers are live widgets here, not the static fallback.
        assert "Error displaying widget" not in text
        walker = page.locator(f"{NB} .fac-tile-walker")
        stepper = page.locator(f"{NB} .fac-softmax-stepper")
        assert walker.count() == 1 and stepper.count() == 1, "the visualisers did not render as widgets"
        _shot(stepper, screenshots / f"{tag}-softmax-stepper.png")
        status = walker.locator(".fac-status")
        image = walker.locator("img")
        before, src_before = status.text_content(), image.get_attribute("src")
        assert re.search(r"step 1 of \d+", before), before
        _shot(walker, screenshots / f"{tag}-tile-walker-step1.png")

        # Drag the step slider's handle three quarters of the way along its track: the picture and text follow.
        handle = walker.locator(".fac-step .noUi-handle")
        track = walker.locator(".fac-step .noUi-base")
        handle.scroll_into_view_if_needed()
        h, t = handle.bounding_box(), track.bounding_box()
        page.mouse.move(h["x"] + h["width"] / 2, h["y"] + h["height"] / 2)
        page.mouse.down()
        page.mouse.move(t["x"] + 0.75 * t["width"], h["y"] + h["height"] / 2, steps=10)
        page.mouse.up()
        after = _wait_until(lambda: (s := status.text_content()) != before and s, 30,
                            "the tile walker to redraw after the slider moved", page,
                            screenshots / f"{tag}-FAIL.png")
        assert re.search(r"step [2-9] of \d+", after), after
        _wait_until(lambda: image.get_attribute("src") != src_before, 15, "a new tile walker picture")
        _shot(walker, screenshots / f"{tag}-tile-walker-moved.png")
        page.screenshot(path=str(screenshots / f"{tag}-jupyterlab.png"))

        # Save, and read what the cells did from the saved file: errors only where the learner's stubs raise.
        page.locator(f"{NB} .jp-Notebook").click(position={"x": 5, "y": 5})
        _menu(page, "File", "Save Notebook")
        saved = lab["root"] / folder / NOTEBOOK

        def saved_cells():
            try:
                nb = json.loads(saved.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                return None
            code = [c for c in nb["cells"] if c["cell_type"] == "code"]
            return code if all(c.get("execution_count") for c in code) else None

        cells = _wait_until(saved_cells, 30, "the notebook to be saved with its outputs")
        errors = [(i, o.get("ename"), "raises-exception" in c.get("metadata", {}).get("tags", []))
                  for i, c in enumerate(cells) for o in c.get("outputs", []) if o.get("output_type") == "error"]
        unexpected = [e for e in errors if not (folder == "notebooks" and e[1] == "NotImplementedError" and e[2])]
        assert not unexpected, f"cells failed: {unexpected}"
        if folder == "notebooks":
            assert errors, "the learner notebook's stub cells should raise NotImplementedError"
        widget_outputs = sum("application/vnd.jupyter.widget-view+json" in o.get("data", {})
                             for c in cells for o in c.get("outputs", []))
        assert widget_outputs >= 2, "the visualisers fell back to static figures in JupyterLab"
        assert not page_errors, f"JavaScript errors in the page: {page_errors[:3]}"
        print(f"{tag}: {n_cells} code cells ran in {ran_s:.0f} s; test took {time.time() - t0:.0f} s")
    finally:
        context.close()
