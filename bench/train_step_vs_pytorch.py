#!/usr/bin/env python3
"""GPT-2 124M training step, Tessera next to plain PyTorch (eager), in one invocation.

Runs bench_train_step (Google Benchmark, JSON output) and bench/pytorch_gpt2.py on the same
work: gpt2-d12 (vocabulary padded to 50304), the same batch, precision and optimizer.
  --device cpu (default): B=4, T=64, fp32, the same thread count; both against llm.c's CPU
      reference trainer (its quoted ~62 tokens/s, 4.1 s/step, on this workload).
  --device cuda: B=8, T=1024, bf16 (Tessera: bf16 weights and activations, fp32 master
      weights; PyTorch: autocast bf16, fp32 weights, fused AdamW), MFU against --peak-tflops
      (default 989, the H200 SXM's dense bf16 rate) and, with --gemm-tflops, against a measured
      cuBLASLt bf16 GEMM rate (bench/gpu_check.sh passes bench_gpu's).
The two alternate for a few rounds (Tessera first in odd rounds, PyTorch first in even ones),
because a shared machine drifts; each side's figure is its median over the rounds. It prints
ms/step, tokens/s, the FLOP rate (nanoGPT's 6N + 12*L*C*T FLOPs per token, N without wpe) and
peak memory for both, and the ratio Tessera/PyTorch, with the load averages.

Usage: bench/train_step_vs_pytorch.py [--binary build/bench/bench_train_step]
           [--device cpu|cuda] [--precision fp32|bf16] [--batch B] [--seq T]
           [--threads 2] [--rounds 3] [--tessera-min-time 4] [--torch-steps 4]
           [--peak-tflops 989] [--gemm-tflops X] [--json out]
Exit status: 0; 2 without PyTorch (Tessera alone); 1 when a side fails.
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
# Per device: batch, sequence, precision.
DEFAULTS = {"cpu": (4, 64, "fp32"), "cuda": (8, 1024, "bf16")}


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


class SideFailed(Exception):
    """One side's run failed; the other side still runs."""


def run(cmd, threads, what):
    """Runs cmd and returns its stdout; raises SideFailed with the end of its stderr."""
    done = subprocess.run(cmd, env=env_with_threads(threads), capture_output=True, text=True)
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        sys.stderr.write(f"{' '.join(cmd)}\n{done.stderr[-3000:]}")
        raise SideFailed(f"{what} exit {done.returncode}: {lines[-1] if lines else ''}")
    return done.stdout


def run_tessera(binary, a):
    cmd = [binary, "--benchmark_filter=^BM_TrainStep/", "--benchmark_format=json",
           f"--benchmark_min_time={a.tessera_min_time}", f"--device={a.device}",
           f"--precision={a.precision}", f"--batch={a.batch}", f"--seq={a.seq}"]
    if a.device == "cuda":
        cmd.append(f"--peak-tflops={a.peak_tflops}")
        if a.gemm_tflops:
            cmd.append(f"--gemm-tflops={a.gemm_tflops}")
    out = run(cmd, a.threads, "bench_train_step")
    try:
        bench = json.loads(out)["benchmarks"][0]
        if bench.get("error_occurred"):
            raise SideFailed(f"bench_train_step failed: {bench.get('error_message')}")
        scale = {"ms": 1.0, "us": 1e-3, "ns": 1e-6, "s": 1e3}[bench["time_unit"]]
        r = {"ms_per_step": bench["real_time"] * scale, "tokens_per_s": bench["tokens/s"],
             "gflops_per_s": bench["FLOPS"] / 1e9, "peak_rss_mib": bench["peak_rss_MiB"],
             "loss": bench["loss"], "threads": int(bench["threads"]),
             "iterations": int(bench["iterations"])}
    except (ValueError, KeyError, IndexError) as e:
        raise SideFailed(f"bench_train_step printed no usable result ({e!r}): {out[-500:]}")
    for key, ours in (("mfu", "mfu"), ("of_gemm", "of_gemm"),
                      ("peak_device_mib", "peak_device_MiB")):
        if ours in bench:
            r[key] = bench[ours]
    return r


