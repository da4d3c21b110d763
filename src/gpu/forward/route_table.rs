//! The route table: every kernel path, what it serves, and how its route is prepared.
//! The staged path (the fallback that always works), the fused flash-attention kernel
//! (the default) and split-KV decoding (short queries, long keys). Weights come from
//! the staged path's score matrix, or on the other two from their log-sum-exp
//! (`paths/from_lse.rs`). A new path adds its arms here.

use crate::error::{AttentionError, Result};
use crate::gpu::device::context::GpuContext;
use crate::gpu::forward::paths::staged::Staged;
use crate::gpu::forward::resolve;
use crate::gpu::forward::route::Route;
use crate::gpu::forward::tune;
use crate::gpu::kernels::elem::Elem;
use crate::gpu::kernels::fused;
use crate::options::KernelPath;
use crate::problem::Problem;

/// Queries up to this long count as decoding for [`KernelPath::Auto`].
pub(crate) const DECODE_MAX_LEN_Q: usize = 16;
/// Keys at least this many make split-KV decoding worth its second dispatch.
pub(crate) const DECODE_MIN_LEN_K: usize = 1024;

/// The path a call takes on this context: `path` checked against the problem, the
/// storage type `elem` and the adapter, or chosen when it is [`KernelPath::Auto`].
/// Never returns `Auto`.
///
/// # Errors
/// [`AttentionError::Unsupported`] for f16 on an adapter without `shader-f16`;
/// [`AttentionError::InvalidOption`] for a path or precision that cannot serve the call
/// (f16 on the staged path, head dims too large).
pub(crate) fn choose(
    ctx: &GpuContext,
    p: &Problem,
    path: KernelPath,
    elem: Elem,
) -> Result<KernelPath> {
    let f16 = elem == Elem::F16;
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
    match path {
        KernelPath::Staged => staged_only("the path is Staged"),
        KernelPath::Fused => {
            fused::check(p, "fused")?;
            Ok(KernelPath::Fused)
        }
        KernelPath::Decode => {
            fused::check(p, "decode")?;
            Ok(KernelPath::Decode)
        }
        KernelPath::Auto => {
            let short = p.len_q <= DECODE_MAX_LEN_Q && p.len_k >= DECODE_MIN_LEN_K;
            if short && fused::check(p, "decode").is_ok() {
                return Ok(KernelPath::Decode);
            }
            match fused::check(p, "fused") {
                Ok(()) => Ok(KernelPath::Fused),
                Err(e) if f16 => Err(e),
                Err(_) => Ok(KernelPath::Staged),
            }
        }
    }
}

/// Decides everything `p` needs on `path` (from [`choose`]) with q, k and v stored as
/// `elem`: the tuned configuration, the probed loop budget, the built pipelines.
///
/// # Errors
/// [`AttentionError::TooLarge`] when no configuration fits the device; device errors
/// while tuning, probing or building pipelines.
pub(crate) async fn prepare(
    ctx: &GpuContext,
    p: &Problem,
    path: KernelPath,
    elem: Elem,
) -> Result<Route> {
    match path {
        KernelPath::Fused => {
            let cfg = tune::fused_config(ctx, p, elem).await?;
            resolve::fused(ctx, p, elem, cfg).await
        }
        KernelPath::Decode => {
            let cand = tune::decode_config(ctx, p, elem).await?;
            resolve::decode(ctx, p, elem, cand).await
        }
        KernelPath::Staged | KernelPath::Auto => {
            if elem == Elem::F16 {
                return Err(AttentionError::option(
                    "precision",
                    "F16 runs on the fused and decode kernels only, not the staged path",
                ));
            }
            Ok(Route::Staged(Staged::prepare(ctx).await?))
        }
    }
}
