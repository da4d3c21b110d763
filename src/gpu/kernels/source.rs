//! WGSL sources. Each kernel is its own file in `shaders/kernels/`, preceded by files of
//! `shaders/prelude/`: the shared prelude (`common.wgsl`) and, for kernels that mask, the masking rule (`masking.wgsl`).
//! Kernels that read q, k and v in either precision start with an element-type prelude
//! (`elem_f32.wgsl` or `elem_f16.wgsl`) that names their storage type `elem`. The
//! split-KV kernels share `launch.wgsl` (key ranges, row packing), and the two that loop
//! over keys also `tile.wgsl` (their common bindings; which head, rows and keys a
//! workgroup serves) and a K/V reader.

pub(crate) const QK: &str = concat!(
    include_str!("../../../shaders/prelude/common.wgsl"),
    include_str!("../../../shaders/kernels/qk.wgsl")
);

pub(crate) const SOFTMAX: &str = concat!(
    include_str!("../../../shaders/prelude/common.wgsl"),
    include_str!("../../../shaders/prelude/masking.wgsl"),
    include_str!("../../../shaders/kernels/softmax.wgsl")
);

pub(crate) const PV: &str = concat!(
    include_str!("../../../shaders/prelude/common.wgsl"),
    include_str!("../../../shaders/kernels/pv.wgsl")
);

/// A kernel that loops over keys (fused.wgsl, decode.wgsl): its element type, the shared
/// preludes, how it reads K and V (`kv_scalar.wgsl` for any head dim, `kv_vec4.wgsl` four
/// elements at a time), then the kernel itself.
macro_rules! key_loop_source {
    ($elem:literal, $kv:literal, $kernel:literal) => {
        concat!(
            include_str!($elem),
            include_str!("../../../shaders/prelude/common.wgsl"),
            include_str!("../../../shaders/prelude/masking.wgsl"),
            include_str!("../../../shaders/prelude/launch.wgsl"),
            include_str!("../../../shaders/prelude/tile.wgsl"),
            include_str!($kv),
            include_str!($kernel)
        )
    };
}

pub(crate) const FUSED: &str = key_loop_source!(
    "../../../shaders/prelude/elem_f32.wgsl",
    "../../../shaders/prelude/kv_scalar.wgsl",
    "../../../shaders/kernels/fused.wgsl"
);
pub(crate) const FUSED_F16: &str = key_loop_source!(
    "../../../shaders/prelude/elem_f16.wgsl",
    "../../../shaders/prelude/kv_scalar.wgsl",
    "../../../shaders/kernels/fused.wgsl"
);
pub(crate) const DECODE: &str = key_loop_source!(
    "../../../shaders/prelude/elem_f32.wgsl",
    "../../../shaders/prelude/kv_scalar.wgsl",
    "../../../shaders/kernels/decode.wgsl"
);
pub(crate) const DECODE_VEC4: &str = key_loop_source!(
    "../../../shaders/prelude/elem_f32.wgsl",
    "../../../shaders/prelude/kv_vec4.wgsl",
    "../../../shaders/kernels/decode.wgsl"
);
pub(crate) const DECODE_F16: &str = key_loop_source!(
    "../../../shaders/prelude/elem_f16.wgsl",
    "../../../shaders/prelude/kv_scalar.wgsl",
    "../../../shaders/kernels/decode.wgsl"
);
pub(crate) const DECODE_VEC4_F16: &str = key_loop_source!(
    "../../../shaders/prelude/elem_f16.wgsl",
    "../../../shaders/prelude/kv_vec4.wgsl",
    "../../../shaders/kernels/decode.wgsl"
);

/// The subgroup decode kernel (decode_subgroup.wgsl): as [`key_loop_source`], after
/// `subgroups.wgsl`, whose `enable subgroups;` must come before the element type's
/// declarations.
macro_rules! subgroup_key_loop_source {
    ($elem:literal, $kv:literal) => {
        concat!(
            include_str!("../../../shaders/prelude/subgroups.wgsl"),
            key_loop_source!($elem, $kv, "../../../shaders/kernels/decode_subgroup.wgsl")
        )
    };
}

pub(crate) const DECODE_SUBGROUP: &str = subgroup_key_loop_source!(
    "../../../shaders/prelude/elem_f32.wgsl",
    "../../../shaders/prelude/kv_scalar.wgsl"
);
pub(crate) const DECODE_SUBGROUP_VEC4: &str = subgroup_key_loop_source!(
    "../../../shaders/prelude/elem_f32.wgsl",
    "../../../shaders/prelude/kv_vec4.wgsl"
);
pub(crate) const DECODE_SUBGROUP_F16: &str = subgroup_key_loop_source!(
    "../../../shaders/prelude/elem_f16.wgsl",
    "../../../shaders/prelude/kv_scalar.wgsl"
);
pub(crate) const DECODE_SUBGROUP_VEC4_F16: &str = subgroup_key_loop_source!(
    "../../../shaders/prelude/elem_f16.wgsl",
    "../../../shaders/prelude/kv_vec4.wgsl"
);

