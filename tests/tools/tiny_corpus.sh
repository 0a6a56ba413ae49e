# Sourced by the CLI test scripts: tiny_corpus <tessera> <dir> makes <dir> afresh and writes a
# 300-line corpus prepared with the byte tokenizer into <dir>/data (data_train_*.bin,
# data_val_*.bin). tiny_run <tessera> trains on it, in <dir>, a 2-layer, 32-wide model with a
# 64-token context for 30 steps into ./run (log: ./train.log); non-zero if training fails.
tiny_corpus() {
  local tessera=$1 dir=$2 i
  rm -rf "$dir" && mkdir -p "$dir/text"
  for i in $(seq 0 299); do
    echo "line $((i % 37)): the quick brown fox jumps over $(((i * 7) % 11)) lazy dogs."
  done >"$dir/text/corpus.txt"
  "$tessera" prepare --input "$dir/text" --output "$dir/data" --tokenizer byte >/dev/null
}

tiny_run() {
  "$1" train --train-data "data/data_train_*.bin" --tokenizer byte --run-dir run \
    --model '{"n_layer": 2, "n_head": 2, "n_kv_head": 2, "n_embd": 32, "block_size": 64}' \
    --batch-size 4 --seq-len 32 --max-steps 30 --log-every 30 --threads 1 --sample-tokens 0 \
    >train.log 2>&1 || { cat train.log >&2; return 1; }
}