def run_torch(a):
    cmd = [sys.executable, os.path.join(HERE, "pytorch_gpt2.py"), "--threads", str(a.threads),
           "--steps", str(a.torch_steps), "--device", a.device, "--dtype", a.precision,
           "--batch", str(a.batch), "--seq", str(a.seq), "--peak-tflops", str(a.peak_tflops)]
    out = run(cmd, a.threads, "pytorch_gpt2.py")
    try:
        r = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError) as e:
        raise SideFailed(f"pytorch_gpt2.py printed no usable result ({e!r}): {out[-500:]}")
    if a.gemm_tflops:
        r["of_gemm"] = r["gflops_per_s"] / 1e3 / a.gemm_tflops
    return r


def summarize(runs):
    keys = [k for k in ("ms_per_step", "tokens_per_s", "gflops_per_s", "mfu", "of_gemm")
            if k in runs[0]]
    s = {k: statistics.median(r[k] for r in runs) for k in keys}
    s["peak_rss_mib"] = max(r["peak_rss_mib"] for r in runs)
    if "peak_device_mib" in runs[0]:
        s["peak_device_mib"] = max(r["peak_device_mib"] for r in runs)
    s["tokens_per_s_all"] = [round(r["tokens_per_s"], 1) for r in runs]
    s["loss"] = runs[-1]["loss"]
    return s


