#!/usr/bin/env bash
# Decode kernels compared in one run: decode.wgsl (the default) and decode_subgroup.wgsl
# (forced with WGPU_ATTENTION_KERNEL=subgroup-decode) take turns, ROUNDS rounds per shape,
# each a fresh process that tunes its own candidates during the warm-up. One JSON line per
# run on stdout, prefixed with the round and the kernel.
#
#   scripts/bench-decode.sh [ROUNDS] [SHAPE...]      (default: 3 rounds, two shapes)
set -euo pipefail
bin=${BIN:-target/release/wgpu-attention}
rounds=${1:-3}
shift || true
shapes=("$@")
if [ ${#shapes[@]} -eq 0 ]; then
    shapes=("1,8,1,4096,64" "1,32,1,32768,64 --hkv 8")
fi
for shape in "${shapes[@]}"; do
    for round in $(seq 1 "$rounds"); do
        for kernel in lanes subgroup; do
            if [ "$kernel" = subgroup ]; then force=subgroup-decode; else force=; fi
            # shellcheck disable=SC2086 # the shape carries its own flags
            line=$(WGPU_ATTENTION_KERNEL=$force "$bin" bench --shape $shape --path decode \
                --iters "${ITERS:-10}" --json)
            echo "round $round $kernel $line"
        done
    done
done
