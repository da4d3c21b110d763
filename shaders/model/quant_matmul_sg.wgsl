// The entry point of quant_matmul.wgsl on a CPU driver's 8-lane subgroups (lavapipe), for
// one row of x from the uniform copy (XU) and the 32-element block types (Q4_0, Q4_1,
// Q8_0): each lane of a subgroup loads one four-element chunk of a block's 32 x elements
// (normed when NORM) and the subgroup shares them by broadcasts, instead of every lane
// gathering all 32. A load from the uniform copy is a gather over the lanes, 32 scalar
// loads a vector on lavapipe, and these gathers were most of a decoding step once the
// weights' own loads were few. The decoders are unrolled so that every broadcast reads a
// constant lane. Needs subgroups of at least 8 lanes (the launcher checks); lanes past 8
// load copies of the first 8's chunks.

// This invocation's lane in its subgroup.
var<private> lane: u32;
// NORM: the sum of squares of this lane's own chunks of x.
var<private> ss_own: f32;

// A block's 32 x elements, four a field (xk holds elements 4k .. 4k + 4), and their sum.
struct XBlock {
    x0: vec4<f32>,
    x1: vec4<f32>,
    x2: vec4<f32>,
    x3: vec4<f32>,
    x4: vec4<f32>,
    x5: vec4<f32>,
    x6: vec4<f32>,
    x7: vec4<f32>,
    sum: f32,
}

// Whether this pipeline stages x through the subgroup (otherwise it decodes as the
// plain entry does).
fn staged() -> bool {
    return XU && ROWS == 1u && (KIND == 2u || KIND == 3u || KIND == 8u || KIND == Q8_0_PLANES);
}

// Elements k0 .. k0 + 32 of x, one chunk loaded by each of the first eight lanes.
fn stage(k0: u32) -> XBlock {
    let k = k0 + 4u * (lane & 7u);
    var v = xv(xr.x + k);
    if (NORM) {
        ss_own += dot(v, v);
        v = v * nv(k);
    }
    let x0 = subgroupBroadcast(v, 0u);
    let x1 = subgroupBroadcast(v, 1u);
    let x2 = subgroupBroadcast(v, 2u);
    let x3 = subgroupBroadcast(v, 3u);
    let x4 = subgroupBroadcast(v, 4u);
    let x5 = subgroupBroadcast(v, 5u);
    let x6 = subgroupBroadcast(v, 6u);
    let x7 = subgroupBroadcast(v, 7u);
    let s = (x0 + x1) + (x2 + x3) + ((x4 + x5) + (x6 + x7));
    return XBlock(x0, x1, x2, x3, x4, x5, x6, x7, s.x + s.y + s.z + s.w);
}

// Four W rows' elements against one chunk of x (ROWS is 1 here).
fn take4x(a: vec4<f32>, b: vec4<f32>, c: vec4<f32>, d: vec4<f32>, x: vec4<f32>) {
    acc += vec4<f32>(dot(a, x), dot(b, x), dot(c, x), dot(d, x));
}

// The 4-bit quants of word i of four rows (lanes x, y, z, w of q: low nibbles are
// elements 4i.., high ones 16 + 4i..) against x: one sum a row. Q4_0's d (q - 8) and
// Q4_1's d q + m are applied per block to these sums and to the block's x sum, as ggml's
// dot products do, rather than to each element.
fn nibble_dots(q: vec4<u32>, lo: vec4<f32>, hi: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(
        dot(nibbles_lo(q.x), lo) + dot(nibbles_hi(q.x), hi),
        dot(nibbles_lo(q.y), lo) + dot(nibbles_hi(q.y), hi),
        dot(nibbles_lo(q.z), lo) + dot(nibbles_hi(q.z), hi),
        dot(nibbles_lo(q.w), lo) + dot(nibbles_hi(q.w), hi),
    );
}

