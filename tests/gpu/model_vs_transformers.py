#!/usr/bin/env python3
"""Random-weight Llama, Qwen2 and Mistral models at real shapes against transformers: each model
is built by transformers (torch.manual_seed; Qwen2's q/k/v biases, which transformers
initialises to zero, drawn at random too), written as a bf16 GGUF by tests/gpu/gguf_writer.py,
and run by our `logits` tool (prompt prefilled, then 32 ids fed one at a time); its logits at every
step are compared with transformers' forward pass over the same ids in f32: normwise relative
error and top-1 agreement. Two precautions make that reference exact enough to judge f32: TF32
is off, and the rotary angles are computed in f64 (transformers computes them in f32, whose
error at position 95 already reaches 1e-4 of the logits; with both fixed our f32 path agrees
to 3e-7 on a small model). The same model also runs from the Hugging Face folder (bf16 and
f32), and each step whose top-1 differs is printed with the reference's margin there. Top-1
agreement counts ties: where the reference puts our choice within one bf16 unit in the last place
of its largest logit (random logits are nearly flat, and a 16-bit run cannot order two logits that
close; seen at hd80, step 6: 0.007 standard deviations apart), for every run and yardstick alike. Our bf16 path is judged against transformers' own bf16 run: its
error and top-1 agreement must be no worse. With an FP8 KV cache (bf16+fp8, GGUF), whose keys
and values keep 3 mantissa bits to bf16's 8, the error may be up to six times transformers' bf16
error and three quarters of the next tokens must agree (measured on the H100: 3.8 times and
33/33 on SmolLM2's shape, 4.6 times and 27/33 on Llama-3.2-1B's, whose random logits are nearly
flat); a wrong cache gives errors near 1. The FP8 run is also judged against transformers with
exactly our quantisation emulated (fp8_emulation: each layer's rotated keys and its values
divided by the per-kv-head power-of-two scales of the prompt's amax, as tc_kv_scales sets them,
saturated, rounded to E4M3 and multiplied back): against that model in f32 it must do as well
as the same emulation in bf16 does (the bf16 rule, with the emulations in place of transformers'
f32 and bf16 runs).
The Mistral shapes have a sliding window shorter than their prompt (4,096 under 4,160 tokens at
Mistral 7B's), so that the window decides the logits.
Usage: model_vs_transformers.py LOGITS_BINARY WORKDIR [shape ...] [--device cuda|cpu]
Shapes: tiny, tiny-qwen2, tiny-mistral (CPU-sized, for a quick check), smollm2-135m,
llama3.2-1b, llama2-7b, qwen2.5-1.5b, mistral-7b, and head sizes other than 64 and 128 (Llama
shapes): hd80 (GQA 4:1), hd96 (MHA), hd256 (one KV head)."""
import os
import shutil
import subprocess
import sys

import numpy as np
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, MistralConfig, Qwen2Config

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_writer  # noqa: E402

