"""HTTP-level behaviour of thincuda serve (CPU backend, real SmolLM2): errors are OpenAI-style
JSON, malformed HTTP included (one answer, after those to the requests before it), keep-alive
works for GET routes (pipelined too), 503s carry Retry-After, and during the shutdown grace
period the listener stays open while /health and new requests get 503."""
import json
import re
import signal
import socket
import threading
import time

import pytest

from test_server import PROMPT, Server, check_error


@pytest.fixture(scope="module")
def srv():
    s = Server()
    yield s
    assert s.stop() == 0, "".join(s.log)


def exchange(port, data, want=1, timeout=10):
    """Send raw bytes and read `want` responses (status, headers, body) off the connection."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(data)
    buf, out = b"", []
    try:
        while len(out) < want:
            while b"\r\n\r\n" not in buf:
                chunk = s.recv(65536)
                if not chunk:
                    return out, True
                buf += chunk
            head, buf = buf.split(b"\r\n\r\n", 1)
            lines = head.decode("latin1").split("\r\n")
            status = int(lines[0].split()[1])
            headers = {k.lower(): v.strip() for k, v in (l.split(":", 1) for l in lines[1:])}
            n = int(headers.get("content-length", 0))
            while len(buf) < n:
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
            out.append((status, headers, buf[:n]))
            buf = buf[n:]
        # Is the connection still open? A closed one reads b"" at once.
        s.settimeout(0.3)
        try:
            closed = s.recv(1) == b""
        except socket.timeout:
            closed = False
        return out, closed
    finally:
        s.close()


def json_error(resp, status, code=None):
    st, headers, body = resp
    assert headers.get("content-type") == "application/json", headers
    check_error(st, json.loads(body), status, code=code)


def test_long_url_and_header_flood_are_json(srv):
    long_url = b"GET /" + b"a" * 40000 + b" HTTP/1.1\r\nHost: x\r\n\r\n"
    (resp,), _ = exchange(srv.port, long_url)
    json_error(resp, 414, "uri_too_long")
    flood = (b"GET /health HTTP/1.1\r\nHost: x\r\n" +
             b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 100) for i in range(400)) + b"\r\n")
    (resp,), _ = exchange(srv.port, flood)
    json_error(resp, 431, "request_header_fields_too_large")
    # Other routes' errors were JSON before; a sample of them over the same raw path.
    (resp,), _ = exchange(srv.port, b"GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n")
    json_error(resp, 404, "not_found")
    (resp,), _ = exchange(srv.port, b"DELETE /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
    json_error(resp, 405)
    assert srv.get("/health")[0] == 200


def read_all(port, data, timeout=10):
    """Send raw bytes and read until the server closes the connection."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
        buf = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return buf
            buf += chunk
    finally:
        s.close()


def status_lines(raw):
    return re.findall(rb"(?:^|\n)HTTP/1\.1 (\d{3}) ", raw)


# libmicrohttpd 0.9.75 answers these itself, in HTML, before any callback; the server's front
# (src/server/front.c) parses the client's bytes first and answers them in JSON.
@pytest.mark.parametrize("raw, status, code", [
    (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
     400, "malformed_request"),
    (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"zz\r\nab\r\n0\r\n\r\n", 400, "malformed_request"),
    (b"GET /health HTTP/2.0\r\nHost: x\r\n\r\n", 505, "http_version_not_supported"),
    (b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"v" * (300 << 10) + b"\r\n\r\n",
     431, "request_header_fields_too_large"),
], ids=["bad-content-length", "bad-chunk-size", "http-2.0", "head-over-256KiB"])
def test_library_errors_are_json(srv, raw, status, code):
    out = read_all(srv.port, raw)
    assert len(status_lines(out)) == 1, out[:400]
    (resp,), closed = exchange(srv.port, raw, want=2)
    assert closed
    json_error(resp, status, code)
    assert srv.get("/health")[0] == 200


@pytest.mark.parametrize("head, status, code", [
    # Near the front's limits (64 KiB, 256 fields, 256 Cookie items) libmicrohttpd's memory
    # still holds the head, and the server answers; past them the front does.
    (b"Cookie: " + b";" * 250 + b"\r\n", 200, None),
    (b"Cookie: " + b";" * 300 + b"\r\n", 431, "request_header_fields_too_large"),
    (b"".join(b"a%d:\r\n" % i for i in range(250)), 431, "request_header_fields_too_large"),
    (b"".join(b"a%d:\r\n" % i for i in range(300)), 431, "request_header_fields_too_large"),
    (b"X-Big: " + b"v" * (60 << 10) + b"\r\n", 431, "request_header_fields_too_large"),
    (b"Cookie: a=" + b"v" * (60 << 10) + b";" * 200 + b"\r\n", 431,
     "request_header_fields_too_large"),
    # libmicrohttpd alone ran out of memory on these (heads of 30 and 50 KiB) and answered
    # in HTML.
    (b"Cookie: " + b";" * 30000 + b"\r\n", 431, "request_header_fields_too_large"),
    (b"".join(b"a%d:\r\n" % i for i in range(6000)), 431, "request_header_fields_too_large"),
], ids=["250-cookies", "300-cookies", "250-fields", "300-fields", "60KiB-header", "60KiB-cookie",
        "30000-cookies", "6000-fields"])
def test_heads_near_the_limits_are_json(srv, head, status, code):
    (resp,), _ = exchange(srv.port, b"GET /health HTTP/1.1\r\nHost: x\r\n" + head + b"\r\n")
    if code:
        json_error(resp, status, code)
    else:
        assert resp[0] == status and resp[1].get("content-type") == "application/json"
    assert srv.get("/health")[0] == 200


