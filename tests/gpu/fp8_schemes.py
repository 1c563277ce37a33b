#!/usr/bin/env python3
"""Which FP8 KV-cache quantisation would meet model_vs_transformers.py's FP8 rule on a shape:
transformers in f32 with each scheme emulated (keys after the rotation, values after v_proj)
against the same model without it, beside transformers' own bf16 run (the rule: error at most
six times bf16's, three quarters of the top-1 choices the same). Schemes, all E4M3 saturated at
448 with power-of-two scales 2^(ceil(log2(amax)) - 5):
  head      a scale per KV head from the prompt's amax (what tc_kv_scales sets today)
  token     a scale per token and KV head from that row's own amax (no calibration)
  k16       keys left in 16 bits, values as `head`
  kchannel  keys with a scale per KV head and channel from the prompt's amax, values as `head`
  e5m2      as `head` with E5M2 codes (2 mantissa bits; for scale)
Usage: fp8_schemes.py [shape ...] (default mistral-7b); needs a GPU for the 7B shapes."""
import sys

import torch

import model_vs_transformers as J
from transformers import AutoModelForCausalLM, LlamaConfig, MistralConfig, Qwen2Config


def pow2_scale(amax):
    m, e = torch.frexp(amax)
    e = e - (m == 0.5).to(e.dtype)
    return torch.where(amax > 0, torch.ldexp(torch.ones_like(amax), e - 5), torch.ones_like(amax))


def quantise(x, prompt, scheme, is_key):
    """x [batch, heads, seq, dim] through the scheme's FP8 round trip, back in x's dtype."""
    xf = x.float()
    code, top = torch.float8_e4m3fn, 448.0
    if scheme == "k16" and is_key:
        return x
    if scheme == "e5m2":
        code, top = torch.float8_e5m2, 57344.0
    if scheme == "token":
        amax = xf.abs().amax(dim=3, keepdim=True)
    elif scheme == "kchannel" and is_key:
        amax = xf[..., :prompt, :].abs().amax(dim=(0, 2), keepdim=True)
    else:
        amax = xf[..., :prompt, :].abs().amax(dim=(0, 2, 3), keepdim=True)
    scale = pow2_scale(amax)
    q = (xf / scale).clamp(-top, top).to(code).float() * scale
    return q.to(x.dtype)


class emulation(J.fp8_emulation):
    def __init__(self, model, prompt, scheme):
        super().__init__(model, prompt)
        self.scheme = scheme

    def __enter__(self):
        layers = self.model.model.layers
        self.module = sys.modules[type(layers[0].self_attn).__module__]
        self.rotate, self.calls = self.module.apply_rotary_pos_emb, 0
        prompt, rotate, scheme = self.prompt, self.rotate, self.scheme

        def rotated(q, k, *args, **kwargs):
            q, k = rotate(q, k, *args, **kwargs)
            self.calls += 1
            return q, quantise(k, prompt, scheme, True)

        def values(module, inputs, out):
            b, n, _ = out.shape
            v = out.view(b, n, self.heads, -1).transpose(1, 2)
            return quantise(v, prompt, scheme, False).transpose(1, 2).reshape(b, n, -1)

        self.module.apply_rotary_pos_emb = rotated
        self.hooks = [layer.self_attn.v_proj.register_forward_hook(values) for layer in layers]
        return self


def main():
    shapes = sys.argv[1:] or ["mistral-7b"]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = False
    J.exact_rope()
    for shape in shapes:
        kw = dict(J.SHAPES[shape])
        kind = kw.pop("model_type", "llama")
        prompt = J.PROMPTS.get(shape, J.PROMPT)
        if kind == "qwen2":
            cfg = Qwen2Config(**kw, rms_norm_eps=1e-6, use_sliding_window=False)
        elif kind == "mistral":
            cfg = MistralConfig(**kw, rms_norm_eps=1e-5)
        else:
            cfg = LlamaConfig(**kw, rms_norm_eps=1e-5, attention_bias=False, mlp_bias=False)
        torch.manual_seed(0)
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16).eval()
            with torch.no_grad():
                for name, p in model.named_parameters():
                    if name.endswith("_proj.bias"):
                        p.normal_(0.0, 0.5)
        g = torch.Generator().manual_seed(1)
        ids = torch.randint(0, cfg.vocab_size, (prompt + J.STEPS,), generator=g).to(device)[None]

        def logits(m, scheme=None):
            with torch.no_grad():
                if scheme is None:
                    return m(ids).logits[0, prompt - 1:].float().cpu().numpy()
                with emulation(m, prompt, scheme):
                    return m(ids).logits[0, prompt - 1:].float().cpu().numpy()

        hf16 = logits(model)
        model = model.float()
        ref = logits(model)
        rel16, top16 = J.compare(hf16, ref)
        bar = max(1e-2, 6 * rel16)
        print(f"{shape}: transformers bf16 {rel16:.3e} {top16}/{len(ref)}; FP8 rule: error <= {bar:.3e}, "
              f"top-1 >= {(3 * len(ref) + 3) // 4}/{len(ref)}")
        for scheme in ("head", "token", "k16", "kchannel", "e5m2"):
            rel, top = J.compare(logits(model, scheme), ref)
            ok = rel <= bar and 4 * top >= 3 * len(ref)
            print(f"  {scheme:9} {rel:.3e} {top:3d}/{len(ref)}  {'meets' if ok else 'fails'}", flush=True)
        del model
        if device == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
