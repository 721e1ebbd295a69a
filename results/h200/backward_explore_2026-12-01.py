"""Notebook 09's backward on the H200: correctness first, fp64 dots, then a launch-config sweep against SDPA.

    python results/h200/backward_explore_2026-12-01.py      # on the GPU machine; logs to $OUT (or /tmp)

1. versions; 2. the solution's forward/backward against an fp64 autograd reference on many shapes and dtypes;
3. fp64 (gradcheck) on the GPU; 4. SDPA cuDNN/FLASH backward checked against the same reference, then timed;
5. each kernel's candidate configs, compiled in parallel worker processes (Triton's disk cache), timed one by one
(triton.testing.do_bench, median), for D = 64 and 128, fp16, B = 4, H = 32, N = 4096, causal and not.
"""

import json
import math
import multiprocessing as mp
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
OUT = Path(os.environ.get("OUT", "/tmp/bwd_out"))
OUT.mkdir(parents=True, exist_ok=True)
B, H, N = 4, 32, 4096

DKDV = [(32, 128, 4, 2), (32, 128, 4, 3), (32, 128, 8, 2), (64, 128, 8, 2), (64, 128, 8, 3), (64, 64, 4, 3),
        (32, 64, 4, 3), (64, 128, 4, 2)]
DQ = [(128, 32, 4, 2), (128, 32, 4, 3), (128, 32, 8, 3), (128, 64, 8, 2), (128, 64, 8, 3), (64, 64, 4, 3),
      (64, 32, 4, 3)]
FWD = [(128, 64, 4, 3), (128, 64, 8, 3), (128, 128, 8, 2), (64, 64, 4, 3)]


def module():
    import grader
    grader.setup(quiet=True)
    from grader.notebooks import load_module
    return load_module(ROOT / "solutions" / "09_backward.ipynb")


def inputs(d, dtype=None, causal=False, seed=0):
    import torch
    dtype = dtype or torch.float16
    g = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v, do = (torch.randn(B, H, N, d, device="cuda", dtype=dtype, generator=g) for _ in range(4))
    return q, k, v, do


def run_job(job):
    """Compile (and run once) one configuration in this worker process: fills Triton's disk cache."""
    kernel, d, causal, cfg = job
    import torch
    m = module()
    q, k, v, do = inputs(d)
    t0 = time.time()
    try:
        if kernel == "fwd":
            block_d = max(16, 1 << (d - 1).bit_length())
            m.CONFIGS["fwd"][block_d] = [cfg]
            m.flash_attention_forward(q, k, v, causal=causal)
        else:
            o, lse = m.flash_attention_forward(q, k, v, causal=causal)
            m.flash_attention_backward_with(q, k, v, o, lse, do, causal, **{kernel: cfg}, kernels=(kernel,))
        torch.cuda.synchronize()
        return job, time.time() - t0, None
    except Exception as e:  # noqa: BLE001
        return job, time.time() - t0, f"{type(e).__name__}: {str(e)[:200]}"