SHAPES = {
    "tiny": dict(hidden_size=128, intermediate_size=344, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=1000, rope_theta=10000.0, tie_word_embeddings=False,
                 max_position_embeddings=512),
    "tiny-llama3": dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=1, vocab_size=1000,
                        rope_theta=500000.0, tie_word_embeddings=True, max_position_embeddings=131072,
                        rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                      "high_freq_factor": 4.0,
                                      "original_max_position_embeddings": 8192}),
    "smollm2-135m": dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                         num_attention_heads=9, num_key_value_heads=3, vocab_size=49152,
                         rope_theta=100000.0, tie_word_embeddings=True, max_position_embeddings=8192),
    "llama3.2-1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                        num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                        rope_theta=500000.0, tie_word_embeddings=True, max_position_embeddings=131072,
                        rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                      "high_freq_factor": 4.0,
                                      "original_max_position_embeddings": 8192}),
    "llama2-7b": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=32, vocab_size=32000,
                      rope_theta=10000.0, tie_word_embeddings=False, max_position_embeddings=4096),
    "tiny-qwen2": dict(model_type="qwen2", hidden_size=256, intermediate_size=512,
                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                       vocab_size=1000, rope_theta=1000000.0, tie_word_embeddings=True,
                       max_position_embeddings=4096),
    "tiny-mistral": dict(model_type="mistral", hidden_size=256, intermediate_size=512,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1,
                         vocab_size=1000, rope_theta=1000000.0, tie_word_embeddings=False,
                         max_position_embeddings=4096, sliding_window=48),
    # Qwen2.5-1.5B: GQA 6:1, q/k/v biases, tied embeddings, a 151,936-token vocabulary
    "qwen2.5-1.5b": dict(model_type="qwen2", hidden_size=1536, intermediate_size=8960,
                         num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
                         vocab_size=151936, rope_theta=1000000.0, tie_word_embeddings=True,
                         max_position_embeddings=32768),
    # Mistral 7B: GQA 4:1 and its 4,096-token sliding window under a longer prompt
    "mistral-7b": dict(model_type="mistral", hidden_size=4096, intermediate_size=14336,
                       num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                       vocab_size=32000, rope_theta=1000000.0, tie_word_embeddings=False,
                       max_position_embeddings=32768, sliding_window=4096),
    # head sizes of the generic CUDA attention kernels
    "hd80": dict(hidden_size=2560, intermediate_size=6912, num_hidden_layers=12, num_attention_heads=32,
                 num_key_value_heads=8, vocab_size=32000, rope_theta=10000.0, tie_word_embeddings=False,
                 max_position_embeddings=4096),
    "hd96": dict(hidden_size=3072, intermediate_size=8192, num_hidden_layers=12, num_attention_heads=32,
                 num_key_value_heads=32, vocab_size=32000, rope_theta=10000.0, tie_word_embeddings=False,
                 max_position_embeddings=4096),
    "hd256": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=12, num_attention_heads=8,
                  num_key_value_heads=1, vocab_size=32000, rope_theta=10000.0, tie_word_embeddings=True,
                  max_position_embeddings=8192),
}
PROMPT, STEPS = 64, 32
# Prompts longer than the default, for the sliding windows.
PROMPTS = {"tiny-mistral": 96, "mistral-7b": 4160}


def exact_rope():
    """Replace the rotary embeddings' forward (Llama's, Qwen2's, Mistral's) by one that computes
    the angles in f64 (plain rope_theta, or Llama 3's scaled frequencies as transformers
    defines them)."""
    import transformers.models.llama.modeling_llama as llama
    import transformers.models.mistral.modeling_mistral as mistral
    import transformers.models.qwen2.modeling_qwen2 as qwen2

    def forward(self, x, position_ids):
        inv = self.inv_freq.double()
        c = self.config
        rp = getattr(c, "rope_parameters", None) or getattr(c, "rope_scaling", None) or {}
        base = getattr(c, "rope_theta", None) or rp["rope_theta"]
        dim = inv.shape[0] * 2
        inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64, device=inv.device) / dim))
        if rp.get("rope_type") == "llama3":
            lo, hi, f = rp["low_freq_factor"], rp["high_freq_factor"], rp["factor"]
            orig = rp["original_max_position_embeddings"]
            wl = 2 * np.pi / inv
            smooth = (orig / wl - lo) / (hi - lo)
            scaled = torch.where(wl > orig / lo, inv / f, inv)
            mid = (wl >= orig / hi) & (wl <= orig / lo)
            inv = torch.where(mid, (1 - smooth) * inv / f + smooth * inv, scaled)
        freqs = position_ids.double()[..., None] * inv
        emb = torch.cat((freqs, freqs), -1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)

    for rotary in (llama.LlamaRotaryEmbedding, qwen2.Qwen2RotaryEmbedding,
                   mistral.MistralRotaryEmbedding):
        rotary.forward = forward


