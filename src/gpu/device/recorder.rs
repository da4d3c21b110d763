//! Dispatches recorded into one compute pass for as long as nothing else is recorded.
//!
//! wgpu ends each compute pass with a command buffer of its own for the barriers before
//! the next, and a driver sets up its state again for each: on lavapipe a pass cost
//! about 0.04 ms a dispatch over the dispatch itself (a bench of 183 dispatches with a
//! decoding step's bindings: 0.08 ms a dispatch each in its own pass, 0.044 in one).
//! Inside one pass wgpu still puts a barrier before every dispatch that needs one, so the
//! order of reads and writes is kept.

use super::bind_cache::BindCache;

/// A command encoder with the compute pass now open on it, if any. Kernels record into
/// [`Recorder::pass`]; copies, timestamps and passes of their own go through
/// [`Recorder::encoder`], which ends the open pass first. Dropping the recorder ends it.
pub(crate) struct Recorder<'e> {
    encoder: &'e mut wgpu::CommandEncoder,
    pass: Option<wgpu::ComputePass<'static>>,
    binds: Option<&'e mut BindCache>,
}

impl<'e> Recorder<'e> {
    /// Records into `encoder`; no pass is opened until a dispatch needs one.
    pub(crate) fn new(encoder: &'e mut wgpu::CommandEncoder) -> Self {
        Self {
            encoder,
            pass: None,
            binds: None,
        }
    }

    /// Records into `encoder`, taking the bind groups of dispatches that bind what they
    /// bound in the last recording with `binds` from it (see [`BindCache`]).
    pub(crate) fn with_binds(
        encoder: &'e mut wgpu::CommandEncoder,
        binds: &'e mut BindCache,
    ) -> Self {
        binds.restart();
        Self {
            binds: Some(binds),
            ..Self::new(encoder)
        }
    }

    /// The bind groups kept from the last recording, if this recorder was given them.
    pub(crate) fn binds(&mut self) -> Option<&mut BindCache> {
        self.binds.as_deref_mut()
    }

    /// The open compute pass, begun now if none is.
    pub(crate) fn pass(&mut self) -> &mut wgpu::ComputePass<'static> {
        let encoder = &mut *self.encoder;
        self.pass.get_or_insert_with(|| {
            encoder
                .begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some("wgpu-attention"),
                    timestamp_writes: None,
                })
                .forget_lifetime()
        })
    }

    /// The encoder itself, the open pass ended (the encoder is locked while it is open).
    pub(crate) fn encoder(&mut self) -> &mut wgpu::CommandEncoder {
        self.pass = None;
        self.encoder
    }
}
