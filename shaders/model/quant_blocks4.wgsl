// Decoders of four W rows at once, built on the helpers of quant_blocks.wgsl and with its
// formulas: component r of `o` is the byte offset of row r's block, and the kernel's
// `take4(a, b, c, d, k)` receives elements k..k+4 of each of the four rows. Used by the
// decoding matmul (quant_matmul.wgsl with COLS = 4), so that each element of the one row
// of x is read once for four W rows rather than once per row.

fn w4(i: vec4<u32>) -> vec4<u32> {
    return vec4<u32>(w[i.x], w[i.y], w[i.z], w[i.w]);
}

fn bytes4v(o: vec4<u32>) -> vec4<u32> {
    return vec4<u32>(bytes4(o.x), bytes4(o.y), bytes4(o.z), bytes4(o.w));
}

fn half_at4(o: vec4<u32>) -> vec4<f32> {
    return vec4<f32>(half_at(o.x), half_at(o.y), half_at(o.z), half_at(o.w));
}

fn sbyte_at4(o: vec4<u32>) -> vec4<f32> {
    return vec4<f32>(sbyte_at(o.x), sbyte_at(o.y), sbyte_at(o.z), sbyte_at(o.w));
}

fn f32_at(i: u32) -> vec4<f32> {
    return bitcast<vec4<f32>>(vec4<u32>(w[i], w[i + 1u], w[i + 2u], w[i + 3u]));
}

fn f16_at(i: u32) -> vec4<f32> {
    return vec4<f32>(halves(w[i]), halves(w[i + 1u]));
}

fn f32_block4(o: vec4<u32>, k0: u32) {
    let i = o >> vec4<u32>(2u);
    take4(f32_at(i.x), f32_at(i.y), f32_at(i.z), f32_at(i.w), k0);
}

fn f16_block4(o: vec4<u32>, k0: u32) {
    let i = o >> vec4<u32>(2u);
    take4(f16_at(i.x), f16_at(i.y), f16_at(i.z), f16_at(i.w), k0);
}

fn q4_0_block4(o: vec4<u32>, k0: u32) {
    let d = half_at4(o);
    for (var i = 0u; i < 4u; i++) {
        let q = bytes4v(o + vec4<u32>(2u + 4u * i));
        take4(
            d.x * (nibbles_lo(q.x) - 8.0),
            d.y * (nibbles_lo(q.y) - 8.0),
            d.z * (nibbles_lo(q.z) - 8.0),
            d.w * (nibbles_lo(q.w) - 8.0),
            k0 + 4u * i,
        );
        take4(
            d.x * (nibbles_hi(q.x) - 8.0),
            d.y * (nibbles_hi(q.y) - 8.0),
            d.z * (nibbles_hi(q.z) - 8.0),
            d.w * (nibbles_hi(q.w) - 8.0),
            k0 + 16u + 4u * i,
        );
    }
}

fn q4_1_block4(o: vec4<u32>, k0: u32) {
    let b = o >> vec4<u32>(2u);
    let m0 = halves(w[b.x]);
    let m1 = halves(w[b.y]);
    let m2 = halves(w[b.z]);
    let m3 = halves(w[b.w]);
    for (var i = 0u; i < 4u; i++) {
        let q = w4(b + vec4<u32>(1u + i));
        take4(
            m0.x * nibbles_lo(q.x) + m0.y,
            m1.x * nibbles_lo(q.y) + m1.y,
            m2.x * nibbles_lo(q.z) + m2.y,
            m3.x * nibbles_lo(q.w) + m3.y,
            k0 + 4u * i,
        );
        take4(
            m0.x * nibbles_hi(q.x) + m0.y,
            m1.x * nibbles_hi(q.y) + m1.y,
            m2.x * nibbles_hi(q.z) + m2.y,
            m3.x * nibbles_hi(q.w) + m3.y,
            k0 + 16u + 4u * i,
        );
    }
}

