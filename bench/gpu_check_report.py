#!/usr/bin/env python3
"""The device check's rows and table (bench/gpu_check.sh).

Every check is one JSON line in results.jsonl:
    {"stage": "kernels", "check": "...", "status": "passed" | "failed" | "skipped" | "not run",
     "detail": "why, or the figures in words", "figures": {...}}
Only "passed" passes: a skipped test, a skipped benchmark and a stage left out for time all
count against the run. Each subcommand turns one tool's output (gtest JSON, Google Benchmark
JSON, metrics.jsonl, the GPT-2 step JSON, the serving load JSON, the checkpoint stall's JSON
lines) into rows, or renders the table.
"""

import argparse
import json
import os
import re
import sys

STATUSES = ("passed", "failed", "skipped", "not run")


def append(results, stage, check, status, detail="", figures=None):
    assert status in STATUSES, status
    row = {"stage": stage, "check": check, "status": status, "detail": detail}
    if figures:
        row["figures"] = figures
    with open(results, "a") as f:
        f.write(json.dumps(row) + "\n")
    print(f"[ {status:7s} ] {stage}: {check}" + (f" -- {detail}" if detail else ""), flush=True)


def read_rows(results):
    if not os.path.exists(results):
        return []
    rows = []
    for line in open(results):
        line = line.strip()
        if line:
            try:
                rows.append(json.loads(line))
            except ValueError:
                pass  # a line cut by a kill: the rest still counts
    return rows


def log_tail(log, lines=3):
    try:
        text = open(log, errors="replace").read().strip().splitlines()
    except OSError:
        return f"no log ({log})"
    return " | ".join(line.strip() for line in text[-lines:])[:400]


# ---- gtest ------------------------------------------------------------------------------------
def cmd_gtest(a):
    """One row for a gtest run (its --gtest_output=json file), or for the tests matching --only."""
    try:
        suites = json.load(open(a.json))["testsuites"]
    except (OSError, ValueError, KeyError):
        why = "timed out" if a.rc in (124, 137, 143) else f"exit {a.rc}, no gtest report"
        append(a.results, a.stage, a.check, "failed", f"{why}: {log_tail(a.log)}")
        return
    only = re.compile(a.only) if a.only else None
    ran, failed, skipped = 0, [], []
    for suite in suites:
        for t in suite["testsuite"]:
            name = f"{t.get('classname', suite['name'])}.{t['name']}"
            if only and not only.search(name):
                continue
            if t.get("status") == "NOTRUN":
                continue
            ran += 1
            if t.get("failures"):
                failed.append(name)
            elif t.get("result") == "SKIPPED":
                skipped.append(name)
    figures = {"tests": ran, "failed": len(failed), "skipped": len(skipped)}
    extra = ""
    if a.grep:
        found = [m.group(1).strip() for m in re.finditer(a.grep, open(a.log, errors="replace").read())]
        extra = "; ".join(found)
    if ran == 0:
        append(a.results, a.stage, a.check, "failed", f"no test ran (exit {a.rc})", figures)
    elif failed:
        append(a.results, a.stage, a.check, "failed",
               f"{len(failed)} of {ran} failed: {' '.join(failed[:6])}", figures)
    elif skipped:
        reasons = sorted(set(re.findall(r"Skipped\s*\n?(.*)", open(a.log, errors="replace").read())))
        append(a.results, a.stage, a.check, "skipped",
               f"{len(skipped)} of {ran} skipped: {' '.join(skipped[:6])} {'; '.join(reasons[:2])}",
               figures)
    elif a.rc != 0:
        append(a.results, a.stage, a.check, "failed", f"{ran} passed but exit {a.rc}", figures)
    else:
        append(a.results, a.stage, a.check, "passed",
               f"{ran} tests" + (f"; {extra}" if extra else ""), figures)


# ---- bench_gpu --------------------------------------------------------------------------------
def bench_name(b):
    return b["name"].replace("/manual_time", "")


