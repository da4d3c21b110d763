#!/usr/bin/env bash
# Builds the candle peer benchmark (release) and runs it: candle 0.11.1 on the CPU and
# wgpu-attention on the default adapter, on the same MiniLM and SmolLM2 files and token
# ids, each library and model in its own process (see README.md). JSON lines go to
# results.jsonl, the table to table.md (and the terminal), progress to run.log.
#
#   benches/peer-candle/run.sh [peer-candle flags, e.g. --iters 5 --gen-tokens 64]
#
# Needs the models (scripts/fetch-models.sh). Environment: CARGO_TARGET_DIR (default
# benches/peer-candle/target; a cold build of candle takes 10 to 30 minutes on 2 cores),
# OUT_DIR (default this folder), MESA25=1 to run on Mesa 25.0's lavapipe
# (scripts/mesa25.sh), VK_ICD_FILENAMES for any other Vulkan driver.
set -euo pipefail
cd "$(dirname "$0")"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
out="${OUT_DIR:-$PWD}"
mkdir -p "$out"
if [ "${MESA25:-0}" = 1 ]; then
    eval "$(../../scripts/mesa25.sh)"
fi
# The Vulkan loader warns when this is unset on a headless machine.
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"
cargo build --release -q
status=0
{ "$CARGO_TARGET_DIR/release/peer-candle" "$@" 2>&1 >&3 | tee "$out/run.log" >&2; } 3>"$out/results.jsonl" || status=$?
grep -E '^(\||MiniLM embeddings|SmolLM2 greedy)' "$out/run.log" >"$out/table.md" || true
echo "results: $out/results.jsonl, $out/table.md" >&2
exit "$status"
