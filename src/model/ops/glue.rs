//! The one file that reaches into the crate's device layer: pipelines, bind groups,
//! uniform buffers, error scopes and the dense-layer kernel. Everything else under
//! `model` goes through the names re-exported here.

use crate::error::Result;
use crate::gpu::buffers;
use crate::gpu::scopes::ErrorScopes;
use crate::GpuContext;

pub(crate) use crate::gpu::dispatch::{bind_group, grid, range};
pub(crate) use crate::gpu::kernels::linear::HeadLayout;
pub(crate) use crate::gpu::linear::Linear;
pub(crate) use crate::gpu::pipelines::{Binding, KernelSpec};

/// Records one dense layer `y = x Wᵀ + b` with the crate's linear kernel.
pub(crate) async fn record_linear(
    ctx: &GpuContext,
    encoder: &mut wgpu::CommandEncoder,
    call: &Linear<'_>,
) -> Result<()> {
    crate::gpu::linear::record(ctx, encoder, call).await
}

/// A uniform buffer holding one params struct.
pub(crate) fn uniform<T: bytemuck::Pod>(
    ctx: &GpuContext,
    label: &str,
    p: &T,
) -> Result<wgpu::Buffer> {
    Ok(buffers::uniform_array(ctx, label, std::slice::from_ref(p))?.0)
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

/// A compute pass running `pipe` over `n` workgroups (a 2-D grid read back linearly).
pub(crate) async fn dispatch(
    ctx: &GpuContext,
    encoder: &mut wgpu::CommandEncoder,
    spec: &KernelSpec,
    resources: Vec<wgpu::BindingResource<'_>>,
    workgroups: u64,
) -> Result<()> {
    let pipe = ctx.pipeline(spec, &[]).await?;
    let group = bind_group(ctx, spec.name, &pipe.layout, resources);
    let (gx, gy) = grid(ctx, workgroups, spec.name)?;
    let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
        label: Some(spec.name),
        timestamp_writes: None,
    });
    pass.set_pipeline(&pipe.pipeline);
    pass.set_bind_group(0, &group, &[]);
    pass.dispatch_workgroups(gx, gy, 1);
    Ok(())
}

/// Binds a whole tensor.
pub(crate) fn whole(t: &crate::GpuTensor) -> wgpu::BindingResource<'_> {
    range(t.buffer(), 0, (t.len() as u64 * 4).max(4))
}

/// Reads whole tensors back with one mapping.
pub(crate) async fn read_tensors(
    ctx: &GpuContext,
    tensors: &[&crate::GpuTensor],
) -> Result<Vec<Vec<f32>>> {
    let ranges: Vec<_> = tensors
        .iter()
        .map(|t| (t.buffer(), 0, t.len() as u64 * 4))
        .collect();
    crate::gpu::readback::read_ranges(ctx, &ranges).await
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