def cmd_bench(a):
    """A row per benchmark: its rate and the fraction of the ceiling it is bound by."""
    try:
        runs = json.load(open(a.json))["benchmarks"]
    except (OSError, ValueError, KeyError):
        why = "timed out" if a.rc in (124, 137, 143) else f"exit {a.rc}, no benchmark report"
        append(a.results, a.stage, "bench_gpu", "failed", f"{why}: {log_tail(a.log)}")
        return
    runs = [b for b in runs if b.get("run_type", "iteration") == "iteration"]
    ok = {bench_name(b): b for b in runs if not b.get("error_occurred")}
    bandwidth = ok.get("BM_CopyBandwidth", {}).get("bandwidth")
    gemm = ok.get("BM_GemmBf16", {}).get("FLOPS")
    for b in runs:
        name = bench_name(b)
        if b.get("error_occurred"):
            append(a.results, a.stage, name, "skipped", b.get("error_message", "skipped"))
            continue
        if "bandwidth" in b:
            rate, ceiling, unit, scale = b["bandwidth"], bandwidth, "GB/s", 1e9
        else:
            rate, ceiling, unit, scale = b.get("FLOPS", 0.0), gemm, "TFLOP/s", 1e12
        figures = {"time": b["real_time"], "time_unit": b["time_unit"], "rate": rate, "unit": unit}
        detail = f"{b['real_time']:.3g} {b['time_unit']}, {rate / scale:.1f} {unit}"
        if ceiling and name not in ("BM_CopyBandwidth", "BM_GemmBf16"):
            figures["of_ceiling"] = rate / ceiling
            detail += f", {100 * rate / ceiling:.0f}% of the measured ceiling"
        append(a.results, a.stage, name, "passed", detail, figures)


# ---- tessera train ----------------------------------------------------------------------------
def losses(run_dir):
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    out = []
    for line in open(path):
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if "loss" in row and "step" in row:
            out.append(row["loss"])
    return out


def cmd_train(a):
    """Rows for the tessera train runs: the loss falls by a tenth; cuda fp32 starts where the CPU
    does (same weights and batch: the first loss agrees to 1e-4, summation order only)."""
    cpu = losses(os.path.join(a.work, "train_cpu_fp32"))
    for run in a.runs:
        device, precision = run.split(":")
        run_dir = os.path.join(a.work, f"train_{device}_{precision}")
        check = f"tessera train --device {device} --precision {precision} ({a.steps} steps)"
        got = losses(run_dir)
        if len(got) != a.steps:
            append(a.results, a.stage, check, "failed",
                   f"{len(got)} of {a.steps} steps logged: {log_tail(run_dir + '.log', 2)}")
            continue
        detail = f"loss {got[0]:.3f} -> {got[-1]:.3f}"
        ok = got[-1] < 0.9 * got[0]
        figures = {"first_loss": got[0], "last_loss": got[-1]}
        if device == "cuda" and precision == "fp32":
            if len(cpu) == a.steps:
                first = abs(got[0] - cpu[0])
                worst = max(abs(x - y) for x, y in zip(got, cpu))
                detail += f"; vs cpu: step 1 {first:.1e}, worst {worst:.1e}"
                figures.update(vs_cpu_first=first, vs_cpu_worst=worst)
                ok = ok and first < 1e-4
            else:
                detail += "; no complete cpu run to compare with"
                ok = False
        append(a.results, a.stage, check, "passed" if ok else "failed", detail, figures)


# ---- GPT-2 step -------------------------------------------------------------------------------
def cmd_step(a):
    try:
        step = json.load(open(a.json))
    except (OSError, ValueError):
        why = "timed out" if a.rc in (124, 137, 143) else f"exit {a.rc}"
        append(a.results, a.stage, "GPT-2 124M step vs PyTorch", "failed",
               f"{why}: {log_tail(a.log)}")
        return
    for side in ("tessera", "pytorch"):
        s = step.get(side)
        check = f"GPT-2 124M {step.get('precision', '')} step, {side}"
        if not s:
            why = step.get("failed", {}).get(side, "no result")
            append(a.results, a.stage, check, "failed", str(why)[:300])
            continue
        detail = f"{s['ms_per_step']:.1f} ms/step, {s['tokens_per_s']:.0f} tokens/s"
        if "mfu" in s:
            detail += f", MFU {100 * s['mfu']:.1f}%"
        if "of_gemm" in s:
            detail += f", {100 * s['of_gemm']:.1f}% of the GEMM rate"
        append(a.results, a.stage, check, "passed", detail, s)
    if "ratio_tessera_over_pytorch" in step:
        r = step["ratio_tessera_over_pytorch"]
        append(a.results, a.stage, "Tessera / PyTorch tokens/s", "passed",
               f"{r:.2f}x (target >= 1.3x)", {"ratio": r})


# ---- serving under load ------------------------------------------------------------------------
GOAL = "continuous >= 2x static's output tokens/s at equal or better median TPOT"


