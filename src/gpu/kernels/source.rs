//! WGSL sources of the attention and dense-layer kernels, each made by the one recipe of
//! [`crate::gpu::kernels::wgsl`]: preludes from `shaders/prelude/`, then the kernel from
//! `shaders/kernels/`. Every kernel starts with the shared prelude (`common.wgsl`) or its
//! own (`matmul.wgsl`); kernels that mask add the masking rule (`masking.wgsl`). Kernels
//! that read q, k and v in either precision start with an element-type prelude
//! (`elem_f32.wgsl` or `elem_f16.wgsl`) that names their storage type `elem`. The
//! split-KV kernels share `launch.wgsl` (key ranges, row packing), and the two that loop
//! over keys also `tile.wgsl` (their common bindings; which head, rows and keys a
//! workgroup serves) and a K/V reader (`kv_scalar.wgsl` for any head dim, `kv_vec4.wgsl`
//! four elements at a time). Every kernel, generated variants included, is listed in
//! [`crate::kernel_table`].

use crate::gpu::kernels::wgsl::kernel_wgsl;

pub(crate) const QK: &str = kernel_wgsl!("prelude/common.wgsl", "kernels/qk.wgsl");

pub(crate) const SOFTMAX: &str = kernel_wgsl!(
    "prelude/common.wgsl",
    "prelude/masking.wgsl",
    "kernels/softmax.wgsl"
);

pub(crate) const PV: &str = kernel_wgsl!("prelude/common.wgsl", "kernels/pv.wgsl");

/// A kernel that loops over keys (fused.wgsl, decode.wgsl, decode_subgroup.wgsl, and the
/// generated fused_tiled.wgsl and fused_lanes.wgsl): its
/// element type, the shared preludes, how it reads K and V, then the kernel itself;
/// `subgroups;` first for one that uses subgroup operations.
macro_rules! key_loop_source {
    ($($sg:ident;)? $elem:literal, $kv:literal, $kernel:literal) => {
        $crate::gpu::kernels::wgsl::kernel_wgsl!(
            $($sg;)?
            $elem,
            "prelude/common.wgsl",
            "prelude/masking.wgsl",
            "prelude/launch.wgsl",
            "prelude/tile.wgsl",
            $kv,
            $kernel
        )
    };
}

// The generated key-loop kernels (`key_loop::row_kernel_preludes`) take the same
// preludes, ending with their shared row helpers.
pub(crate) use key_loop_source;

pub(crate) const FUSED: &str = key_loop_source!(
    "prelude/elem_f32.wgsl",
    "prelude/kv_scalar.wgsl",
    "kernels/fused.wgsl"
);
pub(crate) const FUSED_F16: &str = key_loop_source!(
    "prelude/elem_f16.wgsl",
    "prelude/kv_scalar.wgsl",
    "kernels/fused.wgsl"
);
pub(crate) const DECODE: &str = key_loop_source!(
    "prelude/elem_f32.wgsl",
    "prelude/kv_scalar.wgsl",
    "kernels/decode.wgsl"
);
pub(crate) const DECODE_VEC4: &str = key_loop_source!(
    "prelude/elem_f32.wgsl",
    "prelude/kv_vec4.wgsl",
    "kernels/decode.wgsl"
);
pub(crate) const DECODE_F16: &str = key_loop_source!(
    "prelude/elem_f16.wgsl",
    "prelude/kv_scalar.wgsl",
    "kernels/decode.wgsl"
);
pub(crate) const DECODE_VEC4_F16: &str = key_loop_source!(
    "prelude/elem_f16.wgsl",
    "prelude/kv_vec4.wgsl",
    "kernels/decode.wgsl"
);
pub(crate) const DECODE_SUBGROUP: &str = key_loop_source!(
    subgroups;
    "prelude/elem_f32.wgsl",
    "prelude/kv_scalar.wgsl",
    "kernels/decode_subgroup.wgsl"
);
pub(crate) const DECODE_SUBGROUP_VEC4: &str = key_loop_source!(
    subgroups;
    "prelude/elem_f32.wgsl",
    "prelude/kv_vec4.wgsl",
    "kernels/decode_subgroup.wgsl"
);
pub(crate) const DECODE_SUBGROUP_F16: &str = key_loop_source!(
    subgroups;
    "prelude/elem_f16.wgsl",
    "prelude/kv_scalar.wgsl",
    "kernels/decode_subgroup.wgsl"
);
pub(crate) const DECODE_SUBGROUP_VEC4_F16: &str = key_loop_source!(
    subgroups;
    "prelude/elem_f16.wgsl",
    "prelude/kv_vec4.wgsl",
    "kernels/decode_subgroup.wgsl"
);