@pytest.mark.parametrize("raw, status, code", [
    (b"GET /health HTTP/1.1\r\n\r\n", 400, "malformed_request"),
    (b"GET /health\r\n\r\n", 505, "http_version_not_supported"),
    (b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
     b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, "malformed_request"),
    (b"POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 400,
     "malformed_request"),
    (b"\x00\x01\x02 garbage\r\n\r\n", 400, "malformed_request"),
    (b"GET /" + b"a" * (70 << 10) + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414, "uri_too_long"),
], ids=["no-host", "http-0.9", "length-and-chunked", "gzip-coded", "garbage", "url-over-64KiB"])
def test_other_malformed_requests_are_json(srv, raw, status, code):
    (resp,), closed = exchange(srv.port, raw, want=2)
    assert closed
    json_error(resp, status, code)


def test_malformed_request_after_pipelined_ones(srv):
    """The requests before a malformed one are answered in order, then its error; HEAD's
    answer (a Content-Length and no body) is counted right."""
    ok = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
    bad = b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 1x\r\n\r\n"
    out, closed = exchange(srv.port, ok + bad + ok, want=5)
    assert [r[0] for r in out] == [200, 200, 400] and closed, out
    json_error(out[2], 400, "malformed_request")
    out = read_all(srv.port, b"HEAD /health HTTP/1.1\r\nHost: x\r\n\r\n"
                   b"GET /health HTTP/2.0\r\nHost: x\r\n\r\n")
    assert status_lines(out) == [b"200", b"505"], out
    assert out.endswith(b'"code":"http_version_not_supported"}}'), out


def test_stream_before_a_malformed_request_runs_to_its_end(srv):
    """A malformed request pipelined after a stream neither cuts the stream short nor looks
    like a client that went away: the stream runs to max_tokens and [DONE], then comes the
    error."""
    body = json.dumps({"prompt": PROMPT, "max_tokens": 24, "ignore_eos": True, "stream": True})
    req = (f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           f"Content-Length: {len(body)}\r\n\r\n{body}").encode()
    out = read_all(srv.port, req + b"GET /health HTTP/2.0\r\nHost: x\r\n\r\n", timeout=120)
    assert status_lines(out) == [b"200", b"505"], out[:300]
    assert b'"finish_reason":"length"' in out and b"data: [DONE]" in out, out[-400:]
    assert out.endswith(b'"code":"http_version_not_supported"}}'), out[-300:]


def test_malformed_body_after_an_answer_adds_none(srv):
    """A request answered as soon as its head arrived (404 here) gets no second answer when
    its body turns out malformed; Expect: 100-continue's interim answer is not counted."""
    out = read_all(srv.port, b"POST /nowhere HTTP/1.1\r\nHost: x\r\n"
                   b"Transfer-Encoding: chunked\r\n\r\nzz\r\n")
    assert status_lines(out) == [b"404"], out
    out = read_all(srv.port, b"POST /tokenize HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                   b"Transfer-Encoding: chunked\r\n\r\n5\r\n{\"pro\r\nzz\r\n")
    assert status_lines(out) == [b"100", b"400"], out
    assert srv.get("/health")[0] == 200


def test_pipelined_gets_keep_alive(srv):
    three = b"".join(b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % p
                     for p in (b"/health", b"/v1/models", b"/metrics"))
    out, closed = exchange(srv.port, three, want=3)
    assert [r[0] for r in out] == [200, 200, 200], out
    assert all(r[1].get("connection", "").lower() != "close" for r in out), out
    assert json.loads(out[0][2]) == {"status": "ok"} and json.loads(out[1][2])["object"] == "list"
    assert b"thincuda_requests_total" in out[2][2]
    assert not closed, "the connection was closed after three GETs"
    # One client connection for several requests of each kind, errors included.
    c = srv.conn()
    socks = set()
    for method, path, body in (("GET", "/health", None), ("GET", "/v1/models", None),
                               ("GET", "/nowhere", None),
                               ("POST", "/tokenize", json.dumps({"prompt": PROMPT})),
                               ("GET", "/health", None)):
        c.request(method, path, body=body, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        assert r.getheader("Connection", "").lower() != "close", (path, r.getheaders())
        socks.add(id(c.sock))
    assert len(socks) == 1
    c.close()


def test_queue_full_has_retry_after():
    s = Server("--max-running", "1", "--max-queue", "1")
    try:
        results = []

        def one():
            results.append(s.request("POST", "/v1/completions",
                                     {"prompt": PROMPT, "max_tokens": 64, "ignore_eos": True},
                                     raw=True))
        threads = [threading.Thread(target=one) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        refused = [(st, body, r) for st, body, r in results if st == 503]
        assert refused and len(refused) < 6, [r[0] for r in results]
        for st, body, r in refused:
            check_error(st, json.loads(body), 503, code="queue_full")
            assert r.getheader("Retry-After") == "1"
    finally:
        assert s.stop() == 0


def test_grace_period_answers_503():
    s = Server("--shutdown-timeout", "4")
    c = s.conn()
    body = json.dumps({"prompt": PROMPT, "max_tokens": 2000, "ignore_eos": True, "stream": True})
    c.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200 and r.readline().startswith(b"data: ")
    s.proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    # The listener is still open: /health and new requests get 503 with Retry-After.
    st, payload, resp = s.request("GET", "/health", raw=True)
    assert (st, json.loads(payload)) == (503, {"status": "shutting_down"})
    assert resp.getheader("Retry-After") == "5"
    st, payload, resp = s.request("POST", "/v1/completions", {"prompt": PROMPT}, raw=True)
    check_error(st, json.loads(payload), 503, code="shutting_down")
    assert resp.getheader("Retry-After") == "5"
    rest = r.read().decode()
    assert '"code":"shutting_down"' in rest
    assert s.proc.wait(30) == 0