def print_table(a, rows):
    cuda = a.device == "cuda"
    print(f"GPT-2 124M training step, B={a.batch} T={a.seq} {a.precision} AdamW on {a.device}"
          + ("" if cuda else f", {a.threads} threads") + f", median of {a.rounds} rounds")
    if cuda:
        print(f"{'':30} {'ms/step':>9} {'tokens/s':>9} {'TFLOP/s':>8} {'MFU':>6} {'of GEMM':>8} "
              f"{'device mem':>11}")
        for name, s in rows:
            gemm = f"{100 * s['of_gemm']:7.1f}%" if "of_gemm" in s else f"{'-':>8}"
            mem = s.get("peak_device_mib", 0) / 1024
            print(f"{name:30} {s['ms_per_step']:9.1f} {s['tokens_per_s']:9.0f} "
                  f"{s['gflops_per_s'] / 1e3:8.1f} {100 * s.get('mfu', 0):5.1f}% {gemm} "
                  f"{mem:7.2f} GiB")
        print(f"MFU against {a.peak_tflops:g} TFLOP/s"
              + (f"; 'of GEMM' against the measured {a.gemm_tflops:g} TFLOP/s"
                 if a.gemm_tflops else ""))
        return
    print(f"{'':30} {'ms/step':>9} {'tokens/s':>9} {'GFLOP/s':>8} {'peak RSS':>10} "
          f"{'x llm.c':>8}")
    for name, s in rows:
        print(f"{name:30} {s['ms_per_step']:9.1f} {s['tokens_per_s']:9.1f} "
              f"{s['gflops_per_s']:8.1f} {s['peak_rss_mib'] / 1024:6.2f} GiB "
              f"{s['tokens_per_s'] / LLMC_TOKENS_PER_S:7.2f}x")
    if (a.batch, a.seq, a.precision) == DEFAULTS["cpu"]:
        print(f"{'llm.c CPU reference (quoted)':30} "
              f"{a.batch * a.seq / LLMC_TOKENS_PER_S * 1e3:9.1f} {LLMC_TOKENS_PER_S:9.1f} "
              f"{'':8} {'':10} {1.0:7.2f}x")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--binary", help="bench_train_step executable (default: build*/bench/)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--precision", choices=("fp32", "bf16"),
                   help="default: fp32 on cpu, bf16 on cuda")
    p.add_argument("--batch", type=int, help="default: 4 on cpu, 8 on cuda")
    p.add_argument("--seq", type=int, help="default: 64 on cpu, 1024 on cuda")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--tessera-min-time", type=float, default=4.0,
                   help="seconds of timed steps per Tessera round (Google Benchmark min time)")
    p.add_argument("--torch-steps", type=int, default=4, help="timed PyTorch steps per round")
    p.add_argument("--peak-tflops", type=float, default=989.0,
                   help="cuda: the peak for MFU (default: H200 SXM dense bf16)")
    p.add_argument("--gemm-tflops", type=float, default=0.0,
                   help="cuda: a measured bf16 GEMM rate, for the 'of GEMM' column")
    p.add_argument("--json", help="also write the results to this file")
    a = p.parse_args()
    batch, seq, precision = DEFAULTS[a.device]
    a.batch = a.batch or batch
    a.seq = a.seq or seq
    a.precision = a.precision or precision

    binary = find_binary(a.binary)
    have_torch = torch_available()
    if not have_torch:
        print("PyTorch is not installed for " + sys.executable + " (pip install torch): "
              "running Tessera alone, without the side-by-side ratio.", file=sys.stderr)

    load_before = os.getloadavg()
    runs = {"tessera": [], "pytorch": []}
    sides = {"tessera": lambda: run_tessera(binary, a), "pytorch": lambda: run_torch(a)}
    if not have_torch:
        del sides["pytorch"]
    failed = {}  # side -> error; a side that failed once is not run again
    for r in range(a.rounds):
        order = ["tessera", "pytorch"] if r % 2 == 0 else ["pytorch", "tessera"]
        for side in order:
            if side not in sides or side in failed:
                continue
            try:
                runs[side].append(sides[side]())
            except SideFailed as e:
                failed[side] = str(e)
                continue
            print(f"round {r + 1}: {side} {runs[side][-1]['tokens_per_s']:.1f} tokens/s",
                  file=sys.stderr)
    load_after = os.getloadavg()
    tessera_runs, torch_runs = runs["tessera"], runs["pytorch"]

    results = {"device": a.device, "precision": a.precision, "batch": a.batch, "seq": a.seq,
               "threads": a.threads, "rounds": a.rounds, "peak_tflops": a.peak_tflops,
               "gemm_tflops": a.gemm_tflops, "failed": failed,
               "load_before": load_before, "load_after": load_after}
    rows = []
    if tessera_runs:
        results["tessera"] = summarize(tessera_runs)
        rows.append(("Tessera", results["tessera"]))
    if torch_runs:
        results["pytorch"] = summarize(torch_runs)
        results["pytorch"]["torch"] = torch_runs[0].get("torch")
        results["pytorch"]["adamw"] = torch_runs[0].get("adamw")
        rows.append((f"PyTorch {torch_runs[0].get('torch', '')} eager", results["pytorch"]))

    if rows:
        print_table(a, rows)
    for side, error in failed.items():
        print(f"{side}: FAILED: {error}")
    if tessera_runs and torch_runs:
        ratio = results["tessera"]["tokens_per_s"] / results["pytorch"]["tokens_per_s"]
        per_round = [t["tokens_per_s"] / q["tokens_per_s"]
                     for t, q in zip(tessera_runs, torch_runs)]
        results["ratio_tessera_over_pytorch"] = ratio
        results["ratio_per_round"] = per_round
        print(f"Tessera / PyTorch tokens/s: {ratio:.2f}x (per round: "
              + ", ".join(f"{x:.2f}" for x in per_round) + ")")
    if rows:
        print("tokens/s per round: " + ", ".join(
            f"{side} {[round(r['tokens_per_s'], 1) for r in runs[side]]}" for side in runs
            if runs[side]))
    print("load average (1, 5, 15 min): before " + " ".join(f"{x:.2f}" for x in load_before)
          + ", after " + " ".join(f"{x:.2f}" for x in load_after))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=2)
    if failed:
        return 1
    return 0 if have_torch else 2


if __name__ == "__main__":
    sys.exit(main())
