//! A kernel configuration made into a route for one problem: the loop budget probed
//! (which decides whether the fused kernel needs key ranges) and the pipelines built.
//! Used for the configuration a call runs and for every candidate the tuner times.

use crate::error::{AttentionError, Result};
use crate::gpu::device::context::GpuContext;
use crate::gpu::forward::paths::one_pass::OnePass;
use crate::gpu::forward::paths::split_kv::{FirstPass, KeyRanges, SplitKv};
use crate::gpu::forward::route::Route;
use crate::gpu::kernels::decode_subgroup::DecodeChoice;
use crate::gpu::kernels::elem::Elem;
use crate::gpu::kernels::fused::FusedConfig;
use crate::gpu::kernels::subgroups::subgroup_sizes;
use crate::gpu::routing::budget::key_budget;
use crate::problem::Problem;

/// The fused kernel with `cfg`: one pass, or, where the adapter limits how many keys one
/// workgroup may loop over (see `routing/budget.rs`), key ranges merged like split-KV
/// decoding.
///
/// # Errors
/// Device errors building a pipeline or probing the adapter.
pub(crate) async fn fused(
    ctx: &GpuContext,
    p: &Problem,
    elem: Elem,
    cfg: FusedConfig,
) -> Result<Route> {
    let first = FirstPass::Fused(cfg);
    let budget = key_budget(ctx, p, elem, first).await?;
    if budget.is_some_and(|b| p.len_k as u64 > b) {
        let split = SplitKv::prepare(
            ctx,
            p,
            elem,
            first,
            KeyRanges {
                workgroups: 1,
                budget,
            },
        )
        .await?;
        return Ok(Route::SplitKv(split));
    }
    Ok(Route::Fused(OnePass::prepare(ctx, p, elem, cfg).await?))
}

/// Split-KV decoding with the kernel of `cand`.
///
/// # Errors
/// [`AttentionError::TooLarge`] when the kernel does not fit the device's workgroup
/// limits for the head dims; [`AttentionError::Unsupported`] for a subgroup kernel the
/// adapter cannot run; device errors building a pipeline or probing the adapter.
pub(crate) async fn decode(
    ctx: &GpuContext,
    p: &Problem,
    elem: Elem,
    cand: DecodeChoice,
) -> Result<Route> {
    let too_large = || AttentionError::TooLarge {
        arg: "q",
        detail: format!(
            "the decode kernel does not fit this device's workgroup limits for D {} and Dv {}",
            p.dim, p.dim_v
        ),
    };
    let first = match cand {
        DecodeChoice::Lanes(c) => FirstPass::Decode(c.resolve(ctx, p, elem).ok_or_else(too_large)?),
        DecodeChoice::Subgroup(c) => {
            if subgroup_sizes(ctx).is_none_or(|(smallest, _)| c.d_split > smallest) {
                return Err(AttentionError::Unsupported(format!(
                    "the subgroup decode kernel with {} lanes per key needs subgroups of at least that size; adapter {:?} has {}",
                    c.d_split,
                    ctx.adapter_info().name,
                    subgroup_sizes(ctx).map_or("none".to_string(), |(a, b)| format!("{a} to {b}"))
                )));
            }
            FirstPass::SubgroupDecode(c.resolve(ctx, p, elem).ok_or_else(too_large)?)
        }
    };
    let budget = key_budget(ctx, p, elem, first).await?;
    let split = SplitKv::prepare(
        ctx,
        p,
        elem,
        first,
        KeyRanges {
            workgroups: cand.workgroups(),
            budget,
        },
    )
    .await?;
    Ok(Route::SplitKv(split))
}
