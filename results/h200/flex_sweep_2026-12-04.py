"""Notebook 12's forward on the H200: which tile shape and launch settings (num_warps, num_stages) per variant,
beside torch's compiled FlexAttention in the same run. The kernel is solutions/12_variants.ipynb's (HEAD_DIM a
constexpr since 2026-12-04: the head-dim mask folds away). Every configuration's output is checked against fp64
on a slice of rows first; one that fails to compile or is wrong is reported and skipped.

    python results/h200/flex_sweep_2026-12-04.py --out DIR [--dtype float16] [--d 128] [--ns 4096,16384]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import torch
import triton.testing

spec = importlib.util.spec_from_file_location("flex_bench", Path(__file__).with_name("flex_2026-12-04.py"))
fb = importlib.util.module_from_spec(spec)
sys.modules["flex_bench"] = fb  # dynamo looks the torch modifiers' globals up through their module
spec.loader.exec_module(fb)  # the variants, their fp64 rows and torch's versions: one definition of each

CONFIGS = [  # (BLOCK_M, BLOCK_N, num_warps, num_stages)
    (128, 64, 8, 3), (128, 128, 8, 3), (128, 128, 8, 2), (64, 64, 4, 3), (64, 64, 4, 4), (64, 128, 4, 3),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out")
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--ns", default="4096,16384")
    ap.add_argument("--variants", default="causal,alibi + causal,documents")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch._dynamo.config.recompile_limit = 256
    torch._dynamo.config.accumulated_recompile_limit = 4096
    torch_flex_c = torch.compile(fb.torch_flex.flex_attention, dynamic=False)
    dtype, d = getattr(torch, args.dtype), args.d
    records = []
    for n in map(int, args.ns.split(",")):
        b, h = max(1, 16384 // n), 16
        q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=dtype) for _ in range(3))
        ours, theirs = fb.course_variants(n, h, "cuda"), fb.torch_variants(n, h, "cuda")
        docs, slopes = fb.documents(n, "cuda"), fb.NB.alibi_slopes(h).cuda()
        for name in args.variants.split(","):
            sm, saux, mm, maux = ours[name]
            tsm, tmm = theirs[name]
            tbm = fb.torch_flex.create_block_mask(tmm, None, None, n, n, device="cuda")
            t_ref = triton.testing.do_bench(lambda: torch_flex_c(q, k, v, score_mod=tsm, block_mask=tbm),
                                            return_mode="median")
            row = {"n": n, "variant": name, "torch_ms": t_ref, "configs": {}}
            for bm_, bn_, w, st in CONFIGS:
                key = f"{bm_}x{bn_} w{w} s{st}"
                try:
                    bm = fb.NB.create_block_mask(mm, None, None, n, n, device="cuda", BLOCK_SIZE=(bm_, bn_),
                                                 mask_aux=maux)

                    def run():
                        return fb.NB.flex_attention(q, k, v, score_mod=sm, score_aux=saux, block_mask=bm,
                                                    config=(w, st))
                    o = run()
                    err = 0.0
                    for rows in (slice(0, 64), slice(n - 64, n)):
                        want = fb.fp64_rows(q, k, v, name, rows, slice(0, 2), n, docs, slopes)
                        err = max(err, (o[0, :2, rows].double() - want).abs().max().item())
                    if err > 2e-2:
                        row["configs"][key] = f"wrong ({err:.1e})"
                        continue
                    ms = triton.testing.do_bench(run, return_mode="median")
                    row["configs"][key] = ms
                except Exception as e:  # noqa: BLE001 - a configuration that does not fit: say so, go on
                    row["configs"][key] = f"{type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''}"
            t_ref2 = triton.testing.do_bench(lambda: torch_flex_c(q, k, v, score_mod=tsm, block_mask=tbm),
                                             return_mode="median")
            row["torch_ms_again"] = t_ref2
            best = min((v_, k_) for k_, v_ in row["configs"].items() if isinstance(v_, float))
            print(f"{args.dtype} D={d} N={n} {name:>16}: torch {t_ref:.3f}/{t_ref2:.3f} ms; best {best[1]} "
                  f"{best[0]:.3f} ms ({min(t_ref, t_ref2) / best[0]:.2f}x torch) | " +
                  " ".join(f"{k_}={v_:.3f}" if isinstance(v_, float) else f"{k_}={v_}"
                           for k_, v_ in row["configs"].items()), flush=True)
            records.append(row)
    (out / f"sweep_{args.dtype}_{d}.json").write_text(json.dumps(records, indent=1))


if __name__ == "__main__":
    main()
