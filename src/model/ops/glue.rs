//! The one file that reaches into the crate's device layer: pipelines, bind groups,
//! uniform buffers, error scopes, readback, stage timestamps and the dense-layer kernel. Everything else
//! under `model` goes through the names re-exported here.

use std::sync::Arc;

use crate::error::Result;
use crate::gpu::device::bind_cache::params_group;
pub(crate) use crate::gpu::device::bind_cache::BindCache;
use crate::gpu::device::buffers;
pub(crate) use crate::gpu::device::readback::read_ranges;
pub(crate) use crate::gpu::device::recorder::Recorder;
pub(crate) use crate::gpu::device::scopes::ErrorScopes;
pub(crate) use crate::gpu::device::stage_marks::StageMarks;
use crate::{GpuContext, GpuTensor};

pub(crate) use crate::gpu::kernels::dispatch::range;
pub(crate) use crate::gpu::kernels::elem::Elem;
pub(crate) use crate::gpu::kernels::layout::{uniform_layout, UniformLayout};
pub(crate) use crate::gpu::kernels::linear::{
    force_split_products, lanes_adapter, split_products, vec4_reads, Epilogue, HeadLayout, Linear,
    LinearKernel, LinearNeed, WeightsRef, SPLIT_MAX_ROWS,
};
pub(crate) use crate::gpu::kernels::linear_tune::LinearProblem;
pub(crate) use crate::gpu::kernels::pipelines::{Binding, KernelPipeline, KernelSpec};
pub(crate) use crate::gpu::kernels::wgsl::kernel_wgsl;
use crate::gpu::kernels::{dispatch, pipelines};

/// The pipeline of `spec` (no override constants), built once per context.
///
/// # Errors
/// A device error building the pipeline.
pub(crate) async fn pipeline(ctx: &GpuContext, spec: &KernelSpec) -> Result<Arc<KernelPipeline>> {
    pipelines::pipeline(ctx, spec, &[]).await
}

