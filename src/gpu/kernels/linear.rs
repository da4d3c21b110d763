//! Launcher for `shaders/linear.wgsl`: y = x Wᵀ + b with head layouts on both sides.

use bytemuck::{Pod, Zeroable};

use crate::gpu::kernels::pipelines::{Binding, KernelSpec};
use crate::gpu::kernels::source;

/// Bindings: params, x, W, bias, y.
pub(crate) const SPEC: KernelSpec = KernelSpec {
    name: "linear",
    source: source::LINEAR,
    bindings: &[
        Binding::Uniform,
        Binding::Read,
        Binding::Read,
        Binding::Read,
        Binding::ReadWrite,
    ],
    // Indices into x and y go through the head layouts, whose bounds the host checks
    // rather than the shader: keep the runtime checks.
    trusted: false,
};

/// Must match T in linear.wgsl.
pub(crate) const TILE: u64 = 16;

/// Where row `m = (b, l)` and column `c = (h, d)` of a matrix live in a buffer:
/// `((b * heads + h) * cap + off + l) * dim + d`. See linear.wgsl.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HeadLayout {
    pub len: u32,
    pub heads: u32,
    pub dim: u32,
    pub cap: u32,
    pub off: u32,
}

impl HeadLayout {
    /// `rows` rows of `per_batch` tokens, `heads` heads of width `dim`, stored as
    /// `(B, heads, cap, dim)` with these rows at positions `off..off + per_batch`.
    pub(crate) fn heads(per_batch: u32, heads: u32, dim: u32, cap: u32, off: u32) -> Self {
        Self {
            len: per_batch,
            heads,
            dim,
            cap,
            off,
        }
    }

    /// A plain row-major matrix with `width` columns, `per_batch` rows per batch.
    pub(crate) fn rows(per_batch: u32, width: u32) -> Self {
        Self::heads(per_batch, 1, width, per_batch, 0)
    }

    /// Elements a buffer needs to hold `rows` rows in this layout.
    pub(crate) fn elements(&self, rows: u64) -> u64 {
        let batch = rows.div_ceil(u64::from(self.len.max(1)));
        batch * u64::from(self.heads) * u64::from(self.cap) * u64::from(self.dim)
    }
}

/// Must match the WGSL struct `Linear` in linear.wgsl.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
pub(crate) struct LinearParams {
    pub rows: u32,
    pub cols: u32,
    pub inner: u32,
    pub tiles_n: u32,
    pub input: [u32; 5],
    pub output: [u32; 5],
    pub _pad: [u32; 2],
}

impl LinearParams {
    pub(crate) fn new(
        rows: u32,
        cols: u32,
        inner: u32,
        input: HeadLayout,
        output: HeadLayout,
    ) -> Self {
        let pack = |l: HeadLayout| [l.len, l.heads, l.dim, l.cap, l.off];
        Self {
            rows,
            cols,
            inner,
            tiles_n: (u64::from(cols).div_ceil(TILE)) as u32,
            input: pack(input),
            output: pack(output),
            _pad: [0; 2],
        }
    }
}

/// One workgroup per 16 x 16 block of y.
pub(crate) fn workgroups(rows: u32, cols: u32) -> u64 {
    u64::from(rows).div_ceil(TILE) * u64::from(cols).div_ceil(TILE)
}
