"""The course's one benchmark core, and grader.benchmark on top of it.

The core measures attention the same way for grader.benchmark (a learner's function, in a notebook) and for the
course's suite (`python -m grader.tools.suite`, every kernel against every SDPA backend):

- attention_flops: 4·B·H·Nq·Nk·D (QKᵀ and PV, 2·Nq·Nk·D each per head), halved when causal. Half is the visible
  fraction of a square causal score matrix for large N (exactly (N + 1) / 2N), the convention of FlashAttention's
  and Triton's own benchmarks, so TFLOP/s stay comparable with theirs; it does not count masked work that a kernel
  skips or wastes.
- time_ms: the median of three triton.testing.do_bench medians, each after its warm-up (one call first, which
  compiles, then `warmup` ms of calls); CUDA events, L2 flushed before every timed call.
- peak_extra_mib: the most CUDA memory one call allocates beyond what was already allocated.
- the baselines: naive_attention (softmax(QKᵀ)V in PyTorch, N×N scores in fp32), sdpa (the default
  torch.nn.functional.scaled_dot_product_attention) and sdpa_backend(name) for one of SDPA_BACKENDS (cuDNN,
  FLASH, EFFICIENT through torch.nn.attention.sdpa_kernel). Each is called as fn(q, k, v, causal, sm_scale=None).

On the Triton interpreter timings mean nothing, so grader.benchmark says so and skips.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from . import config, environment
from .messages import Text, catalogue

T = catalogue("benchmarks", {
    # ---- what the x axis sweeps, and the fixed sizes
    "seq_len": ("sequence length N", "序列长度 N"),
    "elements": ("elements", "元素个数"),
    "row_length": ("row length N (4096 rows)", "行长度 N（共 4096 行）"),
    "seq_len_one_head": ("sequence length N (one head)", "序列长度 N（单头）"),
    "one_head": ("one head, D=64", "单头，D=64"),
    "backward_only": ("B=4, H=32, D=128, backward only: 2.5× the forward's FLOPs",
                      "B=4, H=32, D=128，只测反向：FLOPs 按前向的 2.5 倍计"),
    # ---- the providers, as shown (their names stay the keys of the rows)
    "yours": ("yours", "你的实现"),
    "reference": ("reference", "参考实现"),
    "naive": ("naive PyTorch", "朴素 PyTorch"),
    "torch_add": ("torch add", "torch 加法"),
    "sdpa_backward_cudnn": ("SDPA backward (cuDNN)", "SDPA 反向（cuDNN）"),
    "two_kernels_09": ("two kernels (09 reference)", "两个 kernel（09 参考实现）"),
    "sdpa_backward_flash": ("SDPA backward (FLASH)", "SDPA 反向（FLASH）"),
    # ---- the table, the plot
    "table_title": ("{exercise}: {unit} (ms, peak extra MiB) on {environment}",
                    "{exercise}：{unit}（ms，峰值额外显存 MiB），运行环境：{environment}"),
    "size": ("size", "规模"),
    "out_of_memory": ("out of memory", "显存不足"),
    "progress": ("benchmark", "基准测试"),
    "higher_is_better": ("{unit} (higher is better)", "{unit}（越高越好）"),
    "peak_memory_log": ("peak extra memory, MiB (log)", "峰值额外显存，MiB（对数坐标）"),
    "causal": ("causal", "因果"),
    "title_env": ("{env} · driver {driver} · torch {torch} · triton {triton}",
                  "{env} · 驱动 {driver} · torch {torch} · triton {triton}"),
    # ---- grader.benchmark says
    "no_benchmark": ("{exercise} has no benchmark: it is about correctness, not speed.",
                     "{exercise} 没有基准测试：这个练习考的是正确性，不是速度。"),
    "interpreter": ("benchmark skipped: running on the {env}. The interpreter executes kernels one program at a time "
                    "in NumPy, so its timings say nothing about a GPU. Run this notebook on a GPU to see the plot.",
                    "跳过基准测试：当前环境是{env}。解释器用 NumPy 一次只执行一个 program，它的耗时说明不了 GPU "
                    "上的性能。在 GPU 上运行这个 notebook 才能看到图。"),
    "no_reference": ("(reference solution unavailable: {error})", "（参考实现不可用：{error}）"),
    "provider_failed": ("  {provider}: {why}", "  {provider}：{why}"),
})

Inputs = tuple[tuple, dict]

#: provider name -> torch.nn.attention.SDPBackend member
SDPA_BACKENDS = {"SDPA cuDNN": "CUDNN_ATTENTION", "SDPA FLASH": "FLASH_ATTENTION",
                 "SDPA EFFICIENT": "EFFICIENT_ATTENTION"}


# ============================================================================================ the core
def attention_flops(batch: int, heads: int, n_q: int, n_k: int, d: int, causal: bool) -> float:
    """FLOPs of one attention forward: 4·B·H·Nq·Nk·D, halved when causal (see the module's docstring)."""
    return 4.0 * batch * heads * n_q * n_k * d / (2 if causal else 1)


#: FLOPs of a backward pass (dq, dk, dv) and of a training step (forward + backward), as multiples of the forward's:
#: the usual convention (FlashAttention's benchmarks): the backward's five matrix products against the forward's two.
BACKWARD_FLOPS, STEP_FLOPS = 2.5, 3.5


def backward_flops(batch: int, heads: int, n_q: int, n_k: int, d: int, causal: bool) -> float:
    return BACKWARD_FLOPS * attention_flops(batch, heads, n_q, n_k, d, causal)


def step_flops(batch: int, heads: int, n_q: int, n_k: int, d: int, causal: bool) -> float:
    return STEP_FLOPS * attention_flops(batch, heads, n_q, n_k, d, causal)


def time_ms(fn: Callable[[], Any], *, warmup: int = 25, rep: int = 100, repeats: int = 3) -> float:
    """Milliseconds of fn(): the median of `repeats` triton.testing.do_bench medians, each after `warmup` ms of
    untimed calls. One do_bench median now and then comes out ~30 % slow on the H200 (a row of 361, 252, 362
    TFLOP/s at N=1024 in results/h200/perf-2026-12-01/run11_autotune_stability.log); the median of three does not."""
    import statistics

    import triton.testing

    return statistics.median(triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median")
                             for _ in range(repeats))


def throughput(work: float, ms: float, unit: str = "TFLOP/s") -> float:
    """work (FLOPs, or bytes for GB/s) done in ms milliseconds, in unit (TFLOP/s or GB/s)."""
    return work / (ms * 1e-3) / (1e12 if unit == "TFLOP/s" else 1e9)


def peak_extra_mib(fn: Callable[[], Any]) -> float:
    """Peak CUDA memory fn() allocates beyond what was already allocated, in MiB."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    out = fn()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del out
    return peak / 2 ** 20


def naive_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                    sm_scale: float | None = None) -> torch.Tensor:
    """softmax(q kᵀ · sm_scale) v in PyTorch with the N×N scores in fp32 (SDPA's top-left causal mask)."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    s = (q @ k.transpose(-1, -2)).float() * scale
    if causal:
        n_q, n_k = s.shape[-2:]
        keep = torch.ones(n_q, n_k, dtype=torch.bool, device=q.device).tril()
        s = s.masked_fill(~keep, float("-inf"))
    return torch.softmax(s, dim=-1).to(v.dtype) @ v


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
         sm_scale: float | None = None) -> torch.Tensor:
    """PyTorch's scaled_dot_product_attention, whichever backend it picks; (N, D) inputs and GQA too."""
    f = torch.nn.functional.scaled_dot_product_attention
    if q.dim() == 2:
        return f(q[None, None], k[None, None], v[None, None], scale=sm_scale)[0, 0]
    if q.shape[1] != k.shape[1]:
        return f(q, k, v, is_causal=causal, scale=sm_scale, enable_gqa=True)
    return f(q, k, v, is_causal=causal, scale=sm_scale)


def sdpa_backend(backend: str) -> Callable[..., torch.Tensor]:
    """sdpa restricted to one backend, a member name of torch.nn.attention.SDPBackend (see SDPA_BACKENDS)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    chosen = getattr(SDPBackend, backend)

    def run(q, k, v, causal=False, sm_scale=None):
        with sdpa_kernel([chosen]):
            return sdpa(q, k, v, causal, sm_scale)
    run.__name__ = f"sdpa_{backend.lower()}"
    return run


def sdpa_backward(backend: str | None = None) -> Callable[..., Any]:
    """SDPA's backward alone (one backend, or SDPA's own choice) as fn(q, k, v, o, lse, do, causal, sm_scale), the
    signature of notebook 09's flash_attention_backward. Its forward runs once per set of inputs (o and lse are
    ignored: SDPA keeps its own); each call is one torch.autograd.grad through the kept graph. After a call,
    run.forward_output is SDPA's own o, which its gradients follow from."""
    forward = sdpa_backend(backend) if backend else sdpa
    kept: dict = {}

    def run(q, k, v, o, lse, do, causal=False, sm_scale=None):
        key = (q.data_ptr(), k.data_ptr(), v.data_ptr(), q.shape, k.shape, causal, sm_scale)
        if key not in kept:
            kept.clear()  # one graph at a time
            leaves = [t.detach().requires_grad_() for t in (q, k, v)]
            kept[key] = (forward(*leaves, causal, sm_scale), leaves)
        out, leaves = kept[key]
        run.forward_output = out.detach()  # the o its gradients follow from: what the suite's check evaluates at
        return torch.autograd.grad(out, leaves, do, retain_graph=True)
    run.forward_output = None
    run.__name__ = f"sdpa_backward_{(backend or 'default').lower()}"
    return run


