#!/usr/bin/env bash
# The shape ladder of the GPU targets in BENCHMARKS.md, for any machine with a GPU, in one
# run: the adapter, a correctness check against the CPU reference, `wgpu-attention bench
# --json` on each shape, PyTorch's scaled_dot_product_attention on the same shapes where
# `import torch` works, and a side-by-side table.
#
#   benches/ladder.sh [BINARY] [OUT_DIR]
#
# BINARY defaults to target/release/wgpu-attention (`cargo build --release`); a machine
# without a Rust toolchain gets the binary copied over. OUT_DIR (default ladder-out)
# receives info.txt, demo.txt, check.txt, bench.jsonl, torch.jsonl and table.md.
#
# Environment:
#   LADDER_SMALL=1   tiny shapes and few iterations (minutes on a software driver), to
#                    check the script itself; the numbers then mean nothing.
#   TORCH_SDPA       the PyTorch peer script (torch_sdpa_bench.py: one JSON line per shape
#                    with median_ms and tflops); default: next to BINARY, then not run.
#   VK_ICD_FILENAMES, WGPU_BACKEND, WGPU_ADAPTER_NAME pass through to the binary.
#
# Where the machine has the GPU driver but no Vulkan loader, put the loader's .deb
# (`apt-get download libvulkan1`) in .gl/ beside the binary's folder: it is unpacked
# into / first. Exit status: 1 when a correctness check fails, else 0 (a shape that
# fails to bench is a "failed" line in bench.jsonl and in the table).
set -euo pipefail

bin=${1:-target/release/wgpu-attention}
out=${2:-ladder-out}
here=$(cd "$(dirname "$0")" && pwd)
helper="$here/ladder.py"
mkdir -p "$out"
say() { echo "ladder: $*" >&2; }

if ! ldconfig -p 2>/dev/null | grep -q 'libvulkan.so.1' && ls .gl/*.deb >/dev/null 2>&1; then
    say "unpacking the Vulkan loader from .gl/"
    for f in .gl/*.deb; do dpkg -x "$f" /; done
    ldconfig
fi
"$bin" info >"$out/info.txt" 2>&1 || true
# NVIDIA's driver may install its manifest outside the loader's search path.
nvidia_icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
if [ -z "${VK_ICD_FILENAMES:-}${VK_DRIVER_FILES:-}" ] && [ -f "$nvidia_icd" ] &&
    ! grep -qi nvidia "$out/info.txt"; then
    export VK_DRIVER_FILES="$nvidia_icd"
    "$bin" info >"$out/info.txt" 2>&1 || true
fi
cat "$out/info.txt"

if [ "${LADDER_SMALL:-0}" = 1 ]; then
    b=1 h=2 l=256 lk_decode=4096 iters=3 dims="64 128"
else
    b=4 h=16 l=4096 lk_decode=32768 iters=20 dims="64 128"
fi

# Correctness: the demo (causal, against the CPU reference), then the GPU against the
# CPU reference on shapes that straddle tile edges, through every path and both
# storage precisions.
failed=0
"$bin" --quiet >"$out/demo.txt" 2>&1 || { say "demo failed"; failed=1; }
tail -n 3 "$out/demo.txt"
: >"$out/check.txt"
work=$(mktemp -d)
check() { # SHAPE PRECISION RUN_FLAGS...
    local shape=$1 precision=$2
    shift 2
    python3 "$helper" inputs "$work" "$shape" 7
    local io=(--q "$work/q.npy" --k "$work/k.npy" --v "$work/v.npy")
    local line="$shape $precision $*:"
    # The reference takes the same options but no --path (it picks a GPU kernel).
    local cpu_flags=() skip=0 f
    for f in "$@"; do
        if [ "$skip" = 1 ]; then skip=0; continue; fi
        if [ "$f" = --path ]; then skip=1; continue; fi
        cpu_flags+=("$f")
    done
    if "$bin" run "${io[@]}" --out "$work/gpu.npy" --precision "$precision" "$@" 2>>"$out/check.txt" &&
        "$bin" run "${io[@]}" --out "$work/cpu.npy" --precision "$precision" --backend cpu "${cpu_flags[@]}" 2>>"$out/check.txt"; then
        line+=" $(python3 "$helper" compare "$work/gpu.npy" "$work/cpu.npy" "$precision")" || true
    else
        line+=" FAIL (run exited nonzero)"
    fi
    echo "$line" | tee -a "$out/check.txt"
    case "$line" in *FAIL*) failed=1 ;; esac
}
for precision in f32 f16; do
    check 2,4,333,333,64 "$precision" --causal
    check 1,4,200,517,128 "$precision" --causal-bottom-right
    check 1,4,77,1000,64 "$precision" --path fused
    check 1,8,1,5000,64 "$precision"
    check 1,8,3,2049,128 "$precision" --path decode
done
rm -rf "$work"

bench() {
    "$bin" bench --json "$@" 2>/dev/null >>"$out/bench.jsonl" ||
        echo "{\"failed\": \"$*\"}" >>"$out/bench.jsonl"
}
: >"$out/bench.jsonl"
shapes=()
# Prefill: D = 64 and 128, causal and not, f32 and f16; the path the library picks.
for d in $dims; do
    for causal in "" ",causal"; do
        shapes+=("$b,$h,$l,$l,$d$causal")
        for precision in f32 f16; do
            bench --shape "$b,$h,$l,$l,$d" ${causal:+--causal} --precision "$precision" --iters "$iters"
        done
    done
done
# Decode: one query against a long cache, bound by reading K and V (GB/s).
for d in $dims; do
    shapes+=("$b,$h,1,$lk_decode,$d")
    for precision in f32 f16; do
        bench --shape "$b,$h,1,$lk_decode,$d" --precision "$precision" --iters $((iters * 2))
    done
done
# Grouped-query decode (32 query heads over 8 K/V heads) and the staged path on one
# prefill shape, for the fused-versus-staged ratio: this library's numbers only.
bench --shape "1,32,1,$lk_decode,64" --hkv 8 --iters $((iters * 2))
bench --shape "$b,$h,$l,$l,64" --path staged --iters 5
cat "$out/bench.jsonl"

torch_script=${TORCH_SDPA:-$(dirname "$bin")/torch_sdpa_bench.py}
: >"$out/torch.jsonl"
if [ -f "$torch_script" ] && python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    for dtype in float32 float16; do
        python3 "$torch_script" --dtype "$dtype" --iters $((iters * 2)) "${shapes[@]}" | tee -a "$out/torch.jsonl"
    done
else
    say "PyTorch peer not run (no $torch_script, or no torch with CUDA here)"
fi

python3 "$helper" table "$out/bench.jsonl" "$out/torch.jsonl" | tee "$out/table.md"
[ "$failed" = 0 ] || say "a correctness check FAILED (see $out/check.txt)"
exit "$failed"
