// The subgroup entry's entry point (quant_matmul_sg.wgsl): W read from storage, four
// columns an invocation.

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