def main():
    import torch
    import triton
    import triton.testing
    from torch.nn.attention import SDPBackend, sdpa_kernel

    log = open(OUT / "backward_explore.log", "w")

    def say(*a):
        s = " ".join(str(x) for x in a)
        print(s, flush=True)
        log.write(s + "\n")
        log.flush()

    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw",
                          "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    say(f"GPU: {smi}; torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, triton {triton.__version__}")
    m = module()

    # ---- 2. correctness on many shapes against fp64 autograd (on the GPU, in fp64)
    def ref_grads(q, k, v, do, causal, scale=None):
        q, k, v = (t.detach().double().requires_grad_() for t in (q, k, v))
        g = q.shape[1] // k.shape[1]
        kk, vv = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
        s = q @ kk.transpose(-1, -2) * (scale or 1 / math.sqrt(q.shape[-1]))
        if causal:
            s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).tril(), float("-inf"))
        o = torch.softmax(s, -1) @ vv
        return o.detach(), torch.logsumexp(s, -1).detach(), torch.autograd.grad(o, (q, k, v), do.double())

    shapes = [  # B, H, Hkv, Nq, Nk, D, causal, dtype, layout
        (2, 4, 4, 1024, 1024, 64, False, torch.float16, "bhnd"),
        (2, 4, 4, 1024, 1024, 128, True, torch.float16, "bhnd"),
        (1, 8, 2, 777, 1311, 80, True, torch.bfloat16, "bnhd"), (1, 6, 2, 1500, 700, 96, True, torch.float16, "bhnd"),
        (2, 4, 1, 513, 2049, 128, False, torch.bfloat16, "bnhd"), (1, 2, 2, 300, 333, 256, True, torch.float16, "bhnd"),
        (1, 2, 2, 200, 300, 256, False, torch.bfloat16, "bhnd"), (1, 2, 2, 1, 1, 16, False, torch.float16, "bhnd"),
        (1, 2, 2, 5, 300, 32, True, torch.float16, "bhnd"), (1, 2, 2, 300, 5, 32, True, torch.float16, "bhnd"),
        (1, 4, 2, 250, 260, 64, True, torch.float32, "bnhd"), (1, 2, 2, 130, 70, 128, False, torch.float32, "bhnd"),
        (2, 32, 8, 4096, 4096, 128, True, torch.bfloat16, "bhnd"), (1, 2, 2, 64, 80, 32, True, torch.float64, "bhnd"),
    ]
    worst = 0.0
    for B_, H_, Hkv, nq, nk, D, causal, dt, layout in shapes:
        def mk(h, n):
            if layout == "bnhd":
                return torch.randn(B_, n, h, D, device="cuda").to(dt).transpose(1, 2)
            return torch.randn(B_, h, n, D, device="cuda").to(dt)
        q, k, v, do = mk(H_, nq), mk(Hkv, nk), mk(Hkv, nk), mk(H_, nq)
        try:
            o, lse = m.flash_attention_forward(q, k, v, causal)
            dq, dk, dv = m.flash_attention_backward(q, k, v, o, lse, do, causal)
            o_r, lse_r, g = ref_grads(q, k, v, do, causal)
            e = [(o.double() - o_r).abs().max().item(), (lse.double() - lse_r).abs().max().item()]
            e += [((a.double() - b).abs().max() / b.pow(2).mean().sqrt().clamp_min(1e-30)).item()
                  for a, b in zip((dq, dk, dv), g)]
            if dt == torch.float16:
                worst = max(worst, *e[2:])
            say(f"correct? {B_},{H_},{Hkv},{nq},{nk},{D} causal={causal} {str(dt)[6:]} {layout}: |o| {e[0]:.1e} "
                f"|lse| {e[1]:.1e} dq/dk/dv max|err|/rms {e[2]:.1e} {e[3]:.1e} {e[4]:.1e}")
        except Exception as ex:  # noqa: BLE001
            say(f"FAILED {B_},{H_},{Hkv},{nq},{nk},{D} {causal} {dt}: {type(ex).__name__}: {str(ex)[:300]}")
        torch.cuda.empty_cache()

    # ---- 3. fp64 gradcheck on the GPU
    try:
        args = [torch.randn(1, h, n, 16, dtype=torch.float64, device="cuda", requires_grad=True)
                for h, n in ((4, 7), (2, 9), (2, 9))]
        for causal in (False, True):
            ok = torch.autograd.gradcheck(lambda q, k, v: m.flash_attention_autograd(q, k, v, causal=causal), args,
                                          fast_mode=True, atol=1e-5, rtol=1e-4)
            say(f"gradcheck fp64 on GPU causal={causal}: {ok}")
    except Exception as ex:  # noqa: BLE001
        say(f"gradcheck fp64 on GPU: {type(ex).__name__}: {str(ex)[:400]}")

    # ---- 5. compile every candidate in parallel processes
    jobs = []
    for d in (64, 128):
        for causal in (False, True):
            jobs += [("dkdv", d, causal, c) for c in DKDV] + [("dq", d, causal, c) for c in DQ]
            jobs += [("fwd", d, causal, c) for c in FWD]
    t0 = time.time()
    ctx = mp.get_context("spawn")
    errors = {}
    with ctx.Pool(14) as pool:
        for job, _secs, err in pool.imap_unordered(run_job, jobs):
            if err:
                errors[job] = err
                say(f"compile {job}: {err}")
    say(f"compiled {len(jobs)} configurations in {time.time() - t0:.0f} s")

    # ---- 4. SDPA backward (checked, then timed) and the sweep, side by side
    def bench(fn):
        return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")

    results = []
    for d in (64, 128):
        for causal in (False, True):
            q, k, v, do = inputs(d, causal=causal)
            flops = 2.5 * 4 * B * H * N * N * d / (2 if causal else 1)
            row = {"d": d, "causal": causal}
            qs, ks, vs = (t[:1, :2].detach() for t in (q, k, v))
            _, _, g = ref_grads(qs, ks, vs, do[:1, :2], causal)
            for name, backend in (("cuDNN", SDPBackend.CUDNN_ATTENTION), ("FLASH", SDPBackend.FLASH_ATTENTION)):
                try:
                    with sdpa_kernel([backend]):
                        qq, kk, vv = (t.clone().requires_grad_() for t in (qs, ks, vs))
                        small = torch.autograd.grad(torch.nn.functional.scaled_dot_product_attention(
                            qq, kk, vv, is_causal=causal), (qq, kk, vv), do[:1, :2])
                        err = max(((a.double() - b).abs().max() / b.pow(2).mean().sqrt()).item()
                                  for a, b in zip(small, g))
                        qq, kk, vv = (t.clone().requires_grad_() for t in (q, k, v))
                        out = torch.nn.functional.scaled_dot_product_attention(qq, kk, vv, is_causal=causal)
                        ms = bench(lambda: torch.autograd.grad(out, (qq, kk, vv), do, retain_graph=True))
                        row[name] = flops / ms / 1e9
                        say(f"SDPA {name} backward d={d} causal={causal}: max|err|/rms {err:.1e}, {ms:.3f} ms, "
                            f"{row[name]:.0f} TFLOP/s")
                except Exception as ex:  # noqa: BLE001
                    say(f"SDPA {name}: {type(ex).__name__}: {str(ex)[:200]}")
            o, lse = m.flash_attention_forward(q, k, v, causal=causal)
            ms_delta = bench(lambda: m.flash_attention_backward_with(q, k, v, o, lse, do, causal, kernels=("delta",)))
            say(f"delta kernel d={d}: {ms_delta:.3f} ms")
            for kernel, cands in (("dkdv", DKDV), ("dq", DQ)):
                for cfg in cands:
                    if (kernel, d, causal, cfg) in errors:
                        continue
                    try:
                        ms = bench(lambda: m.flash_attention_backward_with(
                            q, k, v, o, lse, do, causal, **{kernel: cfg}, kernels=("delta", kernel))) - ms_delta
                    except Exception as ex:  # noqa: BLE001
                        say(f"{kernel} {cfg}: {type(ex).__name__}: {str(ex)[:200]}")
                        continue
                    results.append({"kernel": kernel, "d": d, "causal": causal, "cfg": cfg, "ms": ms})
                    say(f"{kernel} d={d} causal={causal} {cfg}: {ms:.3f} ms")
            block_d = max(16, 1 << (d - 1).bit_length())
            saved = list(m.CONFIGS["fwd"][block_d])
            for cfg in FWD:
                if ("fwd", d, causal, cfg) in errors:
                    continue
                m.CONFIGS["fwd"][block_d] = [cfg]
                ms = bench(lambda: m.flash_attention_forward(q, k, v, causal=causal))
                results.append({"kernel": "fwd", "d": d, "causal": causal, "cfg": cfg, "ms": ms})
                say(f"fwd d={d} causal={causal} {cfg}: {ms:.3f} ms, {flops / 2.5 / ms / 1e9:.0f} TFLOP/s")
            m.CONFIGS["fwd"][block_d] = saved
            best = {kn: min((r for r in results if r["kernel"] == kn and r["d"] == d and r["causal"] == causal),
                            key=lambda r: r["ms"], default=None) for kn in ("dkdv", "dq", "fwd")}
            total = ms_delta + sum(best[kn]["ms"] for kn in ("dkdv", "dq") if best[kn])
            row.update(ours=flops / total / 1e9, best={kn: best[kn]["cfg"] for kn in best if best[kn]},
                       split={kn: best[kn]["ms"] for kn in best if best[kn]}, delta_ms=ms_delta, total_ms=total)
            say(f"== d={d} causal={causal}: best {row['best']}, ours {row['ours']:.0f} TFLOP/s "
                f"(delta {ms_delta:.3f} + dkdv {row['split'].get('dkdv', 0):.3f} + dq {row['split'].get('dq', 0):.3f}"
                f" = {total:.3f} ms); cuDNN {row.get('cuDNN', 0):.0f}, FLASH {row.get('FLASH', 0):.0f}")
            results.append({"summary": row})
            torch.cuda.empty_cache()
    say(f"worst fp16 gradient max|err|/rms over the correctness shapes: {worst:.2e}")
    (OUT / "backward_explore.json").write_text(json.dumps(results, indent=1, default=str))
    for r in results:
        if "summary" in r:
            s = r["summary"]
            print(f"SUMMARY d={s['d']} causal={s['causal']}: ours {s['ours']:.0f} cuDNN {s.get('cuDNN', 0):.0f} "
                  f"FLASH {s.get('FLASH', 0):.0f} TFLOP/s; best {s['best']}")


if __name__ == "__main__":
    main()
