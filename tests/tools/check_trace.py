#!/usr/bin/env python3
"""check_trace.py RUN_DIR MICROBATCHES: checks the traces `tessera train --trace-steps` wrote.

- every file (RUN_DIR/trace/rank_N.json and the merged one) follows the trace event format:
  an object with a "traceEvents" array of "X" events (name, ts, dur >= 0, pid, tid, integers
  and numbers where the format wants them) and "M" metadata events (process_name,
  process_sort_index, thread_name);
- per rank and traced step, the step track's spans inside "step N" add up to its duration
  within 1%, and that duration equals the step's measured time in metrics.jsonl (data_ms +
  step_ms of that rank) within 1%;
- the pipeline track holds a forward and a backward of every micro-batch per step, and the
  communication track collectives labelled with their group and sequence number.
Exit status 0 when all hold; otherwise a line per failure and 1.
"""
import glob
import json
import re
import sys

failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg)


def check_format(path, trace):
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        fail(f"{path}: no traceEvents array")
        return []
    spans = []
    for i, e in enumerate(trace["traceEvents"]):
        ph = e.get("ph")
        where = f"{path} event {i}"
        if ph == "M":
            if e.get("name") not in ("process_name", "process_sort_index", "thread_name"):
                fail(f"{where}: metadata {e.get('name')!r}")
            if not isinstance(e.get("pid"), int) or not isinstance(e.get("args"), dict):
                fail(f"{where}: metadata without an integer pid and args")
        elif ph == "X":
            ok = (isinstance(e.get("name"), str) and isinstance(e.get("pid"), int)
                  and isinstance(e.get("tid"), int) and isinstance(e.get("ts"), (int, float))
                  and isinstance(e.get("dur"), (int, float)) and e["dur"] >= 0)
            if not ok:
                fail(f"{where}: not a complete event: {e}")
            spans.append(e)
        else:
            fail(f"{where}: phase {ph!r}")
    return spans


def main():
    run_dir, micro = sys.argv[1], int(sys.argv[2])
    with open(f"{run_dir}/metrics.jsonl") as f:
        metrics = {j["step"]: j for j in (json.loads(l) for l in f if l.strip())}
    files = sorted(glob.glob(f"{run_dir}/trace/rank_*.json"))
    if not files:
        fail("no rank_N.json")
    for path in files + [f"{run_dir}/trace/merged.json"]:
        with open(path) as f:
            check_format(path, json.load(f))
    checked = 0
    for path in files:
        rank = int(re.search(r"rank_(\d+)\.json$", path).group(1))
        with open(path) as f:
            spans = check_format(path, json.load(f))
        steps = [s for s in spans if s["tid"] == 0 and s["name"].startswith("step ")]
        if not steps:
            fail(f"rank {rank}: no step span")
        for st in steps:
            n = int(st["name"].split()[1])
            begin, end = st["ts"], st["ts"] + st["dur"]
            inside = [s for s in spans if s is not st and begin <= s["ts"] and s["ts"] + s["dur"] <= end + 1]
            parts = sum(s["dur"] for s in inside if s["tid"] == 0)
            # 1%: the spans are read from one clock back to back; what they leave out is the
            # few clock reads and calls between them (microseconds of a millisecond step).
            if abs(parts - st["dur"]) > 0.01 * st["dur"]:
                fail(f"rank {rank} step {n}: step-track spans sum to {parts} us, the step took {st['dur']} us")
            phases = metrics[n]["phases"] if rank == 0 else metrics[n]["ranks"][rank]["phases"]
            measured_us = 1e3 * (phases["data_ms"] + phases["step_ms"])
            if abs(measured_us - st["dur"]) > 0.01 * measured_us + 2:
                fail(f"rank {rank} step {n}: the span is {st['dur']} us, metrics.jsonl says {measured_us:.0f} us")
            fwd = [s for s in inside if s["tid"] == 1 and s["name"].startswith("forward m")]
            bwd = [s for s in inside if s["tid"] == 1 and s["name"].startswith("backward m")]
            if len(fwd) != micro or len(bwd) != micro:
                fail(f"rank {rank} step {n}: {len(fwd)} forwards and {len(bwd)} backwards, not {micro} each")
            comm = [s for s in inside if s["tid"] == 2]
            if not comm or not all(re.match(r"^[a-z_]+ [a-z_.]+ #\d+$", s["name"]) for s in comm):
                fail(f"rank {rank} step {n}: collectives missing or unlabelled: {[s['name'] for s in comm][:4]}")
            checked += 1
    print(f"check_trace: {len(files)} ranks, {checked} rank-steps checked, {len(failures)} failures")
    return 1 if failures or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
