//! What the key-loop kernels (fused.wgsl, fused_tiled.wgsl, decode.wgsl and
//! decode_subgroup.wgsl) share on the host: their bindings, how head dims round to vec4s,
//! and when K and V may be read four elements at a time. A leaf, so that the kernels'
//! launchers import it and never each other in a loop.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, OnceLock};

use crate::gpu::device::context::GpuContext;
use crate::gpu::kernels::elem::Elem;
use crate::gpu::kernels::layout::UniformLayout;
use crate::gpu::kernels::pipelines::{Binding, KernelSpec};
use crate::gpu::kernels::source::key_loop_source;
use crate::problem::Problem;

/// Bindings of fused.wgsl, shared by decode.wgsl so that both first passes of split-KV
/// decoding bind alike (decode.wgsl leaves lse unused).
pub(crate) const BINDINGS: &[Binding] = &[
    Binding::Uniform,
    Binding::Read,      // q
    Binding::Read,      // k
    Binding::Read,      // v
    Binding::Read,      // mask
    Binding::Read,      // kv_lens
    Binding::ReadWrite, // out, or the partials
    Binding::ReadWrite, // lse
    Binding::Uniform,   // split
];

/// The uniform structs of [`BINDINGS`]: `Params` at 0, `Split` at 8.
pub(crate) const KEY_LOOP_UNIFORMS: &[fn() -> UniformLayout] = &[
    crate::gpu::kernels::params::params_uniform,
    crate::gpu::kernels::launch::split_uniform,
];

/// The vec4s a row of `dim` columns takes in the kernel: `ceil(dim / 4)` rounded up to a
/// power of two up to 8, then to a multiple of 8, so that one pipeline serves several
/// head dims (the padding is zeros).
pub(crate) fn vec4s(dim: usize) -> u32 {
    let n = dim.div_ceil(4).max(1) as u32;
    if n <= 8 {
        n.next_power_of_two()
    } else {
        n.next_multiple_of(8)
    }
}

/// Whether K and V can be read four elements at a time: head dims that are multiples of
/// 4, and binding windows that start on a multiple of 4 elements (the plan aligns them
/// to the device's storage offset alignment).
///
/// Decided per call, not kept in a configuration: tuning classes bucket head dims (see
/// [`vec4s`]), so one class holds both kinds.
pub(crate) fn vec4_reads(ctx: &GpuContext, p: &Problem, elem: Elem) -> bool {
    let align = u64::from(ctx.limits.min_storage_buffer_offset_alignment);
    p.dim.is_multiple_of(4) && p.dim_v.is_multiple_of(4) && align.is_multiple_of(4 * elem.bytes())
}

/// The kernel for `p` with q, k and v stored as `elem`, among a kernel's four builds:
/// (f32, f32 with vec4 K/V reads, f16, f16 with vec4 K/V reads).
pub(crate) fn pick_spec(
    ctx: &GpuContext,
    p: &Problem,
    elem: Elem,
    specs: [&'static KernelSpec; 4],
) -> &'static KernelSpec {
    let [f32, f32_vec4, f16, f16_vec4] = specs;
    match (elem, vec4_reads(ctx, p, elem)) {
        (Elem::F32, false) => f32,
        (Elem::F32, true) => f32_vec4,
        (Elem::F16, false) => f16,
        (Elem::F16, true) => f16_vec4,
    }
}

/// The preludes the generated kernels (fused_tiled.wgsl, fused_lanes.wgsl) are built on,
/// concatenated: storage type, parameters and masking, launch and tile layout, the K/V
/// reader (`vec4`: four elements at a time) and the shared row helpers.
pub(crate) fn row_kernel_preludes(elem: Elem, vec4: bool) -> &'static str {
    match (elem, vec4) {
        (Elem::F32, false) => {
            key_loop_source!(
                "prelude/elem_f32.wgsl",
                "prelude/kv_scalar.wgsl",
                "prelude/rows4.wgsl"
            )
        }
        (Elem::F32, true) => {
            key_loop_source!(
                "prelude/elem_f32.wgsl",
                "prelude/kv_vec4.wgsl",
                "prelude/rows4.wgsl"
            )
        }
        (Elem::F16, false) => {
            key_loop_source!(
                "prelude/elem_f16.wgsl",
                "prelude/kv_scalar.wgsl",
                "prelude/rows4.wgsl"
            )
        }
        (Elem::F16, true) => {
            key_loop_source!(
                "prelude/elem_f16.wgsl",
                "prelude/kv_vec4.wgsl",
                "prelude/rows4.wgsl"
            )
        }
    }
}

/// The kernel spec of a generated variant, made by `make` (its name and source) on first
/// use and kept in `cache` for the process (a few dozen variants at most). Bindings as
/// [`BINDINGS`]; trusted like every key-loop kernel.
pub(crate) fn generated_spec<V: Copy + Eq + Hash>(
    cache: &'static OnceLock<Mutex<HashMap<V, &'static KernelSpec>>>,
    variant: V,
    make: impl FnOnce(V) -> (String, String),
) -> &'static KernelSpec {
    let specs = cache.get_or_init(Default::default);
    let mut specs = specs.lock().unwrap_or_else(|e| e.into_inner());
    specs.entry(variant).or_insert_with(|| {
        let (name, source) = make(variant);
        Box::leak(Box::new(KernelSpec {
            name: Box::leak(name.into_boxed_str()),
            source: Box::leak(source.into_boxed_str()),
            bindings: BINDINGS,
            trusted: true,
            uniforms: KEY_LOOP_UNIFORMS,
        }))
    })
}
