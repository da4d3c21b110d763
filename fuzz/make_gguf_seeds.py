#!/usr/bin/env python3
"""Writes the seed inputs of the `gguf` fuzz target into fuzz/seeds/gguf/.

Three small, valid GGUF files written from the format's description (little-endian:
magic, version, tensor count u64, metadata count u64, key/value pairs, tensor infos,
padding to `general.alignment`, data), so the fuzzer starts from files that parse and
mutates into the corners: metadata of every common type and no tensors; F32 and F16
tensors; Q4_1 and Q8_0 tensors under a non-default alignment in a version 2 file.

Run from the repository root: `python3 fuzz/make_gguf_seeds.py` (standard library only).
"""

import pathlib
import struct

OUT = pathlib.Path(__file__).resolve().parent / "seeds" / "gguf"

U32, I32, F32, BOOL, STRING, ARRAY = 4, 5, 6, 7, 8, 9


def string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def value(ty, v):
    if ty == U32:
        return struct.pack("<I", v)
    if ty == I32:
        return struct.pack("<i", v)
    if ty == F32:
        return struct.pack("<f", v)
    if ty == BOOL:
        return struct.pack("<B", int(v))
    if ty == STRING:
        return string(v)
    if ty == ARRAY:
        inner, items = v
        return struct.pack("<IQ", inner, len(items)) + b"".join(value(inner, x) for x in items)
    raise ValueError(ty)


def gguf(meta, tensors, version=3, alignment=32):
    """meta: [(key, type, value)]; tensors: [(name, dims innermost first, ggml type, bytes)]."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(meta))
    for key, ty, v in meta:
        out += string(key) + struct.pack("<I", ty) + value(ty, v)
    offset, data = 0, b""
    for name, dims, ty, raw in tensors:
        out += string(name) + struct.pack("<I", len(dims))
        out += b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", ty, offset)
        pad = (-len(raw)) % alignment
        data += raw + b"\0" * pad
        offset += len(raw) + pad
    out += b"\0" * ((-len(out)) % alignment)
    return out + data


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    meta = [
        ("general.architecture", STRING, "llama"),
        ("llama.block_count", U32, 1),
        ("llama.rope.freq_base", F32, 10000.0),
        ("tokenizer.ggml.add_bos_token", BOOL, True),
        ("tokenizer.ggml.tokens", ARRAY, (STRING, ["a", "b", "<s>"])),
        ("tokenizer.ggml.token_type", ARRAY, (I32, [1, 1, 3])),
    ]
    (OUT / "metadata.gguf").write_bytes(gguf(meta, []))

    f32 = struct.pack("<8f", *[0.5 * i - 1.0 for i in range(8)])
    f16 = struct.pack("<8e", *[0.25 * i for i in range(8)])
    tensors = [("a.weight", [4, 2], 0, f32), ("b.weight", [8], 1, f16)]
    (OUT / "f32_f16.gguf").write_bytes(gguf(meta[:2], tensors))

    # Q4_1 block: f16 scale, f16 min, 16 bytes of nibbles; Q8_0 block: f16 scale, 32 i8.
    q4_1 = b"".join(struct.pack("<ee", 0.1 * (b + 1), -0.5) + bytes(range(16)) for b in range(2))
    q8_0 = struct.pack("<e", 0.05) + struct.pack("<32b", *range(-16, 16))
    tensors = [("q.weight", [32, 2], 3, q4_1), ("r.weight", [32], 8, q8_0)]
    meta64 = [("general.alignment", U32, 64)]
    (OUT / "quant_v2.gguf").write_bytes(gguf(meta64, tensors, version=2, alignment=64))


if __name__ == "__main__":
    main()
