#!/usr/bin/env python3
"""The HTTP client of serve_cli_test.sh (standard library only).

  serve_client.py answers PORT REFS   concurrent streaming and non-streaming requests give the
                                      texts of `tessera generate` (REFS, JSON); hostile
                                      requests get JSON 4xx errors; /metrics counts them all
  serve_client.py queue PORT          with --max-running 1: a second request waits while a
                                      long stream runs, the stream's client hangs up, its
                                      request is cancelled and its blocks freed, the second
                                      one then completes
Exits non-zero with the first failed check.
"""
import http.client
import json
import socket
import sys
import threading
import time


def request(port, method, path, body=None, raw=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    data = raw if raw is not None else (json.dumps(body) if body is not None else None)
    conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    text = resp.read().decode("utf-8", "replace")
    conn.close()
    return resp.status, resp.getheader("Content-Type", ""), text


def stream(port, path, body):
    """The server-sent events of one streaming request, parsed."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200, (resp.status, resp.read())
    assert resp.getheader("Content-Type", "").startswith("text/event-stream")
    events = []
    for line in resp.read().decode("utf-8", "replace").split("\n"):
        if line.startswith("data: "):
            events.append(line[6:])
    conn.close()
    return events


def metrics(port):
    status, ctype, text = request(port, "GET", "/metrics")
    assert status == 200 and ctype.startswith("text/plain"), (status, ctype)
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


def check(cond, what):
    if not cond:
        print("FAIL: " + what, file=sys.stderr)
        sys.exit(1)


def answers(port, refs):
    results = {}

    def plain(key, prompt):
        status, ctype, text = request(port, "POST", "/v1/completions",
                                      {"prompt": prompt, "max_tokens": 24, "temperature": 0})
        results[key] = (status, ctype, text)

    def streamed(key, prompt):
        results[key] = stream(port, "/v1/completions",
                              {"prompt": prompt, "max_tokens": 24, "temperature": 0, "stream": True})

    threads = []
    for i, prompt in enumerate(refs):
        threads.append(threading.Thread(target=plain, args=(("plain", i), prompt)))
        threads.append(threading.Thread(target=streamed, args=(("stream", i), prompt)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, (prompt, want) in enumerate(refs.items()):
        status, ctype, text = results[("plain", i)]
        check(status == 200 and ctype.startswith("application/json"), f"{prompt!r}: {status} {text}")
        body = json.loads(text)
        choice = body["choices"][0]
        check(choice["text"] == want["text"],
              f"{prompt!r} served together gives {choice['text']!r}, alone {want['text']!r}")
        check(choice["finish_reason"] == want["finish_reason"], f"{prompt!r}: {choice}")
        check(body["usage"]["prompt_tokens"] == len(prompt.encode()), f"usage {body['usage']}")
        events = results[("stream", i)]
        check(events[-1] == "[DONE]", f"{prompt!r}: the stream ends with {events[-1]!r}")
        chunks = [json.loads(e) for e in events[:-1]]
        text = "".join(c["choices"][0]["text"] for c in chunks)
        check(text == want["text"], f"{prompt!r} streamed gives {text!r}, alone {want['text']!r}")
        check(chunks[-1]["choices"][0]["finish_reason"] == want["finish_reason"], f"{chunks[-1]}")
        check(all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1]), "early finish")

    # A stop string cuts the text before it, and the request finishes with "stop".
    first = next(iter(refs.items()))
    cut = first[1]["text"][4:6]
    status, _, text = request(port, "POST", "/v1/completions",
                              {"prompt": first[0], "max_tokens": 24, "temperature": 0, "stop": cut})
    choice = json.loads(text)["choices"][0]
    check(status == 200 and choice["text"] == first[1]["text"].split(cut)[0] and
          choice["finish_reason"] == "stop", f"stop {cut!r}: {choice}")

    hostile = [
        ("POST", "/v1/completions", "{\"prompt\": ", 400, "not valid JSON"),
        ("POST", "/v1/completions", json.dumps({"prompt": "x" * 100}), 400, "maximum context length is 64"),
        ("POST", "/v1/completions", json.dumps({"prompt": "x", "max_tokens": 10**9}), 400, "you requested"),
        ("POST", "/v1/completions", json.dumps({"prompt": "x", "max_tokens": "8"}), 400, "must be an integer"),
        ("POST", "/v1/completions", json.dumps({"prompt": "x", "temperature": "hot"}), 400, "must be a number"),
        ("POST", "/v1/completions", json.dumps({"prompt": "x", "n": 3}), 400, "'n' = 3 is not supported"),
        ("POST", "/v1/completions", json.dumps({"prompt": "x", "model": "gpt-4"}), 404, "does not exist"),
        ("POST", "/v1/completions", json.dumps({"prompt": ""}), 400, "encodes to no tokens"),
        ("POST", "/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": "hi"}]}),
         400, "no known chat template"),
        ("POST", "/v1/completions", json.dumps({"prompt": "x" * 10000}), 413, "too large"),
        # Refused by its depth: printed in the refusal, 500,000 levels overflowed the stack.
        ("POST", "/v1/completions", '{"prompt": "x", "stream": ' + "[" * 1900 + "]" * 1900 + "}",
         400, "deeper than 64 levels"),
        ("GET", "/v1/completions", None, 404, "no route GET /v1/completions"),
        ("POST", "/v2/nothing", "{}", 404, "no route POST /v2/nothing"),
    ]
    for method, path, raw, want_status, says in hostile:
        status, ctype, text = request(port, method, path, raw=raw)
        check(status == want_status, f"{method} {path} {str(raw)[:60]}: {status}, expected {want_status}: {text}")
        err = json.loads(text)["error"]
        check(says in err["message"], f"{method} {path}: {err['message']!r} lacks {says!r}")

    status, _, text = request(port, "GET", "/health")
    check(status == 200 and json.loads(text)["status"] == "ok", f"/health after all that: {status} {text}")
    m = metrics(port)
    n = 2 * len(refs) + 1
    check(m["tessera:e2e_request_latency_seconds_count"] == n, f"{n} requests, metrics say {m}")
    check(m["tessera:time_to_first_token_seconds_count"] == n, "TTFT count")
    check(m['tessera:request_success_total{finished_reason="stop"}'] +
          m['tessera:request_success_total{finished_reason="length"}'] == n, "finish reasons")
    check(m["tessera:generation_tokens_total"] >= n, "generated tokens")
    check(m["tessera:prompt_tokens_total"] == sum(2 * len(p.encode()) for p in refs) + len(first[0].encode()),
          f"prompt tokens {m['tessera:prompt_tokens_total']}")
    check(m["tessera:num_requests_running"] == 0 and m["tessera:num_requests_waiting"] == 0 and
          m["tessera:kv_cache_usage_perc"] == 0, "idle gauges")
    check(m['tessera:time_to_first_token_seconds_bucket{le="+Inf"}'] == n, "+Inf bucket")
    print(f"serve_client: {2 * len(refs)} concurrent requests equal generate alone; "
          f"{len(hostile)} hostile requests refused; metrics count {n} requests")


def queue(port):
    # A long stream; read its first event, then wait for the second request to queue.
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    body = json.dumps({"prompt": "a", "max_tokens": 900, "temperature": 0, "stream": True})
    sock.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {len(body)}\r\n\r\n{body}").encode())
    got = b""
    while b"data: " not in got:
        chunk = sock.recv(4096)
        check(chunk, "the stream closed before its first event")
        got += chunk
    second = {}

    def waiting_request():
        second["answer"] = request(port, "POST", "/v1/completions",
                                   {"prompt": "b", "max_tokens": 5, "temperature": 0})
    t = threading.Thread(target=waiting_request)
    t.start()
    # The gauges are published after each iteration, and the stream's first token reaches the
    # client before the iteration that sampled it publishes: until then they still read one
    # waiting request (the stream itself). So wait for the state itself, both gauges.
    deadline = time.time() + 20
    while True:
        m = metrics(port)
        if m["tessera:num_requests_waiting"] == 1 and m["tessera:num_requests_running"] == 1:
            break
        check(time.time() < deadline, f"the second request never queued behind the stream: {m}")
        time.sleep(0.01)
    check(m["tessera:num_requests_running"] == 1 and m["tessera:kv_cache_usage_perc"] > 0,
          f"while streaming: {m}")
    check(m['tessera:request_success_total{finished_reason="length"}'] == 0, "the stream ended early")
    sock.close()  # the client hangs up
    t.join(timeout=30)
    check(not t.is_alive(), "the queued request never ran")
    status, _, text = second["answer"]
    check(status == 200 and json.loads(text)["choices"][0]["finish_reason"] == "length",
          f"the queued request: {status} {text}")
    m = metrics(port)
    check(m['tessera:request_success_total{finished_reason="cancelled"}'] == 1,
          f"the hung-up stream was not cancelled: {m}")
    check(m["tessera:num_requests_running"] == 0 and m["tessera:kv_cache_usage_perc"] == 0,
          f"blocks not freed: {m}")
    print("serve_client: a request queued behind a full batch; a hung-up stream was cancelled "
          "and its blocks freed; the queued request then completed")


if __name__ == "__main__":
    if sys.argv[1] == "answers":
        answers(int(sys.argv[2]), json.load(open(sys.argv[3])))
    else:
        queue(int(sys.argv[2]))
