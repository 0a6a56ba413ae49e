#!/usr/bin/env python3
"""Reads a run's TensorBoard event files with the tensorboard package's own reader and checks
every scalar against the run's metrics.jsonl, exactly (each value rounded to float32, as
Summary.Value.simple_value holds it).

    pip install tensorboard        # not needed by the build or the test suite
    tools/tensorboard_readback.py RUN_DIR [TB_DIR]    # TB_DIR defaults to RUN_DIR/tb

EventAccumulator is what `tensorboard --logdir` loads scalars with. Its record reader checks
both masked CRC-32Cs of every record, and the accumulator purges the points a resumed run redid
(Tessera writes a SessionLog START at the first step a resumed run redoes), so each step must
appear exactly once.
Exit status 0 when every tag of every step matches, 1 otherwise.
"""
import json
import struct
import sys

from tensorboard.backend.event_processing import event_accumulator

# The tag of each metrics.jsonl key (train/metrics.cpp, StepMetrics::scalars).
TAGS = {
    "loss/train": "loss",
    "loss/val": "val_loss",
    "optim/lr": "lr",
    "optim/grad_norm": "grad_norm",
    "perf/step_ms": "ms",
    "perf/tokens_per_s": "tokens_per_s",
    "perf/mfu": "mfu",
    "memory/live_bytes": "live_bytes",
    "memory/peak_bytes": "peak_bytes",
    "memory/rss_bytes": "rss_bytes",
    "checkpoint/snapshot_wait_ms": "snapshot_wait_ms",
    "fp16/loss_scale": "loss_scale",
    "fp16/skipped_steps": "skipped_steps",
    "parallel/bubble": "bubble",
}


def as_float32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def expected_of(line, tag):
    if tag in TAGS:
        return line.get(TAGS[tag])
    if tag.startswith("phase/"):  # metrics.jsonl's "phases" object
        return line.get("phases", {}).get(tag[len("phase/"):])
    parts = tag.split("/")  # parallel/rankN/<key>
    if len(parts) == 3 and parts[0] == "parallel" and parts[1].startswith("rank"):
        ranks = line.get("ranks", [])
        r = int(parts[1][4:])
        return ranks[r].get(parts[2]) if r < len(ranks) else None
    return None


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    run_dir = sys.argv[1]
    tb_dir = sys.argv[2] if len(sys.argv) == 3 else run_dir + "/tb"
    with open(run_dir + "/metrics.jsonl") as f:
        lines = {j["step"]: j for j in (json.loads(l) for l in f if l.strip())}

    acc = event_accumulator.EventAccumulator(tb_dir, size_guidance={"scalars": 0}, purge_orphaned_data=True)
    acc.Reload()
    tags = acc.Tags()["scalars"]
    compared = mismatches = 0
    for tag in sorted(tags):
        points = acc.Scalars(tag)
        steps = [p.step for p in points]
        if len(steps) != len(set(steps)):
            print(f"{tag}: a step appears more than once: {steps}")
            mismatches += 1
        for p in points:
            want = expected_of(lines.get(p.step, {}), tag)
            if want is None:
                print(f"{tag} step {p.step}: not in metrics.jsonl")
                mismatches += 1
                continue
            compared += 1
            if p.value != as_float32(want):
                print(f"{tag} step {p.step}: event file {p.value!r}, metrics.jsonl {want!r}")
                mismatches += 1
    train_steps = sorted(p.step for p in acc.Scalars("loss/train")) if "loss/train" in tags else []
    if train_steps != sorted(lines):
        print(f"loss/train has steps {train_steps}, metrics.jsonl {sorted(lines)}")
        mismatches += 1
    print(f"tensorboard_readback: {len(tags)} tags, {len(train_steps)} steps, {compared} scalars "
          f"compared, {mismatches} mismatches")
    return 0 if mismatches == 0 and compared > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
