"""logit_bias through thincuda serve (CPU backend, real SmolLM2): -100 bans a token, +100
forces one, greedy and sampled, chat and completions, streamed or not; bad maps are 400s."""
import pytest

from test_server import CHAT, NAME, PROMPT, Server, check_error, stream


@pytest.fixture(scope="module")
def srv():
    s = Server()
    yield s
    assert s.stop() == 0, "".join(s.log)


def token_of(srv, text):
    status, r = srv.post("/tokenize", {"prompt": text, "add_special_tokens": False})
    assert status == 200 and r["count"] == 1, (text, r)
    return r["tokens"][0]


def test_ban_changes_the_greedy_answer(srv):
    body = {"model": NAME, "prompt": PROMPT, "max_tokens": 4, "temperature": 0}
    plain = srv.post("/v1/completions", body)[1]["choices"][0]["text"]
    assert plain.startswith(" Paris"), plain
    paris = token_of(srv, " Paris")
    status, r = srv.post("/v1/completions", {**body, "logit_bias": {str(paris): -100}})
    assert status == 200, r
    banned = r["choices"][0]["text"]
    assert not banned.startswith(" Paris") and banned != plain
    # The same through a stream and through chat.
    events = stream(srv, "/v1/completions", {**body, "stream": True,
                                             "logit_bias": {str(paris): -100}})
    assert "".join(c["choices"][0]["text"] for c in events[:-1]) == banned
    chat = {"model": NAME, "messages": CHAT, "max_tokens": 40, "temperature": 0}
    answer = srv.post("/v1/chat/completions", chat)[1]["choices"][0]["message"]["content"]
    assert "Paris" in answer
    ids = [token_of(srv, t) for t in (" Paris", "Paris")]
    status, r = srv.post("/v1/chat/completions",
                         {**chat, "logit_bias": {str(i): -100 for i in ids}})
    assert status == 200 and "Paris" not in r["choices"][0]["message"]["content"], r


def test_force_a_token_sampled(srv):
    the = token_of(srv, " the")
    for temperature in (0, 1.0):
        status, r = srv.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 5,
                                                 "temperature": temperature, "seed": 5,
                                                 "logit_bias": {str(the): 100}})
        assert status == 200, r
        assert r["choices"][0]["text"] == " the" * 5


def test_sampled_ban_is_never_drawn(srv):
    """Sampling at temperature 2 from a distribution whose three likeliest first tokens are
    banned never draws them."""
    status, r = srv.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 1, "temperature": 0,
                                             "logprobs": 3})
    top = r["choices"][0]["logprobs"]["top_logprobs"][0]
    ids = {token_of(srv, t) for t in top}
    for seed in range(8):
        status, r = srv.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 1,
                                                 "temperature": 2.0, "seed": seed,
                                                 "logit_bias": {str(i): -100 for i in ids}})
        assert status == 200 and r["choices"][0]["text"] not in top, (top, r)


@pytest.mark.parametrize("bias,why", [
    ("no", "not an object"),
    ({"abc": 1}, "key not an id"),
    ({"-5": 1}, "negative id"),
    ({"12": 101}, "over 100"),
    ({"12": "1"}, "value not a number"),
    ({"99999999": 1}, "outside the vocabulary"),
])
def test_bad_logit_bias(srv, bias, why):
    check_error(*srv.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 1,
                                              "logit_bias": bias}), 400, "logit_bias")
