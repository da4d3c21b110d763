// The entry point of quant_matmul.wgsl that reads W from uniform buffers, for rows of x
// on a CPU driver's 8-lane subgroups (lavapipe) and Q4_1 blocks (the layers of SmolLM2's
// file) or Q4_0 ones (rows of whole words: their blocks in pairs). Mesa 22.3's lavapipe loads from a storage buffer lane by lane, with a
// bounds check and a branch per lane and per word, and those loads were a third of a
// decoding step; from a uniform buffer a load is one gather over the lanes. A uniform
// binding holds at most 64 KiB, so such a matrix is stored as pages (QuantMatrix's
// `Pages`): a dispatch binds the PAGES pages of one chunk, and invocation s owns slot s
// of every page, twelve columns of y (four from each group of four pages: columns
// chunk * 12 S + 4 S g + 4 s + j, S = page_rows). x is staged through the subgroup once
// for all twelve (quant_matmul_sg.wgsl's `stage`), and every column is finished as the
// other entries finish theirs. Each page is read at a constant binding, so no load
// depends on a branch. Workgroups of eight invocations, so that a chunk of S slots
// makes S / 8 workgroups for the driver's threads, for each row of x: a dispatch covers
// the rows of x the uniform copy holds (x_off is the first's, row0 its row of y), and
// workgroup g takes row g / (S / 8). Each row reads the pages again; from uniform
// buffers that costs less than sharing the words among rows from storage, as the other
// entries do (a 16-token pass of SmolLM2 on Mesa 22.3: 0.24 to 0.26 s against 0.56 to
// 0.68).

// One page: the bytes of `page_rows` W rows, as words (a binding of 64 KiB).
struct Page {
    v: array<vec4<u32>, 4096>,
}

@group(0) @binding(10) var<uniform> page0: Page;
@group(0) @binding(11) var<uniform> page1: Page;
@group(0) @binding(12) var<uniform> page2: Page;
@group(0) @binding(13) var<uniform> page3: Page;
@group(0) @binding(14) var<uniform> page4: Page;
@group(0) @binding(15) var<uniform> page5: Page;
@group(0) @binding(16) var<uniform> page6: Page;
@group(0) @binding(17) var<uniform> page7: Page;
@group(0) @binding(18) var<uniform> page8: Page;
@group(0) @binding(19) var<uniform> page9: Page;
@group(0) @binding(20) var<uniform> page10: Page;
@group(0) @binding(21) var<uniform> page11: Page;

// Word i of pages 0 .. 3, one page a lane (the chunk's columns 4 s ..).
fn words0(i: u32) -> vec4<u32> {
    return vec4<u32>(
        page0.v[i >> 2u][i & 3u],
        page1.v[i >> 2u][i & 3u],
        page2.v[i >> 2u][i & 3u],
        page3.v[i >> 2u][i & 3u],
    );
}

// Word i of pages 4 .. 7, one page a lane (the chunk's columns 4 S + 4 s ..).
fn words1(i: u32) -> vec4<u32> {
    return vec4<u32>(
        page4.v[i >> 2u][i & 3u],
        page5.v[i >> 2u][i & 3u],
        page6.v[i >> 2u][i & 3u],
        page7.v[i >> 2u][i & 3u],
    );
}

// Word i of pages 8 .. 11, one page a lane (the chunk's columns 8 S + 4 s ..).
fn words2(i: u32) -> vec4<u32> {
    return vec4<u32>(
        page8.v[i >> 2u][i & 3u],
        page9.v[i >> 2u][i & 3u],
        page10.v[i >> 2u][i & 3u],
        page11.v[i >> 2u][i & 3u],
    );
}

// Q4_1 sums of the block at word i of pages 0 .. 3.
fn group0(i: u32, x: XBlock) -> vec4<f32> {
    return q4_1_dots(
        words0(i + 0u),
        words0(i + 1u),
        words0(i + 2u),
        words0(i + 3u),
        words0(i + 4u),
        x,
    );
}

// Q4_1 sums of the block at word i of pages 4 .. 7.
fn group1(i: u32, x: XBlock) -> vec4<f32> {
    return q4_1_dots(
        words1(i + 0u),
        words1(i + 1u),
        words1(i + 2u),
        words1(i + 3u),
        words1(i + 4u),
        x,
    );
}

// Q4_1 sums of the block at word i of pages 8 .. 11.
fn group2(i: u32, x: XBlock) -> vec4<f32> {
    return q4_1_dots(
        words2(i + 0u),
        words2(i + 1u),
        words2(i + 2u),
        words2(i + 3u),
        words2(i + 4u),
        x,
    );
}

