// The subgroup entry's entry point (quant_matmul_sg.wgsl): W read from storage, four
// columns an invocation.

// W's words again, four at a time (the same buffer as `w`), for the loads `words5` and
// `words9` make.
@group(0) @binding(10) var<storage, read> wv: array<vec4<u32>>;

// Words 4 i .. 4 i + 4 of W.
fn wq(i: u32) -> vec4<u32> {
    return wv[i];
}

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
    @builtin(subgroup_invocation_id) sl: u32,
) {
    lane = sl;
    product(wid.x + wid.y * nwg.x, lid);
}