def training_step(forward: Callable[..., Any]) -> Callable[..., Any]:
    """A training step of `forward(q, k, v, causal)`: the forward on fresh leaves, then torch.autograd.grad with
    the output gradient do, as fn(q, k, v, o, lse, do, causal) -> (dq, dk, dv) (o and lse are not used: the
    forward is part of what a step costs)."""
    def run(q, k, v, o, lse, do, causal=False):
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        return torch.autograd.grad(forward(*leaves, causal), leaves, do)
    run.__name__ = f"step_{getattr(forward, '__name__', 'forward')}"
    return run


# ============================================================================================ grader.benchmark
@dataclass(frozen=True)
class BenchSpec:
    xlabel: Text | str  # a Text where it has words: rendered in the plot's language
    sizes: tuple[int, ...]
    make: Callable[[int, torch.dtype, str, bool], Inputs]  # (size, dtype, device, causal) -> (args, kwargs)
    work: Callable[[int, bool], float] | None = None  # FLOPs (or bytes when unit is GB/s) per call
    unit: str = "TFLOP/s"
    baselines: tuple[str, ...] = ()
    describe: Text | str = ""


_COURSE: dict[str, Callable[..., Any]] = {}


def _course(exercise_id: str) -> Callable[..., Any]:
    """A reference solution as a baseline, loaded once (a load per timed call would time the load)."""
    from .references import reference

    if exercise_id not in _COURSE:
        _COURSE[exercise_id] = reference(exercise_id)
    return _COURSE[exercise_id]


