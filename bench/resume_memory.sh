#!/usr/bin/env bash
# What resuming costs each rank in memory, on the 57.0M-parameter GPT of checkpoint_stall.sh
# (684 MB of fp32 weights and AdamW moments) at dp2 (DP=1: one process, ZeRO 0) under mpiexec.
# Two steps write a checkpoint, in each format (their peaks are printed too); then each rank's peak resident
# memory (VmHWM, /usr/bin/time's %M) and the bytes it read (rchar: every read() and pread(),
# page cache or disk) are measured for a run that resumes it and stops before any step
# (--max-steps 2): the two resumes differ only in how the state is read.
#
#   sharded    every rank reads only what it holds (the default format; ParallelTrainer::
#              load_checkpoint_set)
#   gathered   the single-process checkpoint, whose two files are checked (rank 0
#              checksums the model file, rank 1 the optimizer's) and then read by range, each
#              rank only what it holds (ParallelTrainer::load_checkpoint_source)
# The ranks share the checksums of either format (nn::ChecksumShare): before, every rank
# checksummed every file, reading the whole checkpoint on top of its own part.
# Not part of CI (about a minute on 2 cores).
# Usage: [DP=n] bench/resume_memory.sh [zero stage]      (default 1; DP 2; a batch of max(2, DP))
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${TESSERA_BIN:-$PWD/build/tools/tessera}
zero=${1:-1}
dp=${DP:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1
source tests/tools/tiny_corpus.sh
tiny_corpus "$BIN" "$work/corpus"
model='{"n_layer": 8, "n_head": 12, "n_kv_head": 12, "n_embd": 768, "block_size": 64}'

# /usr/bin/time cannot name a file per rank; run each rank's measure through a wrapper instead.
# The kernel adds a reaped child's I/O counters to its parent's, so the wrapper's own
# /proc/PID/io after the command holds the command's reads (and the wrapper's few).
cat >"$work/measured.sh" <<'SH'
#!/usr/bin/env bash
out="$1"; shift
/usr/bin/time -f "%M" -o "$out.${PMI_RANK:-0}" "$@" || exit
awk '/^rchar:/ { print $2 }' "/proc/$$/io" >"$out.read.${PMI_RANK:-0}"
SH
chmod +x "$work/measured.sh"
peak() {  # peak <label> <run dir> <max steps> <flags...>
  local label=$1 run=$2 steps=$3
  shift 3
  rm -f "$work"/peak.*
  mpiexec -n "$dp" "$work/measured.sh" "$work/peak" \
    "$BIN" train --train-data "$work/corpus/data/data_train_*.bin" --model "$model" \
    --batch-size $((dp > 2 ? dp : 2)) --seq-len 64 --threads 1 --dp "$dp" --zero "$zero" --max-steps "$steps" \
    --checkpoint-every 2 --sample-tokens 0 --run-dir "$run" "$@" >"$work/log" 2>&1 ||
    { cat "$work/log"; exit 1; }
  printf '%-34s' "$label"
  for ((r = 0; r < dp; ++r)); do
    awk '{ printf "  rank %s %7.0f MB", r, $1 / 1024 }' r="$r" "$work/peak.$r"
    awk '{ printf ", read %6.0f MB", $1 / 1e6 }' "$work/peak.read.$r"
  done
  echo "$(grep -o "resuming from .*" "$work/log" | sed "s|.*/checkpoints/|   resumed |" || true)"
}

echo "dp$dp, ZeRO-$zero, 57.0M parameters; peak resident memory and bytes read per rank"

peak "two steps, sharded save" "$work/sharded" 2
peak "two steps, gathered save" "$work/gathered" 2 --checkpoint-format gathered
peak "resume sharded, no step" "$work/sharded" 2
peak "resume gathered, no step" "$work/gathered" 2 --checkpoint-format gathered
