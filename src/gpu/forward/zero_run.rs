//! Zero-filled inputs and outputs sized for a problem: for runs whose result says
//! something about the kernels rather than the data (timing candidates, probing loop
//! limits).

use crate::error::Result;
use crate::gpu::device::buffers;
use crate::gpu::device::context::GpuContext;
use crate::gpu::forward::io::{ForwardInputs, ForwardOutputs};
use crate::gpu::kernels::elem::Elem;
use crate::problem::Problem;

/// q, k and v stored as some element type, all zeros, and f32 outputs.
pub(crate) struct ZeroRun {
    q: wgpu::Buffer,
    k: wgpu::Buffer,
    v: wgpu::Buffer,
    out: wgpu::Buffer,
    lse: Option<wgpu::Buffer>,
}

impl ZeroRun {
    /// Buffers for `p` with q, k and v stored as `elem`, and a log-sum-exp output when
    /// `with_lse`. Outputs can be copied from, to read them back.
    ///
    /// # Errors
    /// [`crate::error::AttentionError::TooLarge`] or a device error when an allocation fails.
    pub(crate) fn new(
        ctx: &GpuContext,
        label: &str,
        p: &Problem,
        elem: Elem,
        with_lse: bool,
    ) -> Result<Self> {
        let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC;
        let zeros =
            |elems: usize, bytes: u64| buffers::empty(ctx, label, elems as u64 * bytes, usage);
        let (bq, bkv) = (p.batch * p.heads_q, p.batch * p.heads_kv);
        let e = elem.bytes();
        Ok(Self {
            q: zeros(bq * p.len_q * p.dim, e)?,
            k: zeros(bkv * p.len_k * p.dim, e)?,
            v: zeros(bkv * p.len_k * p.dim_v, e)?,
            out: zeros(bq * p.len_q * p.dim_v, 4)?,
            lse: if with_lse {
                Some(zeros(bq * p.len_q, 4)?)
            } else {
                None
            },
        })
    }

    pub(crate) fn inputs(&self) -> ForwardInputs<'_> {
        ForwardInputs {
            q: &self.q,
            k: &self.k,
            v: &self.v,
            mask: None,
            kv_lens: None,
        }
    }

    pub(crate) fn outputs(&self) -> ForwardOutputs<'_> {
        ForwardOutputs {
            out: &self.out,
            lse: self.lse.as_ref(),
            weights: None,
        }
    }
}

/// A problem with no mask, window or key lengths, for runs the library makes itself
/// (timing proxies, probes): built directly, since its sizes are the library's own.
pub(crate) fn plain_problem(
    [b, hq, lq, d]: [usize; 4],
    [hkv, lk, dv]: [usize; 3],
    causal: bool,
    pos_offset: i64,
    return_lse: bool,
) -> Problem {
    Problem {
        batch: b,
        heads_q: hq,
        heads_kv: hkv,
        len_q: lq,
        len_k: lk,
        dim: d,
        dim_v: dv,
        scale: 1.0 / (d as f32).sqrt(),
        causal,
        pos_offset,
        window_left: None,
        window_right: None,
        mask: None,
        has_kv_lens: false,
        return_weights: false,
        return_lse,
    }
}