BASELINES: dict[str, Callable[..., Any]] = {
    "SDPA (PyTorch)": sdpa,
    "naive PyTorch": naive_attention,
    "torch.softmax": lambda x: torch.softmax(x, dim=-1),
    "torch.matmul": lambda a, b: a @ b,
    "torch add": lambda x, y: x + y,
    "SDPA backward (cuDNN)": sdpa_backward("CUDNN_ATTENTION"),
    "SDPA backward (FLASH)": sdpa_backward("FLASH_ATTENTION"),
    "two kernels (09)": lambda *a, **kw: _course("flash_attention_backward")(*a, **kw),
}

#: provider names (the rows' keys, English) -> how the table and the plot show them
PROVIDER_LABELS: dict[str, Text] = {
    "yours": T.later("yours"),
    "reference": T.later("reference"),
    "naive PyTorch": T.later("naive"),
    "torch add": T.later("torch_add"),
    "SDPA backward (cuDNN)": T.later("sdpa_backward_cudnn"),
    "SDPA backward (FLASH)": T.later("sdpa_backward_flash"),
    "two kernels (09)": T.later("two_kernels_09"),
}


def provider_label(name: str, say: Callable[[Text | str], str] = str) -> str:
    """A provider as shown; `say` renders a Text (a figure's PlotText.text: in the figure's language)."""
    return say(PROVIDER_LABELS.get(name, name))


