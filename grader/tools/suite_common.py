"""What both modes of the benchmark suite share (grader/tools/suite.py, the forward and the command line;
grader/tools/suite_backward.py, `--backward`): the sweep's plan and dtypes, the naive baseline's memory bound, the
environment a report records and the markdown tables. Both import it; it imports neither.
"""

from __future__ import annotations

import platform
import time
from dataclasses import dataclass, field

import torch

#: how grader.benchmarks.time_ms times, as a report says it (a results file records it, so that an older file keeps
#: its own words)
TIMING = "the median of three `triton.testing.do_bench` medians"
NAIVE_MEMORY_FRACTION = 0.35  # naive PyTorch materialises B·H·N² scores (~12 bytes each); skip above this
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
HEADS = 32
#: batch per sequence length: enough work per call to be far above launch overhead, small enough to be quick
BATCH = {512: 4, 1024: 4, 2048: 4, 4096: 4, 8192: 2, 16384: 1}


@dataclass
class Plan:
    sizes: tuple[int, ...]
    dims: tuple[int, ...]
    dtypes: tuple[str, ...]
    causal: tuple[bool, ...]
    heads: int = HEADS
    batch: dict = field(default_factory=lambda: dict(BATCH))

    def configs(self):
        for dt in self.dtypes:
            for d in self.dims:
                for c in self.causal:
                    for n in self.sizes:
                        yield dt, d, c, n

    def batch_for(self, n: int) -> int:
        return self.batch.get(n, max(1, 16384 // n))


# --------------------------------------------------------------------------------------------- reporting
def environment_info() -> dict:
    import triton

    from ..device import driver_version, shared_memory_limit

    info = dict(date=time.strftime("%Y-%m-%d %H:%M %Z"), torch=torch.__version__, triton=triton.__version__,
                python=platform.python_version(), cuda=torch.version.cuda, timing=TIMING)
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(gpu=props.name, capability=f"{props.major}.{props.minor}", sms=props.multi_processor_count,
                    memory_gib=round(props.total_memory / 2 ** 30, 1),
                    smem_per_block_optin=shared_memory_limit(0), cudnn=torch.backends.cudnn.version(),
                    driver=driver_version())
    return info


def _fmt(row):
    if row.get("status") == "ok":
        return f"{row['tflops']:.0f}"
    s = row.get("status", "")
    if s.startswith("not supported"):
        return "n/a"
    if s.startswith("skipped"):
        return "skip"
    if s.startswith("unavailable"):
        return "unavail."
    if s.startswith("WRONG"):
        return "WRONG"
    return "err"


def speed_tables(by: dict, plan: Plan, providers: list[str], ours: str | list[tuple[str, str]], bases,
                 ratio_name: str = "ours", heading: str = "") -> list[str]:
    """One TFLOP/s table per (dtype, D, causal) of the plan that has rows, with a ratio row `ratio_name / base` per
    base; ours: a provider (named ratio_name in the ratio rows) or a list of (provider, name), a ratio row each.
    by: (provider, dtype, D, causal, N) -> row."""
    pairs = [(ours, ratio_name)] if isinstance(ours, str) else ours
    lines = []
    for dt in plan.dtypes:
        for d in plan.dims:
            for c in plan.causal:
                sizes = [n for n in plan.sizes if any((p, dt, d, c, n) in by for p in providers)]
                if not sizes:
                    continue
                lines.append(f"## {heading}{dt}, D = {d}, {'causal' if c else 'not causal'}: TFLOP/s")
                lines.append("")
                lines.append("| provider | " + " | ".join(f"N={n}" for n in sizes) + " |")
                lines.append("|---|" + "---:|" * len(sizes))
                for p in providers:
                    cells = [_fmt(by[(p, dt, d, c, n)]) if (p, dt, d, c, n) in by else "" for n in sizes]
                    lines.append(f"| {p} | " + " | ".join(cells) + " |")
                for mine, name in pairs:
                    for base in bases:
                        cells = []
                        for n in sizes:
                            a, b = by.get((mine, dt, d, c, n), {}), by.get((base, dt, d, c, n), {})
                            cells.append(f"{a['tflops'] / b['tflops']:.2f}×" if "tflops" in a and "tflops" in b
                                         else "")
                        if any(cells):
                            lines.append(f"| *{name} / {base}* | " + " | ".join(cells) + " |")
                lines.append("")
    return lines


def memory_table(by: dict, providers: list[str], sizes: list[int], dtype: str, d: int) -> list[str]:
    """Peak extra MiB per provider and N (not causal), status marks where a provider did not run."""
    lines = ["| provider | " + " | ".join(f"N={n}" for n in sizes) + " |", "|---|" + "---:|" * len(sizes)]
    for p in providers:
        cells = []
        for n in sizes:
            r = by.get((p, dtype, d, False, n))
            cells.append(f"{r['mem_mib']:.0f}" if r and r.get("status") == "ok" else (_fmt(r) if r else ""))
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    return lines + [""]


def status_section(rows: list[dict], prefixes: tuple[str, ...], title: str) -> list[str]:
    """A '## title' list of every (provider, status) whose status starts with one of `prefixes` (none: no lines)."""
    found = {(r["provider"], r["status"]) for r in rows if str(r.get("status", "")).startswith(prefixes)}
    if not found:
        return []
    return [f"## {title}", "", *(f"- {p}: {s}" for p, s in sorted(found)), ""]