// The four rows' scales from their blocks' first words (`mid`: the block starts halfway).
fn q8_0_scales(first: vec4<u32>, mid: vec4<bool>) -> vec4<f32> {
    return select(
        vec4<f32>(half(first.x & 0xffffu), half(first.y & 0xffffu), half(first.z & 0xffffu), half(first.w & 0xffffu)),
        vec4<f32>(half(first.x >> 16u), half(first.y >> 16u), half(first.z >> 16u), half(first.w >> 16u)),
        mid,
    );
}

// Quant word i of four rows from block words a + i (`prev`) and a + i + 1 (`next`).
fn q8_0_quants(prev: vec4<u32>, next: vec4<u32>, mid: vec4<bool>) -> vec4<u32> {
    return select((prev >> vec4<u32>(16u)) | (next << vec4<u32>(16u)), next, mid);
}

// A Q8_0 block is 34 bytes, so every other block of a row starts halfway into a word: its
// scale is the high half of word a and its quants are words a + 1 .. a + 9; a block at a
// word boundary has its scale in the low half and each quant word straddles two words.
// Either way the block lies in words a .. a + 9, and each of those is loaded once (on
// lavapipe every storage load is a loop over the lanes, and reading four unaligned bytes
// as two words cost 17 loads a block instead of 9).
fn q8_0_block4(o: vec4<u32>, k0: u32) {
    let a = o >> vec4<u32>(2u);
    let mid = (o & vec4<u32>(2u)) != vec4<u32>(0u);
    let first = w4(a);
    let d = q8_0_scales(first, mid);
    var prev = first;
    for (var i = 0u; i < 8u; i++) {
        let next = w4(a + vec4<u32>(1u + i));
        let q = q8_0_quants(prev, next, mid);
        prev = next;
        take4(d.x * bytes_i(q.x), d.y * bytes_i(q.y), d.z * bytes_i(q.z), d.w * bytes_i(q.w), k0 + 4u * i);
    }
}

// Q8_0 in planes (Q8_0_PLANES in quant_blocks.wgsl): each row's scale from the scale
// plane, its quants the eight words at byte o.
fn q8_0_planes_block4(o: vec4<u32>, k0: u32) {
    let d = vec4<f32>(
        half_at(plane_scale_at(o.x)),
        half_at(plane_scale_at(o.y)),
        half_at(plane_scale_at(o.z)),
        half_at(plane_scale_at(o.w)),
    );
    let a = o >> vec4<u32>(2u);
    for (var i = 0u; i < 8u; i++) {
        let q = w4(a + vec4<u32>(i));
        take4(d.x * bytes_i(q.x), d.y * bytes_i(q.y), d.z * bytes_i(q.z), d.w * bytes_i(q.w), k0 + 4u * i);
    }
}

// (d sc, dmin m) of sub-blocks 2c and 2c + 1 of a Q4_K block whose first word is b.
fn q4k_coeffs(b: u32, c: u32) -> vec4<f32> {
    let dd = halves(w[b]);
    let s = vec3<u32>(w[b + 1u], w[b + 2u], w[b + 3u]);
    let lo = q4k_scale_min(s, 2u * c);
    let hi = q4k_scale_min(s, 2u * c + 1u);
    return vec4<f32>(dd.x * lo.x, dd.y * lo.y, dd.x * hi.x, dd.y * hi.y);
}

fn q4_k_block4(o: vec4<u32>, k0: u32) {
    let b = o >> vec4<u32>(2u);
    for (var c = 0u; c < 4u; c++) {
        let c0 = q4k_coeffs(b.x, c);
        let c1 = q4k_coeffs(b.y, c);
        let c2 = q4k_coeffs(b.z, c);
        let c3 = q4k_coeffs(b.w, c);
        for (var i = 0u; i < 8u; i++) {
            let q = w4(b + vec4<u32>(4u + 8u * c + i));
            take4(
                c0.x * nibbles_lo(q.x) - c0.y,
                c1.x * nibbles_lo(q.y) - c1.y,
                c2.x * nibbles_lo(q.z) - c2.y,
                c3.x * nibbles_lo(q.w) - c3.y,
                k0 + 64u * c + 4u * i,
            );
            take4(
                c0.z * nibbles_hi(q.x) - c0.w,
                c1.z * nibbles_hi(q.y) - c1.w,
                c2.z * nibbles_hi(q.z) - c2.w,
                c3.z * nibbles_hi(q.w) - c3.w,
                k0 + 64u * c + 32u + 4u * i,
            );
        }
    }
}

