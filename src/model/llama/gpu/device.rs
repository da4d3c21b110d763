//! The crate's device layer as the llama forward pass uses it: buffers, dispatch
//! helpers, the pipeline cache, the linear kernel, error scopes and the readback. Every
//! use of `crate::gpu` internals by the llama family goes through this file.

pub(crate) use crate::gpu::buffers;
pub(crate) use crate::gpu::dispatch::{bind_group, grid, range};
pub(crate) use crate::gpu::kernels::linear::HeadLayout;
pub(crate) use crate::gpu::linear::{record as record_linear, Linear};
pub(crate) use crate::gpu::pipelines::{Binding, KernelSpec};
pub(crate) use crate::gpu::readback::read_ranges;
pub(crate) use crate::gpu::scopes::ErrorScopes;
