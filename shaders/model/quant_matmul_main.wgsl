// The entry point of quant_matmul.wgsl for adapters without subgroup operations (and
// for kernels whose weight type the subgroup entry does not stage): every invocation
// reads x itself (quant_matmul_plain.wgsl).

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    product(wid.x + wid.y * nwg.x, lid);
}
