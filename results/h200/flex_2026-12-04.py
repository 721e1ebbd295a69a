"""Notebook 12 on the H200: the references graded on the GPU, then the forward's speed per attention variant beside
PyTorch's FlexAttention (torch.compile), SDPA (FLASH and cuDNN where the variant is plain causal, EFFICIENT with an
explicit mask where it is not) and notebook 08's tuned kernel (plain causal). Every timed output is checked against
fp64 first (a slice of rows of two heads, against all keys). The kernels come from solutions/12_variants.ipynb.

    python results/h200/flex_2026-12-04.py --check --out DIR
    python results/h200/flex_2026-12-04.py --bench --dtypes float16 --dims 128 --ns 4096,16384 --out DIR

(levers moved into the notebook after run-2026-12-04g: results/h200/flex_levers_2026-12-04.py ran against the
solution before them and no longer applies to it.)
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.testing
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention import flex_attention as torch_flex

import grader
from grader import notebooks

NB = notebooks.solution_module("12_variants")
SOFTCAP = 50.0
#: the block mask's (and so the kernel's) tile per (variant, head dim): the fastest of the sweep of 2026-12-04
#: (run-2026-12-04e/f); 64 × 64 elsewhere
TILES = {("causal", 128): 128, ("window", 128): 128, ("softcap", 128): 128}
WINDOW = 1024


def course_variants(n, h, device):
    """name -> (score_mod, score_aux, mask_mod, mask_aux) of the course's kernel."""
    docs = documents(n, device)
    slopes = NB.alibi_slopes(h).to(device)
    return {
        "causal": (None, None, NB.causal_mask_mod, None),
        f"window {WINDOW}": (None, None, NB.sliding_window, torch.tensor([WINDOW], dtype=torch.int32, device=device)),
        f"softcap {SOFTCAP:g} + causal": (NB.softcap, torch.tensor([SOFTCAP], device=device), NB.causal_mask_mod,
                                          None),
        "alibi + causal": (NB.alibi, slopes, NB.causal_mask_mod, None),
        "documents": (None, None, NB.document_mask, docs),
    }


def torch_variants(n, h, device):
    """The same variants as PyTorch FlexAttention's score_mod / mask_mod."""
    docs = documents(n, device)
    slopes = NB.alibi_slopes(h).to(device)

    def causal(b, hh, q, kv):
        return kv <= q

    def window(b, hh, q, kv):
        return (kv <= q) & (q - kv < WINDOW)

    def softcap(score, b, hh, q, kv):
        return SOFTCAP * torch.tanh(score / SOFTCAP)

    def alibi(score, b, hh, q, kv):
        return score + slopes[hh] * (kv - q)

    def document(b, hh, q, kv):
        return (docs[q] == docs[kv]) & (kv <= q)
    return {"causal": (None, causal), f"window {WINDOW}": (None, window),
            f"softcap {SOFTCAP:g} + causal": (softcap, causal), "alibi + causal": (alibi, causal),
            "documents": (None, document)}


def documents(n, device):
    """8 documents of deterministic, unequal lengths packed into n positions."""
    g = torch.Generator().manual_seed(n)
    cuts = torch.sort(torch.randperm(n - 1, generator=g)[:7] + 1).values
    ids = torch.zeros(n, dtype=torch.int32)
    ids[cuts] = 1
    return torch.cumsum(ids, 0).to(torch.int32).to(device)


def fp64_rows(q, k, v, name, rows, h_slice, n, docs, slopes):
    """The variant in fp64 for query rows `rows` of heads h_slice of batch 0, against all keys."""
    q64 = q[0, h_slice, rows].double()
    k64, v64 = k[0, h_slice].double(), v[0, h_slice].double()
    s = q64 @ k64.transpose(-1, -2) / math.sqrt(q.shape[-1])
    i = torch.arange(n, device=q.device)[rows][:, None]
    j = torch.arange(n, device=q.device)[None, :]
    if name.startswith("softcap"):
        s = SOFTCAP * torch.tanh(s / SOFTCAP)
    if name.startswith("alibi"):
        s = s + slopes[h_slice].double()[:, None, None] * (j - i)
    keep = j <= i
    if name.startswith("window"):
        keep = keep & (i - j < WINDOW)
    if name == "documents":
        keep = keep & (docs[rows][:, None] == docs[None, :])
    s = s.masked_fill(~keep, float("-inf"))
    return torch.softmax(s, -1) @ v64


