"""What every visualiser of grader.visuals shares: whether widgets can render here, how a figure writes its text
(PlotText: its language and fonts), figures outside pyplot with a PNG fallback, and the widget panel."""

from __future__ import annotations

import io
import math
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

from .. import config, messages
from ..messages import Text, catalogue

T = catalogue("visuals", {  # the namespace of every visualiser: message ids visuals.<key>
    "w_step": ("step", "步"),
    "w_play": ("play", "播放"),
    "w_causal": ("causal", "因果"),
})

STATIC_ENV = config.STATIC_VISUALS.name


# ============================================================================================ front end detection
def widgets_available() -> bool:
    """True when widgets can render here: ipywidgets importable, running in a Jupyter kernel, not forced static."""
    if config.STATIC_VISUALS.enabled():
        return False
    try:
        import ipywidgets  # noqa: F401
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    # A kernel (ipykernel) has a .kernel with comms; terminal IPython and plain Python do not.
    return shell is not None and getattr(shell, "kernel", None) is not None


def _interactive(flag: bool | None) -> bool:
    return widgets_available() if flag is None else bool(flag)


# ============================================================================================ text in figures
#: font families with the Chinese glyphs, in order of preference (matplotlib's default DejaVu Sans has none)
CJK_FONTS = ("Noto Sans CJK SC", "Noto Sans SC", "Source Han Sans SC", "Source Han Sans CN",  # not shown
             "WenQuanYi Zen Hei", "WenQuanYi Micro Hei", "SimHei", "Microsoft YaHei", "PingFang SC",  # not shown
             "Heiti SC")


def cjk_font() -> str | None:
    """The first family of CJK_FONTS that matplotlib can use here, or None."""
    from matplotlib import font_manager

    have = {f.name for f in font_manager.fontManager.ttflist}
    return next((name for name in CJK_FONTS if name in have), None)


@dataclass(frozen=True)
class PlotText:
    """How one figure writes its text: in the language in force, except Chinese without a CJK font installed, where
    it falls back to English (a figure never draws boxes for missing glyphs). Widgets' HTML needs no such care."""

    lang: str  # "en" or "zh"
    font: str | None = None  # the CJK family drawn with when lang is "zh"

    def __call__(self, render: Callable[..., str], key: str, **values: object) -> str:
        """The message `key` of the catalogue behind `render` (a module's T), in this figure's language."""
        return self.text(messages.later(render, key, **values))

    def text(self, message: Text | str) -> str:
        """A messages.Text in this figure's language (a plain string as it is)."""
        if not isinstance(message, Text):
            return str(message)
        text = messages.CATALOGUE[message.msg_id][self.lang]
        return text.format(**message.values) if message.values or messages.fields(text) else text

    def rc(self) -> dict:
        """rcParams for matplotlib.rc_context while the figure is made and drawn: the CJK family as a fallback
        after the usual ones, so Latin letters and digits look as in the English figures."""
        if self.font is None:
            return {}
        import matplotlib

        families = [f for f in matplotlib.rcParams["font.family"] if f != self.font]
        return {"font.family": [*families, self.font]}


def plot_text() -> PlotText:
    """The PlotText for a figure made now (grader.benchmark's plots use it too)."""
    if messages.language() != "zh":
        return PlotText("en")
    font = cjk_font()
    return PlotText("zh", font) if font else PlotText("en")


@contextmanager
def figure_fonts(pt: PlotText):
    """The context to make a figure in (its texts take their fonts when they are created) and to draw it in."""
    import logging

    import matplotlib

    log = logging.getLogger("matplotlib.font_manager")
    level = log.level
    if pt.font is not None:  # bold digits with a one-weight CJK family as the fallback: findfont's "using 400"
        log.setLevel(logging.ERROR)
    try:
        with matplotlib.rc_context(pt.rc()):
            yield
    finally:
        log.setLevel(level)


# ============================================================================================ drawing helpers
def _figure(w: float, h: float):
    """A Figure outside pyplot: never auto-shown twice by the inline backend, safe without a display."""
    from matplotlib.figure import Figure

    return Figure(figsize=(w, h), layout="constrained")


def _static(fig):
    """The static fallback: a Figure that IPython front ends show as a PNG even without the inline backend."""
    fig._repr_png_ = lambda: _png(fig)
    return fig


def _png(fig, dpi: int = 96) -> bytes:
    buf = io.BytesIO()
    with figure_fonts(getattr(fig, "fac_text", PlotText("en"))):
        fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def _fmt(x: float, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if math.isinf(x):
        return "−∞" if x < 0 else "∞"
    return f"{x:.{digits}f}"


_PANEL_CLASS = None


def _panel(children, render_png, css_class: str):
    """A VBox that also offers a PNG of its current picture (shown by front ends without a widget manager)."""
    global _PANEL_CLASS
    import ipywidgets as W

    if _PANEL_CLASS is None:
        class VisualPanel(W.VBox):
            def _repr_mimebundle_(self, **kwargs):
                data = super()._repr_mimebundle_(**kwargs)
                if data is not None and self.render_png is not None:
                    try:
                        import base64

                        data["image/png"] = base64.b64encode(self.render_png()).decode("ascii")
                    except Exception:  # noqa: BLE001 - the widget itself is what matters
                        pass
                return data

        _PANEL_CLASS = VisualPanel
    box = _PANEL_CLASS(children=children)
    box.render_png = render_png
    box.add_class("fac-visual")
    box.add_class(css_class)
    return box



def _step_controls(W):
    """A step slider with a linked play button, and the image and status line they drive."""
    w_step = W.IntSlider(value=1, min=1, max=1, description=T("w_step"), layout=W.Layout(width="360px"))
    w_step.add_class("fac-step")
    w_play = W.Play(value=1, min=1, max=1, interval=900, description=T("w_play"), show_repeat=False)
    W.jslink((w_play, "value"), (w_step, "value"))
    return w_step, w_play, W.Image(format="png", layout=W.Layout(max_width="100%")), W.HTML()
