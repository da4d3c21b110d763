// Rotary position embedding in place, in llama.cpp's GGUF layout: within each head,
// elements 2i and 2i + 1 are pair i, rotated by the angle of (position, i), whose cos
// and sin come from a table computed on the host in f64.
// x holds (heads, cap, dim); the rows off .. off + rows are rotated as positions
// pos0 .. pos0 + rows. One invocation per pair.

// Must match `RopeParams` in src/model/ops/rope.rs.
struct Rope {
    rows: u32,
    heads: u32,
    dim: u32,
    cap: u32,
    off: u32,
    pos0: u32,
    // Positions the table holds.
    positions: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Rope;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
// (positions, dim / 2, 2): cos, sin.
@group(0) @binding(2) var<storage, read> table: array<f32>;

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let half = p.dim / 2u;
    let i = (wid.x + wid.y * nwg.x) * 64u + lid;
    // The last workgroup's tail past the pairs there are.
    if (i >= p.heads * p.rows * half) {
        return;
    }
    let pair = i % half;
    let t = (i / half) % p.rows;
    let h = i / (half * p.rows);
    let pos = p.pos0 + t;
    // A position past the table (the host sizes it to the context) is left as is.
    if (pos >= p.positions) {
        return;
    }
    let e = (h * p.cap + p.off + t) * p.dim + 2u * pair;
    let c = table[(pos * half + pair) * 2u];
    let s = table[(pos * half + pair) * 2u + 1u];
    let a = x[e];
    let b = x[e + 1u];
    x[e] = a * c - b * s;
    x[e + 1u] = a * s + b * c;
}
