#!/usr/bin/env python3
"""Load test for `thincuda serve` (or any OpenAI-compatible server): CLIENTS concurrent
streaming clients for SECONDS, each sending completions with random token-id prompts of
PROMPT +- PROMPT/2 tokens and MAX +- MAX/2 output tokens (ignore_eos). Prints requests/s,
output tokens/s, time to first token and inter-token latency (p50/p99), errors.

Usage: tools/loadtest.py --port 8080 [--clients 64] [--seconds 30] [--prompt 512] [--max 256]
                         [--vocab 32000] [--key KEY]
Only the standard library: it runs on a bare GPU machine."""
import argparse
import http.client
import json
import random
import threading
import time


def pct(values, p):
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(p / 100 * len(v)))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--max", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--key", default=None)
    a = ap.parse_args()
    lock = threading.Lock()
    ttft, itl, out_tokens, errors, done = [], [], [], [], []
    stop_at = time.time() + a.seconds
    headers = {"Content-Type": "application/json"}
    if a.key:
        headers["Authorization"] = f"Bearer {a.key}"

    def client(k):
        rng = random.Random(k)
        while time.time() < stop_at:
            n_prompt = rng.randint(a.prompt // 2, a.prompt * 3 // 2)
            n_out = rng.randint(max(1, a.max // 2), a.max * 3 // 2)
            body = json.dumps({"prompt": [rng.randrange(1, a.vocab) for _ in range(n_prompt)],
                               "max_tokens": n_out, "ignore_eos": True, "temperature": 0,
                               "stream": True, "stream_options": {"include_usage": True}})
            t0 = time.time()
            try:
                c = http.client.HTTPConnection(a.host, a.port, timeout=600)
                c.request("POST", "/v1/completions", body=body, headers=headers)
                r = c.getresponse()
                if r.status != 200:
                    raise RuntimeError(f"status {r.status}: {r.read()[:200]!r}")
                first, last, gaps, usage, ended = None, None, [], None, False
                for line in r:
                    line = line.strip()
                    if not line.startswith(b"data: "):
                        continue
                    data = line[6:]
                    if data == b"[DONE]":
                        ended = True
                        break
                    ev = json.loads(data)
                    if "error" in ev:
                        raise RuntimeError(ev["error"]["message"])
                    now = time.time()
                    if ev.get("choices"):
                        if first is None:
                            first = now - t0
                        elif last is not None:
                            gaps.append(now - last)
                        last = now
                    if ev.get("usage"):
                        usage = ev["usage"]
                c.close()
                if not ended or usage is None or usage["completion_tokens"] != n_out:
                    raise RuntimeError(f"incomplete stream (usage {usage}, wanted {n_out})")
                with lock:
                    ttft.append(first)
                    itl.extend(gaps)
                    out_tokens.append(usage["completion_tokens"])
                    done.append(time.time())
            except Exception as e:  # noqa: BLE001 - counted and reported
                with lock:
                    errors.append(repr(e)[:200])

    threads = [threading.Thread(target=client, args=(k,)) for k in range(a.clients)]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.time() - t0
    n = len(out_tokens)
    print(f"clients {a.clients}, {elapsed:.1f} s (new requests for {a.seconds:.0f} s), prompts "
          f"{a.prompt}+-{a.prompt // 2}, outputs {a.max}+-{a.max // 2} tokens")
    print(f"requests    {n} complete, {len(errors)} failed; {n / elapsed:.2f} requests/s")
    print(f"output      {sum(out_tokens)} tokens, {sum(out_tokens) / elapsed:.1f} tokens/s")
    print(f"ttft        p50 {pct(ttft, 50) * 1e3:.1f} ms, p99 {pct(ttft, 99) * 1e3:.1f} ms")
    print(f"inter-token p50 {pct(itl, 50) * 1e3:.2f} ms, p99 {pct(itl, 99) * 1e3:.2f} ms")
    for e in errors[:5]:
        print("error:", e)
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
