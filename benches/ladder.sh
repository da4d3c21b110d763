#!/usr/bin/env bash
# The shape ladder of the GPU targets in BENCHMARKS.md, for any machine with a GPU:
# the adapter, a correctness check against the CPU reference (the demo), then
# `wgpu-attention bench --json` on each shape, one JSON line per (shape, path, precision).
#
#   benches/ladder.sh [BINARY] [OUT_DIR]
#
# BINARY defaults to target/release/wgpu-attention (build it with `cargo build --release`);
# OUT_DIR (default ladder-out) receives info.txt, demo.txt and bench.jsonl.
set -euo pipefail

bin=${1:-target/release/wgpu-attention}
out=${2:-ladder-out}
mkdir -p "$out"

"$bin" info >"$out/info.txt" 2>&1 || true
# The demo compares the GPU with the CPU reference and exits nonzero when they differ.
"$bin" >"$out/demo.txt" 2>&1

bench() {
    "$bin" bench --json "$@" 2>/dev/null >>"$out/bench.jsonl" ||
        echo "{\"failed\": \"$*\"}" >>"$out/bench.jsonl"
}
: >"$out/bench.jsonl"
# Prefill: B = 4, H = 16, L = 4,096, D = 64 and 128, causal and not, f32 and f16.
for d in 64 128; do
    for causal in "" --causal; do
        for precision in f32 f16; do
            bench --shape "4,16,4096,4096,$d" $causal --path fused --precision "$precision" --iters 20
        done
    done
done
# Decode: one query, 32 query heads over 8 K/V heads, 32,768 keys.
for precision in f32 f16; do
    bench --shape 1,32,1,32768,64 --hkv 8 --path decode --precision "$precision" --iters 50
    bench --shape 1,32,1,32768,64 --hkv 8 --path fused --precision "$precision" --iters 50
done
# The staged path on one prefill shape, for the fused-versus-staged ratio.
bench --shape 4,16,4096,4096,64 --path staged --iters 5

cat "$out/bench.jsonl"