// Q6_K's four 6-bit element words for row component r: low nibbles a (elements l) and c
// (l + 32), high bits hb; as q6_k_block.
fn q6k_quads(a: u32, c: u32, hb: u32) -> mat4x4<f32> {
    let q1 = (a & 0x0f0f0f0fu) | ((hb & 0x03030303u) << 4u);
    let q2 = (c & 0x0f0f0f0fu) | (((hb >> 2u) & 0x03030303u) << 4u);
    let q3 = ((a >> 4u) & 0x0f0f0f0fu) | (((hb >> 4u) & 0x03030303u) << 4u);
    let q4 = ((c >> 4u) & 0x0f0f0f0fu) | (((hb >> 6u) & 0x03030303u) << 4u);
    return mat4x4<f32>(
        bytes_u(q1) - 32.0,
        bytes_u(q2) - 32.0,
        bytes_u(q3) - 32.0,
        bytes_u(q4) - 32.0,
    );
}

fn q6_k_block4(o: vec4<u32>, k0: u32) {
    let d = half_at4(o + vec4<u32>(208u));
    for (var h = 0u; h < 2u; h++) {
        let ql = o + vec4<u32>(64u * h);
        let qh = o + vec4<u32>(128u + 32u * h);
        let sc = o + vec4<u32>(192u + 8u * h);
        let k = k0 + 128u * h;
        for (var i = 0u; i < 8u; i++) {
            let a = bytes4v(ql + vec4<u32>(4u * i));
            let c = bytes4v(ql + vec4<u32>(32u + 4u * i));
            let hb = bytes4v(qh + vec4<u32>(4u * i));
            let r0 = q6k_quads(a.x, c.x, hb.x);
            let r1 = q6k_quads(a.y, c.y, hb.y);
            let r2 = q6k_quads(a.z, c.z, hb.z);
            let r3 = q6k_quads(a.w, c.w, hb.w);
            let is = i >> 2u;
            let s1 = d * sbyte_at4(sc + vec4<u32>(is));
            let s2 = d * sbyte_at4(sc + vec4<u32>(is + 2u));
            let s3 = d * sbyte_at4(sc + vec4<u32>(is + 4u));
            let s4 = d * sbyte_at4(sc + vec4<u32>(is + 6u));
            take4(s1.x * r0[0], s1.y * r1[0], s1.z * r2[0], s1.w * r3[0], k + 4u * i);
            take4(s2.x * r0[1], s2.y * r1[1], s2.z * r2[1], s2.w * r3[1], k + 32u + 4u * i);
            take4(s3.x * r0[2], s3.y * r1[2], s3.z * r2[2], s3.w * r3[2], k + 64u + 4u * i);
            take4(s4.x * r0[3], s4.y * r1[3], s4.z * r2[3], s4.w * r3[3], k + 96u + 4u * i);
        }
    }
}

// Decodes the blocks at byte offsets o (four rows) whose first element is element k0.
fn decode_block4(o: vec4<u32>, k0: u32) {
    switch KIND {
        case 1u: { f16_block4(o, k0); }
        case 2u: { q4_0_block4(o, k0); }
        case 3u: { q4_1_block4(o, k0); }
        case 8u: { q8_0_block4(o, k0); }
        case Q8_0_PLANES: { q8_0_planes_block4(o, k0); }
        case 12u: { q4_k_block4(o, k0); }
        case 14u: { q6_k_block4(o, k0); }
        default: { f32_block4(o, k0); }
    }
}