/// The weights after a fused or decode pass (weights.wgsl): its element type, the shared prelude
/// and the masking rule.
macro_rules! weights_source {
    ($elem:literal) => {
        concat!(
            include_str!($elem),
            include_str!("../../../shaders/prelude/common.wgsl"),
            include_str!("../../../shaders/prelude/masking.wgsl"),
            include_str!("../../../shaders/kernels/weights.wgsl")
        )
    };
}

pub(crate) const WEIGHTS: &str = weights_source!("../../../shaders/prelude/elem_f32.wgsl");
pub(crate) const WEIGHTS_F16: &str = weights_source!("../../../shaders/prelude/elem_f16.wgsl");

pub(crate) const COMBINE: &str = concat!(
    include_str!("../../../shaders/prelude/common.wgsl"),
    include_str!("../../../shaders/prelude/launch.wgsl"),
    include_str!("../../../shaders/kernels/combine.wgsl")
);

pub(crate) const TO_F16: &str = include_str!("../../../shaders/kernels/to_f16.wgsl");

/// A dense-layer kernel (`y = x Wᵀ + b` and its epilogues, every projection of the
/// models and of `mha`): W's storage type (`elem`), the shared parameters, layouts and
/// epilogue (`matmul.wgsl`), how x and W are read (`matmul_vec4.wgsl` four elements at
/// a time, `matmul_scalar.wgsl` for any width), then the kernel. The lanes kernel uses
/// subgroup operations and starts with `subgroups.wgsl`.
macro_rules! matmul_source {
    ($elem:literal, $load:literal, $kernel:literal) => {
        concat!(
            include_str!("../../../shaders/prelude/subgroups.wgsl"),
            include_str!($elem),
            include_str!("../../../shaders/prelude/matmul.wgsl"),
            include_str!($load),
            include_str!($kernel)
        )
    };
}

macro_rules! matmul_sources {
    ($kernel:literal, $f32:ident, $f32_scalar:ident, $f16:ident, $f16_scalar:ident) => {
        pub(crate) const $f32: &str = matmul_source!(
            "../../../shaders/prelude/elem_f32.wgsl",
            "../../../shaders/prelude/matmul_vec4.wgsl",
            $kernel
        );
        pub(crate) const $f32_scalar: &str = matmul_source!(
            "../../../shaders/prelude/elem_f32.wgsl",
            "../../../shaders/prelude/matmul_scalar.wgsl",
            $kernel
        );
        pub(crate) const $f16: &str = matmul_source!(
            "../../../shaders/prelude/elem_f16.wgsl",
            "../../../shaders/prelude/matmul_vec4.wgsl",
            $kernel
        );
        pub(crate) const $f16_scalar: &str = matmul_source!(
            "../../../shaders/prelude/elem_f16.wgsl",
            "../../../shaders/prelude/matmul_scalar.wgsl",
            $kernel
        );
    };
}

matmul_sources!(
    "../../../shaders/kernels/matmul_tiled.wgsl",
    MATMUL_TILED,
    MATMUL_TILED_SCALAR,
    MATMUL_TILED_F16,
    MATMUL_TILED_SCALAR_F16
);
matmul_sources!(
    "../../../shaders/kernels/matmul_lanes.wgsl",
    MATMUL_LANES,
    MATMUL_LANES_SCALAR,
    MATMUL_LANES_F16,
    MATMUL_LANES_SCALAR_F16
);

/// Every kernel's full source with its name, for validation without a GPU. The f16
/// variants need naga's `SHADER_FLOAT16` capability (the adapter's `shader-f16`), the
/// subgroup ones `SUBGROUP` (the adapter's `subgroup`).
pub const ALL: &[(&str, &str)] = &[
    ("qk", QK),
    ("softmax", SOFTMAX),
    ("pv", PV),
    ("fused", FUSED),
    ("fused_f16", FUSED_F16),
    ("decode", DECODE),
    ("decode_vec4", DECODE_VEC4),
    ("decode_f16", DECODE_F16),
    ("decode_vec4_f16", DECODE_VEC4_F16),
    ("decode_subgroup", DECODE_SUBGROUP),
    ("decode_subgroup_vec4", DECODE_SUBGROUP_VEC4),
    ("decode_subgroup_f16", DECODE_SUBGROUP_F16),
    ("decode_subgroup_vec4_f16", DECODE_SUBGROUP_VEC4_F16),
    ("weights", WEIGHTS),
    ("weights_f16", WEIGHTS_F16),
    ("combine", COMBINE),
    ("to_f16", TO_F16),
    ("matmul_tiled", MATMUL_TILED),
    ("matmul_tiled_scalar", MATMUL_TILED_SCALAR),
    ("matmul_tiled_f16", MATMUL_TILED_F16),
    ("matmul_tiled_scalar_f16", MATMUL_TILED_SCALAR_F16),
    ("matmul_lanes", MATMUL_LANES),
    ("matmul_lanes_scalar", MATMUL_LANES_SCALAR),
    ("matmul_lanes_f16", MATMUL_LANES_F16),
    ("matmul_lanes_scalar_f16", MATMUL_LANES_SCALAR_F16),
];
