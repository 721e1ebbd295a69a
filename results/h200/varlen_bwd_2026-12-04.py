"""H200: notebook 10's packed (varlen) backward against the padded backward (notebook 09's flash_attention_backward
on the same sequences padded to a batch) and SDPA's backward on the padded batch (cuDNN and FLASH backends).

Not run yet (written 2026-12-04 for the next GPU session). Every provider's gradients are checked against fp64
first (grader.oracle.varlen_attention_grads, sequence by sequence; a provider that fails is reported "wrong" and not
timed). Backward only: the forward (o, lse) is computed once outside the timing; each timed call is the backward
alone (ours: flash_attention_varlen_backward; padded: flash_attention_backward from the padded o, lse; SDPA:
torch.autograd.grad through the padded forward, whose time is measured separately and subtracted). Timings are
triton.testing.do_bench medians, the providers interleaved, `--reps` rounds. Shapes: equal lengths (B × N) and
16 mixed lengths, fp16/bf16, D 64/128, causal and not.

Equal lengths have no padding: every provider computes the same gradients. Mixed lengths padded to the longest:
notebook 09's kernels take one N for the whole batch, so the padded run is timed for what padding costs (B · N_max²
work) and checked on the sequences of length N_max only, where it is exact ("cost only" in the log); SDPA gets a
boolean key-padding (and causal) mask, which cuDNN may take and FLASH refuses (reported n/a).

    python results/h200/varlen_bwd_2026-12-04.py --out results/h200/varlen-bwd-2026-12-04
    python results/h200/varlen_bwd_2026-12-04.py --cpu-smoke     # imports and the fp64 checks, toy sizes, CPU

Writes --out/log.txt and --out/results.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=str(ROOT / "results" / "h200" / "varlen-bwd-2026-12-04"))
    p.add_argument("--reps", type=int, default=3, help="interleaved rounds of every provider")
    p.add_argument("--cpu-smoke", action="store_true", help="Triton interpreter, toy sizes, checks only")
    return p.parse_args()


ARGS = parse()
if ARGS.cpu_smoke:
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import grader  # noqa: E402
from grader import oracle  # noqa: E402
from grader.notebooks import solution_module  # noqa: E402
from grader.tolerances import grad_tolerance  # noqa: E402

ENV = grader.setup(quiet=True)
NB10 = solution_module("10_inference")
BACKWARD = grader.reference("flash_attention_backward")  # notebook 09's two kernels
FORWARD = grader.reference("flash_attention_forward")
DEV = ENV.device
LOG: list[str] = []


def say(*parts):
    line = " ".join(str(p) for p in parts)
    print(line, flush=True)
    LOG.append(line)


def cu_of(lengths):
    out = [0]
    for n in lengths:
        out.append(out[-1] + n)
    return torch.tensor(out, dtype=torch.int32, device=DEV)


def packed_problem(lengths, H, H_kv, D, dtype, gen):
    total = sum(lengths)
    q = torch.randn(total, H, D, generator=gen, device="cpu").to(dtype).to(DEV)
    k = torch.randn(total, H_kv, D, generator=gen, device="cpu").to(dtype).to(DEV)
    v = torch.randn(total, H_kv, D, generator=gen, device="cpu").to(dtype).to(DEV)
    do = torch.randn(total, H, D, generator=gen, device="cpu").to(dtype).to(DEV)
    return q, k, v, do


def pad(x, lengths):
    """(total, h, D) packed -> (B, h, N_max, D) zero-padded."""
    B, n_max = len(lengths), max(lengths)
    out = x.new_zeros(B, x.shape[1], n_max, x.shape[2])
    start = 0
    for b, n in enumerate(lengths):
        out[b, :, :n] = x[start:start + n].transpose(0, 1)
        start += n
    return out


def unpad(x, lengths):
    """(B, h, N_max, D) -> (total, h, D), the padding dropped."""
    return torch.cat([x[b, :, :n].transpose(0, 1) for b, n in enumerate(lengths)], 0)


def grads_ok(got, want, dtype):
    a, r = grad_tolerance(dtype)
    for g, w in zip(got, want):
        w = w.to(g.device)
        rms = max(float(w.pow(2).mean().sqrt()), 1e-3)
        if not bool(((g.double() - w).abs() <= a * rms + r * w.abs()).all()):
            return False
    return True


def bench(fn):
    import triton
    if ENV.interpreter:  # the interpreter's times mean nothing: one call, for the check's sake
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3
    return triton.testing.do_bench(fn, return_mode="median")


def providers(lengths, H, H_kv, D, dtype, causal, gen):
    """{name: (backward callable returning (dq, dk, dv) packed, extra time to subtract)} after the fp64 check."""
    q, k, v, do = packed_problem(lengths, H, H_kv, D, dtype, gen)
    cu = cu_of(lengths)
    n_max = max(lengths)
    o, lse = NB10.flash_attention_varlen(q, k, v, cu, cu, n_max, n_max, causal=causal, return_lse=True)
    want = oracle.varlen_attention_grads(q, k, v, do, cu, cu, causal, None, o=o)  # Δ from the o a kernel sees
    out = {}

    def ours():
        return NB10.flash_attention_varlen_backward(q, k, v, o, lse, do, cu, cu, n_max, n_max, causal=causal,
                                                    check_values=False)
    out["packed (ours)"] = ours
    equal = len(set(lengths)) == 1
    qp, kp, vp, dop = pad(q, lengths), pad(k, lengths), pad(v, lengths), pad(do, lengths)
    if equal:  # no padding: notebook 09's backward and SDPA's on the batch as it is
        op, lsep = FORWARD(qp, kp, vp, causal=causal, causal_align="bottom_right")

        def padded():
            g = BACKWARD(qp, kp, vp, op, lsep, dop, causal=causal, causal_align="bottom_right")
            return tuple(unpad(x, lengths) for x in g)
        out["padded (09)"] = padded
        if not ENV.interpreter:
            from torch.nn.attention import SDPBackend, sdpa_kernel
            for name, backend in (("SDPA cuDNN", SDPBackend.CUDNN_ATTENTION),
                                  ("SDPA FLASH", SDPBackend.FLASH_ATTENTION)):
                qs, ks, vs = (x.detach().clone().requires_grad_() for x in (qp, kp, vp))
                with sdpa_kernel(backend):
                    os_ = F.scaled_dot_product_attention(qs, ks, vs, is_causal=causal, enable_gqa=H != H_kv)

                def sdpa(os_=os_, qs=qs, ks=ks, vs=vs):
                    g = torch.autograd.grad(os_, (qs, ks, vs), dop, retain_graph=True)
                    return tuple(unpad(x, lengths) for x in g)
                out[name] = sdpa
    else:  # mixed lengths, padded: 09's kernels take one N for the batch (see the docstring: "cost only")
        op, lsep = FORWARD(qp, kp, vp, causal=causal, causal_align="bottom_right")

        def padded():
            return BACKWARD(qp, kp, vp, op, lsep, dop, causal=causal, causal_align="bottom_right")
        out["padded (09), cost only"] = padded
        if not ENV.interpreter:
            from torch.nn.attention import SDPBackend, sdpa_kernel
            keep = torch.zeros(len(lengths), 1, n_max, n_max, dtype=torch.bool, device=DEV)
            for b, n in enumerate(lengths):
                i, j = torch.arange(n_max, device=DEV)[:, None], torch.arange(n_max, device=DEV)[None, :]
                keep[b, 0] = (j < n) & ((j <= i) if causal else True)
            for name, backend in (("SDPA cuDNN (masked)", SDPBackend.CUDNN_ATTENTION),
                                  ("SDPA FLASH (masked)", SDPBackend.FLASH_ATTENTION)):
                qs, ks, vs = (x.detach().clone().requires_grad_() for x in (qp, kp, vp))
                try:
                    with sdpa_kernel(backend):
                        os_ = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=keep, enable_gqa=H != H_kv)
                except RuntimeError as e:
                    say(f"    {name}: n/a ({str(e).splitlines()[0][:60]})")
                    continue

                def sdpa(os_=os_, qs=qs, ks=ks, vs=vs):
                    g = torch.autograd.grad(os_, (qs, ks, vs), dop, retain_graph=True)
                    return tuple(unpad(x, lengths) for x in g)
                out[name] = sdpa
    checked = {}
    for name, fn in out.items():
        try:
            got = fn()
        except RuntimeError as e:
            say(f"    {name}: n/a ({str(e).splitlines()[0][:60]})")
            continue
        if "cost only" in name:  # checked on the sequences that fill the padded length, where it is exact
            full = [b for b, n in enumerate(lengths) if n == n_max]
            got = tuple(torch.cat([g[b, :, :n_max].transpose(0, 1) for b in full]) for g in got)
            starts = cu.tolist()
            sub = tuple(torch.cat([w[starts[b]:starts[b + 1]] for b in full]) for w in want)
            ok = grads_ok(got, sub, dtype)
        else:
            ok = grads_ok(got, want, dtype)
        say(f"    {name}: fp64 check {'ok' if ok else 'WRONG'}")
        if ok:
            checked[name] = fn
    return checked


def flops(lengths, H, D, causal):
    """Useful backward FLOPs: 2.5 × the forward's 4·n²·D per head (5 products of 2·n²·D), halved when causal."""
    return sum(2.5 * 4 * n * n * D * H * (0.5 if causal else 1.0) for n in lengths)


