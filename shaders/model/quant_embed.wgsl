// out (rows, hidden) = rows ids of a (vocab, hidden) table kept as its GGUF blocks
// (quant_blocks.wgsl, which this source follows): each invocation decodes one block of
// one row. An id outside the table gives zeros (the host rejects such ids first).

// Must match `QuantEmbedParams` in src/model/ops/quant_embed.rs.
struct QuantEmbed {
    rows: u32,
    hidden: u32,
    vocab: u32,
    row_bytes: u32,
}

@group(0) @binding(0) var<uniform> p: QuantEmbed;
@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read> w: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

override KIND: u32 = 0u;

var<private> base: u32;

// The table's rows, for a table in planes (quant_blocks.wgsl's Q8_0_PLANES).
fn plane_rows() -> u32 {
    return p.vocab;
}

fn take(v: vec4<f32>, k: u32) {
    let i = base + k;
    out[i] = v.x;
    out[i + 1u] = v.y;
    out[i + 2u] = v.z;
    out[i + 3u] = v.w;
}

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let shape = block_shape();
    let per_row = p.hidden / shape.x;
    let i = (wid.x + wid.y * nwg.x) * 64u + lid;
    if (i >= p.rows * per_row) {
        return;
    }
    let m = i / per_row;
    let b = i % per_row;
    base = m * p.hidden;
    let id = ids[m];
    if (id >= p.vocab) {
        for (var k = 0u; k < shape.x; k += 4u) {
            take(vec4<f32>(0.0), b * shape.x + k);
        }
        return;
    }
    decode_block(id * p.row_bytes + b * shape.y, b * shape.x);
}
