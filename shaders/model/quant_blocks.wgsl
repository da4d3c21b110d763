// Decoders of the GGUF block types, shared by the quantized matmul and the quantized
// embedding gather. The including kernel declares the weights `w` (the tensor's bytes as
// stored in the file, read as little-endian u32 words, padded by one word so a read of
// four bytes at the last even offset stays inside), the override constant KIND (the ggml
// type number, or Q8_0_PLANES), the function `take(v, k)`, which receives the
// dequantized elements k..k+4 of the current row four at a time, and `plane_rows()`, the
// rows of a table in planes. Values are dequantized in registers with the
// formulas of ggml-quants.c; nothing dequantized is ever stored by these functions.

// Four bytes at byte offset o (o even): one word, or the halves of two.
fn bytes4(o: u32) -> u32 {
    let i = o >> 2u;
    let sh = (o & 3u) * 8u;
    let lo = w[i];
    let hi = w[i + 1u];
    return select((lo >> sh) | (hi << (32u - sh)), lo, sh == 0u);
}

// The f16 whose bits are the low half of h, exactly. Decoded by hand rather than with
// unpack2x16float, which some backends only offer with a float16 capability.
fn half(h: u32) -> f32 {
    let sign = (h & 0x8000u) << 16u;
    let e = (h >> 10u) & 31u;
    let m = h & 0x3ffu;
    // Subnormals (and zero): m * 2^-24, exact in f32.
    let tiny = bitcast<f32>(sign | bitcast<u32>(f32(m) * 5.9604645e-8));
    let big = bitcast<f32>(sign | select((e + 112u) << 23u, 0x7f800000u, e == 31u) | (m << 13u));
    return select(big, tiny, e == 0u);
}

// The two f16 of a word, low half first.
fn halves(v: u32) -> vec2<f32> {
    return vec2<f32>(half(v & 0xffffu), half(v >> 16u));
}

// The f16 at byte offset o (o even).
fn half_at(o: u32) -> f32 {
    return half((w[o >> 2u] >> ((o & 2u) * 8u)) & 0xffffu);
}

// The signed byte at byte offset o.
fn sbyte_at(o: u32) -> f32 {
    return f32(bitcast<i32>(w[o >> 2u] << (24u - (o & 3u) * 8u)) >> 24u);
}

