#!/usr/bin/env python3
"""Write tests/model/smollm2_expected.json: reference token ids and greedy continuations of
SmolLM2-135M-Instruct (GGUF, Q4_1) from Hugging Face transformers on the CPU, an implementation
independent of ours (its tokenizer is the Rust `tokenizers` library built from the GGUF
vocabulary; its model dequantises the GGUF with gguf-py and runs LlamaForCausalLM in f32).

Run once, by hand, and commit the output:
    pip install torch transformers gguf accelerate
    python3 tests/model/make_expected.py PATH/TO/SmolLM2-135M-Instruct.Q4_1.gguf > tests/model/smollm2_expected.json
"""
import json
import os
import sys

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

TEXTS = [
    "Hello, world!",
    "The year 2024 had 366 days; pi is 3.14159265.",
    "   leading spaces, trailing spaces   ",
    "tabs\tand\nnewlines\n\n\nand   runs    of     spaces",
    "I'm sure you've seen they'll do it, won't they? She'd",
    "Emoji: 😀🎉👍🏽 and a family 👨‍👩‍👧",
    "中文测试：你好，世界。日本語のテキスト",
    "Ünïcödé àccents, naïve café, Straße",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "code: for (int i = 0; i < n; i++) { x += a[i]; }",
    "",
    "a",
    " ",
    "1234567890",
]
PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village,",
    "<|im_start|>user\nWhat is 12 times 7?<|im_end|>\n<|im_start|>assistant\n",
]
CHATS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
     {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye"}],
]


def main():
    path = sys.argv[1]
    d, f = os.path.split(os.path.abspath(path))
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, torch_dtype=torch.float32)
    out = {
        "command": "python3 tests/model/make_expected.py SmolLM2-135M-Instruct.Q4_1.gguf",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "tokenize": [],
        "generate": [],
        "chat": [],
    }
    for t in TEXTS:
        out["tokenize"].append({"text": t, "ids": tok(t, add_special_tokens=False).input_ids})
    for p in PROMPTS:
        ids = tok(p, return_tensors="pt").input_ids
        gen = model.generate(ids, max_new_tokens=32, do_sample=False)
        out["generate"].append({"prompt": p, "prompt_ids": ids[0].tolist(),
                                "ids": gen[0][ids.shape[1]:].tolist()})
    for msgs in CHATS:
        out["chat"].append({"messages": msgs,
                            "text": tok.apply_chat_template(msgs, tokenize=False,
                                                            add_generation_prompt=True)})
    # One entry per line, so that a change shows as a readable diff.
    w = sys.stdout.write
    w("{\n")
    keys = list(out)
    for i, k in enumerate(keys):
        v = out[k]
        if isinstance(v, list):
            w(f' "{k}": [\n')
            w(",\n".join("  " + json.dumps(e, ensure_ascii=False) for e in v))
            w("\n ]")
        else:
            w(f' "{k}": {json.dumps(v)}')
        w(",\n" if i + 1 < len(keys) else "\n")
    w("}\n")


if __name__ == "__main__":
    main()