class fp8_emulation:
    """Within the block, every layer of `model` (Llama, Qwen2 or Mistral) quantises its keys
    (after the rotation) and values as our FP8 KV cache does: per KV head, the scale is the power
    of two 2^(ceil(log2(amax)) - 5) of the largest magnitude among the first `prompt` positions
    (1 where that is 0), set once as our first pass sets it (tc_kv_scales); the cache holds
    clamp(x / scale, +-448) rounded to E4M3 and gives back code * scale. Keys are caught where
    the attention calls its module's apply_rotary_pos_emb (counted: each layer once a pass),
    values at the output of v_proj (biases included)."""

    def __init__(self, model, prompt):
        self.model, self.prompt = model, prompt
        self.heads = model.config.num_key_value_heads

    @staticmethod
    def quantise(x, prompt):
        """x [batch, heads, seq, dim]: per head scales from the first `prompt` positions, then the
        FP8 round trip, in f32, back to x's dtype."""
        xf = x.float()
        amax = xf[..., :prompt, :].abs().amax(dim=(0, 2, 3), keepdim=True)
        m, e = torch.frexp(amax)
        e = e - (m == 0.5).to(e.dtype)
        scale = torch.where(amax > 0, torch.ldexp(torch.ones_like(amax), e - 5), torch.ones_like(amax))
        q = (xf / scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn).float() * scale
        return q.to(x.dtype)

    def __enter__(self):
        layers = self.model.model.layers
        self.module = sys.modules[type(layers[0].self_attn).__module__]
        self.rotate, self.calls = self.module.apply_rotary_pos_emb, 0
        prompt, rotate = self.prompt, self.rotate

        def rotated(q, k, *args, **kwargs):
            q, k = rotate(q, k, *args, **kwargs)  # k [batch, kv heads, seq, dim]
            self.calls += 1
            return q, fp8_emulation.quantise(k, prompt)

        def values(module, inputs, out):  # [batch, seq, kv heads * dim]
            b, n, _ = out.shape
            v = out.view(b, n, self.heads, -1).transpose(1, 2)
            return fp8_emulation.quantise(v, prompt).transpose(1, 2).reshape(b, n, -1)

        self.module.apply_rotary_pos_emb = rotated
        self.hooks = [layer.self_attn.v_proj.register_forward_hook(values) for layer in layers]
        return self

    def __exit__(self, *exc):
        self.module.apply_rotary_pos_emb = self.rotate
        for h in self.hooks:
            h.remove()
        # every layer's keys went through the quantisation (once a forward pass)
        assert exc[0] is not None or (self.calls and self.calls % len(self.hooks) == 0), self.calls
        return False


def compare(got, ref):
    """Largest per-step normwise relative error (inf where a step is not finite) and top-1
    agreements of logits [steps, vocab] against ref."""
    rel = [float(np.linalg.norm(got[s] - ref[s]) / np.linalg.norm(ref[s])) if np.isfinite(got[s]).all()
           else float("inf") for s in range(len(ref))]
    return max(rel), int(sum(agrees(got[s], ref[s]) for s in range(len(ref))))


def agrees(got, ref):
    """Whether the reference ranks our top-1 choice first: where its logit is within one bf16
    unit in the last place of the reference's largest (2^-7 of its power of two), the two are a
    tie that no 16-bit run can tell apart, and either choice agrees."""
    top = float(ref.max())
    c = int(got.argmax())
    if not np.isfinite(got[c]):
        return False
    ulp = 2.0 ** (np.floor(np.log2(max(abs(top), 1e-30))) - 7)
    return c == int(ref.argmax()) or float(ref[c]) >= top - ulp