// Two Q4_0 blocks of four rows (36 bytes, nine words w0 .. w8 a row, lanes of each are the
// rows): the first block's scale is the low half of w0 and its quant words straddle w0 ..
// w4; the second's scale is the high half of w4 and its quants are w5 .. w8. Against the
// staged x of the two blocks, as q4_0_staged sums a block.
fn q4_0_pair(
    w0: vec4<u32>, w1: vec4<u32>, w2: vec4<u32>, w3: vec4<u32>, w4: vec4<u32>,
    w5: vec4<u32>, w6: vec4<u32>, w7: vec4<u32>, w8: vec4<u32>,
    xa: XBlock, xb: XBlock,
) -> vec4<f32> {
    let at = vec4<bool>(false);
    let mid = vec4<bool>(true);
    let na = nibble_dots(q8_0_quants(w0, w1, at), xa.x0, xa.x4)
        + nibble_dots(q8_0_quants(w1, w2, at), xa.x1, xa.x5)
        + nibble_dots(q8_0_quants(w2, w3, at), xa.x2, xa.x6)
        + nibble_dots(q8_0_quants(w3, w4, at), xa.x3, xa.x7);
    let nb = nibble_dots(w5, xb.x0, xb.x4)
        + nibble_dots(w6, xb.x1, xb.x5)
        + nibble_dots(w7, xb.x2, xb.x6)
        + nibble_dots(w8, xb.x3, xb.x7);
    return q8_0_scales(w0, at) * (na - 8.0 * xa.sum) + q8_0_scales(w4, mid) * (nb - 8.0 * xb.sum);
}

// Q4_0 sums of the block pair at word i of pages 0 .. 3.
fn pair0(i: u32, xa: XBlock, xb: XBlock) -> vec4<f32> {
    return q4_0_pair(
        words0(i + 0u),
        words0(i + 1u),
        words0(i + 2u),
        words0(i + 3u),
        words0(i + 4u),
        words0(i + 5u),
        words0(i + 6u),
        words0(i + 7u),
        words0(i + 8u),
        xa,
        xb,
    );
}

// Q4_0 sums of the block pair at word i of pages 4 .. 7.
fn pair1(i: u32, xa: XBlock, xb: XBlock) -> vec4<f32> {
    return q4_0_pair(
        words1(i + 0u),
        words1(i + 1u),
        words1(i + 2u),
        words1(i + 3u),
        words1(i + 4u),
        words1(i + 5u),
        words1(i + 6u),
        words1(i + 7u),
        words1(i + 8u),
        xa,
        xb,
    );
}

// Q4_0 sums of the block pair at word i of pages 8 .. 11.
fn pair2(i: u32, xa: XBlock, xb: XBlock) -> vec4<f32> {
    return q4_0_pair(
        words2(i + 0u),
        words2(i + 1u),
        words2(i + 2u),
        words2(i + 3u),
        words2(i + 4u),
        words2(i + 5u),
        words2(i + 6u),
        words2(i + 7u),
        words2(i + 8u),
        xa,
        xb,
    );
}

// Words 4 i .. 4 i + 4 of W from storage: the paged entry decodes Q4_1 and Q4_0 from its
// pages, so its pipelines never call this (quant_matmul_sg.wgsl's `words5` and `words9`
// do, through the subgroup entry's wider binding).
fn wq(i: u32) -> vec4<u32> {
    return w4(vec4<u32>(4u * i) + vec4<u32>(0u, 1u, 2u, 3u));
}

@compute @workgroup_size(8)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
    @builtin(subgroup_invocation_id) sl: u32,
) {
    lane = sl;
    // Uniform across the workgroup: its row of x, and its group of eight slots.
    let groups = (p.page_rows + 7u) / 8u;
    let r = wid.x / groups;
    let s = (wid.x % groups) * 8u + lid;
    let past = s >= p.page_rows;
    // A lane past the last slot stays while its subgroup needs it for the broadcasts,
    // reading the last slot's words, and stores nothing.
    if (idle(past)) {
        return;
    }
    xr = vec4<u32>(p.x_off + r * p.x_stride);
    acc = vec4<f32>(0.0);
    acc1 = vec4<f32>(0.0);
    acc2 = vec4<f32>(0.0);
    let words = p.row_bytes / 4u;
    let base = min(s, p.page_rows - 1u) * words;
    let blocks = p.inner / 32u;
    if (KIND == 2u) {
        // Q4_0: a paged row is whole words, so its blocks come in pairs of nine words.
        for (var j = 0u; j < blocks / 2u; j++) {
            let xa = stage(j * 64u);
            let xb = stage(j * 64u + 32u);
            let i = base + j * 9u;
            acc += pair0(i, xa, xb);
            acc1 += pair1(i, xa, xb);
            acc2 += pair2(i, xa, xb);
        }
    } else {
        for (var b = 0u; b < blocks; b++) {
            let x = stage(b * 32u);
            let i = base + b * 5u;
            acc += group0(i, x);
            acc1 += group1(i, x);
            acc2 += group2(i, x);
        }
    }
    // Every lane, before any leaves: the norm's sum of squares takes broadcasts.
    let scale = norm_scale(0u);
    if (past) {
        return;
    }
    let m = p.row0 + r;
    let c = p.chunk * PAGES * p.page_rows + 4u * s;
    let g = 4u * p.page_rows;
    if (c < p.cols) {
        finish(m, c, acc * scale);
    }
    if (c + g < p.cols) {
        finish(m, c + g, acc1 * scale);
    }
    if (c + 2u * g < p.cols) {
        finish(m, c + 2u * g, acc2 * scale);
    }
}
