//! This crate's side: device tensors, tuning on, the public device-resident entry point.

use ndarray::Array4;
use wgpu_attention::{
    Alignment, AttentionOptions, GpuContext, GpuOutputs, GpuTensor, KernelPath,
    attention_gpu_into_async, kernel_path,
};

use crate::inputs::{Inputs, Shape};
use crate::library::Library;

pub struct Ours {
    ctx: GpuContext,
}

/// One shape's inputs and outputs on the device.
pub struct Prepared {
    q: GpuTensor,
    k: GpuTensor,
    v: GpuTensor,
    outputs: GpuOutputs,
    opts: AttentionOptions<'static>,
}

pub fn options(shape: &Shape) -> AttentionOptions<'static> {
    AttentionOptions {
        causal: shape.causal,
        // burn aligns its causal mask bottom-right (query i sees keys up to
        // i + Lk - Lq); this crate's default is top-left. The same for Lq == Lk.
        alignment: Alignment::BottomRight,
        ..Default::default()
    }
}

impl Ours {
    /// The default adapter (`WGPU_BACKEND`, `WGPU_ADAPTER_NAME` and the Vulkan loader's
    /// `VK_ICD_FILENAMES` pick it), with kernel tuning on as `wgpu-attention bench` has it.
    pub fn new() -> Result<Self, String> {
        let ctx = GpuContext::new().map_err(|e| format!("wgpu-attention: {e}"))?;
        ctx.set_autotune(true);
        Ok(Self { ctx })
    }
}

impl Library for Ours {
    type Prepared = Prepared;

    fn adapter(&self) -> String {
        let info = self.ctx.adapter_info();
        format!("{} ({}, {})", info.name, info.driver, info.driver_info)
    }

    fn prepare(&self, shape: &Shape, inputs: &Inputs) -> Result<Prepared, String> {
        let up = |a: &Array4<f32>| {
            GpuTensor::from_array(&self.ctx, a.view().into_dyn()).map_err(|e| e.to_string())
        };
        let (q, k, v) = (&inputs.q, &inputs.k, &inputs.v);
        let opts = options(shape);
        let outputs = GpuOutputs::allocate(&self.ctx, q.shape(), k.shape(), v.shape(), &opts)
            .map_err(|e| e.to_string())?;
        Ok(Prepared {
            q: up(q)?,
            k: up(k)?,
            v: up(v)?,
            outputs,
            opts,
        })
    }

    /// The kernel path the call takes (`Auto` resolved).
    fn path(&self, p: &Prepared) -> String {
        match kernel_path(&self.ctx, p.q.shape(), p.k.shape(), p.v.shape(), &p.opts) {
            Ok(KernelPath::Fused) => "fused".into(),
            Ok(KernelPath::Decode) => "decode".into(),
            Ok(KernelPath::Staged | KernelPath::Auto) => "staged".into(),
            Err(e) => format!("error: {e}"),
        }
    }

    fn run(&self, p: &Prepared) -> Result<(), String> {
        pollster::block_on(attention_gpu_into_async(
            &self.ctx, &p.q, &p.k, &p.v, &p.opts, &p.outputs,
        ))
        .map_err(|e| e.to_string())?;
        self.ctx
            .device()
            .poll(wgpu::PollType::wait_indefinitely())
            .map(|_| ())
            .map_err(|e| format!("waiting for the device: {e}"))
    }

    fn read(&self, p: &Prepared) -> Result<Vec<f32>, String> {
        let out = p.outputs.out.read(&self.ctx).map_err(|e| e.to_string())?;
        Ok(out.iter().copied().collect())
    }
}
