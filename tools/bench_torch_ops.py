#!/usr/bin/env python3
"""PyTorch's figures for the shapes of tools/bench_ops.c (bf16 F.linear through cuBLAS, SDPA
prefill), timed the same way: CUDA events, median of 7, after a warm-up, inputs rotating
through 4 copies."""
import torch
import torch.nn.functional as F


def median_ms(fn, reps):
    for _ in range(3):
        fn(0)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(7):
        start.record()
        for i in range(reps):
            fn(i % 4)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / reps)
    return sorted(times)[3]


def main():
    torch.manual_seed(0)
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    for m, n, k in [(512, 4096, 4096), (4096, 4096, 4096), (4096, 14336, 4096), (4096, 4096, 14336)]:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
        ms = median_ms(lambda i: F.linear(x, ws[i]), 10)
        print(f"torch linear bf16 [{m:5d} x {n:5d} x {k:5d}] {ms:8.4f} ms {2 * m * n * k / ms / 1e9:6.1f} TFLOP/s")
    q = torch.randn(1, 32, 4096, 128, device="cuda", dtype=torch.bfloat16)
    kv = [torch.randn(1, 8, 4096, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    ms = median_ms(lambda i: F.scaled_dot_product_attention(q, kv[0], kv[1], is_causal=True, enable_gqa=True), 3)
    flop = 4.0 * 4096 * 4096 / 2 * 32 * 128
    print(f"torch sdpa prefill bf16 4096 tokens H 32 KV 8: {ms:8.4f} ms {flop / ms / 1e9:6.1f} TFLOP/s (causal)")


if __name__ == "__main__":
    main()
