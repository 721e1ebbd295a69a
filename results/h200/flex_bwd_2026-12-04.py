"""Notebook 12's backward on the H200 (section 7's kernels, from solutions/12_variants.ipynb): gradients checked
against fp64 autograd first (batch 0, heads 0-1, at N=512 and at the timed size: max |error| / rms of the fp64
gradient, torch's FlexAttention too), then forward+backward timed beside torch's compiled
FlexAttention (and, on causal, SDPA's cuDNN and FLASH backends), interleaved, `do_bench` medians.

    python results/h200/flex_bwd_2026-12-04.py --out DIR [--dtype float16] [--d 128] [--n 4096]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as Fn
import triton.testing
from torch.nn.attention import SDPBackend, sdpa_kernel

spec = importlib.util.spec_from_file_location("flex_bench", Path(__file__).with_name("flex_2026-12-04.py"))
fb = importlib.util.module_from_spec(spec)
sys.modules["flex_bench"] = fb  # dynamo looks the torch modifiers' globals up through their module
spec.loader.exec_module(fb)
NB = fb.NB
GRADS = {"causal": None, "softcap 50 + causal": NB.softcap_grad, "alibi + causal": NB.alibi_grad, "documents": None}


def fp64_grads(q, k, v, do, name, n, docs, slopes):
    """fp64 autograd of the variant for batch 0, heads 0-1."""
    leaves = [t[0, :2].double().detach().requires_grad_() for t in (q, k, v)]
    o = _attend64(*leaves, name, slice(None), n, docs, slopes, q.shape[-1])
    return torch.autograd.grad(o, leaves, do[0, :2].double())


def rel_errors(grads, want):
    """max |g − fp64| / rms(fp64) per gradient, batch 0, heads 0-1."""
    return {g: ((a[0, :2].double() - w).abs().max() / w.pow(2).mean().sqrt()).item()
            for g, a, w in zip("qkv", grads, want)}


def _attend64(q, k, v, name, rows, n, docs, slopes, d):
    s = q @ k.transpose(-1, -2) / math.sqrt(d)
    i = torch.arange(n, device=q.device)[rows][:, None]
    j = torch.arange(n, device=q.device)[None, :]
    if name.startswith("softcap"):
        s = fb.SOFTCAP * torch.tanh(s / fb.SOFTCAP)
    if name.startswith("alibi"):
        s = s + slopes[:2].double()[:, None, None] * (j - i)
    keep = j <= i
    if name == "documents":
        keep = keep & (docs[rows][:, None] == docs[None, :])
    return torch.softmax(s.masked_fill(~keep, float("-inf")), -1) @ v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out")
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--variants", default="causal,softcap 50 + causal,documents")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch._dynamo.config.recompile_limit = 256
    torch._dynamo.config.accumulated_recompile_limit = 4096
    torch_flex_c = torch.compile(fb.torch_flex.flex_attention, dynamic=False)
    dtype, d = getattr(torch, args.dtype), args.d
    records = []
    for n, b in ((512, 1), (args.n, max(1, 16384 // args.n))):
        h = 16
        ours, theirs = fb.course_variants(n, h, "cuda"), fb.torch_variants(n, h, "cuda")
        docs, slopes = fb.documents(n, "cuda"), NB.alibi_slopes(h).cuda()
        q, k, v, do = (torch.randn(b, h, n, d, device="cuda", dtype=dtype) for _ in range(4))
        for name in args.variants.split(","):
            sm, saux, mm, maux = ours[name]
            tsm, tmm = theirs[name]
            tile = fb.TILES.get((name.split()[0], d), 64)
            bm = NB.create_block_mask(mm, None, None, n, n, device="cuda", BLOCK_SIZE=tile, mask_aux=maux)
            tbm = fb.torch_flex.create_block_mask(tmm, None, None, n, n, device="cuda")
            leaves = [t.detach().requires_grad_() for t in (q, k, v)]

            def ours_fb():
                o = NB.flex_attention_autograd(*leaves, score_mod=sm, score_mod_grad=GRADS[name], block_mask=bm,
                                               score_aux=saux, forward=NB.flex_attention)
                return torch.autograd.grad(o, leaves, do)

            def theirs_fb():
                o = torch_flex_c(*leaves, score_mod=tsm, block_mask=tbm)
                return torch.autograd.grad(o, leaves, do)
            mine, ref_t = ours_fb(), theirs_fb()
            want = fp64_grads(q, k, v, do, name, n, docs, slopes)
            errs, errs_t = rel_errors(mine, want), rel_errors(ref_t, want)
            del want
            print(f"N={n} {name}: max |error| / rms of fp64 autograd: ours "
                  f"{ {g: f'{e:.1e}' for g, e in errs.items()} }, torch { {g: f'{e:.1e}' for g, e in errs_t.items()} }",
                  flush=True)
            if n == 512:
                records.append({"n": n, "variant": name, "errors": errs, "torch_errors": errs_t})
                continue
            providers = {"course": ours_fb, "torch": theirs_fb}
            if name == "causal":  # SDPA's cuDNN and FLASH backends, is_causal (the same mask)
                for label, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
                    def sdpa_fb(backend=backend):
                        with sdpa_kernel(backend):
                            o = Fn.scaled_dot_product_attention(*leaves, is_causal=True)
                        return torch.autograd.grad(o, leaves, do)
                    e = rel_errors(sdpa_fb(), fp64_grads(q, k, v, do, name, n, docs, slopes))
                    print(f"N={n} {name}: SDPA {label} errors {e}", flush=True)
                    providers[label] = sdpa_fb
            times = {p: [] for p in providers}
            for _ in range(2):  # interleaved repetitions
                for p, f in providers.items():
                    times[p].append(triton.testing.do_bench(f, return_mode="median"))
            print(f"{args.dtype} D={d} N={n} B={b} H={h} {name:>20}: fwd+bwd ms "
                  + ", ".join(f"{p} {'/'.join(f'{t:.3f}' for t in ts)}" for p, ts in times.items()), flush=True)
            records.append({"n": n, "variant": name, "ms": times, "errors": errs, "torch_errors": errs_t})
    (out / f"flex_bwd_{args.dtype}_{d}.json").write_text(json.dumps(records, indent=1))


if __name__ == "__main__":
    main()