fn q4_0_staged(o: vec4<u32>, x: XBlock) {
    // An 18-byte block lies in words a .. a + 4, as a Q8_0 block's start does (its
    // scale and quant words come out the same way).
    let a = o >> vec4<u32>(2u);
    let mid = (o & vec4<u32>(2u)) != vec4<u32>(0u);
    let r0 = words5(a.x);
    let r1 = words5(a.y);
    let r2 = words5(a.z);
    let r3 = words5(a.w);
    let w0 = vec4<u32>(r0.lo.x, r1.lo.x, r2.lo.x, r3.lo.x);
    let w1 = vec4<u32>(r0.lo.y, r1.lo.y, r2.lo.y, r3.lo.y);
    let w2 = vec4<u32>(r0.lo.z, r1.lo.z, r2.lo.z, r3.lo.z);
    let w3 = vec4<u32>(r0.lo.w, r1.lo.w, r2.lo.w, r3.lo.w);
    let w4_ = vec4<u32>(r0.last, r1.last, r2.last, r3.last);
    let d = q8_0_scales(w0, mid);
    let n = nibble_dots(q8_0_quants(w0, w1, mid), x.x0, x.x4)
        + nibble_dots(q8_0_quants(w1, w2, mid), x.x1, x.x5)
        + nibble_dots(q8_0_quants(w2, w3, mid), x.x2, x.x6)
        + nibble_dots(q8_0_quants(w3, w4_, mid), x.x3, x.x7);
    acc += d * (n - 8.0 * x.sum);
}

// Four Q4_1 rows' sums over a block: each row's d/m word (lanes of dm) and quant words
// 0 .. 3 (q0 .. q3), against the staged x.
fn q4_1_dots(dm: vec4<u32>, q0: vec4<u32>, q1: vec4<u32>, q2: vec4<u32>, q3: vec4<u32>, x: XBlock) -> vec4<f32> {
    let m0 = halves(dm.x);
    let m1 = halves(dm.y);
    let m2 = halves(dm.z);
    let m3 = halves(dm.w);
    let n = nibble_dots(q0, x.x0, x.x4)
        + nibble_dots(q1, x.x1, x.x5)
        + nibble_dots(q2, x.x2, x.x6)
        + nibble_dots(q3, x.x3, x.x7);
    return vec4<f32>(m0.x, m1.x, m2.x, m3.x) * n + vec4<f32>(m0.y, m1.y, m2.y, m3.y) * x.sum;
}

fn q4_1_staged(o: vec4<u32>, x: XBlock) {
    let b = o >> vec4<u32>(2u);
    let r0 = words5(b.x);
    let r1 = words5(b.y);
    let r2 = words5(b.z);
    let r3 = words5(b.w);
    acc += q4_1_dots(
        vec4<u32>(r0.lo.x, r1.lo.x, r2.lo.x, r3.lo.x),
        vec4<u32>(r0.lo.y, r1.lo.y, r2.lo.y, r3.lo.y),
        vec4<u32>(r0.lo.z, r1.lo.z, r2.lo.z, r3.lo.z),
        vec4<u32>(r0.lo.w, r1.lo.w, r2.lo.w, r3.lo.w),
        vec4<u32>(r0.last, r1.last, r2.last, r3.last),
        x,
    );
}

// Quant word of four Q8_0 rows from the block words before and after it (see
// q8_0_block4) against x: one unscaled sum a row (the block's scale is applied once to
// the block's sums, as for Q4_0 and Q4_1).
fn q8_0_word(prev: vec4<u32>, next: vec4<u32>, mid: vec4<bool>, x: vec4<f32>) -> vec4<f32> {
    return quant_dots(q8_0_quants(prev, next, mid), x);
}

// Words a .. a + 8 of W: a Q8_0 block and the word it ends in (`lo` 0 .. 3, `hi` 4 .. 7).
struct Words9 {
    lo: vec4<u32>,
    hi: vec4<u32>,
    last: u32,
}

