"""Bounds on the work one request may cause before generation (thincuda serve, CPU backend,
real SmolLM2): many-message and large bodies are answered quickly with OpenAI-style 400s and
the server stays healthy. The times are printed, not asserted."""
import json
import time

import pytest

from test_server import Server, check_error

CHAT_PATH = "/v1/chat/completions"


def tiny_messages(n):
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": "word"} for i in range(n)]


def timed_post(srv, path, body):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    t0 = time.time()
    status, r = srv.post(path, data)
    return status, r, time.time() - t0, len(data)


@pytest.fixture(scope="module")
def srv():
    s = Server()
    yield s
    assert s.stop() == 0, "".join(s.log)


@pytest.fixture(scope="module")
def unbounded():
    """A server whose message and byte bounds are high: the tokenizer does all the work."""
    s = Server("--max-messages", "1000000", "--max-prompt-bytes", "4194304")
    yield s
    assert s.stop() == 0, "".join(s.log)


def test_40000_messages_rejected(srv):
    status, r, t, size = timed_post(srv, CHAT_PATH, {"messages": tiny_messages(40000),
                                                     "max_tokens": 1})
    print(f"\n40,000 messages ({size} bytes): {status} in {t:.3f} s")
    check_error(status, r, 400, "messages", "array_above_max_length")
    assert srv.get("/health")[0] == 200


def test_4mib_body_of_tiny_messages(srv):
    msgs = tiny_messages(118000)
    body = json.dumps({"messages": msgs, "max_tokens": 1}, separators=(",", ":")).encode()
    assert 4_000_000 < len(body) <= 4 << 20, len(body)
    status, r, t, size = timed_post(srv, CHAT_PATH, body)
    print(f"\n{len(msgs)} messages ({size} bytes): {status} in {t:.3f} s")
    check_error(status, r, 400, "messages", "array_above_max_length")
    assert srv.get("/health")[0] == 200


def test_prompt_bytes_bounded(srv):
    text = "a " * (600 << 10)  # 1.2 MB of text: over the default 1 MiB
    for path, body, param in ((CHAT_PATH, {"messages": [{"role": "user", "content": text}]}, "messages"),
                              ("/v1/completions", {"prompt": text}, "prompt"),
                              ("/tokenize", {"prompt": text}, "prompt")):
        status, r, t, size = timed_post(srv, path, body)
        print(f"\n{path} with {len(text)} bytes of text: {status} in {t:.3f} s")
        check_error(status, r, 400, param, "string_above_max_length")
    assert srv.get("/health")[0] == 200


def test_40000_messages_tokenized_quickly(unbounded):
    """With the bounds raised, the 40,000 messages are tokenized (the issue measured 69 s):
    generation is refused once the prompt passes the context, and /tokenize counts them all."""
    status, r, t, size = timed_post(unbounded, CHAT_PATH, {"messages": tiny_messages(40000),
                                                           "max_tokens": 1})
    print(f"\n40,000 messages ({size} bytes) past the context: {status} in {t:.3f} s")
    check_error(status, r, 400, "messages", "context_length_exceeded")
    status, r, t, size = timed_post(unbounded, "/tokenize", {"messages": tiny_messages(40000)})
    print(f"/tokenize of 40,000 messages ({size} bytes): {status}, {r['count']} tokens in {t:.3f} s")
    assert status == 200
    # Each pair of messages adds the same tokens.
    two = unbounded.post("/tokenize", {"messages": tiny_messages(2)})[1]["count"]
    four = unbounded.post("/tokenize", {"messages": tiny_messages(4)})[1]["count"]
    assert r["count"] == two + 19999 * (four - two)
    assert unbounded.get("/health")[0] == 200
