//! Tensors that live on the device between calls.

use ndarray::{ArrayD, ArrayViewD, IxDyn};

use crate::error::{AttentionError, Result};
use crate::gpu::device::buffers;
use crate::gpu::device::context::GpuContext;
use crate::gpu::device::scopes::ErrorScopes;

/// A row-major f32 tensor in a device buffer. Made from host data, from an application's
/// own buffer, or returned by a GPU call; read back with [`GpuTensor::read_async`].
#[derive(Debug, Clone)]
pub struct GpuTensor {
    buffer: wgpu::Buffer,
    shape: Vec<usize>,
}

/// Usages every tensor buffer made here has: kernels read and write it, and it can be
/// copied in and out.
pub(crate) const TENSOR_USAGE: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
    .union(wgpu::BufferUsages::COPY_SRC)
    .union(wgpu::BufferUsages::COPY_DST);

impl GpuTensor {
    /// Uploads host data (any memory layout; it is made contiguous first).
    ///
    /// # Errors
    /// [`AttentionError::TooLarge`] when the data exceeds the device's
    /// `max_buffer_size`; [`AttentionError::Device`] when the device is lost or the
    /// allocation fails.
    pub fn from_array(ctx: &GpuContext, data: ArrayViewD<'_, f32>) -> Result<Self> {
        Self::upload(ctx, "tensor", data)
    }

    /// As [`GpuTensor::from_array`], naming the argument in errors.
    pub(crate) fn upload(
        ctx: &GpuContext,
        arg: &'static str,
        data: ArrayViewD<'_, f32>,
    ) -> Result<Self> {
        let shape = data.shape().to_vec();
        buffers::check_size(ctx, arg, &shape, buffers::f32_bytes(arg, &shape)?)?;
        let contiguous = data.as_standard_layout();
        let slice = contiguous.as_slice().unwrap_or(&[]);
        let scopes = ErrorScopes::push(ctx);
        let buffer = buffers::with_contents(
            ctx,
            "wgpu-attention tensor",
            bytemuck::cast_slice(slice),
            TENSOR_USAGE,
        )?;
        scopes.pop_now(ctx, &format!("uploading {arg} {shape:?}"))?;
        Ok(Self { buffer, shape })
    }

    /// A tensor of `shape` on the device, zero-filled (wgpu clears new buffers).
    ///
    /// # Errors
    /// As [`GpuTensor::from_array`].
    pub fn empty(ctx: &GpuContext, shape: &[usize]) -> Result<Self> {
        Self::allocate(ctx, "tensor", shape)
    }

    /// As [`GpuTensor::empty`], naming the argument in errors.
    pub(crate) fn allocate(ctx: &GpuContext, arg: &'static str, shape: &[usize]) -> Result<Self> {
        let bytes = buffers::f32_bytes(arg, shape)?;
        buffers::check_size(ctx, arg, shape, bytes)?;
        let scopes = ErrorScopes::push(ctx);
        let buffer = buffers::empty(ctx, "wgpu-attention tensor", bytes, TENSOR_USAGE)?;
        scopes.pop_now(ctx, &format!("allocating {arg} {shape:?}"))?;
        Ok(Self {
            buffer,
            shape: shape.to_vec(),
        })
    }

    /// Wraps an application's buffer holding a row-major f32 tensor of `shape`.
    ///
    /// # Errors
    /// [`AttentionError::Shape`] when the buffer is smaller than the shape needs or lacks
    /// `STORAGE` usage.
    pub fn from_buffer(buffer: wgpu::Buffer, shape: &[usize]) -> Result<Self> {
        let need = buffers::f32_bytes("buffer", shape)?;
        if buffer.size() < need {
            return Err(AttentionError::shape(
                "buffer",
                format!(
                    "{} bytes cannot hold an f32 tensor of shape {shape:?} ({need} bytes)",
                    buffer.size()
                ),
            ));
        }
        if !buffer.usage().contains(wgpu::BufferUsages::STORAGE) {
            return Err(AttentionError::shape(
                "buffer",
                "needs BufferUsages::STORAGE to be read by the kernels",
            ));
        }
        Ok(Self {
            buffer,
            shape: shape.to_vec(),
        })
    }

    /// The tensor's shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The device buffer.
    pub fn buffer(&self) -> &wgpu::Buffer {
        &self.buffer
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// True when some dimension is zero.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies the tensor back to the host.
    ///
    /// # Errors
    /// [`AttentionError::Device`] when the copy or the mapping fails.
    pub async fn read_async(&self, ctx: &GpuContext) -> Result<ArrayD<f32>> {
        let bytes = self.len() as u64 * 4;
        let data =
            crate::gpu::device::readback::read_ranges(ctx, &[(&self.buffer, 0, bytes)]).await?;
        to_array(&self.shape, data.into_iter().next().unwrap_or_default())
    }

    /// Blocking form of [`GpuTensor::read_async`]. Native only.
    ///
    /// # Errors
    /// As [`GpuTensor::read_async`].
    #[cfg(not(target_arch = "wasm32"))]
    pub fn read(&self, ctx: &GpuContext) -> Result<ArrayD<f32>> {
        pollster::block_on(self.read_async(ctx))
    }
}

pub(crate) fn to_array(shape: &[usize], data: Vec<f32>) -> Result<ArrayD<f32>> {
    ArrayD::from_shape_vec(IxDyn(shape), data)
        .map_err(|e| AttentionError::Device(format!("readback of shape {shape:?}: {e}")))
}