// Words a .. a + 8 from the three aligned four-word loads that hold them (`wq`), moved
// down by a % 4 words in two selects. On lavapipe each storage load is a loop over the
// lanes whatever its width, so three loads of four words cost about a third of nine
// loads of one (the logits head of SmolLM2: 49,152 Q8_0 rows, 9.3 against 6.1 ms a
// decoding step when six of the nine loads were left out).
fn words9(a: u32) -> Words9 {
    let v = a >> 2u;
    let p = wq(v);
    let q = wq(v + 1u);
    let r = wq(v + 2u);
    let odd = (a & 1u) != 0u;
    let p1 = select(p, vec4<u32>(p.yzw, q.x), odd);
    let q1 = select(q, vec4<u32>(q.yzw, r.x), odd);
    let r1 = select(r.xyz, r.yzw, odd);
    let two = (a & 2u) != 0u;
    return Words9(
        select(p1, vec4<u32>(p1.zw, q1.xy), two),
        select(q1, vec4<u32>(q1.zw, r1.xy), two),
        select(r1.x, r1.z, two),
    );
}

// Words a .. a + 4 of W (`lo` 0 .. 3): a Q4_1 block, or the words a Q4_0 block lies in.
struct Words5 {
    lo: vec4<u32>,
    last: u32,
}

// Words a .. a + 4 from the two aligned four-word loads that hold them, as `words9`.
fn words5(a: u32) -> Words5 {
    let v = a >> 2u;
    let p = wq(v);
    let q = wq(v + 1u);
    let odd = (a & 1u) != 0u;
    let p1 = select(p, vec4<u32>(p.yzw, q.x), odd);
    let q1 = select(q.xyz, q.yzw, odd);
    let two = (a & 2u) != 0u;
    return Words5(select(p1, vec4<u32>(p1.zw, q1.xy), two), select(q1.x, q1.z, two));
}

fn q8_0_staged(o: vec4<u32>, x: XBlock) {
    let a = o >> vec4<u32>(2u);
    let mid = (o & vec4<u32>(2u)) != vec4<u32>(0u);
    let r0 = words9(a.x);
    let r1 = words9(a.y);
    let r2 = words9(a.z);
    let r3 = words9(a.w);
    let w0 = vec4<u32>(r0.lo.x, r1.lo.x, r2.lo.x, r3.lo.x);
    let w1 = vec4<u32>(r0.lo.y, r1.lo.y, r2.lo.y, r3.lo.y);
    let w2 = vec4<u32>(r0.lo.z, r1.lo.z, r2.lo.z, r3.lo.z);
    let w3 = vec4<u32>(r0.lo.w, r1.lo.w, r2.lo.w, r3.lo.w);
    let w4_ = vec4<u32>(r0.hi.x, r1.hi.x, r2.hi.x, r3.hi.x);
    let w5 = vec4<u32>(r0.hi.y, r1.hi.y, r2.hi.y, r3.hi.y);
    let w6 = vec4<u32>(r0.hi.z, r1.hi.z, r2.hi.z, r3.hi.z);
    let w7 = vec4<u32>(r0.hi.w, r1.hi.w, r2.hi.w, r3.hi.w);
    let w8 = vec4<u32>(r0.last, r1.last, r2.last, r3.last);
    let d = q8_0_scales(w0, mid);
    let n = (q8_0_word(w0, w1, mid, x.x0) + q8_0_word(w1, w2, mid, x.x1))
        + (q8_0_word(w2, w3, mid, x.x2) + q8_0_word(w3, w4_, mid, x.x3))
        + ((q8_0_word(w4_, w5, mid, x.x4) + q8_0_word(w5, w6, mid, x.x5))
        + (q8_0_word(w6, w7, mid, x.x6) + q8_0_word(w7, w8, mid, x.x7)));
    acc += d * n;
}

