#!/usr/bin/env python3
"""The fast CPU path (`wgpu-attention bench --backend cpu`) beside JAX's XLA CPU, in one run.

  pip install jax
  cargo build --release
  python3 benches/cpu_vs_jax.py [--rounds N] [--iters N] [--bin PATH] [--shapes NAME,...]

For each shape, ROUNDS rounds alternate the two sides (this crate's CLI in a subprocess,
then JAX in this process), each timing ITERS calls after warm-up and reporting the median
(JAX: one jitted jax.nn.dot_product_attention(implementation="xla") call per iteration,
waited for with block_until_ready; the CLI: its own median of wall times). Alternating
keeps the two sides under the same load from whatever else the machine runs; the table
gives the median over rounds of each side, the ratio JAX / ours (above 1: this crate is
faster) and the load average before and after. Both use every core of the machine.

Inputs are uniform in [-1, 1) on both sides (the CLI's bench inputs); the shapes are
(B, Hq, Lq, Lk, D) with Hkv = Hq and Dv = D unless a shape says otherwise.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

# name: (B, Hq, Lq, Lk, D, Hkv, causal)
SHAPES = {
    "prefill_L512": (1, 8, 512, 512, 64, 8, False),
    "prefill_L512_causal": (1, 8, 512, 512, 64, 8, True),
    "prefill_L2048": (1, 8, 2048, 2048, 64, 8, False),
    "prefill_L2048_causal": (1, 8, 2048, 2048, 64, 8, True),
    "decode_Lk4096": (1, 8, 1, 4096, 64, 8, False),
    "decode_Lk4096_gqa": (1, 32, 1, 4096, 64, 8, False),
}


def load():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def ours(binary, shape, iters):
    b, h, lq, lk, d, hkv, causal = shape
    cmd = [binary, "bench", "--backend", "cpu", "--shape", f"{b},{h},{lq},{lk},{d}",
           "--hkv", str(hkv), "--iters", str(iters), "--json"]
    if causal:
        cmd.append("--causal")
    res = subprocess.run(cmd, check=True, capture_output=True, text=True)
    line = [l for l in res.stdout.splitlines() if l.startswith("{")][-1]
    return json.loads(line)["median_ms"]


def jax_timer(shape):
    import jax
    import jax.numpy as jnp

    b, h, lq, lk, d, hkv, causal = shape
    key = jax.random.PRNGKey(0)
    kq, kk, kv = jax.random.split(key, 3)
    # JAX's layout is (B, L, H, D).
    q = jax.random.uniform(kq, (b, lq, h, d), jnp.float32, -1.0, 1.0)
    k = jax.random.uniform(kk, (b, lk, hkv, d), jnp.float32, -1.0, 1.0)
    v = jax.random.uniform(kv, (b, lk, hkv, d), jnp.float32, -1.0, 1.0)
    f = jax.jit(lambda q, k, v: jax.nn.dot_product_attention(
        q, k, v, is_causal=causal, implementation="xla"))
    f(q, k, v).block_until_ready()  # compile

    def run(iters):
        samples = []
        for _ in range(iters):
            t = time.perf_counter()
            f(q, k, v).block_until_ready()
            samples.append((time.perf_counter() - t) * 1e3)
        return statistics.median(samples)

    run(1)
    return run


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--bin", default="target/release/wgpu-attention")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    args = ap.parse_args()
    import jax

    print(f"# jax {jax.__version__} on {jax.devices()[0].platform}, {os.cpu_count()} CPUs; "
          f"{args.rounds} alternating rounds of {args.iters} calls", flush=True)
    print("| shape | ours (ms) | XLA CPU (ms) | XLA / ours | load before, after |")
    print("| --- | --- | --- | --- | --- |")
    for name in args.shapes.split(","):
        shape = SHAPES[name]
        before = load()
        timer = jax_timer(shape)
        mine, theirs = [], []
        for _ in range(args.rounds):
            mine.append(ours(args.bin, shape, args.iters))
            theirs.append(timer(args.iters))
        a, x = statistics.median(mine), statistics.median(theirs)
        print(f"| {name} {shape[:5]} | {a:.2f} | {x:.2f} | {x / a:.2f} | {before:.2f}, {load():.2f} |",
              flush=True)


if __name__ == "__main__":
    sys.exit(main())
