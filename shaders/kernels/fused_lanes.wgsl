// Fused flash attention for adapters whose subgroups are the SIMD lanes of a CPU (the
// same computation, options and row rule as fused.wgsl; see there and
// src/reference.rs). With PARTIAL it is the first pass of split-KV over key ranges.
//
// Why this shape. On a software rasteriser every load from a storage buffer or from
// workgroup memory is a loop over the lanes, one scalar at a time, whatever the
// address; arithmetic on private values is one SIMD instruction for all lanes, and a
// subgroup broadcast from a constant lane is a register shuffle. So here a workgroup is
// one subgroup of SG invocations, and each invocation owns R query rows, their Q and
// output rows held as named private variables. The workgroup walks its keys SG at a
// time: lane c loads key c's K and V rows (each element is loaded once, by one lane),
// and every lane takes them from lane c with subgroupBroadcast, so that each loaded
// vec4 feeds SG * R products. There is no workgroup memory and no barrier, and nothing
// reduces across lanes: a row's maximum, sum and output stay in its invocation.
//
// The Rust side (src/gpu/kernels/fused_lanes.rs) writes `main`: every loop over rows,
// keys of a block and vec4 columns is unrolled into named variables (no private array
// is indexed at run time, which would be a per-lane loop again); only the key loop
// remains. Scores stay in natural units, as in fused_tiled.wgsl, and each difference
// from the row maximum is scaled by log2(e) for one exp2.
//
// The kernel is offered only where the adapter's subgroup size is fixed at SG
// (src/gpu/kernels/fused_lanes.rs); `main` still checks that its lanes are the
// workgroup's invocations in order and otherwise writes NaN rather than a wrong result.

// Write partials for combine.wgsl instead of the output.
override PARTIAL: bool = false;

const LOG2E: f32 = 1.4426950408889634;

// One row's probabilities for four keys: exp2 of the distance below the running
// maximum m, or 0 while the row has no allowed key (m still -inf).
fn probs4(x: vec4<f32>, m: f32, none: bool) -> vec4<f32> {
    return select(exp2((x - vec4(m)) * LOG2E), vec4(0.0), none);
}

// Out chunk o plus weight p times value chunk v, where a weight of exactly 0 adds
// nothing even when v holds a NaN or an infinity (the reference's rule).
fn add_guarded(o: vec4<f32>, p: f32, v: vec4<f32>) -> vec4<f32> {
    return select(fma(vec4(p), v, o), o, p == 0.0);
}

MAIN
