"""Slow clients (thincuda serve, CPU backend, real SmolLM2): a request's head and body must
arrive within --read-timeout however slowly they trickle, the connection is closed when they
do not, one address holds at most --max-connections-per-ip connections, and /health keeps
answering throughout. Times are printed."""
import json
import select
import socket
import time

import pytest

from test_server import PROMPT, Server


def health_ok(srv):
    try:
        return srv.get("/health")[0] == 200
    except OSError:
        return False


def closed_among(socks, ids):
    """The connections among ids that the server closed (end of stream or a reset)."""
    ready, _, _ = select.select([socks[i] for i in ids], [], [], 0)
    gone = set()
    for i in ids:
        if socks[i] in ready:
            try:
                if socks[i].recv(4096) == b"":
                    gone.add(i)
            except OSError:
                gone.add(i)
    return gone


def test_200_trickling_connections_closed_at_deadline():
    s = Server("--read-timeout", "3")
    try:
        heads = [b"GET /health HTTP/1.1\r\nHost: x\r\n", b"POST /v1/completions HTTP/1.1\r\n"
                 b"Host: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"]
        socks = []
        for i in range(200):
            c = socket.create_connection(("127.0.0.1", s.port))
            c.sendall(heads[i % 2])  # half trickle their head, half their body
            socks.append(c)
        t0 = time.time()
        open_ = set(range(200))
        health_failures = 0
        while open_ and time.time() - t0 < 15:
            # Each sends a byte every half second: never silent for the library's timeout.
            for i in list(open_):
                try:
                    socks[i].sendall(b"X-Slow: 1\r\n" if i % 2 == 0 else b" ")
                except OSError:
                    open_.discard(i)
            open_ -= closed_among(socks, open_)
            health_failures += not health_ok(s)
            time.sleep(0.5)
        took = time.time() - t0
        print(f"\n200 trickling connections: {200 - len(open_)} closed after {took:.1f} s "
              f"(deadline 3 s); /health failed {health_failures} times meanwhile")
        assert not open_, f"{len(open_)} connections still open after {took:.1f} s"
        assert health_failures == 0
        assert s.metrics()["thincuda_request_deadline_closes_total"] >= 200
        # A request that arrives in time is answered, and generation is not under the deadline.
        status, r = s.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 2})
        assert status == 200, r
    finally:
        for c in socks:
            c.close()
        assert s.stop() == 0


def test_keep_alive_request_after_the_deadline_is_served():
    """The deadline counts from when a connection waits for a request, not from its opening."""
    s = Server("--read-timeout", "2")
    try:
        c = s.conn()
        for _ in range(3):
            c.request("GET", "/health")
            r = c.getresponse()
            assert r.status == 200 and json.loads(r.read()) == {"status": "ok"}
            time.sleep(1.2)  # 3.6 s in all, each wait under the 2 s deadline
        c.close()
    finally:
        assert s.stop() == 0


def test_connections_per_address():
    s = Server("--max-connections-per-ip", "4", "--read-timeout", "30")
    try:
        # Five connections from one address: whichever the server accepts last is refused at
        # once (closed without an answer), the other four are served. (First the server lets
        # go of the connection that Server() checked /health with.)
        time.sleep(1)
        conns = [socket.create_connection(("127.0.0.1", s.port)) for _ in range(5)]
        for c in conns:
            try:
                c.sendall(b"GET /health HTTP/1.1\r\n")
            except OSError:
                pass
        time.sleep(1)
        answers = []
        for c in conns:
            c.settimeout(10)
            try:
                c.sendall(b"Host: x\r\n\r\n")
                answers.append(c.recv(100))
            except OSError:
                answers.append(b"")
        got = sorted(a[:12] for a in answers)
        assert got == [b""] + [b"HTTP/1.1 200"] * 4, got
        for c in conns:
            c.close()
        deadline = time.time() + 5
        while not health_ok(s) and time.time() < deadline:
            time.sleep(0.1)
        assert health_ok(s)
    finally:
        assert s.stop() == 0