def cmd_serve(a):
    """Rows for bench/serve_load.py's JSON: one per batching mode with its figures, and the
    serving goal (docs/serving.md): against each static run, the continuous configuration of
    highest throughput whose median TPOT is no worse must give at least twice the tokens/s."""
    try:
        load = json.load(open(a.json))
    except (OSError, ValueError):
        why = "timed out" if a.rc in (124, 137, 143) else f"exit {a.rc}"
        append(a.results, a.stage, "serve load benchmark", "failed", f"{why}: {log_tail(a.log)}")
        return
    for r in load["runs"]:
        detail = (f"{r['output_throughput']:.1f} output tok/s, median TPOT "
                  f"{r['tpot_ms']['median']:.2f} ms, median TTFT {r['ttft_ms']['median']:.0f} ms, "
                  f"{r['completed']} requests in {r['duration_s']:.1f} s")
        figures = {k: r[k] for k in ("output_throughput", "tpot_ms", "ttft_ms", "itl_ms",
                                     "duration_s")}
        append(a.results, a.stage, f"serve {r['mode']}, rate {r['rate']}", "passed", detail,
               figures)
    for g in load.get("at_equal_tpot", []):
        check = f"{GOAL} (rate {g['rate']})"
        if a.no_goal:
            append(a.results, a.stage, check, "skipped", a.no_goal)
        elif g["continuous"] is None:
            append(a.results, a.stage, check, "failed",
                   f"no continuous configuration reached {g['static']}'s median TPOT of "
                   f"{g['static_tpot_ms']:.2f} ms")
        else:
            ratio = g["throughput_ratio"]
            append(a.results, a.stage, check, "passed" if ratio >= 2 else "failed",
                   f"{g['continuous']} {ratio:.2f}x {g['static']} at median TPOT "
                   f"{g['continuous_tpot_ms']:.2f} ms against {g['static_tpot_ms']:.2f} ms", g)


# ---- collectives against plain MPI --------------------------------------------------------------
def cmd_collectives(a):
    """Rows for bench_collectives' JSON at one rank count: per collective, the worst ratio of
    the Communicator's time to plain MPI's (vs_mpi, measured just before in the same run) for
    buffers up to 64 KiB (goal <= 1.5x: latency) and from 1 MiB up (goal <= 1/0.9: within 10%
    of MPI's bus bandwidth)."""
    try:
        runs = json.load(open(a.json))["benchmarks"]
    except (OSError, ValueError, KeyError):
        why = "timed out" if a.rc in (124, 137, 143) else f"exit {a.rc}"
        append(a.results, a.stage, f"bench_collectives, {a.ranks} ranks", "failed",
               f"{why}: {log_tail(a.log)}")
        return
    regimes = (("up to 64 KiB", lambda b: b <= 64 << 10, 1.5),
               ("from 1 MiB", lambda b: b >= 1 << 20, 1 / 0.9))
    for name in ("AllReduce", "ReduceScatter", "AllGather"):
        rows = [b for b in runs if b["name"].startswith(f"BM_{name}/") and "vs_mpi" in b]
        for label, within, goal in regimes:
            check = f"{name}, {a.ranks} ranks, {label}: <= {goal:.2f}x plain MPI's time"
            sel = [b for b in rows if within(int(b["name"].split("/")[1]))]
            if not sel:
                append(a.results, a.stage, check, "failed", "no row with vs_mpi in the JSON")
                continue
            worst = max(sel, key=lambda b: b["vs_mpi"])
            detail = (f"worst {worst['vs_mpi']:.2f}x at {worst['name'].split('/')[1]} B; "
                      + ", ".join(f"{b['name'].split('/')[1]} B {b['vs_mpi']:.2f}x" for b in sel))
            figures = {b["name"].split("/")[1]: b["vs_mpi"] for b in sel}
            if a.no_goal:
                append(a.results, a.stage, check, "skipped", f"{a.no_goal}; {detail}", figures)
            else:
                append(a.results, a.stage, check, "passed" if worst["vs_mpi"] <= goal else "failed",
                       detail, figures)


# ---- checkpoint stall -------------------------------------------------------------------------
def cmd_checkpoint(a):
    """Rows for bench/checkpoint_stall.sh's JSON lines: per snapshot mode, the loop's own stall
    per save and the wall-clock cost per save, each amortised over the save interval; the goal
    (the resilience issue) is at most 1% of the interval's time, wall-clock included."""
    try:
        modes = [json.loads(line) for line in open(a.json) if line.strip()]
    except (OSError, ValueError):
        modes = []
    if not modes:
        why = "timed out" if a.rc in (124, 137, 143) else f"exit {a.rc}"
        append(a.results, a.stage, "checkpoint stall", "failed", f"{why}: {log_tail(a.log)}")
        return
    for m in modes:
        check = (f"checkpoint stall, {m['mode']}, dp {m['dp']}, {m['device']}: <= 1% of "
                 f"{m['interval']} steps")
        detail = (f"direct {m['direct_ms']:.1f} ms a save ({m['direct_share']:.2f}%), wall "
                  f"{1000 * m['wall_per_save_s']:.0f} ms a save ({m['wall_share']:.2f}%), step "
                  f"{m['step_ms']:.0f} ms, extra {m['extra_mb']:.0f} MB")
        worst = max(m["direct_share"], m["wall_share"])
        if a.no_goal:
            append(a.results, a.stage, check, "skipped", f"{a.no_goal}; {detail}", m)
        else:
            append(a.results, a.stage, check, "passed" if worst <= 1.0 else "failed", detail, m)


