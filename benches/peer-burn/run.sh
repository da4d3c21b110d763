#!/usr/bin/env bash
# Builds the peer benchmark (release) and runs it: burn 0.22.1's fused attention and
# wgpu-attention on the same adapter and shapes (each in its own process by default; see
# README.md). JSON lines go to
# results.jsonl, the table to table.md (and the terminal), progress to run.log.
#
#   benches/peer-burn/run.sh [peer-burn flags, e.g. --iters 5 --shapes "1,8,512,512,64"]
#
# Environment: CARGO_TARGET_DIR (default benches/peer-burn/target; a cold build of burn
# takes 15 to 45 minutes on 2 cores), OUT_DIR (default this folder), MESA25=1 to run on
# Mesa 25.0's lavapipe (scripts/mesa25.sh), VK_ICD_FILENAMES for any other Vulkan driver.
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
# stdout (JSON) to the results file, stderr through tee to the log and the terminal.
status=0
{ "$CARGO_TARGET_DIR/release/peer-burn" "$@" 2>&1 >&3 | tee "$out/run.log" >&2; } 3>"$out/results.jsonl" || status=$?
grep -E '^(\||[0-9]+ (timed calls|rounds))' "$out/run.log" >"$out/table.md" || true
echo "results: $out/results.jsonl, $out/table.md" >&2
exit "$status"