/// The weights after a fused or decode pass (weights.wgsl): its element type, the shared
/// prelude and the masking rule.
macro_rules! weights_source {
    ($elem:literal) => {
        kernel_wgsl!(
            $elem,
            "prelude/common.wgsl",
            "prelude/masking.wgsl",
            "kernels/weights.wgsl"
        )
    };
}

pub(crate) const WEIGHTS: &str = weights_source!("prelude/elem_f32.wgsl");
pub(crate) const WEIGHTS_F16: &str = weights_source!("prelude/elem_f16.wgsl");

pub(crate) const COMBINE: &str = kernel_wgsl!(
    "prelude/common.wgsl",
    "prelude/launch.wgsl",
    "kernels/combine.wgsl"
);

pub(crate) const TO_F16: &str = kernel_wgsl!("kernels/to_f16.wgsl");

/// A dense-layer kernel (`y = x Wᵀ + b` and its epilogues, every projection of the
/// models and of `mha`): W's storage type (`elem`), the shared parameters, layouts and
/// epilogue (`matmul.wgsl`), how x and W are read (`matmul_vec4.wgsl` four elements at
/// a time, `matmul_scalar.wgsl` for any width), then the kernel. Every kernel takes the
/// subgroup prelude: the lanes kernel uses subgroup operations, and the tiled and split
/// kernels share its preludes.
macro_rules! matmul_sources {
    ($kernel:literal, $f32:ident, $f32_scalar:ident, $f16:ident, $f16_scalar:ident) => {
        pub(crate) const $f32: &str = kernel_wgsl!(
            subgroups;
            "prelude/elem_f32.wgsl",
            "prelude/matmul.wgsl",
            "prelude/matmul_vec4.wgsl",
            $kernel
        );
        pub(crate) const $f32_scalar: &str = kernel_wgsl!(
            subgroups;
            "prelude/elem_f32.wgsl",
            "prelude/matmul.wgsl",
            "prelude/matmul_scalar.wgsl",
            $kernel
        );
        pub(crate) const $f16: &str = kernel_wgsl!(
            subgroups;
            "prelude/elem_f16.wgsl",
            "prelude/matmul.wgsl",
            "prelude/matmul_vec4.wgsl",
            $kernel
        );
        pub(crate) const $f16_scalar: &str = kernel_wgsl!(
            subgroups;
            "prelude/elem_f16.wgsl",
            "prelude/matmul.wgsl",
            "prelude/matmul_scalar.wgsl",
            $kernel
        );
    };
}

matmul_sources!(
    "kernels/matmul_tiled.wgsl",
    MATMUL_TILED,
    MATMUL_TILED_SCALAR,
    MATMUL_TILED_F16,
    MATMUL_TILED_SCALAR_F16
);
matmul_sources!(
    "kernels/matmul_split.wgsl",
    MATMUL_SPLIT,
    MATMUL_SPLIT_SCALAR,
    MATMUL_SPLIT_F16,
    MATMUL_SPLIT_SCALAR_F16
);
matmul_sources!(
    "kernels/matmul_lanes.wgsl",
    MATMUL_LANES,
    MATMUL_LANES_SCALAR,
    MATMUL_LANES_F16,
    MATMUL_LANES_SCALAR_F16
);

/// Attention patterns recomputed from q and k (patterns.wgsl): f32 storage, the shared
/// prelude and the masking rule.
pub(crate) const PATTERNS: &str = kernel_wgsl!(
    "prelude/elem_f32.wgsl",
    "prelude/common.wgsl",
    "prelude/masking.wgsl",
    "kernels/patterns.wgsl"
);