def _attn_inputs(B, H, D, style="4d"):
    def make(n, dtype, device, causal):
        shape = (n, D) if style == "2d" else (B, H, n, D)
        q, k, v = (torch.randn(shape, dtype=dtype, device=device) for _ in range(3))
        if style == "2d":
            return (q, k, v, 1.0 / math.sqrt(D)), {}
        if style == "naive":
            return (q, k, v), {"causal": causal}
        if style == "tiled":
            return (q, k, v), {}
        return (q, k, v), {"causal": causal}
    return make


def _attn_flops(B, H, D):
    return lambda n, causal: attention_flops(B, H, n, n, D, causal)


SPECS: dict[str, BenchSpec] = {
    "naive_attention": BenchSpec(T.later("seq_len"), (256, 512, 1024, 2048, 4096, 8192),
                                 _attn_inputs(2, 16, 64, "naive"), _attn_flops(2, 16, 64),
                                 baselines=("SDPA (PyTorch)",), describe="B=2, H=16, D=64"),
    "tiled_attention": BenchSpec(T.later("seq_len"), (256, 512, 1024, 2048, 4096),
                                 _attn_inputs(2, 16, 64, "tiled"), _attn_flops(2, 16, 64),
                                 baselines=("naive PyTorch", "SDPA (PyTorch)"), describe="B=2, H=16, D=64"),
    "vector_add": BenchSpec(T.later("elements"), tuple(2 ** i for i in range(12, 27, 2)),
                            lambda n, dt, dev, c: ((torch.randn(n, dtype=dt, device=dev),
                                                    torch.randn(n, dtype=dt, device=dev)), {}),
                            lambda n, c: 3.0 * n * 2, unit="GB/s", baselines=("torch add",)),
    "row_softmax": BenchSpec(T.later("row_length"), (256, 512, 1024, 2048, 4096, 8192, 16384),
                             lambda n, dt, dev, c: ((torch.randn(4096, n, dtype=dt, device=dev),), {}),
                             lambda n, c: 2.0 * 4096 * n * 2, unit="GB/s", baselines=("torch.softmax",)),
    "tiled_matmul": BenchSpec("M = N = K", (256, 512, 1024, 2048, 4096),
                              lambda n, dt, dev, c: ((torch.randn(n, n, dtype=dt, device=dev),
                                                      torch.randn(n, n, dtype=dt, device=dev)), {}),
                              lambda n, c: 2.0 * n ** 3, baselines=("torch.matmul",)),
    "flash_attention_2d": BenchSpec(T.later("seq_len_one_head"), (512, 1024, 2048, 4096, 8192, 16384),
                                    _attn_inputs(1, 1, 64, "2d"), _attn_flops(1, 1, 64),
                                    baselines=("naive PyTorch", "SDPA (PyTorch)"), describe=T.later("one_head")),
    "flash_attention": BenchSpec(T.later("seq_len"), (512, 1024, 2048, 4096, 8192),
                                 _attn_inputs(4, 16, 64), _attn_flops(4, 16, 64),
                                 baselines=("naive PyTorch", "SDPA (PyTorch)"), describe="B=4, H=16, D=64"),
    "flash_attention_fast": BenchSpec(T.later("seq_len"), (1024, 2048, 4096, 8192, 16384),
                                      _attn_inputs(4, 32, 128), _attn_flops(4, 32, 128),
                                      baselines=("naive PyTorch", "SDPA (PyTorch)"), describe="B=4, H=32, D=128"),
    "flash_attention_backward": BenchSpec(T.later("seq_len"), (1024, 2048, 4096, 8192),
                                          lambda n, dt, dev, c: _backward_inputs(4, 32, 128, n, dt, dev, c),
                                          lambda n, c: backward_flops(4, 32, n, n, 128, c),
                                          baselines=("SDPA backward (cuDNN)", "SDPA backward (FLASH)"),
                                          describe=T.later("backward_only")),
    "flash_attention_backward_atomic": BenchSpec(T.later("seq_len"), (1024, 2048, 4096, 8192),
                                                 lambda n, dt, dev, c: _backward_inputs(4, 32, 128, n, dt, dev, c),
                                                 lambda n, c: backward_flops(4, 32, n, n, 128, c),
                                                 baselines=("two kernels (09)", "SDPA backward (cuDNN)",
                                                            "SDPA backward (FLASH)"),
                                                 describe=T.later("backward_only")),
}


