// Converts f32 to f16 storage, two values per invocation packed into one u32 word:
// NaN stays NaN, magnitudes that round past the largest f16 (65504) become infinities,
// the rest convert to one of the two nearest f16 values. pack2x16float only sees values
// inside f16's finite range, where its result is defined.

// Must match `CastParams` in src/gpu/kernels/cast.rs.
struct Cast {
    // Values in this slice.
    count: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> conv: Cast;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;

const WG: u32 = 256u;

fn half_bits(x: f32) -> u32 {
    let bits = bitcast<u32>(x);
    let sign = (bits >> 16u) & 0x8000u;
    if (bits & 0x7fffffffu) > 0x7f800000u {
        return sign | 0x7e00u;
    }
    // 65520 is halfway between 65504 and the next step: it and beyond round to infinity.
    if abs(x) >= 65520.0 {
        return sign | 0x7c00u;
    }
    return pack2x16float(vec2(clamp(x, -65504.0, 65504.0), 0.0)) & 0xffffu;
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let word = (wid.x + wid.y * nwg.x) * WG + li;
    let first = 2u * word;
    // Words past the slice (the last workgroup's tail) do not exist.
    if first >= conv.count {
        return;
    }
    var hi = 0u;
    // An odd count leaves the last word's upper half empty.
    if first + 1u < conv.count {
        hi = half_bits(src[first + 1u]);
    }
    dst[word] = half_bits(src[first]) | (hi << 16u);
}
