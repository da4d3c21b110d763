//! A route: the kernels a call runs, decided and built. Deciding (tuning, probing,
//! pipeline builds) is async and happens before (`routing/table.rs`, `routing/resolve.rs`);
//! recording a route only encodes commands.

use crate::error::Result;
use crate::gpu::forward::io::Recording;
use crate::gpu::forward::paths::one_pass::OnePass;
use crate::gpu::forward::paths::split_kv::SplitKv;
use crate::gpu::forward::paths::staged::Staged;

/// How one problem runs on one context.
pub(crate) enum Route {
    /// Q·Kᵀ, softmax, weights·V.
    Staged(Staged),
    /// The fused kernel, one pass over all keys.
    Fused(OnePass),
    /// Key ranges in parallel, then a combine pass: decoding, or the fused kernel where
    /// the adapter limits how many keys one workgroup may loop over.
    SplitKv(SplitKv),
}

impl Route {
    /// Records the forward of `r.p`. Returns the device bytes it allocated beyond inputs
    /// and outputs.
    ///
    /// # Errors
    /// As the path's own record function.
    pub(crate) fn record(&self, r: &mut Recording<'_, '_>) -> Result<u64> {
        match self {
            Route::Staged(s) => s.record(r),
            Route::Fused(f) => f.record(r),
            Route::SplitKv(s) => s.record(r),
        }
    }
}
