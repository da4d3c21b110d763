//! Which kernels run a call, and recording them: the staged path (the only one that
//! returns weights, and the fallback that always works), the fused flash-attention
//! kernel (the default otherwise) and split-KV decoding (short queries, long keys).

use crate::error::{AttentionError, Result};
use crate::gpu::device::context::GpuContext;
use crate::gpu::device::f16_tensor as f16;
use crate::gpu::forward::paths::staged::{ForwardInputs, ForwardOutputs};
use crate::gpu::forward::paths::{one_pass as fused, split_kv as decode, staged};
use crate::gpu::forward::upload;
use crate::gpu::kernels::fused as fused_kernel;
use crate::gpu::tune;
use crate::options::{AttentionOptions, KernelPath, Precision};
use crate::problem::Problem;

/// How q, k and v are stored in their device buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Elem {
    F32,
    F16,
}

impl Elem {
    pub(crate) fn bytes(self) -> u64 {
        match self {
            Elem::F32 => 4,
            Elem::F16 => 2,
        }
    }
}

/// Queries up to this long count as decoding for [`KernelPath::Auto`].
pub(crate) const DECODE_MAX_LEN_Q: usize = 16;
/// Keys at least this many make split-KV decoding worth its second dispatch.
pub(crate) const DECODE_MIN_LEN_K: usize = 1024;

/// The path a call takes on this context: `opts.path` checked against the problem and
/// the adapter, or chosen when it is [`KernelPath::Auto`]. Never returns `Auto`.
///
/// # Errors
/// [`AttentionError::Unsupported`] for f16 on an adapter without `shader-f16`;
/// [`AttentionError::InvalidOption`] for a path or precision that cannot serve the call
/// (weights from a kernel that has none, f16 on the staged path, head dims too large).
pub(crate) fn route(
    ctx: &GpuContext,
    p: &Problem,
    opts: &AttentionOptions<'_>,
) -> Result<KernelPath> {
    let f16 = opts.precision == Precision::F16;
    if f16 && !ctx.features.contains(wgpu::Features::SHADER_F16) {
        return Err(AttentionError::Unsupported(format!(
            "precision F16 needs the adapter feature shader-f16, which {} lacks; use Precision::F32",
            ctx.adapter_info().name
        )));
    }
    let staged_only = |why: &str| -> Result<KernelPath> {
        if f16 {
            return Err(AttentionError::option(
                "precision",
                format!("F16 runs on the fused and decode kernels only, and {why}"),
            ));
        }
        Ok(KernelPath::Staged)
    };
    let no_weights = |path: KernelPath| -> Result<()> {
        if p.return_weights {
            return Err(AttentionError::option(
                "path",
                format!("{path:?} cannot return attention weights; use Staged or Auto"),
            ));
        }
        Ok(())
    };
    match opts.path {
        KernelPath::Staged => staged_only("the path is Staged"),
        KernelPath::Fused => {
            no_weights(KernelPath::Fused)?;
            fused_kernel::check(p, "fused")?;
            Ok(KernelPath::Fused)
        }
        KernelPath::Decode => {
            no_weights(KernelPath::Decode)?;
            fused_kernel::check(p, "decode")?;
            Ok(KernelPath::Decode)
        }
        KernelPath::Auto => {
            if p.return_weights {
                return staged_only("the call returns weights");
            }
            let short = p.len_q <= DECODE_MAX_LEN_Q && p.len_k >= DECODE_MIN_LEN_K;
            if short && fused_kernel::check(p, "decode").is_ok() {
                return Ok(KernelPath::Decode);
            }
            match fused_kernel::check(p, "fused") {
                Ok(()) => Ok(KernelPath::Fused),
                Err(e) if f16 => Err(e),
                Err(_) => Ok(KernelPath::Staged),
            }
        }
    }
}

/// Records the forward of `p` on `path` (from [`route`]) into `encoder`. Returns the
/// device bytes allocated beyond inputs and outputs.
///
/// # Errors
/// As the path's own record function.
pub(crate) async fn record(
    ctx: &GpuContext,
    encoder: &mut wgpu::CommandEncoder,
    p: &Problem,
    path: KernelPath,
    elem: Elem,
    inputs: &ForwardInputs<'_>,
    outputs: &ForwardOutputs<'_>,
) -> Result<u64> {
    match path {
        KernelPath::Fused => {
            let cfg = tune::fused_config(ctx, p, elem).await?;
            fused::record(ctx, encoder, p, elem, cfg, inputs, outputs).await
        }
        KernelPath::Decode => {
            let cfg = tune::decode_config(ctx, p, elem).await?;
            decode::record(ctx, encoder, p, elem, cfg, inputs, outputs).await
        }
        KernelPath::Staged | KernelPath::Auto => {
            if elem == Elem::F16 {
                return Err(AttentionError::option(
                    "precision",
                    "F16 runs on the fused and decode kernels only, not the staged path",
                ));
            }
            staged::record(ctx, encoder, p, inputs, outputs).await
        }
    }
}

/// The q, k and v buffers of a call and how they are stored.
pub(crate) struct CallInputs<'a> {
    pub q: &'a wgpu::Buffer,
    pub k: &'a wgpu::Buffer,
    pub v: &'a wgpu::Buffer,
    pub elem: Elem,
}

/// Records a whole call into `encoder`: the mask and key lengths uploaded, f32 inputs
/// converted when the precision is f16, then the kernels of `path`. Returns the device
/// bytes allocated beyond inputs (q, k, v, mask, key lengths) and outputs.
///
/// # Errors
/// As [`record`], and device errors of the conversion.
pub(crate) async fn encode(
    ctx: &GpuContext,
    encoder: &mut wgpu::CommandEncoder,
    p: &Problem,
    path: KernelPath,
    opts: &AttentionOptions<'_>,
    inputs: &CallInputs<'_>,
    outputs: &ForwardOutputs<'_>,
) -> Result<u64> {
    let mask = upload::mask(ctx, opts)?;
    let kv_lens = upload::kv_lens(ctx, opts)?;
    let mut scratch = 0;
    let converted = if opts.precision == Precision::F16 && inputs.elem == Elem::F32 {
        let (b, hq, hkv) = (p.batch as u64, p.heads_q as u64, p.heads_kv as u64);
        let (lq, lk) = (p.len_q as u64, p.len_k as u64);
        let q = f16::record_cast(ctx, encoder, inputs.q, b * hq * lq * p.dim as u64).await?;
        let k = f16::record_cast(ctx, encoder, inputs.k, b * hkv * lk * p.dim as u64).await?;
        let v = f16::record_cast(ctx, encoder, inputs.v, b * hkv * lk * p.dim_v as u64).await?;
        scratch += q.size() + k.size() + v.size();
        Some((q, k, v))
    } else {
        None
    };
    let (q, k, v, elem) = match &converted {
        Some((q, k, v)) => (q, k, v, Elem::F16),
        None => (inputs.q, inputs.k, inputs.v, inputs.elem),
    };
    let forward_inputs = ForwardInputs {
        q,
        k,
        v,
        mask: mask.as_ref(),
        kv_lens: kv_lens.as_ref(),
    };
    scratch += record(ctx, encoder, p, path, elem, &forward_inputs, outputs).await?;
    Ok(scratch)
}
