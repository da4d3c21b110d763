//! The quantized matmul's kernel specs, one per entry point, their bindings, and the
//! uniform structs (parameters, the uniform copy of x, a page of W) as the WGSL declares
//! them.

use bytemuck::{Pod, Zeroable};

use super::super::glue::{
    uniform_layout, uniform_readable_tensor, Binding, KernelSpec, UniformLayout,
};
use super::super::quant_matrix::{PAGES, PAGE_BYTES};
use super::super::source;
use crate::error::Result;
use crate::{GpuContext, GpuTensor};

/// Bindings: params, x, the weight words, y, the norm's weight, the RoPE table, the key
/// store, the value store (those four stand-ins where the variant does not use them), the
/// uniform copy of x's rows and the norm's weight in a uniform buffer, which products
/// whose x fits the copy read.
pub(crate) const SPEC: KernelSpec = KernelSpec {
    name: "model_quant_matmul",
    source: source::QUANT_MATMUL,
    bindings: &BINDINGS,
    trusted: false,
    uniforms: &UNIFORMS,
};

/// [`SPEC`]'s bindings, which every entry shares (the paged one adds its pages).
const BINDINGS: [Binding; 10] = [
    Binding::Uniform,
    Binding::Read,
    Binding::Read,
    Binding::ReadWrite,
    Binding::Read,
    Binding::Read,
    Binding::ReadWrite,
    Binding::ReadWrite,
    Binding::Uniform,
    Binding::Uniform,
];

/// The layouts of [`BINDINGS`]' uniform structs, in binding order.
const UNIFORMS: [fn() -> UniformLayout; 3] = [params_uniform, x_row_uniform, x_row_uniform];

/// The same kernel on a CPU driver's 8-lane subgroups (lavapipe): for one row of x and
/// the 32-element block types, each lane loads one chunk of a block's x and the subgroup
/// shares them by broadcasts (`shaders/model/quant_matmul_sg.wgsl`).
pub(crate) const SPEC_SUBGROUPS: KernelSpec = KernelSpec {
    name: "model_quant_matmul_subgroups",
    source: source::QUANT_MATMUL_SUBGROUPS,
    bindings: &SUBGROUP_BINDINGS,
    ..SPEC
};

/// [`BINDINGS`] and W's buffer again as four-word elements (`wv`), for loads of four
/// words at once.
const SUBGROUP_BINDINGS: [Binding; BINDINGS.len() + 1] = followed_by(BINDINGS, Binding::Read);

/// The same kernel with K split across the lanes of groups of 16 and the lanes' sums
/// added through workgroup memory (`shaders/model/quant_matmul_split.wgsl`): for GPUs,
/// where neighbouring lanes then read neighbouring blocks of one W row.
pub(crate) const SPEC_SPLIT: KernelSpec = KernelSpec {
    name: "model_quant_matmul_split",
    source: source::QUANT_MATMUL_SPLIT,
    ..SPEC
};

/// The subgroup kernel reading W from [`PAGES`] uniform pages (QuantMatrix's
/// [`Pages`](super::super::quant_matrix::Pages)) rather than storage
/// (`shaders/model/quant_matmul_paged.wgsl`): Q4_1 and Q4_0 products on lavapipe, whose
/// storage loads go lane by lane.
pub(crate) const SPEC_PAGED: KernelSpec = KernelSpec {
    name: "model_quant_matmul_paged",
    source: source::QUANT_MATMUL_PAGED,
    bindings: &PAGED_BINDINGS,
    trusted: false,
    uniforms: &PAGED_UNIFORMS,
};

/// [`BINDINGS`] and the paged entry's [`PAGES`] uniform pages.
const PAGED_BINDINGS: [Binding; BINDINGS.len() + PAGES] = followed_by(BINDINGS, Binding::Uniform);

/// [`UNIFORMS`] and the pages' layouts.
const PAGED_UNIFORMS: [fn() -> UniformLayout; UNIFORMS.len() + PAGES] =
    followed_by(UNIFORMS, page_uniform);

/// `base` followed by `more` up to `M` elements (the length the constant declares).
const fn followed_by<T: Copy, const N: usize, const M: usize>(base: [T; N], more: T) -> [T; M] {
    assert!(M > N, "at least one element past `base`");
    let mut all = [more; M];
    let mut i = 0;
    while i < N {
        all[i] = base[i];
        i += 1;
    }
    all
}

/// Columns of y a workgroup of the split entry owns (`GROUPS * COLS` in the shader).
pub(super) const SPLIT_COLS: u64 = 16;

/// Elements of the uniform copy `xu` and of the norm's weight `nu` (`XRow` in the
/// shader, 32 KiB each: two fit the 64 KiB every adapter and browser must allow for
/// uniform bindings). Products whose x has more elements read x from storage.
pub(super) const XU_ELEMS: usize = 8192;

/// The uniform copy of x's rows, or a norm's weight (`XRow`), as the WGSL declares it.
/// Never built on the host: it is filled on the device.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct XRow {
    v: [[f32; 4]; XU_ELEMS / 4],
}

/// One uniform page of W (`Page` in quant_matmul_paged.wgsl), [`PAGE_BYTES`] bytes.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct Page {
    v: [[u32; 4]; PAGE_BYTES / 16],
}

/// [`Page`] as the WGSL declares it.
fn page_uniform() -> UniformLayout {
    uniform_layout!(Page as "Page" { v })
}

/// [`XRow`] as the WGSL declares it.
fn x_row_uniform() -> UniformLayout {
    uniform_layout!(XRow as "XRow" { v })
}

/// A tensor of `shape` for x of the products, which a product whose x rows start at a
/// multiple of the uniform offset alignment binds as its uniform copy (`xu`) rather than
/// copying them there first: a uniform buffer too, and at least the copy's size. On
/// lavapipe each copy is a command of about 20 µs, four in each layer of a decoding step.
///
/// # Errors
/// As [`GpuTensor::empty`].
pub(crate) fn x_tensor(ctx: &GpuContext, shape: &[usize]) -> Result<GpuTensor> {
    uniform_readable_tensor(ctx, shape, XU_ELEMS as u64 * 4)
}

/// Must match the WGSL struct `QuantMatmul` in quant_matmul.wgsl.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
pub(crate) struct QuantMatmulParams {
    pub(super) rows: u32,
    pub(super) cols: u32,
    pub(super) inner: u32,
    pub(super) row_bytes: u32,
    pub(super) x_off: u32,
    pub(super) x_stride: u32,
    pub(super) out: [u32; 5],
    pub(super) eps: f32,
    pub(super) col0: u32,
    pub(super) q_end: u32,
    pub(super) k_end: u32,
    pub(super) kv_heads: u32,
    pub(super) kv_cap: u32,
    pub(super) kv_off: u32,
    pub(super) pos0: u32,
    pub(super) positions: u32,
    pub(super) page_rows: u32,
    pub(super) page_stride: u32,
    pub(super) chunk: u32,
    pub(super) row0: u32,
}

/// [`QuantMatmulParams`] as the WGSL declares it.
fn params_uniform() -> UniformLayout {
    uniform_layout!(QuantMatmulParams as "QuantMatmul" { rows, cols, inner, row_bytes, x_off, x_stride, out => ["out_len", "out_heads", "out_dim", "out_cap", "out_off"], eps, col0, q_end, k_end, kv_heads, kv_cap, kv_off, pos0, positions, page_rows, page_stride, chunk, row0 })
}
