//! The kernel `shaders/kernels/to_f16.wgsl`: f32 to f16 storage, one slice per dispatch.

use bytemuck::{Pod, Zeroable};

use std::sync::Arc;

use crate::error::{AttentionError, Result};
use crate::gpu::device::buffers;
use crate::gpu::device::context::GpuContext;
use crate::gpu::kernels::dispatch::{bind_group, grid, range};
use crate::gpu::kernels::layout::{uniform_layout, UniformLayout};
use crate::gpu::kernels::pipelines::{pipeline, Binding, KernelPipeline, KernelSpec};
use crate::gpu::kernels::plan::buffer_bytes;
use crate::gpu::kernels::source;

/// Bindings: cast parameters, f32 source slice, packed f16 destination slice.
pub(crate) const SPEC: KernelSpec = KernelSpec {
    name: "to_f16",
    source: source::TO_F16,
    bindings: &[Binding::Uniform, Binding::Read, Binding::ReadWrite],
    trusted: true,
    uniforms: &[cast_uniform],
};

/// As the WGSL struct `Cast` in to_f16.wgsl (checked by `reflection.rs`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
pub(crate) struct CastParams {
    pub count: u32,
    pub _pad: [u32; 3],
}

/// [`CastParams`] as to_f16.wgsl declares it.
fn cast_uniform() -> UniformLayout {
    uniform_layout!(CastParams as "Cast" { count, _pad => ["_pad0", "_pad1", "_pad2"] })
}

/// As WG in to_f16.wgsl (checked by `reflection.rs`).
pub(crate) const WG: u64 = 256;

/// Slices start on multiples of this many values, so both the f32 source (4 bytes each)
/// and the f16 destination (2 bytes each) start on 256-byte binding offsets.
pub(crate) const SLICE_ALIGN: u64 = 128;

/// One invocation per two values.
pub(crate) fn workgroups(count: u64) -> u64 {
    count.div_ceil(2).div_ceil(WG)
}

/// The conversion kernel, built.
pub(crate) struct Cast {
    pipe: Arc<KernelPipeline>,
}

impl Cast {
    /// Builds (or finds cached) the pipeline.
    ///
    /// # Errors
    /// A device error building the pipeline.
    pub(crate) async fn prepare(ctx: &GpuContext) -> Result<Self> {
        Ok(Self {
            pipe: pipeline(ctx, &SPEC, &[]).await?,
        })
    }

    /// Records the conversion of the first `elems` f32 values of `src` into a new f16
    /// buffer, which it returns.
    ///
    /// # Errors
    /// A device error allocating, or [`AttentionError::TooLarge`] for a launch
    /// beyond the grid limits.
    pub(crate) fn record(
        &self,
        ctx: &GpuContext,
        encoder: &mut wgpu::CommandEncoder,
        src: &wgpu::Buffer,
        elems: u64,
    ) -> Result<wgpu::Buffer> {
        let pipe = &self.pipe;
        let dst = buffers::empty(
            ctx,
            "wgpu-attention f16 copy",
            buffer_bytes(elems, 2),
            wgpu::BufferUsages::STORAGE,
        )?;
        // Each slice's f32 source must fit one binding.
        let slice = (ctx.max_binding() / 4 / SLICE_ALIGN) * SLICE_ALIGN;
        if slice == 0 {
            return Err(AttentionError::TooLarge {
                arg: "q",
                detail: "the storage binding limit is too small to convert to f16".into(),
            });
        }
        let starts: Vec<u64> = (0..elems).step_by(slice as usize).collect();
        let cast_params: Vec<CastParams> = starts
            .iter()
            .map(|&s| CastParams {
                count: (elems - s).min(slice) as u32,
                _pad: [0; 3],
            })
            .collect();
        let (params, stride) =
            buffers::uniform_array(ctx, "wgpu-attention cast params", &cast_params)?;
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("wgpu-attention to f16"),
            timestamp_writes: None,
        });
        pass.set_pipeline(&pipe.pipeline);
        for (n, &start) in starts.iter().enumerate() {
            let count = (elems - start).min(slice);
            let group = bind_group(
                ctx,
                "to_f16",
                &pipe.layout,
                vec![
                    range(
                        &params,
                        n as u64 * stride,
                        std::mem::size_of::<CastParams>() as u64,
                    ),
                    range(src, start * 4, count * 4),
                    range(&dst, start * 2, buffer_bytes(count, 2)),
                ],
            );
            let (x, y) = grid(ctx, workgroups(count), "q")?;
            pass.set_bind_group(0, &group, &[]);
            pass.dispatch_workgroups(x, y, 1);
        }
        Ok(dst)
    }
}
