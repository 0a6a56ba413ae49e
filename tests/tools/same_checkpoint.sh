# Sourced by the CLI test scripts: same_checkpoint <dir a> <dir b> succeeds when two checkpoint
# directories hold the same tensor files byte for byte: model.safetensors and
# optimizer.safetensors of a gathered checkpoint, every shard_*.safetensors of a sharded one
# (written deterministically, so equal states give equal files).
same_checkpoint() {
  local f n=0
  for f in "$1"/*.safetensors; do
    [ -f "$f" ] || return 1
    cmp -s "$f" "$2/$(basename "$f")" || return 1
    n=$((n + 1))
  done
  [ "$n" -gt 0 ] && [ "$n" = "$(find "$2" -maxdepth 1 -name '*.safetensors' | wc -l)" ]
}
