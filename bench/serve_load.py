#!/usr/bin/env python3
"""Load benchmark of `tessera serve`, in the style of vLLM's benchmark_serving.py.

For each batching mode (continuous, and static as the baseline) it starts a server on a free
port, then for each request rate sends the same prompts at the same Poisson arrival times
(rate "inf": all at once; --concurrency C: at most C in flight instead), every request
streamed so that each token's arrival is timed. Prompts are cut from Tessera's own README and
docs; output lengths are drawn from --output-len (uniform, or --output-dist exponential for a
long tail) and fixed by ignore_eos, as vLLM's benchmark does, so both modes do exactly the same
work.

A mode may carry its own limits, MODE:MAX_RUNNING:MAX_BATCH_TOKENS (for example
continuous:4:16): comparing throughput at equal or better median TPOT, the way serving
papers compare at a latency target, needs the continuous server at a smaller batch than the
static one. Without them a mode takes --max-running and --max-batch-tokens. For each rate the
JSON's "at_equal_tpot" names the continuous configuration of highest throughput whose median
TPOT is no worse than each static one's, and the ratio.

Reported per run: TTFT, TPOT (per request: (e2e - ttft) / (tokens - 1)), ITL (every gap
between tokens) and end-to-end latency, each as mean, median and p99 in ms; requests/s,
output tokens/s and total (prompt + output) tokens/s. JSON goes to --out; with matplotlib,
--plot draws output tokens/s against request rate for both modes.

  python3 bench/serve_load.py --model runs/default --rates 2,4,8,16,inf \\
      --num-prompts 64 --out bench_serve.json --plot docs/images/serve_throughput.png

Standard library only (matplotlib for --plot).
"""
import argparse
import glob
import http.client
import json
import os
import random
import re
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def prompt_set(n, lo, hi, seed):
    """n snippets of lo..hi characters from the project's own prose."""
    text = open(os.path.join(ROOT, "README.md")).read()
    for path in sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))):
        text += "\n" + open(path).read()
    words = re.sub(r"\s+", " ", text).split(" ")
    rng = random.Random(seed)
    prompts = []
    while len(prompts) < n:
        start = rng.randrange(len(words) - 200)
        want = rng.randint(lo, hi)
        snippet = ""
        for w in words[start:]:
            if len(snippet) + len(w) + 1 > want:
                break
            snippet = (snippet + " " + w).strip()
        if snippet:
            prompts.append(snippet)
    return prompts


def parse_mode(spec, args):
    """MODE[:MAX_RUNNING:MAX_BATCH_TOKENS] -> (label, batching, max_running, max_batch_tokens)."""
    parts = spec.split(":")
    if parts[0] not in ("continuous", "static") or len(parts) not in (1, 3):
        raise SystemExit(f"serve_load: mode '{spec}' is not continuous|static[:RUNNING:TOKENS]")
    running, tokens = (int(parts[1]), int(parts[2])) if len(parts) == 3 else \
        (args.max_running, args.max_batch_tokens)
    return spec, parts[0], running, tokens


