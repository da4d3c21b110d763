// Shared by every attention kernel: the parameters uniform and the masking rule.
// Concatenated in front of each kernel's own source (no text substitution).

// Must match `Params` in src/gpu/params.rs.
struct Params {
    len_q: u32,
    len_k: u32,
    dim: u32,
    dim_v: u32,
    heads_q: u32,
    heads_kv: u32,
    group: u32,
    bh_start: u32,
    bh_count: u32,
    row_start: u32,
    row_count: u32,
    // Logical element index where each binding window starts. Indices are computed
    // logically (as if the whole tensor were bound) and this is subtracted, in wrapping
    // u32 arithmetic, which stays exact because every window is under 4 GiB.
    q_base: u32,
    k_base: u32,
    v_base: u32,
    o_base: u32,
    lse_base: u32,
    mask_base: u32,
    mask_stride_b: u32,
    mask_stride_h: u32,
    mask_stride_i: u32,
    mask_stride_j: u32,
    // 0 none, 1 boolean (bytes packed in u32 words), 2 additive f32.
    mask_kind: u32,
    // Bit 0 causal, bit 1 per-batch key lengths, bit 2 write lse.
    flags: u32,
    // p(i) = i + pos_offset.
    pos_offset: i32,
    // Window reach; unbounded sides hold 2^30, beyond any valid position.
    win_left: i32,
    win_right: i32,
    scale: f32,
    // Logical weight index where the weights window starts (weights.wgsl).
    w_base: u32,
}

@group(0) @binding(0) var<uniform> params: Params;

const FLAG_CAUSAL: u32 = 1u;
const FLAG_KV_LENS: u32 = 2u;
const FLAG_WRITE_LSE: u32 = 4u;
const MASK_NONE: u32 = 0u;
const MASK_BOOL: u32 = 1u;
const MASK_ADDITIVE: u32 = 2u;

// The bit patterns of -inf and a quiet NaN, read from private variables so that the
// bitcasts below are runtime expressions: WGSL makes a constant expression that
// evaluates to inf or NaN a shader-creation error (browsers' compilers enforce it).
var<private> NEG_INF_BITS: u32 = 0xff800000u;
var<private> QUIET_NAN_BITS: u32 = 0x7fc00000u;

fn neg_inf() -> f32 {
    return bitcast<f32>(NEG_INF_BITS);
}

fn quiet_nan() -> f32 {
    return bitcast<f32>(QUIET_NAN_BITS);
}

// NaN test on the bits: comparisons cannot be trusted to see NaN on every driver.
fn is_nan(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;
}

// -inf test on the bits, for the same reason: `x != -inf` is false for NaN on drivers
// that compile it as an ordered comparison.
fn is_neg_inf(x: f32) -> bool {
    return bitcast<u32>(x) == 0xff800000u;
}

// How every kernel finishes a row (fused.wgsl, softmax.wgsl, combine.wgsl): a row that
// met a NaN (a NaN or +inf logit, a NaN partial) is NaN throughout; a row with no
// allowed key gives out 0 and lse -inf; any other row keeps what it computed.
// Branch-free: kernels call it for every element of a row.
fn finish_out(y: f32, nan: bool, empty: bool) -> f32 {
    return select(select(y, 0.0, empty), quiet_nan(), nan);
}

// The row's log-sum-exp from its running max `m` and sum `l`, finished as above.
fn finish_lse(m: f32, l: f32, nan: bool, empty: bool) -> f32 {
    if nan {
        return quiet_nan();
    }
    if empty {
        return neg_inf();
    }
    return m + log(l);
}

// Flattened dispatch: a 2-D grid of workgroups read as one linear index, so a launch
// may exceed the 65,535-per-dimension limit.
fn linear_workgroup(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wid.x + wid.y * nwg.x;
}

// Logical (b, h) of a flattened query head, and its key/value head.
fn kv_head_of(bh: u32) -> u32 {
    let b = bh / params.heads_q;
    let h = bh % params.heads_q;
    return b * params.heads_kv + h / params.group;
}
