"""Qwen2, Mistral with a sliding window, and head sizes that are not hidden_size / heads, on the
CPU backend: tiny random-weight models (arch_models.py) from a Hugging Face folder and from a
GGUF written as llama.cpp's converter writes each architecture, run by tools/logits (the prompt
prefilled, then ids fed one at a time), against transformers' f32 logits over the same folder
(recorded in data/arch_expected.npz; recomputed live where torch and transformers are
installed). Then the configurations that must be refused, each with one clear error."""
import ctypes.util
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("safetensors")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import arch_models as A  # noqa: E402

BUILD = os.environ.get("BUILD", "build")
# NFC normalisation loads libutf8proc at run time.
HAVE_UTF8PROC = ctypes.util.find_library("utf8proc") is not None
LOGITS = os.path.join(HERE, "..", "..", BUILD, "tools", "logits")


@pytest.fixture(scope="module")
def expected():
    return np.load(A.EXPECTED)


def logits_tool():
    if not os.path.exists(LOGITS):
        pytest.skip(f"{LOGITS} is not built")
    return LOGITS


def run(model, name, tmp, act="f32"):
    ids = os.path.join(tmp, "ids.bin")
    A.ids(name).tofile(ids)
    out = os.path.join(tmp, "out.bin")
    r = subprocess.run([logits_tool(), model, "cpu", act, str(A.PROMPT), ids, out],
                       capture_output=True, text=True)
    return r, (np.fromfile(out, dtype=np.float32).reshape(-1, A.VOCAB) if r.returncode == 0 else None)


def rel(got, ref):
    return max(float(np.linalg.norm(got[s] - ref[s]) / np.linalg.norm(ref[s])) for s in range(len(ref)))


def live_reference(name, folder):
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        return None
    return A.reference(name, folder)


@pytest.mark.parametrize("name", list(A.CASES))
def test_logits_match_transformers(name, expected, tmp_path):
    sd = A.weights(name)
    # The weights are the recorded ones (numpy's RandomState streams are stable).
    assert A.digest(sd) == str(expected[name + ".sha256"]), "the generated weights changed"
    ref = expected[name + ".logits"]
    folder, gguf = str(tmp_path / "hf"), str(tmp_path / "m.gguf")
    A.write_folder(name, folder, sd)
    A.write_gguf(name, gguf, sd)
    live = live_reference(name, folder)
    if live is not None:
        assert rel(live, ref) < 1e-5, "data/arch_expected.npz is stale: rerun arch_models.py"
    for model in (folder, gguf):
        r, got = run(model, name, str(tmp_path))
        assert r.returncode == 0, r.stderr
        assert got.shape == ref.shape
        err = rel(got, ref)
        assert err < 1e-4, (model, err)
        assert (got.argmax(1) == ref.argmax(1)).all(), model


