//! Forcing the subgroup decode kernel, on one context or for the whole process through
//! `WGPU_ATTENTION_KERNEL`, so that its tests run it on any adapter that has subgroups.

use crate::error::{AttentionError, Result};
use crate::gpu::device::context::GpuContext;
use crate::gpu::kernels::decode_subgroup::DecodeChoice;
use crate::gpu::kernels::elem::Elem;
use crate::gpu::kernels::subgroups::subgroup_sizes;
use crate::gpu::routing::tune::candidates::{
    ordered, subgroup, Candidate, SUBGROUP_DECODE_CANDIDATES, SUBGROUP_DECODE_CPU_FIRST, TIMED,
};
use crate::gpu::routing::tune::choose::choose;
use crate::gpu::routing::tune::class::ClassKey;
use crate::options::FusedKernel;
use crate::problem::Problem;

/// Forces the subgroup decode kernel on `ctx` (see [`super::decode_config`]): with `d_split`
/// lanes per key, or with the first candidate that fits when `None`.
pub(crate) fn force_subgroup_decode(ctx: &GpuContext, d_split: Option<u32>) {
    ctx.memo.insert(ForcedSubgroupDecode, d_split.unwrap_or(0));
}

/// The key of the forcing in the memo; its value is `d_split`, 0 for any.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct ForcedSubgroupDecode;

/// The subgroup decode kernel asked for, if any: by [`force_subgroup_decode`] on this
/// context (`Some(0)` is any width), or by `subgroup-decode` among the comma-separated
/// names of `WGPU_ATTENTION_KERNEL` for every context whose device has subgroups (the
/// others keep decode.wgsl, so a whole test suite can run with it set).
pub(super) fn forced_subgroup_decode(ctx: &GpuContext) -> Option<u32> {
    if let Some(d) = ctx
        .memo
        .get::<ForcedSubgroupDecode, u32>(&ForcedSubgroupDecode)
    {
        return Some(d);
    }
    let named = crate::options::kernel_env_names()
        .iter()
        .any(|k| k == "subgroup-decode");
    (named && subgroup_sizes(ctx).is_some()).then_some(0)
}

/// A class whose decode kernel is forced to be the subgroup one, remembered apart.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ForcedClass(ClassKey);

/// The forced subgroup decode kernel: one of `d_split` lanes per key in a workgroup of
/// at least 64 lanes, or, for `d_split` 0, the subgroup candidates that fit in the
/// adapter's order (timed when tuning is on).
pub(super) async fn forced_decode(
    ctx: &GpuContext,
    p: &Problem,
    elem: Elem,
    d_split: u32,
) -> Result<DecodeChoice> {
    let (_, largest) = subgroup_sizes(ctx).ok_or_else(|| {
        AttentionError::Unsupported(format!(
            "the subgroup decode kernel was asked for, and adapter {:?} has no subgroups",
            ctx.adapter_info().name
        ))
    })?;
    if d_split != 0 {
        return Ok(DecodeChoice::Subgroup(subgroup(
            largest.max(64),
            d_split,
            256,
        )));
    }
    let key = ForcedClass(ClassKey::new(p, elem, true, FusedKernel::Auto));
    if let Some(c) = ctx.memo.get::<ForcedClass, DecodeChoice>(&key) {
        return Ok(c);
    }
    let fitting = ordered(ctx, SUBGROUP_DECODE_CANDIDATES, SUBGROUP_DECODE_CPU_FIRST)
        .into_iter()
        .map(DecodeChoice::Subgroup)
        .filter(|c| c.fits(ctx, p, elem))
        .take(TIMED)
        .collect();
    let wrap: fn(DecodeChoice) -> Candidate = Candidate::Decode;
    choose(ctx, p, elem, key, fitting, ("subgroup decode", wrap)).await
}