def start_server(args, batching, max_running, max_batch_tokens):
    cmd = [args.tessera, "serve", "--model", args.model, "--port", "0", "--batching", batching,
           "--max-running", str(max_running), "--max-batch-tokens", str(max_batch_tokens)]
    if args.device:
        cmd += ["--device", args.device]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    if args.kv_blocks:
        cmd += ["--kv-blocks", str(args.kv_blocks)]
    if args.int8_activations:
        cmd += ["--int8-activations"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    port = None
    for line in proc.stderr:
        m = re.search(r"127\.0\.0\.1:(\d+)", line)
        if m and port is None:
            port = int(m.group(1))
        if "serve: ready" in line:
            print("  " + line.strip(), file=sys.stderr)
            break
    else:
        raise SystemExit("serve_load: the server exited before it was ready")
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
    return proc, port


def one_request(port, prompt, max_tokens, record):
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                       "ignore_eos": True, "stream": True})
    start = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.request("POST", "/v1/completions", body=body,
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        record.update(error=f"{resp.status} {resp.read()[:200]!r}")
        return
    arrivals, tokens, buf = [], 0, b""
    while True:
        chunk = resp.read1(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            if not event.startswith(b"data: ") or event == b"data: [DONE]":
                continue
            data = json.loads(event[6:])
            if data["choices"][0]["text"]:
                arrivals.append(time.perf_counter() - start)
    conn.close()
    end = time.perf_counter() - start
    record.update(e2e=end, arrivals=arrivals, output_tokens=max_tokens)


def summarize(values):
    if not values:
        return {"mean": None, "median": None, "p99": None}
    v = sorted(values)
    p99 = v[min(len(v) - 1, int(round(0.99 * (len(v) - 1))))]
    return {"mean": statistics.fmean(v) * 1e3, "median": statistics.median(v) * 1e3,
            "p99": p99 * 1e3}


def run_load(port, prompts, out_lens, prompt_tokens, rate, concurrency, seed):
    rng = random.Random(seed)
    records = [dict() for _ in prompts]
    threads = []
    gate = threading.Semaphore(concurrency) if concurrency else None
    t0 = time.perf_counter()
    next_at = 0.0
    for i, prompt in enumerate(prompts):
        if rate != float("inf") and not concurrency:
            next_at += rng.expovariate(rate)
            delay = t0 + next_at - time.perf_counter()
            if delay > 0:
                time.sleep(delay)

        def work(i=i, prompt=prompt):
            if gate:
                with gate:
                    one_request(port, prompt, out_lens[i], records[i])
            else:
                one_request(port, prompt, out_lens[i], records[i])
        t = threading.Thread(target=work)
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    duration = time.perf_counter() - t0
    errors = [r["error"] for r in records if "error" in r]
    if errors:
        raise SystemExit(f"serve_load: {len(errors)} requests failed, e.g. {errors[0]}")
    ttft = [r["arrivals"][0] for r in records]
    tpot = [(r["e2e"] - r["arrivals"][0]) / (len(r["arrivals"]) - 1) for r in records
            if len(r["arrivals"]) > 1]
    itl = [b - a for r in records for a, b in zip(r["arrivals"], r["arrivals"][1:])]
    out_tokens = sum(out_lens)
    return {"duration_s": duration, "completed": len(records),
            "request_throughput": len(records) / duration,
            "output_throughput": out_tokens / duration,
            "total_token_throughput": (out_tokens + prompt_tokens) / duration,
            "output_tokens": out_tokens, "prompt_tokens": prompt_tokens,
            "ttft_ms": summarize(ttft), "tpot_ms": summarize(tpot), "itl_ms": summarize(itl),
            "e2e_ms": summarize([r["e2e"] for r in records])}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tessera", default=os.path.join(ROOT, "build", "tools", "tessera"))
    ap.add_argument("--model", required=True, help="what `tessera serve --model` takes")
    ap.add_argument("--modes", default="continuous,static")
    ap.add_argument("--rates", default="inf", help="requests/s, comma-separated; inf: all at once")
    ap.add_argument("--concurrency", type=int, default=0, help="at most C requests in flight")
    ap.add_argument("--num-prompts", type=int, default=64)
    ap.add_argument("--prompt-chars", default="40,200", help="prompt length range in characters")
    ap.add_argument("--output-len", default="8,128", help="output token range")
    ap.add_argument("--output-dist", default="uniform", choices=["uniform", "exponential"],
                    help="uniform over the range, or exponential with mean at a quarter of "
                         "the range's top, clipped to it: a long tail like chat traffic's")
    ap.add_argument("--max-running", type=int, default=16)
    ap.add_argument("--max-batch-tokens", type=int, default=2048)
    ap.add_argument("--kv-blocks", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--device", default="", help="what `tessera serve --device` takes "
                    "(default: the server's own, the CPU)")
    ap.add_argument("--int8-activations", action="store_true",
                    help="serve a Q8_0 model as W8A8 (`tessera serve --int8-activations`)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="")
    ap.add_argument("--plot", default="")
    args = ap.parse_args()
    lo, hi = (int(x) for x in args.prompt_chars.split(","))
    prompts = prompt_set(args.num_prompts, lo, hi, args.seed)
    olo, ohi = (int(x) for x in args.output_len.split(","))
    rng = random.Random(args.seed + 1)
    if args.output_dist == "uniform":
        out_lens = [rng.randint(olo, ohi) for _ in prompts]
    else:
        out_lens = [min(ohi, max(olo, int(rng.expovariate(4.0 / ohi)))) for _ in prompts]
    rates = [float(r) for r in args.rates.split(",")]

    results = {"config": {k: v for k, v in vars(args).items()}, "runs": []}
    modes = [parse_mode(m, args) for m in args.modes.split(",")]
    for mode, batching, max_running, max_batch_tokens in modes:
        proc, port = start_server(args, batching, max_running, max_batch_tokens)
        try:
            # The prompts' token counts, from the server's own usage figures.
            prompt_tokens = 0
            for p in prompts:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
                conn.request("POST", "/v1/completions",
                             body=json.dumps({"prompt": p, "max_tokens": 1}),
                             headers={"Content-Type": "application/json"})
                prompt_tokens += json.loads(conn.getresponse().read())["usage"]["prompt_tokens"]
                conn.close()
            for rate in rates:
                r = run_load(port, prompts, out_lens, prompt_tokens, rate, args.concurrency,
                             args.seed + 2)
                r.update(mode=mode, batching=batching, max_running=max_running,
                         max_batch_tokens=max_batch_tokens,
                         rate=rate if rate != float("inf") else "inf")
                results["runs"].append(r)
                print(f"{mode:18s} rate {str(r['rate']):>5s}: {r['request_throughput']:6.2f} req/s "
                      f"{r['output_throughput']:8.1f} out tok/s  TTFT median "
                      f"{r['ttft_ms']['median']:8.1f} ms  TPOT median {r['tpot_ms']['median']:7.2f} ms"
                      f"  ITL p99 {r['itl_ms']['p99']:7.2f} ms", file=sys.stderr)
        finally:
            proc.terminate()
            proc.wait()
    by = {(r["mode"], str(r["rate"])): r for r in results["runs"]}
    keys = [str(rate if rate != float("inf") else "inf") for rate in rates]
    if ("continuous", keys[0]) in by and ("static", keys[0]) in by:
        results["continuous_over_static"] = [
            {"rate": k,
             "throughput_ratio": by[("continuous", k)]["output_throughput"] /
                                 by[("static", k)]["output_throughput"],
             "median_tpot_ms": {"continuous": by[("continuous", k)]["tpot_ms"]["median"],
                                "static": by[("static", k)]["tpot_ms"]["median"]}}
            for k in keys]
    # Throughput at equal or better median TPOT: against each static run, the best continuous.
    results["at_equal_tpot"] = []
    for k in keys:
        runs = [r for r in results["runs"] if str(r["rate"]) == k]
        for st in (r for r in runs if r["batching"] == "static"):
            ok = [r for r in runs if r["batching"] == "continuous"
                  and r["tpot_ms"]["median"] <= st["tpot_ms"]["median"]]
            best = max(ok, key=lambda r: r["output_throughput"], default=None)
            results["at_equal_tpot"].append({
                "rate": k, "static": st["mode"], "static_tpot_ms": st["tpot_ms"]["median"],
                "continuous": best["mode"] if best else None,
                "continuous_tpot_ms": best["tpot_ms"]["median"] if best else None,
                "throughput_ratio": best["output_throughput"] / st["output_throughput"]
                if best else None})
    text = json.dumps(results, indent=2)
    if args.out:
        with open(args.out + ".tmp", "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(args.out + ".tmp", args.out)
    print(text)
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(6, 4))
        finite = [r for r in rates if r != float("inf")]
        for mode, _, _, _ in modes:
            ys = [by[(mode, str(r))]["output_throughput"] for r in finite]
            ax.plot(finite, ys, marker="o", label=mode)
            if float("inf") in rates:
                ax.axhline(by[(mode, "inf")]["output_throughput"], ls=":", lw=0.8,
                           color=ax.lines[-1].get_color())
        ax.set_xlabel("request rate (requests/s, Poisson)")
        ax.set_ylabel("output tokens/s")
        ax.set_title(f"tessera serve: {args.num_prompts} prompts, outputs {args.output_len.replace(',', '-')} tokens")
        ax.legend(title="batching (dotted: all at once)")
        ax.grid(alpha=0.3)
        fig.savefig(args.plot, dpi=130, bbox_inches="tight")
        print("wrote " + args.plot, file=sys.stderr)


if __name__ == "__main__":
    main()