/// The pipeline of `spec` with override constants, built once per context and constants.
///
/// # Errors
/// A device error building the pipeline.
pub(crate) async fn pipeline_with(
    ctx: &GpuContext,
    spec: &KernelSpec,
    constants: &[(&'static str, f64)],
) -> Result<Arc<KernelPipeline>> {
    pipelines::pipeline(ctx, spec, constants).await
}

/// A zero-filled tensor of `shape` whose buffer is also a uniform buffer of at least
/// `min_bytes` bytes, so that a kernel can bind a range of it as a uniform binding.
///
/// # Errors
/// As [`GpuTensor::empty`].
pub(crate) fn uniform_readable_tensor(
    ctx: &GpuContext,
    shape: &[usize],
    min_bytes: u64,
) -> Result<GpuTensor> {
    let bytes = (shape.iter().product::<usize>() as u64 * 4).max(min_bytes);
    let usage = crate::gpu::device::tensor::TENSOR_USAGE | wgpu::BufferUsages::UNIFORM;
    let buffer = buffers::empty(ctx, "wgpu-attention uniform-readable tensor", bytes, usage)?;
    GpuTensor::from_buffer(buffer, shape)
}

/// A buffer of `usage` (storage, and uniform for paged weights) holding `bytes` verbatim,
/// zeros to the next multiple of 16 bytes and 16 more (so a kernel may read the word
/// after any byte it reads, and the aligned four words holding it).
///
/// # Errors
/// [`crate::AttentionError::TooLarge`] past the device's storage binding limit; a device
/// error creating it.
pub(crate) fn upload_words(
    ctx: &GpuContext,
    label: &str,
    bytes: &[u8],
    usage: wgpu::BufferUsages,
) -> Result<wgpu::Buffer> {
    ctx.check_alive()?;
    let size = (bytes.len() as u64).next_multiple_of(16) + 16;
    let limits = ctx.device().limits();
    let max = limits
        .max_storage_buffer_binding_size
        .min(limits.max_buffer_size);
    if size > max {
        return Err(crate::AttentionError::TooLarge {
            arg: "weights",
            detail: format!("{label}: {size} bytes exceed the device's {max}-byte storage binding"),
        });
    }
    let scopes = ErrorScopes::push(ctx);
    let buffer = ctx.device().create_buffer(&wgpu::BufferDescriptor {
        label: Some(label),
        size,
        usage,
        mapped_at_creation: true,
    });
    {
        let mut view = buffer
            .get_mapped_range_mut(..)
            .map_err(|e| ctx.device_error(format!("creating {label}: {e}")))?;
        // Mapped-at-creation memory starts zeroed, so the padding needs no write.
        view.slice(..bytes.len()).copy_from_slice(bytes);
    }
    buffer.unmap();
    scopes.pop_now(ctx, label)?;
    Ok(buffer)
}

/// A uniform buffer holding one params struct.
pub(crate) fn uniform<T: bytemuck::Pod>(
    ctx: &GpuContext,
    label: &str,
    p: &T,
) -> Result<wgpu::Buffer> {
    Ok(buffers::uniform_array(ctx, label, std::slice::from_ref(p))?.0)
}

/// A zero-filled uniform buffer of `bytes` that kernels are given copies in
/// (`COPY_DST`), never written from the host.
///
/// # Errors
/// A device error creating it.
pub(crate) fn uniform_scratch(ctx: &GpuContext, label: &str, bytes: usize) -> Result<wgpu::Buffer> {
    buffers::empty(
        ctx,
        label,
        bytes as u64,
        wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
    )
}

/// Token ids as a storage buffer.
pub(crate) fn upload_ids(ctx: &GpuContext, ids: &[u32]) -> Result<wgpu::Buffer> {
    let scopes = ErrorScopes::push(ctx);
    let buffer = buffers::with_contents(
        ctx,
        "wgpu-attention token ids",
        bytemuck::cast_slice(ids),
        wgpu::BufferUsages::STORAGE,
    )?;
    scopes.pop_now(ctx, "uploading token ids")?;
    Ok(buffer)
}

/// Submits `encoder` inside error scopes, reporting a device error as `what` failing.
pub(crate) async fn submit(
    ctx: &GpuContext,
    encoder: wgpu::CommandEncoder,
    what: &str,
) -> Result<()> {
    ctx.check_alive()?;
    let scopes = ErrorScopes::push(ctx);
    ctx.queue().submit([encoder.finish()]);
    scopes.pop(ctx, what).await
}

/// Records one dispatch of `pipe` (the kernel `name`) over `workgroups` workgroups (a
/// 2-D grid read back linearly) into the recorder's open pass. Only encodes: the
/// pipeline is built.
///
/// # Errors
/// [`crate::AttentionError::TooLarge`] for a launch beyond the grid limits.
pub(crate) fn record_pass(
    ctx: &GpuContext,
    rec: &mut Recorder<'_>,
    (name, pipe): (&'static str, &KernelPipeline),
    resources: Vec<wgpu::BindingResource<'_>>,
    workgroups: u64,
) -> Result<()> {
    let group = dispatch::bind_group(ctx, name, &pipe.layout, resources);
    dispatch::dispatch(ctx, rec.pass(), (pipe, &group), workgroups, name)
}

/// [`record_pass`] for a kernel whose binding 0 is its uniform parameters `params`,
/// followed by `rest`: where the recorder keeps bind groups between recordings
/// ([`Recorder::with_binds`]), the dispatch reuses the group it had last time if it
/// binds the same parameters and buffers, else a parameter buffer and a bind group are
/// made for it.
///
/// # Errors
/// As [`record_pass`]; a device error creating the parameters' buffer.
pub(crate) fn record_with_params<T: bytemuck::Pod>(
    ctx: &GpuContext,
    rec: &mut Recorder<'_>,
    (name, pipe): (&'static str, &KernelPipeline),
    params: &T,
    rest: Vec<wgpu::BindingResource<'_>>,
    workgroups: u64,
) -> Result<()> {
    let bytes = bytemuck::bytes_of(params);
    let group = match rec.binds() {
        Some(binds) => binds.group(ctx, name, &pipe.layout, bytes, rest)?,
        None => params_group(ctx, name, &pipe.layout, bytes, rest)?,
    };
    dispatch::dispatch(ctx, rec.pass(), (pipe, &group), workgroups, name)
}

/// Binds a whole tensor.
pub(crate) fn whole(t: &GpuTensor) -> wgpu::BindingResource<'_> {
    range(t.buffer(), 0, (t.len() as u64 * 4).max(4))
}

/// Reads whole tensors back with one mapping.
pub(crate) async fn read_tensors(
    ctx: &GpuContext,
    tensors: &[&GpuTensor],
) -> Result<Vec<Vec<f32>>> {
    let ranges: Vec<_> = tensors
        .iter()
        .map(|t| (t.buffer(), 0, t.len() as u64 * 4))
        .collect();
    read_ranges(ctx, &ranges).await
}

/// Blocks until the device has finished everything submitted (stage timing only).
#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn wait_idle(ctx: &GpuContext) -> Result<()> {
    ctx.device()
        .poll(wgpu::PollType::wait_indefinitely())
        .map(|_| ())
        .map_err(|e| ctx.device_error(format!("waiting for the device: {e}")))
}

/// The browser cannot block; stage timing does not run there.
#[cfg(target_arch = "wasm32")]
pub(crate) fn wait_idle(_ctx: &GpuContext) -> Result<()> {
    Ok(())
}
