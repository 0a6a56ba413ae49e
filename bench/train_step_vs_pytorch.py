#!/usr/bin/env python3
"""GPT-2 124M training step, Tessera next to plain PyTorch (eager), in one invocation.

Runs bench_train_step (Google Benchmark, JSON output) and bench/pytorch_gpt2.py on the same
work: gpt2-d12 (vocabulary padded to 50304), B=4, T=64, fp32, AdamW, the same thread count.
The two alternate for a few rounds (Tessera first in odd rounds, PyTorch first in even ones),
because a shared machine drifts; each side's figure is its median over the rounds. It prints
ms/step, tokens/s, GFLOP/s (nanoGPT's 6N + 12*L*C*T FLOPs per token, N without wpe) and peak
RSS for both, the ratio Tessera/PyTorch, and both against llm.c's CPU reference trainer
(its quoted ~62 tokens/s, 4.1 s/step, on this workload), with the load averages.

Usage: bench/train_step_vs_pytorch.py [--binary build/bench/bench_train_step]
           [--threads 2] [--rounds 3] [--tessera-min-time 4] [--torch-steps 4] [--json out]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
LLMC_TOKENS_PER_S = 62.0  # llm.c train_gpt2.c on CPU, B=4 T=64: about 4.1 s/step
TOKENS_PER_STEP = 4 * 64


def find_binary(path):
    if path:
        return path
    for build in ("build", "build-perf", "build-release"):
        candidate = os.path.join(ROOT, build, "bench", "bench_train_step")
        if os.path.exists(candidate):
            return candidate
    sys.exit("bench_train_step not found: build it (cmake -DTESSERA_BUILD_BENCHMARKS=ON, "
             "ninja bench_train_step) or pass --binary")


def torch_available():
    try:
        import torch  # noqa: F401
        return True
    except ImportError:
        return False


def env_with_threads(threads):
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(threads)
    env["MKL_NUM_THREADS"] = str(threads)
    return env


def run_tessera(binary, threads, min_time):
    cmd = [binary, "--benchmark_filter=^BM_TrainStep/", "--benchmark_format=json",
           f"--benchmark_min_time={min_time}"]
    out = subprocess.run(cmd, env=env_with_threads(threads), check=True, capture_output=True,
                         text=True).stdout
    bench = json.loads(out)["benchmarks"][0]
    if bench.get("error_occurred"):
        sys.exit(f"bench_train_step failed: {bench.get('error_message')}")
    scale = {"ms": 1.0, "us": 1e-3, "ns": 1e-6, "s": 1e3}[bench["time_unit"]]
    return {"ms_per_step": bench["real_time"] * scale, "tokens_per_s": bench["tokens/s"],
            "gflops_per_s": bench["FLOPS"] / 1e9, "peak_rss_mib": bench["peak_rss_MiB"],
            "loss": bench["loss"], "threads": int(bench["threads"]),
            "iterations": int(bench["iterations"])}


def run_torch(threads, steps):
    cmd = [sys.executable, os.path.join(HERE, "pytorch_gpt2.py"), "--threads", str(threads),
           "--steps", str(steps)]
    out = subprocess.run(cmd, env=env_with_threads(threads), check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def summarize(runs):
    keys = ("ms_per_step", "tokens_per_s", "gflops_per_s")
    s = {k: statistics.median(r[k] for r in runs) for k in keys}
    s["peak_rss_mib"] = max(r["peak_rss_mib"] for r in runs)
    s["tokens_per_s_all"] = [round(r["tokens_per_s"], 1) for r in runs]
    return s


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--binary", help="bench_train_step executable (default: build*/bench/)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--tessera-min-time", type=float, default=4.0,
                   help="seconds of timed steps per Tessera round (Google Benchmark min time)")
    p.add_argument("--torch-steps", type=int, default=4, help="timed PyTorch steps per round")
    p.add_argument("--json", help="also write the results to this file")
    a = p.parse_args()

    binary = find_binary(a.binary)
    have_torch = torch_available()
    if not have_torch:
        print("PyTorch is not installed for " + sys.executable + " (pip install torch): "
              "running Tessera alone, without the side-by-side ratio.", file=sys.stderr)

    load_before = os.getloadavg()
    tessera_runs, torch_runs = [], []
    for r in range(a.rounds):
        order = ["tessera", "torch"] if r % 2 == 0 else ["torch", "tessera"]
        for side in order:
            if side == "tessera":
                tessera_runs.append(run_tessera(binary, a.threads, a.tessera_min_time))
                print(f"round {r + 1}: tessera {tessera_runs[-1]['tokens_per_s']:.1f} tokens/s",
                      file=sys.stderr)
            elif have_torch:
                torch_runs.append(run_torch(a.threads, a.torch_steps))
                print(f"round {r + 1}: pytorch {torch_runs[-1]['tokens_per_s']:.1f} tokens/s",
                      file=sys.stderr)
    load_after = os.getloadavg()

    results = {"threads": a.threads, "rounds": a.rounds, "tessera": summarize(tessera_runs),
               "load_before": load_before, "load_after": load_after}
    rows = [("Tessera", results["tessera"])]
    if torch_runs:
        results["pytorch"] = summarize(torch_runs)
        results["pytorch"]["torch"] = torch_runs[0].get("torch")
        rows.append((f"PyTorch {torch_runs[0].get('torch', '')} eager", results["pytorch"]))

    print(f"GPT-2 124M training step, B=4 T=64 fp32 AdamW, {a.threads} threads, "
          f"median of {a.rounds} rounds")
    print(f"{'':30} {'ms/step':>9} {'tokens/s':>9} {'GFLOP/s':>8} {'peak RSS':>10} "
          f"{'x llm.c':>8}")
    for name, s in rows:
        print(f"{name:30} {s['ms_per_step']:9.1f} {s['tokens_per_s']:9.1f} "
              f"{s['gflops_per_s']:8.1f} {s['peak_rss_mib'] / 1024:6.2f} GiB "
              f"{s['tokens_per_s'] / LLMC_TOKENS_PER_S:7.2f}x")
    print(f"{'llm.c CPU reference (quoted)':30} {TOKENS_PER_STEP / LLMC_TOKENS_PER_S * 1e3:9.1f} "
          f"{LLMC_TOKENS_PER_S:9.1f} {'':8} {'':10} {1.0:7.2f}x")
    if torch_runs:
        ratio = results["tessera"]["tokens_per_s"] / results["pytorch"]["tokens_per_s"]
        per_round = [t["tokens_per_s"] / q["tokens_per_s"] for t, q in zip(tessera_runs, torch_runs)]
        results["ratio_tessera_over_pytorch"] = ratio
        results["ratio_per_round"] = per_round
        print(f"Tessera / PyTorch tokens/s: {ratio:.2f}x (per round: "
              + ", ".join(f"{x:.2f}" for x in per_round) + ")")
    print("tokens/s per round: tessera " + str(results["tessera"]["tokens_per_s_all"])
          + (", pytorch " + str(results["pytorch"]["tokens_per_s_all"]) if torch_runs else ""))
    print("load average (1, 5, 15 min): before " + " ".join(f"{x:.2f}" for x in load_before)
          + ", after " + " ".join(f"{x:.2f}" for x in load_after))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0 if have_torch else 2


if __name__ == "__main__":
    sys.exit(main())