def _backward_inputs(B, H, D, n, dtype, device, causal) -> Inputs:
    """q, k, v, do and the o, lse of notebook 09's reference forward, for fn(q, k, v, o, lse, do, causal=...)."""
    from .references import reference

    q, k, v, do = (torch.randn(B, H, n, D, dtype=dtype, device=device) for _ in range(4))
    o, lse = reference("flash_attention_forward")(q, k, v, causal=causal)
    return (q, k, v, o, lse, do), {"causal": causal}


@dataclass
class BenchmarkResult:
    exercise: str
    unit: str
    environment: str
    rows: list[dict] = field(default_factory=list)  # one per (provider, size)
    figure: Any = None

    def table(self) -> str:
        providers = list(dict.fromkeys(r["provider"] for r in self.rows))
        sizes = list(dict.fromkeys(r["size"] for r in self.rows))
        by = {(r["provider"], r["size"]): r for r in self.rows}
        head = _rjust(T("size"), 8) + "  " + "  ".join(_rjust(provider_label(p)[:22], 22) for p in providers)
        lines = [T("table_title", exercise=self.exercise, unit=self.unit, environment=self.environment), head]
        for s in sizes:
            cells = []
            for p in providers:
                r = by.get((p, s))
                if r is None or r.get("error"):
                    cells.append(_rjust((r or {}).get("error", "-")[:22], 22))
                else:
                    cells.append(f"{r['rate']:7.1f} ({r['ms']:.3f}, {r['mem_mib']:.0f})".rjust(22))
            lines.append(f"{s:>8}  " + "  ".join(cells))
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.table()


def _rjust(text: str, n: int) -> str:
    """str.rjust by terminal columns (a Chinese character takes two: reports.width)."""
    from .reports import width

    return " " * max(n - width(text), 0) + text


def measure(providers: dict[str, Callable], spec: BenchSpec, *, sizes=None, dtype=torch.float16, causal=False,
            progress: bool = True) -> list[dict]:
    from tqdm.auto import tqdm

    sizes = tuple(sizes or spec.sizes)
    if config.BENCH_QUICK.enabled():  # test runs: the two smallest sizes prove the plumbing
        sizes = sizes[:2]
    rows = []
    bar = tqdm(total=len(sizes) * len(providers), disable=not progress, desc=T("progress"))
    for n in sizes:
        for name, fn in providers.items():
            row = {"provider": name, "size": n}
            try:
                args, kwargs = spec.make(n, dtype, "cuda", causal)
                call = lambda: fn(*args, **kwargs)  # noqa: E731
                ms = time_ms(call)
                row.update(ms=ms, mem_mib=peak_extra_mib(call))
                work = spec.work(n, causal) if spec.work else None
                row["rate"] = throughput(work, ms, spec.unit) if work else float("nan")
            except torch.cuda.OutOfMemoryError:
                row["error"] = T("out_of_memory")
            except Exception as e:  # noqa: BLE001 - one provider failing must not stop the others
                row["error"] = f"{type(e).__name__}"
                row["detail"] = str(e)[:300]
            finally:
                args = kwargs = None
                torch.cuda.empty_cache()
            rows.append(row)
            bar.update(1)
    bar.close()
    return rows


