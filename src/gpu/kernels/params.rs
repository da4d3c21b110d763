//! The parameters uniform shared by every kernel, and how a chunk of a problem fills it.

use bytemuck::{Pod, Zeroable};

use crate::gpu::kernels::layout::{uniform_layout, UniformLayout};
use crate::gpu::kernels::plan::Chunk;
use crate::problem::{MaskKind, Problem};

/// Unbounded window sides: beyond any position a valid problem can have.
const UNBOUNDED: i32 = 1 << 30;

pub(crate) const FLAG_CAUSAL: u32 = 1;
pub(crate) const FLAG_KV_LENS: u32 = 2;
pub(crate) const FLAG_WRITE_LSE: u32 = 4;

/// As the WGSL struct `Params` in shaders/prelude/common.wgsl (checked by `reflection.rs`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
pub(crate) struct Params {
    pub len_q: u32,
    pub len_k: u32,
    pub dim: u32,
    pub dim_v: u32,
    pub heads_q: u32,
    pub heads_kv: u32,
    pub group: u32,
    pub bh_start: u32,
    pub bh_count: u32,
    pub row_start: u32,
    pub row_count: u32,
    pub q_base: u32,
    pub k_base: u32,
    pub v_base: u32,
    pub o_base: u32,
    pub lse_base: u32,
    pub mask_base: u32,
    pub mask_stride_b: u32,
    pub mask_stride_h: u32,
    pub mask_stride_i: u32,
    pub mask_stride_j: u32,
    pub mask_kind: u32,
    pub flags: u32,
    pub pos_offset: i32,
    pub win_left: i32,
    pub win_right: i32,
    pub scale: f32,
    /// Logical index of the first weight in the weights window (weights.wgsl only).
    pub w_base: u32,
}

/// Wrapping cast: window starts are subtracted from logical indices mod 2^32 on the GPU.
fn low32(x: u64) -> u32 {
    x as u32
}

impl Params {
    pub(crate) fn new(p: &Problem, chunk: &Chunk, write_lse: bool) -> Self {
        let (mask_kind, strides) = match p.mask {
            None => (0, [0; 4]),
            Some(m) => (
                match m.kind {
                    MaskKind::Bool => 1,
                    MaskKind::Additive => 2,
                },
                m.strides,
            ),
        };
        let mut flags = 0;
        if p.causal {
            flags |= FLAG_CAUSAL;
        }
        if p.has_kv_lens {
            flags |= FLAG_KV_LENS;
        }
        if write_lse {
            flags |= FLAG_WRITE_LSE;
        }
        let clamp = |w: Option<i64>| w.map_or(UNBOUNDED, |v| v.min(UNBOUNDED as i64) as i32);
        Self {
            len_q: p.len_q as u32,
            len_k: p.len_k as u32,
            dim: p.dim as u32,
            dim_v: p.dim_v as u32,
            heads_q: p.heads_q as u32,
            heads_kv: p.heads_kv as u32,
            group: p.group() as u32,
            bh_start: chunk.bh_start as u32,
            bh_count: chunk.bh_count as u32,
            row_start: chunk.row_start as u32,
            row_count: chunk.row_count as u32,
            q_base: low32(chunk.q.base_elem),
            k_base: low32(chunk.k.base_elem),
            v_base: low32(chunk.v.base_elem),
            o_base: low32(chunk.out.base_elem),
            lse_base: low32(chunk.lse.base_elem),
            mask_base: chunk.mask.map_or(0, |m| low32(m.base_elem)),
            mask_stride_b: strides[0] as u32,
            mask_stride_h: strides[1] as u32,
            mask_stride_i: strides[2] as u32,
            mask_stride_j: strides[3] as u32,
            mask_kind,
            flags,
            pos_offset: p.pos_offset as i32,
            win_left: clamp(p.window_left),
            win_right: clamp(p.window_right),
            scale: p.scale,
            w_base: 0,
        }
    }
}

/// [`Params`] as `shaders/prelude/common.wgsl` declares it.
pub(crate) fn params_uniform() -> UniformLayout {
    uniform_layout!(Params as "Params" {
        len_q, len_k, dim, dim_v, heads_q, heads_kv, group, bh_start, bh_count, row_start,
        row_count, q_base, k_base, v_base, o_base, lse_base, mask_base, mask_stride_b,
        mask_stride_h, mask_stride_i, mask_stride_j, mask_kind, flags, pos_offset, win_left,
        win_right, scale, w_base,
    })
}
