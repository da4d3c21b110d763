//! The crate's device layer as the llama forward pass uses it: buffers, dispatch
//! helpers, the pipeline cache, the linear kernel, error scopes and the readback. Every
//! use of `crate::gpu` internals by the llama family goes through this file.

pub(crate) use crate::gpu::device::buffers;
pub(crate) use crate::gpu::device::readback::read_ranges;
pub(crate) use crate::gpu::device::scopes::ErrorScopes;
pub(crate) use crate::gpu::kernels::dispatch::{bind_group, grid, range};
pub(crate) use crate::gpu::kernels::linear::{HeadLayout, Linear, LinearKernel};
pub(crate) use crate::gpu::kernels::pipelines::{pipeline, Binding, KernelPipeline, KernelSpec};