# ---- the table --------------------------------------------------------------------------------
def cmd_table(a):
    rows = read_rows(a.results)
    lines = []
    if a.title:
        lines.append(a.title)
    if a.machine and os.path.exists(a.machine):
        lines += [line.rstrip() for line in open(a.machine) if line.strip()][:8]
    lines.append("")
    width = max([len(r["check"]) for r in rows] + [20])
    width = min(width, 56)
    sw = max([len(r["stage"]) for r in rows] + [8])
    lines.append(f"{'stage':{sw}s} {'check':{width}s} {'result':8s} detail")
    for r in rows:
        lines.append(f"{r['stage']:{sw}s} {r['check'][:width]:{width}s} {r['status']:8s} {r['detail']}")
    counts = {s: sum(r["status"] == s for r in rows) for s in STATUSES}
    lines.append("")
    lines.append(", ".join(f"{n} {s}" for s, n in counts.items()) + f" of {len(rows)} rows")
    if a.seconds and os.path.exists(a.seconds):
        spent = [line.split() for line in open(a.seconds) if line.strip()]
        lines.append("seconds per stage: " + ", ".join(f"{n} {t}" for n, t in spent))
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)


# ---- rehearsal verdicts -----------------------------------------------------------------------
def cmd_verdicts(a):
    """Compares every row with the expected status of its stage (STAGE=STATUS, or
    STAGE/CHECK-REGEX=STATUS, the first match winning); exit 1 on a difference."""
    rules = []
    for spec in a.expect:
        key, status = spec.rsplit("=", 1)
        stage, _, pattern = key.partition("/")
        rules.append((stage, re.compile(pattern) if pattern else None, status))
    bad = 0
    rows = read_rows(a.results)
    for r in rows:
        want = next((s for st, p, s in rules
                     if st == r["stage"] and (p is None or p.search(r["check"]))), "passed")
        if r["status"] != want:
            bad += 1
            print(f"rehearsal: {r['stage']}: {r['check']}: {r['status']}, expected {want}"
                  f" ({r['detail']})")
    stages = {r["stage"] for r in rows}
    for stage in a.stages:
        if stage not in stages:
            bad += 1
            print(f"rehearsal: stage {stage} left no row")
    print(f"rehearsal: {len(rows)} rows, {bad} not as expected")
    sys.exit(1 if bad else 0)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)

    r = sub.add_parser("row")
    r.add_argument("results"), r.add_argument("stage"), r.add_argument("check")
    r.add_argument("status", choices=STATUSES), r.add_argument("detail", nargs="?", default="")

    g = sub.add_parser("gtest")
    g.add_argument("results"), g.add_argument("stage"), g.add_argument("check")
    g.add_argument("json"), g.add_argument("log"), g.add_argument("rc", type=int)
    g.add_argument("--only", help="count only tests whose Suite.Name matches this regex")
    g.add_argument("--grep", help="a regex whose group 1 in the log goes into the detail")

    def tool(name, goal=False):
        """A subcommand over one tool's output: results stage json log rc [--no-goal WHY]."""
        q = sub.add_parser(name)
        q.add_argument("results"), q.add_argument("stage"), q.add_argument("json")
        q.add_argument("log"), q.add_argument("rc", type=int)
        if goal:
            q.add_argument("--no-goal", default="",
                           help="report the goals as skipped, with this reason")
        return q

    tool("bench")

    t = sub.add_parser("train")
    t.add_argument("results"), t.add_argument("stage"), t.add_argument("work")
    t.add_argument("steps", type=int), t.add_argument("runs", nargs="+")

    tool("step")
    tool("serve", goal=True)
    tool("collectives", goal=True).add_argument("ranks", type=int)
    tool("checkpoint", goal=True)

    tb = sub.add_parser("table")
    tb.add_argument("results"), tb.add_argument("--machine"), tb.add_argument("--title")
    tb.add_argument("--seconds", help="stage_seconds.tsv: each stage's wall seconds")

    v = sub.add_parser("verdicts")
    v.add_argument("results"), v.add_argument("--expect", nargs="*", default=[])
    v.add_argument("--stages", nargs="*", default=[])

    a = p.parse_args()
    {"row": lambda: append(a.results, a.stage, a.check, a.status, a.detail),
     "gtest": lambda: cmd_gtest(a), "bench": lambda: cmd_bench(a), "train": lambda: cmd_train(a),
     "step": lambda: cmd_step(a), "serve": lambda: cmd_serve(a),
     "collectives": lambda: cmd_collectives(a), "checkpoint": lambda: cmd_checkpoint(a),
     "table": lambda: cmd_table(a), "verdicts": lambda: cmd_verdicts(a)}[a.cmd]()


if __name__ == "__main__":
    main()
