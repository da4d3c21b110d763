// The entry point of quant_matmul.wgsl for GPUs and few rows of x (a decoding step's
// one, a short prompt's four a workgroup): K is split across lanes. The 64 invocations
// of a workgroup are four groups of SPLIT = 16 lanes; each group owns four columns of y
// (so a workgroup owns 16), and lane s of a group decodes blocks s, s + 16, s + 32, ...
// of the group's four W rows, so that neighbouring lanes read neighbouring blocks of the
// same rows (coalesced on a GPU) rather than rows `row_bytes` apart, as the entry with an
// invocation per column does. Each lane keeps its own partial sums; the group's sixteen
// are added through workgroup memory, and the group's first lane finishes the columns
// as the other entries do (the same epilogues, the same norm scale over the row's whole
// sum of squares). x is read from storage (XU off): lanes read different x elements, and
// a uniform buffer read at divergent addresses is serialised on GPUs.

// Lanes that split one group's K.
const SPLIT: u32 = 16u;
// Column groups of four per workgroup (64 / SPLIT).
const GROUPS: u32 = 4u;

// Each lane's partial sums: acc, acc1, acc2, acc3, then the sums of squares, 64 each.
var<workgroup> part: array<vec4<f32>, 320>;

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let g = wid.x + wid.y * nwg.x;
    let s = lid % SPLIT;
    let group = lid / SPLIT;
    let col_groups = (p.cols + GROUPS * COLS - 1u) / (GROUPS * COLS);
    let c = ((g % col_groups) * GROUPS + group) * COLS;
    let m0 = (g / col_groups) * ROWS;
    // No lane leaves before the barrier: columns and rows past the last repeat the last
    // one's loads, and their sums are dropped by `finish_tile`.
    sums(m0, c, s, SPLIT);
    part[lid] = acc;
    part[64u + lid] = acc1;
    part[128u + lid] = acc2;
    part[192u + lid] = acc3;
    part[256u + lid] = ss;
    workgroupBarrier();
    if (s != 0u) {
        return;
    }
    // In a fixed order, so a result does not depend on the adapter's scheduling.
    for (var i = 1u; i < SPLIT; i++) {
        acc += part[lid + i];
        acc1 += part[64u + lid + i];
        acc2 += part[128u + lid + i];
        acc3 += part[192u + lid + i];
        ss += part[256u + lid + i];
    }
    finish_tile(m0, c);
}
