"""Where the host time of one flash_decode call goes (H200, 2026-12-01, after split and merge became one launch):
CPU µs per call of an empty Triton kernel with 9 and with 30 arguments, of flash_decode with its launch replaced by
a no-op (the Python wrapper alone), of the real call with 1 and 2 splits, with and without the value checks, of
flash_decode_paged and of SDPA cuDNN; then, for 8 × 8192 (the shape the host cost limited), do_bench and
do_bench_cudagraph of ours and cuDNN side by side, after checking both against fp64.
Usage: python results/h200/decode_host_2026-12-01.py"""

import importlib.util
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
_spec = importlib.util.spec_from_file_location("decode_bench", Path(__file__).with_name("decode_2026-12-01.py"))
_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_bench)
bench, bench_graph, fp64_decode, load_kernels = (_bench.bench, _bench.bench_graph, _bench.fp64_decode,
                                                  _bench.load_kernels)


@triton.jit
def _empty9(a, b, c, d, e, f, g, i0, i1, X: tl.constexpr):
    pass


@triton.jit
def _empty30(a, b, c, d, e, f, g, h, i, i0, i1, i2, i3, i4, i5, i6, i7, i8, i9, i10, i11, i12, i13, i14, i15, i16,
             i17, i18, i19, i20, X: tl.constexpr):
    pass


def host_us(fn, n=300):
    for _ in range(30):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    us = (time.perf_counter() - t0) / n * 1e6
    torch.cuda.synchronize()
    return us


class _NoLaunch:
    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


def main():
    K = load_kernels(None)
    dev = torch.device("cuda")
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__} triton {triton.__version__} cuDNN "
          f"{torch.backends.cudnn.version()} {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", flush=True)
    H, HKV, D, dt = 32, 8, 128, torch.float16
    q = torch.randn(8, H, 1, D, device=dev, dtype=dt)
    k = torch.randn(8, HKV, 8192, D, device=dev, dtype=dt)
    v = torch.randn_like(k)
    full = torch.full((8,), 8192, dtype=torch.int32, device=dev)
    pages = k.reshape(8, HKV, 64, 128, D).permute(0, 2, 1, 3, 4).reshape(8 * 64, HKV, 128, D).contiguous()
    vpages = v.reshape(8, HKV, 64, 128, D).permute(0, 2, 1, 3, 4).reshape(8 * 64, HKV, 128, D).contiguous()
    table = torch.arange(8 * 64, dtype=torch.int32, device=dev).reshape(8, 64)
    t9, t30 = [torch.empty(1, device=dev) for _ in range(7)], [torch.empty(1, device=dev) for _ in range(9)]
    calls = {
        "empty kernel, 9 args": lambda: _empty9[(1,)](*t9, 1, 2, X=1),
        "empty kernel, 30 args": lambda: _empty30[(1,)](*t9, *t30[:2], *range(3, 24), X=1),
        "flash_decode 1 split": lambda: K.flash_decode(q, k, v, full, num_splits=1, check_values=False),
        "flash_decode 2 splits": lambda: K.flash_decode(q, k, v, full, num_splits=2, check_values=False),
        "flash_decode 2 splits, value checks": lambda: K.flash_decode(q, k, v, full, num_splits=2),
        "flash_decode_paged 2 splits": lambda: K.flash_decode_paged(q, pages, vpages, table, full, num_splits=2,
                                                                    check_values=False),
        "sdpa cudnn": lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
    }
    for name, fn in calls.items():
        if name == "sdpa cudnn":
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                print(f"host time per call: {name}: {host_us(fn):.1f} us", flush=True)
        else:
            print(f"host time per call: {name}: {host_us(fn):.1f} us", flush=True)
    real = K._decode_split
    K._decode_split = _NoLaunch()
    try:
        for splits in (1, 2):
            us = host_us(lambda: K.flash_decode(q, k, v, full, num_splits=splits, check_values=False))
            print(f"host time per call: flash_decode {splits} split(s), launch replaced by a no-op: {us:.1f} us")
    finally:
        K._decode_split = real

    want = fp64_decode(q, k, v, full)
    nbytes = 2 * k.numel() * k.element_size()
    ours = lambda: K.flash_decode(q, k, v, full, check_values=False)  # noqa: E731

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    for name, fn in (("ours", ours), ("cudnn", cudnn)):
        err = (fn().double() - want).abs().max().item()
        assert err < 2e-3, (name, err)
        plain, graph = bench(fn), bench_graph(fn)
        print(f"8x8192 {name}: max|err| {err:.1e}; plain {nbytes / plain / 1e6:.0f} GB/s ({plain * 1e3:.1f} us), "
              f"graphs {nbytes / graph / 1e6:.0f} GB/s ({graph * 1e3:.1f} us)", flush=True)


if __name__ == "__main__":
    main()
