# Sourced by the CLI test scripts: tiny_corpus <tessera> <dir> makes <dir> afresh and writes a
# 300-line corpus prepared with the byte tokenizer into <dir>/data (data_train_*.bin,
# data_val_*.bin).
tiny_corpus() {
  local tessera=$1 dir=$2 i
  rm -rf "$dir" && mkdir -p "$dir/text"
  for i in $(seq 0 299); do
    echo "line $((i % 37)): the quick brown fox jumps over $(((i * 7) % 11)) lazy dogs."
  done >"$dir/text/corpus.txt"
  "$tessera" prepare --input "$dir/text" --output "$dir/data" --tokenizer byte >/dev/null
}
