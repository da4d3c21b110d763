#!/usr/bin/env python3
"""Helpers of benches/ladder.sh, standard library only (the GPU machine may lack numpy).

  ladder.py inputs DIR B,H,LQ,LK,D SEED   seeded normal q.npy, k.npy, v.npy (f32) in DIR
  ladder.py compare GPU.npy CPU.npy f32|f16
      f32: every element within 2e-5 + 1e-4 * |ref| (docs/DESIGN.md's f32 bound);
      f16: Frobenius relative error within 2e-3 (its f16-storage bound).
      Prints the worst error; exits 1 when the bound fails.
  ladder.py table BENCH.jsonl [TORCH.jsonl]
      One row per shape and precision: wgpu-attention beside PyTorch's SDPA. Prefill in
      TFLOP/s (2 * B * H * (D + Dv) per allowed pair, both sides), decoding (Lq = 1) in
      GB/s of the least bytes a kernel must move (q, k, v read once in the storage
      precision, an f32 output written once: the same count for both sides).
"""
import ast
import json
import math
import random
import struct
import sys


def write_npy(path, shape, values):
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }" % (tuple(shape),)
    # The magic, version, header length and header are padded to a multiple of 64.
    pad = 64 - (10 + len(header) + 1) % 64
    header = header + " " * pad + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1"))
        f.write(struct.pack("<%df" % len(values), *values))


def read_npy(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:6] != b"\x93NUMPY":
        raise SystemExit(f"{path}: not a .npy file")
    major = data[6]
    (hlen,), start = (struct.unpack("<H", data[8:10]), 10) if major == 1 else (struct.unpack("<I", data[8:12]), 12)
    header = ast.literal_eval(data[start:start + hlen].decode("latin1"))
    if header["descr"] != "<f4" or header["fortran_order"]:
        raise SystemExit(f"{path}: expected little-endian f32 in C order, got {header}")
    n = math.prod(header["shape"])
    body = data[start + hlen:]
    return header["shape"], struct.unpack("<%df" % n, body[:4 * n])


def parse_shape(s):
    dims = [int(x) for x in s.split(",")[:5]]
    if len(dims) != 5 or min(dims) < 1:
        raise SystemExit(f"shape {s!r}: needs five positive counts B,H,LQ,LK,D")
    return dims


def inputs(directory, shape, seed):
    b, h, lq, lk, d = parse_shape(shape)
    rng = random.Random(int(seed))
    for name, rows in (("q", lq), ("k", lk), ("v", lk)):
        dims = (b, h, rows, d)
        write_npy(f"{directory}/{name}.npy", dims, [rng.gauss(0.0, 1.0) for _ in range(math.prod(dims))])


def compare(gpu_path, cpu_path, precision):
    gs, g = read_npy(gpu_path)
    cs, c = read_npy(cpu_path)
    if gs != cs:
        print(f"FAIL shapes differ: gpu {gs}, cpu {cs}")
        return 1
    if precision == "f32":
        worst, at, ratio = 0.0, 0, 0.0
        for i, (x, r) in enumerate(zip(g, c)):
            err = abs(x - r)
            bound = 2e-5 + 1e-4 * abs(r)
            # NaN compares false: count it as failing.
            q = err / bound if err == err else math.inf
            if q > ratio:
                worst, at, ratio = err, i, q
        ok = ratio <= 1.0
        print(f"{'ok' if ok else 'FAIL'} f32 max |err| {worst:.2e} at element {at} "
              f"({ratio:.2f} of the bound 2e-5 + 1e-4 |ref|)")
        return 0 if ok else 1
    num = sum((x - r) ** 2 for x, r in zip(g, c))
    den = sum(r * r for r in c)
    rel = math.sqrt(num / den) if den > 0 else (0.0 if num == 0 else math.inf)
    ok = rel <= 2e-3
    print(f"{'ok' if ok else 'FAIL'} f16 Frobenius relative error {rel:.2e} (bound 2e-3)")
    return 0 if ok else 1


def load(path):
    rows = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    rows.append(json.loads(line))
    except FileNotFoundError:
        pass
    return rows


def min_bytes(b, h, lq, lk, d, elem):
    return (b * h * lq * d + 2 * b * h * lk * d) * elem + b * h * lq * d * 4


def table(bench_path, torch_path=None):
    ours = [r for r in load(bench_path) if "median_ms" in r and r.get("backend") == "gpu"]
    torch = {}
    for r in load(torch_path) if torch_path else []:
        key = (tuple(r["shape"]), r["causal"], {"float32": "f32", "float16": "f16"}.get(r["dtype"], r["dtype"]))
        torch[key] = r
    print("| B,H,Lq,Lk,D | causal | storage | path | ours ms | ours | torch SDPA ms | torch | ours / torch (speed) |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|")
    for r in ours:
        if r.get("hkv") != r["shape"][1] or r.get("dv") != r["shape"][4]:
            # Grouped heads or Dv != D: the SDPA script runs neither, so no peer row.
            peer = None
        else:
            peer = torch.get((tuple(r["shape"]), r["causal"], r["precision"]))
        b, h, lq, lk, d = r["shape"]
        decode = lq == 1
        elem = 2 if r["precision"] == "f16" else 4

        def rate(ms):
            if decode:
                return f"{min_bytes(b, h, lq, lk, d, elem) / (ms * 1e6):.1f} GB/s"
            return f"{r['gflops'] * r['median_ms'] / ms / 1e3:.2f} TFLOP/s"

        if peer is None or "median_ms" not in peer:
            peer_ms, peer_rate, ratio = "-", (peer or {}).get("error", "-")[:40], "-"
        else:
            peer_ms, peer_rate = f"{peer['median_ms']:.3f}", rate(peer["median_ms"])
            ratio = f"{peer['median_ms'] / r['median_ms']:.2f}"
        shape = ",".join(str(x) for x in r["shape"])
        if r.get("hkv") != h:
            shape += f" (Hkv {r['hkv']})"
        print(f"| {shape} | {'yes' if r['causal'] else 'no'} | {r['precision']} | {r['path']} | "
              f"{r['median_ms']:.3f} | {rate(r['median_ms'])} | {peer_ms} | {peer_rate} | {ratio} |")
    for r in load(bench_path):
        if "failed" in r:
            print(f"| failed: {r['failed']} | | | | | | | | |")


def main(argv):
    if len(argv) >= 4 and argv[1] == "inputs":
        inputs(argv[2], argv[3], argv[4] if len(argv) > 4 else 0)
        return 0
    if len(argv) == 5 and argv[1] == "compare" and argv[4] in ("f32", "f16"):
        return compare(argv[2], argv[3], argv[4])
    if len(argv) in (3, 4) and argv[1] == "table":
        table(argv[2], argv[3] if len(argv) == 4 else None)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