def test_the_window_changes_the_logits(expected, tmp_path):
    """Without its window the Mistral model (prompt 40, window 16) gives other logits: the
    window is what the match above checks."""
    folder = str(tmp_path / "hf")
    A.write_folder("mistral-window", folder)
    cfg = json.load(open(os.path.join(folder, "config.json")))
    cfg["sliding_window"] = None
    json.dump(cfg, open(os.path.join(folder, "config.json"), "w"))
    r, got = run(folder, "mistral-window", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert rel(got, expected["mistral-window.logits"]) > 0.1


def test_bf16_activations_stay_close(expected, tmp_path):
    """The bf16 path (the biases and window in the activation dtype) within bf16's error."""
    folder = str(tmp_path / "hf")
    A.write_folder("qwen2-hd96", folder)
    r, got = run(folder, "qwen2-hd96", str(tmp_path), act="bf16")
    assert r.returncode == 0, r.stderr
    assert rel(got, expected["qwen2-hd96.logits"]) < 5e-2


def refused(folder_or_gguf, tmp):
    r, _ = run(folder_or_gguf, "qwen2-hd80", tmp)
    assert r.returncode != 0
    return r.stderr


@pytest.mark.parametrize("edit,words", [
    ({"model_type": "gemma"}, "unsupported architecture 'gemma'"),
    ({"model_type": "qwen2", "use_sliding_window": True, "sliding_window": 8, "max_window_layers": 1},
     "sliding-window attention on some layers only"),
    ({"layer_types": ["full_attention", "sliding_attention"], "sliding_window": 8},
     "sliding-window attention on some layers only"),
    ({"model_type": "llama", "attention_bias": True}, "attention_bias and mlp_bias are not supported"),
    ({"head_dim": 81}, "head size 81 is odd"),
])
def test_unsupported_folders_are_one_clear_error(edit, words, tmp_path):
    folder = str(tmp_path / "hf")
    A.write_folder("qwen2-hd80", folder)
    cfg = json.load(open(os.path.join(folder, "config.json")))
    cfg.update(edit)
    json.dump(cfg, open(os.path.join(folder, "config.json"), "w"))
    assert words in refused(folder, str(tmp_path))


def test_qwen2_folder_without_biases_is_refused(tmp_path):
    folder = str(tmp_path / "hf")
    sd = A.weights("qwen2-hd80")
    del sd["model.layers.1.self_attn.k_proj.bias"]
    A.write_folder("qwen2-hd80", folder, sd)
    assert "missing tensor blk.1.attn_k.bias" in refused(folder, str(tmp_path))


def test_unsupported_gguf_architecture(tmp_path):
    path = str(tmp_path / "m.gguf")
    c = A.config("qwen2-hd80")
    A.gguf_writer.state_to_gguf("phi3", c, A.weights("qwen2-hd80"), path, "f32")
    assert "unsupported architecture 'phi3'" in refused(path, str(tmp_path))


def test_mistral_gguf_keeps_its_window(tmp_path):
    """A Mistral GGUF without attention.sliding_window attends to everything (as the folder
    without its window does), so the window key is what the GGUF match reads."""
    folder, gguf = str(tmp_path / "hf"), str(tmp_path / "m.gguf")
    A.write_folder("mistral-window", folder)
    cfg = json.load(open(os.path.join(folder, "config.json")))
    cfg["sliding_window"] = None
    json.dump(cfg, open(os.path.join(folder, "config.json"), "w"))
    A.gguf_writer.state_to_gguf("mistral", cfg, A.weights("mistral-window"), gguf, "f32")
    r1, a = run(folder, "mistral-window", str(tmp_path))
    r2, b = run(gguf, "mistral-window", str(tmp_path))
    assert r1.returncode == 0 and r2.returncode == 0, r1.stderr + r2.stderr
    assert rel(b, a) < 1e-5
    shutil.rmtree(folder)


# ---------------------------------------------------------------- a Qwen2 GGUF served

EXE = os.path.join(HERE, "..", "..", BUILD, "src", "cli", "thincuda")
QWEN25_TEMPLATE = os.path.join(HERE, "..", "server", "data", "qwen2.5-instruct.jinja")


class Served:
    """thincuda serve on the CPU backend over a model file, on a free loopback port."""

    def __init__(self, model):
        import re
        import threading

        if not os.path.exists(EXE):
            pytest.skip(f"{EXE} is not built")
        self.proc = subprocess.Popen([EXE, "serve", "--model", model, "--port", "0", "--device",
                                      "cpu", "--kv-tokens", "1024"],
                                     stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        self.log, self.port = [], None
        for line in self.proc.stderr:
            self.log.append(line)
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
            if "ready" in line:
                break
        assert self.port, "".join(self.log)
        threading.Thread(target=lambda: self.log.extend(self.proc.stderr), daemon=True).start()

    def post(self, path, body):
        import http.client

        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        c.request("POST", path, body=json.dumps(body).encode(),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        out = json.loads(r.read())
        c.close()
        return r.status, out

    def stop(self):
        self.proc.terminate()
        return self.proc.wait(30)


def test_qwen2_gguf_serves_with_its_vocabulary(tmp_path):
    """A Qwen2 GGUF with a byte-level vocabulary under llama.cpp's "qwen2" pre-tokeniser (each
    digit a piece) and Qwen 2.5's chat template: /tokenize gives the ids of Hugging Face's
    tokenizers over the same vocabulary, text and rendered chat alike, and a completion runs."""
    tokenizers = pytest.importorskip("tokenizers")  # noqa: F841
    with open(QWEN25_TEMPLATE) as f:
        template = f.read()
    path = str(tmp_path / "qwen2.gguf")
    A.write_gguf("qwen2-hd80", path, extra=A.qwen2_tokenizer_metadata(template))
    ref = A.qwen2_reference_tokenizer()
    s = Served(path)
    try:
        texts = ["Hello world 12345 and 67890", "I'm sure you'll see; THEY'RE here",
                 "tabs\tand\n\n\nnewlines  and   runs", "Zwölf Boxkämpfer 日本語のテキスト",
                 "<|im_start|>user\nhi<|im_end|>\n", "a\u180eb \U00011F50\U00011F51 x"]
        # NFC, which the "qwen2" pre-tokeniser implies (Qwen2's tokenizer.json declares it)
        for text in texts + (A.NFC_TEXTS if HAVE_UTF8PROC else []):
            status, tok = s.post("/tokenize", {"prompt": text})
            assert status == 200, tok
            assert tok["tokens"] == ref.encode(text).ids, text
        msgs = [{"role": "user", "content": "What is 12 times 7?"}]
        status, tok = s.post("/tokenize", {"messages": msgs})
        assert status == 200, tok
        rendered = ("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
                    "assistant.<|im_end|>\n<|im_start|>user\nWhat is 12 times 7?<|im_end|>\n"
                    "<|im_start|>assistant\n")
        assert tok["tokens"] == ref.encode(rendered).ids
        status, r = s.post("/v1/chat/completions", {"messages": msgs, "max_tokens": 4,
                                                   "temperature": 0})
        assert status == 200, r
        assert r["usage"]["prompt_tokens"] == len(tok["tokens"])
    finally:
        assert s.stop() == 0, "".join(s.log)


@pytest.mark.skipif(not HAVE_UTF8PROC, reason="libutf8proc (NFC normalisation) is not installed")
@pytest.mark.parametrize("nfc", [True, False], ids=["normalizer NFC", "no normalizer"])
def test_qwen2_folder_tokenizer_follows_its_normalizer(nfc, tmp_path):
    """A Qwen2 folder whose tokenizer.json declares the NFC normalizer (as Qwen2's and Qwen2.5's
    do): /tokenize gives tokenizers' ids for text that NFC changes (decomposed accents, Hangul
    jamo, singletons, marks out of order); without the normalizer, the text is tokenised as
    given, again as tokenizers does, and the ids differ."""
    pytest.importorskip("tokenizers")
    folder = str(tmp_path / "qwen2")
    A.write_folder("qwen2-hd80", folder)
    ref = A.qwen2_reference_tokenizer(nfc=nfc)
    ref.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"add_bos_token": False, "bos_token": None, "eos_token": "<|im_end|>"}, f)
    other = A.qwen2_reference_tokenizer(nfc=not nfc)
    s = Served(folder)
    try:
        for text in A.NFC_TEXTS:
            status, tok = s.post("/tokenize", {"prompt": text})
            assert status == 200, tok
            assert tok["tokens"] == ref.encode(text).ids, text
            assert tok["tokens"] != other.encode(text).ids, text
    finally:
        assert s.stop() == 0, "".join(s.log)


def test_mistral_v3_template_serves_tool_history(tmp_path):
    """A model with Mistral-7B-Instruct-v0.3's template: a conversation with earlier tool calls
    and results (9-character ids) renders as transformers renders it (recorded in
    data/chat_renderings.json) and is answered; a request that requires a tool gets the call
    back from the template's [TOOL_CALLS] array (a 9-character id, the function's name, JSON
    arguments); ids of another length in the history are a 400."""
    pytest.importorskip("tokenizers")
    with open(os.path.join(HERE, "data", "mistral-7b-instruct-v0.3.jinja")) as f:
        template = f.read()
    with open(os.path.join(HERE, "data", "chat_renderings.json")) as f:
        case = next(c for c in json.load(f)["cases"]
                    if c["family"] == "mistral-v0.3" and c["name"] == "history without tools")
    path = str(tmp_path / "mistral-v3.gguf")
    A.write_gguf("qwen2-hd80", path, extra=A.qwen2_tokenizer_metadata(template))
    ref = A.qwen2_reference_tokenizer()
    msgs = case["messages"]
    s = Served(path)
    try:
        status, tok = s.post("/tokenize", {"messages": msgs})
        assert status == 200, tok
        assert tok["tokens"] == ref.encode(case["expected"]).ids
        status, r = s.post("/v1/chat/completions", {"messages": msgs, "max_tokens": 2,
                                                   "temperature": 0})
        assert status == 200, r
        weather = {"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object", "properties": {"city": {"type": "string"}}}}}
        status, r = s.post("/v1/chat/completions", {"messages": msgs[:1], "tools": [weather],
                                                   "tool_choice": "required", "max_tokens": 64,
                                                   "temperature": 0})
        assert status == 200, r
        calls = r["choices"][0]["message"].get("tool_calls")
        assert calls, r
        assert len(calls[0]["id"]) == 9 and calls[0]["id"].isalnum(), calls
        assert calls[0]["function"]["name"] == "get_weather", calls
        if r["choices"][0]["finish_reason"] == "tool_calls":
            assert isinstance(json.loads(calls[0]["function"]["arguments"]), dict), calls
        short = json.loads(json.dumps(msgs).replace("abcdefghi", "call_1"))
        status, r = s.post("/v1/chat/completions", {"messages": short, "max_tokens": 2})
        assert status == 400 and "9 characters" in r["error"]["message"], r
    finally:
        assert s.stop() == 0, "".join(s.log)