def disagreements(got, ref):
    """The steps whose top-1 differs, each with how far the reference puts our choice below its
    own (in units of the reference step's logit standard deviation: a near tie is small)."""
    out = []
    for s in np.nonzero(got.argmax(1) != ref.argmax(1))[0]:
        gap = (ref[s].max() - ref[s][got[s].argmax()]) / max(float(ref[s].std()), 1e-30)
        out.append(f"step {s}: {gap:.3f} sd{' (a tie)' if agrees(got[s], ref[s]) else ''}")
    return ", ".join(out)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--device")]
    device = "cuda" if "--device=cpu" not in sys.argv[1:] and torch.cuda.is_available() else "cpu"
    binary, work = args[0], args[1]
    shapes = args[2:] or ["smollm2-135m", "llama3.2-1b", "llama2-7b"]
    os.makedirs(work, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    exact_rope()
    rows, failed = [], 0
    for shape in shapes:
        kw = dict(SHAPES[shape])
        kind = kw.pop("model_type", "llama")
        prompt = PROMPTS.get(shape, PROMPT)
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
        path = os.path.join(work, f"{shape}.gguf")
        gguf_writer.llama_to_gguf(model, path, "bf16")
        hf_dir = os.path.join(work, f"{shape}-hf")
        model.save_pretrained(hf_dir, safe_serialization=True)
        g = torch.Generator().manual_seed(1)
        ids = torch.randint(0, cfg.vocab_size, (prompt + STEPS,), generator=g, dtype=torch.int32)
        ids_path = os.path.join(work, f"{shape}.ids")
        ids.numpy().tofile(ids_path)
        # transformers in bf16 (the yardstick for our bf16), then the same weights in f32 (the
        # reference); each also with the FP8 cache's quantisation emulated (the FP8 run's
        # yardstick and reference).
        def logits(m, fp8=False):
            with torch.no_grad():
                if not fp8:
                    return m(ids.long()[None].to(device)).logits[0, prompt - 1:].float().cpu().numpy()
                with fp8_emulation(m, prompt):
                    return m(ids.long()[None].to(device)).logits[0, prompt - 1:].float().cpu().numpy()
        hf16, hf16_8 = logits(model), logits(model, True)
        model = model.float()
        ref, ref8 = logits(model), logits(model, True)
        hf16_rel, hf16_top1 = compare(hf16, ref)
        hf8_rel, hf8_top1 = compare(hf16_8, ref8)
        emu_rel, emu_top1 = compare(ref8, ref)
        rows.append((shape, "hf-bf16", f"{hf16_rel:.2e}", f"{hf16_top1}/{len(ref)}", "yardstick"))
        rows.append((shape, "hf-bf16+fp8 vs emu", f"{hf8_rel:.2e}", f"{hf8_top1}/{len(ref)}", "yardstick"))
        rows.append((shape, "hf-f32+fp8 (emu)", f"{emu_rel:.2e}", f"{emu_top1}/{len(ref)}", "for scale"))
        del model
        if device == "cuda":
            torch.cuda.empty_cache()
        ours_dev = "cuda" if device == "cuda" else "cpu"
        runs = [("gguf", path, a) for a in ("bf16", "f32", "bf16+fp8")]
        runs += [("safetensors", hf_dir, "bf16"), ("safetensors", hf_dir, "f32")]
        for fmt, model_path, act in runs:
            out = os.path.join(work, f"{shape}.{act}.logits")
            r = subprocess.run([binary, model_path, ours_dev, act, str(prompt), ids_path, out],
                               capture_output=True, text=True)
            print(r.stdout.strip(), r.stderr.strip(), flush=True)
            if r.returncode:
                failed += 1
                rows.append((shape, f"{fmt} {act}", "run failed", "", ""))
                continue
            got = np.fromfile(out, dtype=np.float32).reshape(-1, cfg.vocab_size)
            assert got.shape == ref.shape, (got.shape, ref.shape)
            rel, top1 = compare(got, ref)
            if (got.argmax(1) != ref.argmax(1)).any():
                print(f"{shape} {fmt} {act}: top-1 differs at {disagreements(got, ref)}", flush=True)
            if act == "f32":
                ok = rel < 1e-4 and top1 == len(ref)
            elif act.endswith("+fp8"):
                ok = rel <= max(1e-2, 6 * hf16_rel) and 4 * top1 >= 3 * len(ref)
                # against the emulated quantisation, as the bf16 run against f32
                rel8, top8 = compare(got, ref8)
                ok8 = rel8 <= max(1e-2, 1.25 * hf8_rel) and top8 >= hf8_top1
                failed += not ok8
                rows.append((shape, f"{fmt} {act} vs emu", f"{rel8:.2e}", f"{top8}/{len(ref)}",
                             "ok" if ok8 else "FAIL"))
            else:
                ok = rel <= max(1e-2, 1.25 * hf16_rel) and top1 >= hf16_top1
            failed += not ok
            rows.append((shape, f"{fmt} {act}", f"{rel:.2e}", f"{top1}/{len(ref)}", "ok" if ok else "FAIL"))
        os.remove(path)
        shutil.rmtree(hf_dir)
    print(f"\n{'shape':14} {'ours':22} {'max rel err':>12} {'top-1':>7}  result")
    for r in rows:
        print(f"{r[0]:14} {r[1]:22} {r[2]:>12} {r[3]:>7}  {r[4]}")
    print(f"{sum(r[4] == 'ok' for r in rows)} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