def plot(result: BenchmarkResult, title: str, xlabel: Text | str, pt=None):
    """The plot of a result: throughput and peak extra memory against size. pt: the figure's visuals.PlotText
    (its language and fonts; default: visuals.plot_text(), Chinese where a CJK font is installed)."""
    import matplotlib.pyplot as plt

    from .visuals import figure_fonts, plot_text

    pt = pt or plot_text()
    with figure_fonts(pt):
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.2))
        for p in dict.fromkeys(r["provider"] for r in result.rows):
            pts = [(r["size"], r["rate"], r["mem_mib"]) for r in result.rows if r["provider"] == p and "ms" in r]
            if not pts:
                continue
            xs, rates, mems = zip(*pts)
            label = provider_label(p, pt.text)
            ax1.plot(xs, rates, marker="o", label=label)
            ax2.plot(xs, [max(m, 1e-3) for m in mems], marker="o", label=label)
        for ax in (ax1, ax2):
            ax.set_xscale("log", base=2)
            ax.set_xlabel(pt.text(xlabel))
            ax.grid(True, alpha=0.3)
        ax1.set_ylabel(pt(T, "higher_is_better", unit=result.unit))
        ax2.set_ylabel(pt(T, "peak_memory_log"))
        ax2.set_yscale("log")
        ax1.legend()
        fig.suptitle(title, fontsize=10)
        fig.tight_layout()
    return fig


def benchmark(exercise_id: str, fn: Callable, *, sizes=None, dtype: torch.dtype = torch.float16,
              causal: bool = False, show: bool = True) -> BenchmarkResult | None:
    """Time fn against the reference solution and baselines over a sweep of sizes; plot it on a GPU."""
    from .exercises import get
    from .references import reference

    env = environment.detect()
    ex = get(exercise_id)
    spec = SPECS.get(ex.id)
    if spec is None:
        print(T("no_benchmark", exercise=ex.id))
        return None
    if env.interpreter:
        print(T("interpreter", env=env.label))
        return None
    if dtype == torch.bfloat16 and not env.supports_bf16:
        dtype = torch.float16
    providers = {"yours": fn}
    try:
        providers["reference"] = reference(ex.id)
    except Exception as e:  # noqa: BLE001 - the learner's timing is still worth showing
        print(T("no_reference", error=e))
    for b in spec.baselines:
        providers[b] = BASELINES[b]
    rows = measure(providers, spec, sizes=sizes, dtype=dtype, causal=causal)
    import triton

    result = BenchmarkResult(ex.id, spec.unit, env.label, rows)
    if show:
        from .visuals import plot_text

        pt = plot_text()  # the plot's language: Chinese only where a CJK font can draw it
        parts = [ex.id, str(dtype).replace("torch.", "")]
        if causal:
            parts.append(pt(T, "causal"))
        if spec.describe:
            parts.append(pt.text(spec.describe))
        title = " · ".join(parts) + "\n" + pt(T, "title_env", env=env.label, driver=env.driver,
                                              torch=torch.__version__, triton=triton.__version__)
        result.figure = plot(result, title, spec.xlabel, pt)
        print(result.table())
        failed = {r["provider"]: r.get("detail", r["error"]) for r in rows if r.get("error")}
        for p, why in failed.items():
            print(T("provider_failed", provider=provider_label(p), why=why))
    return result
