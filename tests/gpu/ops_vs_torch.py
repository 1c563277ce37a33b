#!/usr/bin/env python3
"""Check the CUDA ops' outputs dumped by gpu_ops (TC_OPS_DUMP=DIR) against PyTorch on the
same inputs: F.embedding, F.rms_norm, Hugging Face's rotate_half rope, F.linear (also with
the fused SwiGLU and residual add of tc_linear, in f64), F.silu,
softmax and F.scaled_dot_product_attention (GQA by repeating kv heads). Prints one line per
case and exits 1 if any relative error (max |ours - torch| / max |torch|) exceeds the dtype's
tolerance or is NaN."""
import json
import math
import sys

import torch
import torch.nn.functional as F

TOL = {"f32": 1e-5, "bf16": 1e-2, "f16": 2e-3}
DT = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16, "i32": torch.int32}


def load(d, t):
    raw = open(f"{d}/{t['file']}", "rb").read()
    return torch.frombuffer(bytearray(raw), dtype=DT[t["dtype"]]).reshape(t["shape"]).cuda()


def rel(ours, ref):
    ours, ref = ours.double(), ref.double()
    if torch.isnan(ours).any() or torch.isnan(ref).any():
        return math.inf
    return ((ours - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()


def rope_ref(x, pos, p):
    hd = p["head_dim"]
    inv = p["theta"] ** (-torch.arange(0, hd, 2, dtype=torch.float64, device="cuda") / hd)
    if p["llama3"]:
        wl = 2 * math.pi / inv
        lw, hw = p["original_max_position"] / p["low_freq_factor"], p["original_max_position"] / p["high_freq_factor"]
        sm = (p["original_max_position"] / wl - p["low_freq_factor"]) / (p["high_freq_factor"] - p["low_freq_factor"])
        scaled = torch.where(wl > lw, inv / p["factor"], inv)
        inv = torch.where((wl >= hw) & (wl <= lw), (1 - sm) * inv / p["factor"] + sm * inv, scaled)
    ang = pos.double()[:, None] * inv[None, :]
    cos, sin = ang.cos()[:, None, :], ang.sin()[:, None, :]
    xf = x.double()
    if p["interleaved"]:
        a, b = xf[..., 0::2], xf[..., 1::2]
        out = torch.empty_like(xf)
        out[..., 0::2], out[..., 1::2] = a * cos - b * sin, b * cos + a * sin
        return out
    a, b = xf[..., : hd // 2], xf[..., hd // 2 :]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)


def gather_kv(cache, table, n, bs):
    idx = torch.arange(n, device="cuda")
    blocks = table[idx // bs].long()
    return cache[blocks, idx % bs]  # [n, KV, hd]


def attention_ref(t, p):
    q, kc, vc = t["q"], t["k_cache"], t["v_cache"]
    table, lens, qs = t["block_table"], t["seq_lens"].tolist(), t["q_start"].tolist()
    bs = p["block_size"]
    out = torch.empty_like(q)
    for s in range(len(lens)):
        m = qs[s + 1] - qs[s]
        if m == 0:
            continue
        L = lens[s]
        k = gather_kv(kc, table[s], L, bs).transpose(0, 1)[None]
        v = gather_kv(vc, table[s], L, bs).transpose(0, 1)[None]
        qq = q[qs[s] : qs[s + 1]].transpose(0, 1)[None]
        g = qq.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
        # causal with the queries at the end: query j sees keys 0 .. L - m + j
        mask = torch.arange(L, device="cuda")[None, :] <= (L - m + torch.arange(m, device="cuda"))[:, None]
        o = F.scaled_dot_product_attention(qq, k, v, attn_mask=mask, scale=p["scale"])
        out[qs[s] : qs[s + 1]] = o[0].transpose(0, 1)
    return out


def main(d):
    failures = 0
    for line in open(f"{d}/manifest.jsonl"):
        case = json.loads(line)
        op, p = case["op"], case["params"]
        t = {k: load(d, v) for k, v in case["tensors"].items()}
        dt = case["tensors"][next(iter(case["tensors"]))]["dtype"]
        checks = []
        if op == "embedding":
            dt = case["tensors"]["out"]["dtype"]
            checks.append(("out", t["out"], F.embedding(t["ids"].long(), t["table"]).to(t["out"].dtype)))
        elif op == "rmsnorm":
            s = t["x"] + t["residual"]
            checks.append(("residual", t["residual_out"], s))
            checks.append(("out", t["out"], F.rms_norm(s.float(), (s.shape[-1],), t["weight"].float(), p["eps"])))
        elif op == "rope":
            checks.append(("q", t["q_out"], rope_ref(t["q"], t["pos"], p)))
            checks.append(("k", t["k_out"], rope_ref(t["k"], t["pos"], p)))
        elif op == "matmul":
            checks.append(("out", t["out"], F.linear(t["x"], t["w"])))
        elif op == "linear":
            x = t["x"].double()
            if p.get("norm_eps") is not None:
                x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + p["norm_eps"])
            y = F.linear(x, t["w"].double())
            if p["swiglu"]:
                g, u = y.chunk(2, dim=-1)
                y = F.silu(g) * u
            if "acc" in t:
                y = y + t["acc"].double()
            checks.append(("out", t["out"], y))
        elif op == "swiglu":
            g, u = t["gate_up"].chunk(2, dim=-1)
            checks.append(("out", t["out"], F.silu(g) * u))
        elif op == "softmax":
            g, _ = t["gate_up"].chunk(2, dim=-1)
            checks.append(("out", t["out"], torch.softmax(g, dim=-1)))
        elif op == "attention":
            checks.append(("out", t["out"], attention_ref(t, p)))
        for name, ours, ref in checks:
            e = rel(ours, ref)
            ok = e <= TOL[dt]
            failures += not ok
            shape = "x".join(str(x) for x in ours.shape)
            print(f"torch {op:<10} {name:<9} {dt:<5} [{shape}] rel err {e:.2e} (tol {TOL[dt]:.0e}) {'ok' if ok else 'FAIL'}")
    print(f"{failures} torch comparisons failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
