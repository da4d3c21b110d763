//! Tensors that live on the device between calls.

use ndarray::{ArrayD, ArrayViewD, IxDyn};
use wgpu::util::DeviceExt;

use crate::error::{AttentionError, Result};
use crate::gpu::context::GpuContext;
use crate::gpu::plan::buffer_bytes;

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
    pub fn from_array(ctx: &GpuContext, data: ArrayViewD<'_, f32>) -> Self {
        let shape = data.shape().to_vec();
        let contiguous = data.as_standard_layout();
        let slice = contiguous.as_slice().unwrap_or(&[]);
        // wgpu rejects zero-size mapped buffers; keep one word so the handle stays valid.
        let bytes: &[u8] = if slice.is_empty() {
            &[0; 4]
        } else {
            bytemuck::cast_slice(slice)
        };
        let buffer = ctx
            .device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("wgpu-attention tensor"),
                contents: bytes,
                usage: TENSOR_USAGE,
            });
        Self { buffer, shape }
    }

    /// An uninitialised tensor of `shape` (contents are whatever the device gives,
    /// zeros on wgpu).
    pub fn empty(ctx: &GpuContext, shape: &[usize]) -> Self {
        let elems: usize = shape.iter().product();
        let buffer = ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("wgpu-attention tensor"),
            size: buffer_bytes(elems as u64, 4).max(4),
            usage: TENSOR_USAGE,
            mapped_at_creation: false,
        });
        Self {
            buffer,
            shape: shape.to_vec(),
        }
    }

    /// Wraps an application's buffer holding a row-major f32 tensor of `shape`.
    ///
    /// # Errors
    /// [`AttentionError::Shape`] when the buffer is smaller than the shape needs or lacks
    /// `STORAGE` usage.
    pub fn from_buffer(buffer: wgpu::Buffer, shape: &[usize]) -> Result<Self> {
        let need = shape.iter().product::<usize>() as u64 * 4;
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
        let data = crate::gpu::readback::read_ranges(ctx, &[(&self.buffer, 0, bytes)]).await?;
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