def bench(args, out_dir):
    records = []
    torch._dynamo.config.recompile_limit = 256  # one compile per variant and shape: the default 8 fell back to eager
    torch._dynamo.config.accumulated_recompile_limit = 4096
    torch_flex_c = torch.compile(torch_flex.flex_attention, dynamic=False)
    fast = grader.reference("flash_attention_fast")
    for dtype_name in args.dtypes.split(","):
        dtype = getattr(torch, dtype_name)
        for d in map(int, args.dims.split(",")):
            for n in map(int, args.ns.split(",")):
                b, h = (max(1, 16384 // n), 16)
                q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=dtype) for _ in range(3))
                ours = course_variants(n, h, "cuda")
                theirs = torch_variants(n, h, "cuda")
                docs, slopes = documents(n, "cuda"), NB.alibi_slopes(h).cuda()
                for name in ours:
                    sm, saux, mm, maux = ours[name]
                    t0 = time.time()
                    tile = TILES.get((name.split()[0], d), 64)
                    bm = NB.create_block_mask(mm, None, None, n, n, device="cuda", BLOCK_SIZE=tile, mask_aux=maux)
                    tsm, tmm = theirs[name]
                    tbm = torch_flex.create_block_mask(tmm, None, None, n, n, device="cuda")
                    providers = {
                        "course flex": lambda: NB.flex_attention(q, k, v, score_mod=sm, score_aux=saux, block_mask=bm),
                        "torch flex (compiled)": lambda: torch_flex_c(q, k, v, score_mod=tsm, block_mask=tbm),
                    }
                    if name == "causal":
                        providers["course 08 fast (causal)"] = lambda: fast(q, k, v, causal=True)

                        def sdpa(backend):
                            def run():
                                with sdpa_kernel(backend):
                                    return F.scaled_dot_product_attention(q, k, v, is_causal=True)
                            return run
                        providers["SDPA FLASH"] = sdpa(SDPBackend.FLASH_ATTENTION)
                        providers["SDPA cuDNN"] = sdpa(SDPBackend.CUDNN_ATTENTION)
                    # correctness first, every provider
                    rows_list = [slice(0, 64), slice(n - 64, n)]
                    errors = {}
                    for pname, fn in providers.items():
                        o = fn()
                        torch.cuda.synchronize()
                        err = 0.0
                        for rows in rows_list:
                            want = fp64_rows(q, k, v, name, rows, slice(0, 2), n, docs, slopes)
                            err = max(err, (o[0, :2, rows].double() - want).abs().max().item())
                        errors[pname] = err
                    setup_s = time.time() - t0
                    times = {p: [] for p in providers}
                    for _ in range(2):  # interleaved repetitions
                        for pname, fn in providers.items():
                            times[pname].append(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))
                    rec = dict(dtype=dtype_name, d=d, n=n, b=b, h=h, variant=name, density=bm.density(),
                               errors=errors, ms=times, setup_s=setup_s)
                    records.append(rec)
                    line = "  ".join(f"{p}: {'/'.join(f'{t:.3f}' for t in ts)} ms (err {errors[p]:.1e})"
                                     for p, ts in times.items())
                    print(f"{dtype_name} D={d} N={n} B={b} H={h} {name:>22} density {bm.density():5.1%} | {line}",
                          flush=True)
    (out_dir / f"flex_bench_{args.dtypes}_{args.dims}.json").write_text(json.dumps(records, indent=1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--dtypes", default="float16")
    ap.add_argument("--dims", default="128")
    ap.add_argument("--ns", default="4096,16384")
    ap.add_argument("--out", default="out")
    args = ap.parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    env = grader.setup(quiet=True)
    print(env.gpu_name, torch.__version__, triton.__version__, torch.backends.cudnn.version(), flush=True)
    if args.check:
        for ex in ("create_block_mask", "flex_attention", "softcap", "alibi", "sliding_window", "document_mask"):
            t = time.time()
            r = grader.check(ex, grader.reference(ex), quiet=True)
            print(f"{ex}: {'PASS' if r.passed else 'FAIL'} in {time.time() - t:.0f} s", flush=True)
            if not r.passed:
                print(str(r))
    if args.bench:
        bench(args, out_dir)


if __name__ == "__main__":
    main()
