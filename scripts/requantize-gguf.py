#!/usr/bin/env python3
"""Writes a copy of a GGUF model whose Q4_1 tensors are requantized to another type.

For measuring the quantized kernels on block types the fetched files do not use (the
BENCHMARKS.md entry on Q4_0 decoding was made this way from SmolLM2's Q4_1 file). The
values are the Q4_1 weights dequantized and quantized again with gguf-py's reference
quantizer, so the copy's outputs differ a little from the original's; every other tensor
and every metadata field is copied as it is. The copy is a measuring aid, never a
fixture: do not commit it.

    pip install gguf numpy
    python3 scripts/requantize-gguf.py IN.gguf OUT.gguf Q4_0

The target type is any gguf-py can quantize to (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0).
"""

import sys

import gguf.quants as quants
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter


def main() -> int:
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    src, dst, target = sys.argv[1:]
    try:
        to = GGMLQuantizationType[target]
    except KeyError:
        print(f"unknown type {target!r}", file=sys.stderr)
        return 2
    reader = GGUFReader(src)
    writer = GGUFWriter(dst, reader.fields["general.architecture"].contents())
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        kind = field.types[0]
        if kind == GGUFValueType.ARRAY:
            writer.add_key_value(name, field.contents(), kind, sub_type=field.types[-1])
        else:
            writer.add_key_value(name, field.contents(), kind)
    for tensor in reader.tensors:
        if tensor.tensor_type == GGMLQuantizationType.Q4_1:
            values = quants.dequantize(tensor.data, tensor.tensor_type)
            writer.add_tensor(tensor.name, quants.quantize(values, to), raw_dtype=to)
        else:
            writer.add_tensor(tensor.name, tensor.data, raw_dtype=tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