fn nibbles_lo(q: u32) -> vec4<f32> {
    return vec4<f32>((vec4<u32>(q) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(15u));
}

fn nibbles_hi(q: u32) -> vec4<f32> {
    return vec4<f32>((vec4<u32>(q) >> vec4<u32>(4u, 12u, 20u, 28u)) & vec4<u32>(15u));
}

fn bytes_u(q: u32) -> vec4<f32> {
    return vec4<f32>((vec4<u32>(q) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(255u));
}

fn bytes_i(q: u32) -> vec4<f32> {
    let s = bitcast<vec4<i32>>(vec4<u32>(q) << vec4<u32>(24u, 16u, 8u, 0u));
    return vec4<f32>(s >> vec4<u32>(24u));
}

// KIND of Q8_0 kept in planes (QuantMatrix's `planes`): every block's 32 quant bytes in
// row order (row r at r * row_bytes, 32 bytes a block), then the f16 scales block by
// block, the rows rounded up to 8 (block b of row r at (b * rows8 + r) * 2 past the
// quants). Must match KIND_Q8_0_PLANES in src/model/ops/quant_matrix.rs.
const Q8_0_PLANES: u32 = 108u;

// Rows of a table in planes, rounded up to 8: the scale plane's rows per block.
fn plane_rows8() -> u32 {
    return (plane_rows() + 7u) & ~7u;
}

// Byte offset of the scale of the block in planes whose quants start at byte o.
fn plane_scale_at(o: u32) -> u32 {
    let r = o / p.row_bytes;
    let b = (o % p.row_bytes) / 32u;
    return plane_rows() * p.row_bytes + (b * plane_rows8() + r) * 2u;
}

fn q8_0_planes_block(o: u32, k0: u32) {
    let d = half_at(plane_scale_at(o));
    for (var i = 0u; i < 8u; i++) {
        take(d * bytes_i(w[(o >> 2u) + i]), k0 + 4u * i);
    }
}

// (elements, bytes) of one block of KIND. F32 and F16 are read four elements at a time.
fn block_shape() -> vec2<u32> {
    var shape = vec2<u32>(4u, 16u);
    switch KIND {
        case 1u: { shape = vec2<u32>(4u, 8u); }
        case 2u: { shape = vec2<u32>(32u, 18u); }
        case 3u: { shape = vec2<u32>(32u, 20u); }
        case 8u: { shape = vec2<u32>(32u, 34u); }
        case Q8_0_PLANES: { shape = vec2<u32>(32u, 32u); }
        case 12u: { shape = vec2<u32>(256u, 144u); }
        case 14u: { shape = vec2<u32>(256u, 210u); }
        default: {}
    }
    return shape;
}

fn f32_block(o: u32, k0: u32) {
    let i = o >> 2u;
    take(bitcast<vec4<f32>>(vec4<u32>(w[i], w[i + 1u], w[i + 2u], w[i + 3u])), k0);
}

fn f16_block(o: u32, k0: u32) {
    let i = o >> 2u;
    take(vec4<f32>(halves(w[i]), halves(w[i + 1u])), k0);
}

// Q4_0: f16 d, 16 bytes; low nibbles are elements 0..16, high 16..32; x = d (q - 8).
fn q4_0_block(o: u32, k0: u32) {
    let d = half_at(o);
    for (var i = 0u; i < 4u; i++) {
        let q = bytes4(o + 2u + 4u * i);
        take(d * (nibbles_lo(q) - 8.0), k0 + 4u * i);
        take(d * (nibbles_hi(q) - 8.0), k0 + 16u + 4u * i);
    }
}

// Q4_1: f16 d, f16 m, 16 bytes of nibbles as Q4_0; x = d q + m. Blocks are word-aligned.
fn q4_1_block(o: u32, k0: u32) {
    let b = o >> 2u;
    let dm = halves(w[b]);
    for (var i = 0u; i < 4u; i++) {
        let q = w[b + 1u + i];
        take(dm.x * nibbles_lo(q) + dm.y, k0 + 4u * i);
        take(dm.x * nibbles_hi(q) + dm.y, k0 + 16u + 4u * i);
    }
}

// Q8_0: f16 d, 32 signed bytes; x = d q.
fn q8_0_block(o: u32, k0: u32) {
    let d = half_at(o);
    for (var i = 0u; i < 8u; i++) {
        take(d * bytes_i(bytes4(o + 2u + 4u * i)), k0 + 4u * i);
    }
}

// Q4_K sub-block j's 6-bit (scale, min) from the 12 packed bytes s (three words).
fn q4k_scale_min(s: vec3<u32>, j: u32) -> vec2<f32> {
    let sh = 8u * (j & 3u);
    let a = (s.x >> sh) & 255u;
    let b = (s.y >> sh) & 255u;
    let c = (s.z >> sh) & 255u;
    let high = vec2<u32>((c & 15u) | ((a >> 6u) << 4u), (c >> 4u) | ((b >> 6u) << 4u));
    return vec2<f32>(select(high, vec2<u32>(a & 63u, b & 63u), j < 4u));
}

// Q4_K: f16 d, f16 dmin, 12 scale bytes, 128 bytes; each 64 elements take 32 bytes, low
// nibbles with sub-block 2c, high with 2c + 1; x = (d sc) q - dmin m. Word-aligned.
fn q4_k_block(o: u32, k0: u32) {
    let b = o >> 2u;
    let dd = halves(w[b]);
    let s = vec3<u32>(w[b + 1u], w[b + 2u], w[b + 3u]);
    for (var c = 0u; c < 4u; c++) {
        let lo = q4k_scale_min(s, 2u * c);
        let hi = q4k_scale_min(s, 2u * c + 1u);
        let d_lo = dd.x * lo.x;
        let m_lo = dd.y * lo.y;
        let d_hi = dd.x * hi.x;
        let m_hi = dd.y * hi.y;
        for (var i = 0u; i < 8u; i++) {
            let q = w[b + 4u + 8u * c + i];
            take(d_lo * nibbles_lo(q) - m_lo, k0 + 64u * c + 4u * i);
            take(d_hi * nibbles_hi(q) - m_hi, k0 + 64u * c + 32u + 4u * i);
        }
    }
}

// Q6_K: 128 bytes of low nibbles, 64 of 2-bit highs, 16 signed scales, f16 d; per half
// of 128 elements, element l (of 32) and l + 32, l + 64, l + 96 share byte l of the
// highs; x = (d sc) (q - 32) with the scale of element e at e / 16.
fn q6_k_block(o: u32, k0: u32) {
    let d = half_at(o + 208u);
    for (var h = 0u; h < 2u; h++) {
        let ql = o + 64u * h;
        let qh = o + 128u + 32u * h;
        let sc = o + 192u + 8u * h;
        let k = k0 + 128u * h;
        for (var i = 0u; i < 8u; i++) {
            let a = bytes4(ql + 4u * i);
            let c = bytes4(ql + 32u + 4u * i);
            let hb = bytes4(qh + 4u * i);
            let q1 = (a & 0x0f0f0f0fu) | ((hb & 0x03030303u) << 4u);
            let q2 = (c & 0x0f0f0f0fu) | (((hb >> 2u) & 0x03030303u) << 4u);
            let q3 = ((a >> 4u) & 0x0f0f0f0fu) | (((hb >> 4u) & 0x03030303u) << 4u);
            let q4 = ((c >> 4u) & 0x0f0f0f0fu) | (((hb >> 6u) & 0x03030303u) << 4u);
            let is = i >> 2u;
            take((d * sbyte_at(sc + is)) * (bytes_u(q1) - 32.0), k + 4u * i);
            take((d * sbyte_at(sc + is + 2u)) * (bytes_u(q2) - 32.0), k + 32u + 4u * i);
            take((d * sbyte_at(sc + is + 4u)) * (bytes_u(q3) - 32.0), k + 64u + 4u * i);
            take((d * sbyte_at(sc + is + 6u)) * (bytes_u(q4) - 32.0), k + 96u + 4u * i);
        }
    }
}

// Decodes the block at byte offset o whose first element is element k0 of its row.
fn decode_block(o: u32, k0: u32) {
    switch KIND {
        case 1u: { f16_block(o, k0); }
        case 2u: { q4_0_block(o, k0); }
        case 3u: { q4_1_block(o, k0); }
        case 8u: { q8_0_block(o, k0); }
        case Q8_0_PLANES: { q8_0_planes_block(o, k0); }
        case 12u: { q4_k_block(o, k0); }
        case 14u: { q6_k_block(o, k0); }
        default: { f32_block(o, k0); }
    }
}