def main():
    gen = torch.Generator().manual_seed(0)
    if ARGS.cpu_smoke:
        shapes = {"equal": [48, 48], "mixed": [40, 7, 1, 33]}
        dtypes, dims, heads = [torch.float16], [64], (4, 2)
    else:
        mixed = [int(x) for x in torch.randint(64, 8192, (16,), generator=gen)]
        mixed[0] = 8192  # one sequence of the padded length, so that the padded baseline can be checked
        shapes = {"equal 4 × 4096": [4096] * 4, "equal 16 × 1024": [1024] * 16, "mixed 16": mixed}
        dtypes, dims, heads = [torch.float16, torch.bfloat16], [64, 128], (32, 8)
    say(f"varlen backward, {ENV.label}, torch {torch.__version__}, python {platform.python_version()}, "
        f"{time.strftime('%Y-%m-%d %H:%M')}")
    rows = []
    for dtype in dtypes:
        for D in dims:
            for causal in (False, True):
                for shape_name, lengths in shapes.items():
                    say(f"{shape_name} {lengths if len(lengths) <= 16 else ''} {dtype} D={D} causal={causal}")
                    fns = providers(lengths, *heads, D, dtype, causal, gen)
                    times = {name: [] for name in fns}
                    for _ in range(1 if ENV.interpreter else ARGS.reps):  # interleaved rounds
                        for name, fn in fns.items():
                            times[name].append(bench(fn))
                    useful = flops(lengths, heads[0], D, causal)
                    for name, ts in times.items():
                        ms = sorted(ts)[len(ts) // 2]
                        row = dict(shape=shape_name, lengths=lengths, dtype=str(dtype), D=D, causal=causal,
                                   provider=name, ms=ms, useful_tflops=useful / ms / 1e9, rounds=ts)
                        rows.append(row)
                        say(f"    {name:28s} {ms:9.3f} ms  {row['useful_tflops']:7.1f} useful TFLOP/s")
    out = Path(ARGS.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(rows, indent=1))
    (out / "log.txt").write_text("\n".join(LOG) + "\n")
    say(f"wrote {out}/results.json and log.txt")
    assert all(math.isfinite(r["ms"]) for r in rows)


if __name__ == "__main__":
    main()
