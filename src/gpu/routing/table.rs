//! The route table: every kernel path, what it serves, and how its route is prepared.
//! The staged path (the fallback that always works), the fused flash-attention kernel
//! (the default) and split-KV decoding (short queries, long keys). Weights come from
//! the staged path's score matrix, or on the other two from their log-sum-exp
//! (`paths/from_lse.rs`). A new path adds its arms here.

use crate::error::{AttentionError, Result};
use crate::gpu::device::context::GpuContext;
use crate::gpu::forward::paths::staged::{self, Staged};
use crate::gpu::forward::route::Route;
use crate::gpu::kernels::elem::Elem;
use crate::gpu::kernels::fused;
use crate::gpu::kernels::plan::Chunk;
use crate::gpu::routing::resolve;
use crate::gpu::routing::tune;
use crate::options::KernelPath;
use crate::problem::Problem;

/// Queries up to this long count as decoding for [`KernelPath::Auto`].
pub(crate) const DECODE_MAX_LEN_Q: usize = 16;
/// Keys at least this many make split-KV decoding worth its second dispatch.
pub(crate) const DECODE_MIN_LEN_K: usize = 1024;

/// The path a call takes, as [`choose`] decided it: never `Auto`, f16 only where the
/// path reads it, and for the staged path its chunk plan, made once. [`prepare`] takes
/// it as it is.
#[derive(Debug, Clone)]
pub(crate) enum Chosen {
    Staged { chunks: Vec<Chunk> },
    Fused { elem: Elem },
    Decode { elem: Elem },
}

impl Chosen {
    /// The path, as the public API names it.
    pub(crate) fn path(&self) -> KernelPath {
        match self {
            Chosen::Staged { .. } => KernelPath::Staged,
            Chosen::Fused { .. } => KernelPath::Fused,
            Chosen::Decode { .. } => KernelPath::Decode,
        }
    }

    /// How the path's kernels read q, k and v.
    pub(crate) fn elem(&self) -> Elem {
        match self {
            Chosen::Staged { .. } => Elem::F32,
            Chosen::Fused { elem } | Chosen::Decode { elem } => *elem,
        }
    }
}

/// The path a call takes on this context: `path` checked against the problem, the
/// storage type `elem` and the adapter, or chosen when it is [`KernelPath::Auto`]; for
/// the staged path, with its chunks planned (so that a call too large for the device's
/// bindings is refused before anything is uploaded).
///
/// # Errors
/// [`AttentionError::Unsupported`] for f16 on an adapter without `shader-f16`;
/// [`AttentionError::InvalidOption`] for a path or precision that cannot serve the call
/// (f16 on the staged path, head dims too large); [`AttentionError::TooLarge`] when one
/// row of one head does not fit the staged path's bindings.
pub(crate) fn choose(
    ctx: &GpuContext,
    p: &Problem,
    path: KernelPath,
    elem: Elem,
) -> Result<Chosen> {
    let path = choose_path(ctx, p, path, elem)?;
    Ok(match path {
        KernelPath::Fused => Chosen::Fused { elem },
        KernelPath::Decode => Chosen::Decode { elem },
        KernelPath::Staged | KernelPath::Auto => Chosen::Staged {
            chunks: staged::chunks(ctx, p)?,
        },
    })
}

/// [`choose`]'s decision of the path alone. Never returns `Auto`.
fn choose_path(ctx: &GpuContext, p: &Problem, path: KernelPath, elem: Elem) -> Result<KernelPath> {
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

/// Decides everything `p` needs on the path [`choose`] chose: the tuned configuration,
/// the probed loop budget, the built pipelines.
///
/// # Errors
/// [`AttentionError::TooLarge`] when no configuration fits the device; device errors
/// while tuning, probing or building pipelines.
pub(crate) async fn prepare(ctx: &GpuContext, p: &Problem, chosen: &Chosen) -> Result<Route> {
    match chosen {
        Chosen::Fused { elem } => {
            let cfg = tune::fused_config(ctx, p, *elem).await?;
            resolve::fused(ctx, p, *elem, cfg).await
        }
        Chosen::Decode { elem } => {
            let cand = tune::decode_config(ctx, p, *elem).await?;
            resolve::decode(ctx, p, *elem, cand).await
        }
        Chosen::Staged { chunks } => Ok(Route::Staged(Staged::prepare(ctx, chunks.clone()).await?)),
    }
}
