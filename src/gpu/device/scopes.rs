//! Device errors as results: every piece of device work runs inside error scopes for
//! validation, out-of-memory and internal errors, and whatever they catch comes back
//! as an [`AttentionError::Device`] instead of reaching wgpu's default handler.

use crate::error::{AttentionError, Result};
use crate::gpu::device::context::GpuContext;

/// Error scopes pushed on this thread's stack for one device (wgpu's scopes are
/// thread-local). Popped in reverse order of pushing, also when dropped early, since
/// wgpu panics on an out-of-order pop.
pub(crate) struct ErrorScopes {
    /// Pushed first to last; popped last to first.
    guards: Vec<wgpu::ErrorScopeGuard>,
}

impl ErrorScopes {
    /// Starts capturing every kind of device error raised on this thread.
    pub(crate) fn push(ctx: &GpuContext) -> Self {
        let guards = [
            wgpu::ErrorFilter::Internal,
            wgpu::ErrorFilter::OutOfMemory,
            wgpu::ErrorFilter::Validation,
        ]
        .into_iter()
        .map(|f| ctx.device.push_error_scope(f))
        .collect();
        Self { guards }
    }

    /// Stops capturing and reports the first error caught, naming `what` was being done.
    /// Out of memory is reported before validation: an allocation that failed makes
    /// everything after it invalid too.
    pub(crate) async fn pop(mut self, ctx: &GpuContext, what: &str) -> Result<()> {
        let mut caught = Vec::new();
        while let Some(guard) = self.guards.pop() {
            caught.push(guard.pop().await);
        }
        // `caught` is in reverse push order: validation, out of memory, internal.
        let first = caught.into_iter().rev().flatten().min_by_key(|e| match e {
            wgpu::Error::OutOfMemory { .. } => 0,
            wgpu::Error::Internal { .. } => 1,
            wgpu::Error::Validation { .. } => 2,
        });
        match first {
            None => Ok(()),
            Some(e) => Err(describe(ctx, what, &e)),
        }
    }
}

impl ErrorScopes {
    /// [`ErrorScopes::pop`] for synchronous callers. On native targets the pop is ready
    /// at once. On the web it cannot be awaited here, so the scopes are dropped and an
    /// error surfaces at the next use of what was made (as an invalid object).
    pub(crate) fn pop_now(self, ctx: &GpuContext, what: &str) -> Result<()> {
        #[cfg(not(target_arch = "wasm32"))]
        return pollster::block_on(self.pop(ctx, what));
        #[cfg(target_arch = "wasm32")]
        {
            let _ = (ctx, what);
            drop(self);
            Ok(())
        }
    }
}

impl Drop for ErrorScopes {
    fn drop(&mut self) {
        while let Some(guard) = self.guards.pop() {
            drop(guard);
        }
    }
}

fn describe(ctx: &GpuContext, what: &str, e: &wgpu::Error) -> AttentionError {
    let kind = match e {
        wgpu::Error::OutOfMemory { .. } => "out of device memory",
        wgpu::Error::Internal { .. } => "internal error",
        wgpu::Error::Validation { .. } => "validation error",
    };
    ctx.device_error(format!("{what}: {kind}: {e}"))
}
