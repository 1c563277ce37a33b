#!/usr/bin/env python3
"""SentencePiece-style BPE references: Mistral 7B's tokenizer (mistral-common's
data/tokenizer.model.v1, 32k, Apache-2.0) converted to tokenizer.json by transformers'
LlamaTokenizerFast, and the ids and decoded text that Hugging Face's `tokenizers` gives for
tricky text under three conventions of such files: Metaspace with prepend_scheme "first"
(current files), "never" (what this conversion writes), and Llama 2's "legacy" normalizer
(Prepend + Replace, decoder Strip).

Run once, by hand, and commit the outputs:
    pip download --no-deps mistral-common==1.13.1 && unzip mistral_common-1.13.1-py3-none-any.whl
    pip install --target /tmp/tf4 "transformers==4.46.3" "tokenizers<0.21" sentencepiece protobuf
    PYTHONPATH=/tmp/tf4 python3 tests/model/make_spm_expected.py mistral_common/data/tokenizer.model.v1
writes tests/model/data/mistral-v1.tokenizer.json, tests/model/spm_expected.json and
tests/model/data/mistral-v1.vocab.gguf (the vocabulary alone as llama.cpp stores a SentencePiece
model: tokenizer.ggml.model "llama", pieces, scores, types), whose score-ordered merging must
give the "legacy" variant's ids.
"""
import json
import os
import sys
import tempfile

from tokenizers import Tokenizer
from transformers import LlamaTokenizerFast

TEXTS = [
    "Hello world", " leading space", "two  spaces and\ttab", "lines\n\nand more\n",
    "numbers 1234567 and 3.14", "naïve café, Straße", "中文测试，日本語", "emoji 😀👍🏽 done",
    "a<s>b</s> c", "[INST] Hi [/INST]", "", "x", "   ", "rare 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 chars ℵ",
]
META = {"type": "Metaspace", "replacement": "\u2581", "split": False}
VARIANTS = {
    "first": {"normalizer": None, "pre_tokenizer": dict(META, prepend_scheme="first"),
              "decoder": {"type": "Sequence", "decoders": [
                  {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
                  {"type": "ByteFallback"}, {"type": "Fuse"},
                  {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}},
    "never": {"normalizer": None, "pre_tokenizer": dict(META, prepend_scheme="never"),
              "decoder": {"type": "Sequence", "decoders": [
                  {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
                  {"type": "ByteFallback"}, {"type": "Fuse"}]}},
    "legacy": {"normalizer": {"type": "Sequence", "normalizers": [
                   {"type": "Prepend", "prepend": "\u2581"},
                   {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
               "pre_tokenizer": None,
               "decoder": {"type": "Sequence", "decoders": [
                   {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
                   {"type": "ByteFallback"}, {"type": "Fuse"},
                   {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}},
}


def vocab_gguf(model_file, path):
    import gguf
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=model_file)
    n = sp.get_piece_size()
    types = [2 if sp.is_unknown(i) else 3 if sp.is_control(i) else 6 if sp.is_byte(i) else 1 for i in range(n)]
    w = gguf.GGUFWriter(path, "llama")
    w.add_tokenizer_model("llama")
    w.add_token_list([sp.id_to_piece(i).encode() for i in range(n)])
    w.add_token_scores([sp.get_score(i) for i in range(n)])
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    vocab_gguf(sys.argv[1], os.path.join(here, "data", "mistral-v1.vocab.gguf"))
    tok = LlamaTokenizerFast(vocab_file=sys.argv[1], legacy=False, from_slow=True)
    with tempfile.TemporaryDirectory() as d:
        tok.save_pretrained(d)
        base = json.load(open(os.path.join(d, "tokenizer.json")))
    base["post_processor"] = None
    with open(os.path.join(here, "data", "mistral-v1.tokenizer.json"), "w") as f:
        json.dump(base, f, ensure_ascii=False, separators=(",", ":"))
    out = {"command": "PYTHONPATH=/tmp/tf4 python3 tests/model/make_spm_expected.py tokenizer.model.v1",
           "variants": {}}
    for name, patch in VARIANTS.items():
        j = dict(base, **patch)
        t = Tokenizer.from_str(json.dumps(j))
        cases = []
        for text in TEXTS:
            ids = t.encode(text, add_special_tokens=False).ids
            cases.append({"text": text, "ids": ids, "decoded": t.decode(ids, skip_special_tokens=True)})
        out["variants"][name] = {"patch": patch, "cases": cases}
    with open(os.path.join(here, "spm_expected.json"), "w") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
