//! The choice among fitting candidates: the first in the adapter's order, or with tuning
//! on the fastest on a proxy of the problem, remembered in the context.

use crate::error::{AttentionError, Result};
use crate::gpu::device::context::GpuContext;
use crate::gpu::device::memo::Memoizable;
use crate::gpu::kernels::elem::Elem;
use crate::gpu::routing::tune::candidates::Candidate;
use crate::gpu::routing::tune::timing;
use crate::problem::Problem;

pub(super) fn none_fits(kernel: &str, p: &Problem) -> AttentionError {
    AttentionError::TooLarge {
        arg: "q",
        detail: format!(
            "no {kernel} configuration fits this device's workgroup limits for D {} and Dv {}",
            p.dim, p.dim_v
        ),
    }
}

/// The first of `fitting` (the adapter's preferred order, already cut to what fits), or
/// with tuning on the fastest of them, remembered in `memo` under the problem's class.
pub(super) async fn choose<T: Copy + Memoizable, K: Eq + std::hash::Hash + Memoizable>(
    ctx: &GpuContext,
    p: &Problem,
    elem: Elem,
    key: K,
    fitting: Vec<T>,
    (kernel, wrap): (&str, fn(T) -> Candidate),
) -> Result<T> {
    let first = *fitting.first().ok_or_else(|| none_fits(kernel, p))?;
    let chosen = if !ctx.autotune() || fitting.len() == 1 {
        first
    } else {
        let candidates: Vec<Candidate> = fitting.iter().copied().map(wrap).collect();
        let index = timing::fastest_index(ctx, p, elem, &candidates).await?;
        index.and_then(|i| fitting.get(i).copied()).unwrap_or(first)
    };
    ctx.memo.insert(key, chosen);
    Ok(chosen)
}