// Q8_0 in planes (Q8_0_PLANES): each row's quants are two aligned four-word loads, and
// one load holds the scales of eight consecutive rows, where a block as the file stores
// it straddles three. The four rows are consecutive, c0 .. c0 + 4 with c0 a multiple of
// four (`product`'s columns, `col`); for a lane past the last column, which repeats the
// last row's loads, the scales read are some others', and its sums are dropped. Block b
// starts at element k0 = 32 b.
fn q8_0_planes_staged(o: vec4<u32>, k0: u32, x: XBlock) {
    let at = ((k0 >> 5u) * plane_rows8() + col) * 2u;
    let sv = wq((p.cols * p.row_bytes + at) >> 4u);
    let sw = select(sv.xy, sv.zw, (at & 8u) != 0u);
    let d = vec4<f32>(halves(sw.x), halves(sw.y));
    // Words 0 .. 3 (lo) and 4 .. 7 (hi) of each row's quants.
    let a = o >> vec4<u32>(4u);
    let lo0 = wq(a.x);
    let hi0 = wq(a.x + 1u);
    let lo1 = wq(a.y);
    let hi1 = wq(a.y + 1u);
    let lo2 = wq(a.z);
    let hi2 = wq(a.z + 1u);
    let lo3 = wq(a.w);
    let hi3 = wq(a.w + 1u);
    let w0 = vec4<u32>(lo0.x, lo1.x, lo2.x, lo3.x);
    let w1 = vec4<u32>(lo0.y, lo1.y, lo2.y, lo3.y);
    let w2 = vec4<u32>(lo0.z, lo1.z, lo2.z, lo3.z);
    let w3 = vec4<u32>(lo0.w, lo1.w, lo2.w, lo3.w);
    let w4_ = vec4<u32>(hi0.x, hi1.x, hi2.x, hi3.x);
    let w5 = vec4<u32>(hi0.y, hi1.y, hi2.y, hi3.y);
    let w6 = vec4<u32>(hi0.z, hi1.z, hi2.z, hi3.z);
    let w7 = vec4<u32>(hi0.w, hi1.w, hi2.w, hi3.w);
    let n = (quant_dots(w0, x.x0) + quant_dots(w1, x.x1))
        + (quant_dots(w2, x.x2) + quant_dots(w3, x.x3))
        + ((quant_dots(w4_, x.x4) + quant_dots(w5, x.x5))
        + (quant_dots(w6, x.x6) + quant_dots(w7, x.x7)));
    acc += d * n;
}

// Quant word q of four Q8_0 rows (lanes of q) against x: one unscaled sum a row.
fn quant_dots(q: vec4<u32>, x: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(dot(bytes_i(q.x), x), dot(bytes_i(q.y), x), dot(bytes_i(q.z), x), dot(bytes_i(q.w), x));
}

fn block4(o: vec4<u32>, k0: u32) {
    if (!staged()) {
        decode_block4(o, k0);
        return;
    }
    let x = stage(k0);
    switch KIND {
        case 2u: {
            q4_0_staged(o, x);
        }
        case 3u: {
            q4_1_staged(o, x);
        }
        case Q8_0_PLANES: {
            q8_0_planes_staged(o, k0, x);
        }
        default: {
            q8_0_staged(o, x);
        }
    }
}

// A lane with nothing to store leaves only with its whole subgroup, whose broadcasts
// need every lane.
fn idle(past_the_end: bool) -> bool {
    return subgroupAll(past_the_end);
}

// The row's sum of squares: staged, the first eight lanes' own sums together.
fn row_ss(r: u32) -> f32 {
    if (!staged()) {
        return ss[r];
    }
    return subgroupBroadcast(ss_own, 0u) + subgroupBroadcast(ss_own, 1u)
        + subgroupBroadcast(ss_own, 2u) + subgroupBroadcast(ss_own, 3u)
        + subgroupBroadcast(ss_own, 4u) + subgroupBroadcast(ss_own, 5u)
        + subgroupBroadcast(ss_own, 6u) + subgroupBroadcast(ss_own, 7u);
}
