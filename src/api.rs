//! The public entry points: host arrays in and out, or tensors that stay on the device.
//! Every function is async at heart; the blocking forms are thin native-only wrappers.

use ndarray::ArrayView4;

use crate::checked_call::{check_buffer_aliases, check_device_sizes, CheckedCall};
use crate::error::{AttentionError, Result};
use crate::gpu::call::{Call, CallInputs};
use crate::gpu::device::context::GpuContext;
use crate::gpu::device::f16_tensor;
pub use crate::gpu::device::outputs::GpuOutputs;
use crate::gpu::device::tensor::GpuTensor;
use crate::gpu::forward::io::ForwardOutputs;
use crate::gpu::kernels::elem::Elem;
use crate::options::{AttentionOptions, KernelPath};
use crate::output::AttentionOutput;
use crate::problem::{validate, Problem};

impl GpuOutputs {
    /// Device tensors of the right shapes for a call with these inputs and options.
    ///
    /// # Errors
    /// Any input error of [`validate`]; [`AttentionError::TooLarge`] when a tensor of
    /// the call exceeds the device's buffer limits (checked before allocating);
    /// [`AttentionError::Device`] when the device is lost or the allocation fails.
    pub fn allocate(
        ctx: &GpuContext,
        q: &[usize],
        k: &[usize],
        v: &[usize],
        opts: &AttentionOptions<'_>,
    ) -> Result<Self> {
        let p = validate(q, k, v, opts)?;
        check_device_sizes(ctx, &p)?;
        Self::for_problem(ctx, &p)
    }
}

/// The one runner: prepares the checked call (tuning, probing, pipelines), then records
/// and submits it into `outputs`.
async fn run(
    ctx: &GpuContext,
    checked: CheckedCall<'_, '_>,
    inputs: CallInputs<'_>,
    outputs: &GpuOutputs,
) -> Result<()> {
    let call = Call::prepare(ctx, checked.problem, &checked.chosen, inputs, checked.data).await?;
    call.run(ctx, &ForwardOutputs::of(outputs, call.problem()))
        .await?;
    Ok(())
}

fn f32_inputs<'a>(q: &'a GpuTensor, k: &'a GpuTensor, v: &'a GpuTensor) -> CallInputs<'a> {
    CallInputs {
        q: q.buffer(),
        k: k.buffer(),
        v: v.buffer(),
        elem: Elem::F32,
    }
}

/// The kernel path a call with these shapes and options takes on `ctx`
/// ([`KernelPath::Auto`] resolved), after the checks the call itself makes first.
///
/// # Errors
/// As [`validate`], and an option this adapter or path cannot run.
pub fn kernel_path(
    ctx: &GpuContext,
    q: &[usize],
    k: &[usize],
    v: &[usize],
    opts: &AttentionOptions<'_>,
) -> Result<KernelPath> {
    CheckedCall::new(ctx, (q, k, v), opts).map(|c| c.path())
}

fn check_tensor(arg: &'static str, t: &GpuTensor, want: &[usize]) -> Result<()> {
    if t.shape() != want {
        return Err(AttentionError::shape(
            arg,
            format!(
                "output tensor has shape {:?}, the call needs {want:?}",
                t.shape()
            ),
        ));
    }
    Ok(())
}

/// Rejects outputs that share a buffer with an input or with each other: later chunks
/// would read what earlier ones wrote.
fn check_no_alias(
    q: &GpuTensor,
    k: &GpuTensor,
    v: &GpuTensor,
    outputs: &GpuOutputs,
    p: &Problem,
) -> Result<()> {
    let mut written = vec![("out", outputs.out.buffer())];
    if p.return_weights {
        written.extend(outputs.weights.as_ref().map(|t| ("weights", t.buffer())));
    }
    if p.return_lse {
        written.extend(outputs.lse.as_ref().map(|t| ("lse", t.buffer())));
    }
    let read = [("q", q.buffer()), ("k", k.buffer()), ("v", v.buffer())];
    check_buffer_aliases(&read, &written)
}

/// Runs attention on tensors already on the device, writing into `outputs` (made with
/// [`GpuOutputs::allocate`] or by the application). One submission; returns once it is
/// queued, without waiting for the device.
///
/// # Errors
/// Input errors of [`validate`], a shape mismatch of `outputs`, outputs sharing a
/// buffer with an input, or [`AttentionError::Device`] if the device rejects the work
/// (validation, out of memory) or has been lost.
pub async fn attention_gpu_into_async(
    ctx: &GpuContext,
    q: &GpuTensor,
    k: &GpuTensor,
    v: &GpuTensor,
    opts: &AttentionOptions<'_>,
    outputs: &GpuOutputs,
) -> Result<()> {
    let checked = CheckedCall::new(ctx, (q.shape(), k.shape(), v.shape()), opts)?;
    check_outputs(&checked.problem, outputs)?;
    check_no_alias(q, k, v, outputs, &checked.problem)?;
    run(ctx, checked, f32_inputs(q, k, v), outputs).await
}

/// Checks that `outputs` has the shapes `p` writes.
fn check_outputs(p: &Problem, outputs: &GpuOutputs) -> Result<()> {
    let (b, h, lq) = (p.batch, p.heads_q, p.len_q);
    check_tensor("out", &outputs.out, &[b, h, lq, p.dim_v])?;
    if p.return_weights {
        let w = outputs.weights.as_ref().ok_or_else(|| {
            AttentionError::option("return_weights", "set, but outputs have no weights tensor")
        })?;
        check_tensor("weights", w, &[b, h, lq, p.len_k])?;
    }
    if p.return_lse {
        let l = outputs.lse.as_ref().ok_or_else(|| {
            AttentionError::option("return_lse", "set, but outputs have no lse tensor")
        })?;
        check_tensor("lse", l, &[b, h, lq])?;
    }
    Ok(())
}

/// Runs attention on device tensors and returns new device outputs.
///
/// # Errors
/// As [`attention_gpu_into_async`].
pub async fn attention_gpu_async(
    ctx: &GpuContext,
    q: &GpuTensor,
    k: &GpuTensor,
    v: &GpuTensor,
    opts: &AttentionOptions<'_>,
) -> Result<GpuOutputs> {
    let checked = CheckedCall::new(ctx, (q.shape(), k.shape(), v.shape()), opts)?;
    let outputs = GpuOutputs::for_problem(ctx, &checked.problem)?;
    run(ctx, checked, f32_inputs(q, k, v), &outputs).await?;
    Ok(outputs)
}

/// Runs attention on host arrays: uploads, one submission, one readback. With
/// [`crate::Precision::F16`] the arrays are uploaded as f16 directly: half the transfer, no
/// conversion pass.
///
/// # Errors
/// Input errors of [`validate`] and [`AttentionError::TooLarge`] for tensors beyond the
/// device's buffer limits (both checked before anything touches the device),
/// [`AttentionError::Unsupported`] for options this adapter cannot run, or
/// [`AttentionError::Device`] if the device fails or has been lost.
pub async fn attention_async(
    ctx: &GpuContext,
    q: ArrayView4<'_, f32>,
    k: ArrayView4<'_, f32>,
    v: ArrayView4<'_, f32>,
    opts: &AttentionOptions<'_>,
) -> Result<AttentionOutput> {
    let checked = CheckedCall::new(ctx, (q.shape(), k.shape(), v.shape()), opts)?;
    let elem = checked.elem();
    let upload = |arg: &'static str, a: ArrayView4<'_, f32>| -> Result<wgpu::Buffer> {
        match elem {
            Elem::F16 => f16_tensor::upload(ctx, arg, a.into_dyn()),
            Elem::F32 => Ok(GpuTensor::upload(ctx, arg, a.into_dyn())?.buffer().clone()),
        }
    };
    let (qb, kb, vb) = (upload("q", q)?, upload("k", k)?, upload("v", v)?);
    let outputs = GpuOutputs::for_problem(ctx, &checked.problem)?;
    let inputs = CallInputs {
        q: &qb,
        k: &kb,
        v: &vb,
        elem,
    };
    run(ctx, checked, inputs, &outputs).await?;
    outputs.read_async(ctx).await
}

/// Blocking form of [`attention_async`]. Native only.
///
/// ```
/// use ndarray::Array4;
/// use wgpu_attention::{attention, attention_cpu, AttentionOptions, GpuContext};
///
/// let ctx = GpuContext::new()?;
/// let q = Array4::<f32>::from_shape_fn((1, 2, 5, 8), |(_, h, i, d)| (h + i * d) as f32 * 0.1);
/// let opts = AttentionOptions { causal: true, ..Default::default() };
/// let gpu = attention(&ctx, q.view(), q.view(), q.view(), &opts)?;
/// let cpu = attention_cpu(q.view(), q.view(), q.view(), &opts)?;
/// assert!(gpu.out.iter().zip(&cpu.out).all(|(a, b)| (a - b).abs() < 1e-5));
/// # Ok::<(), wgpu_attention::AttentionError>(())
/// ```
///
/// # Errors
/// As [`attention_async`].
#[cfg(not(target_arch = "wasm32"))]
pub fn attention(
    ctx: &GpuContext,
    q: ArrayView4<'_, f32>,
    k: ArrayView4<'_, f32>,
    v: ArrayView4<'_, f32>,
    opts: &AttentionOptions<'_>,
) -> Result<AttentionOutput> {
    pollster::block_on(attention_async(ctx, q, k, v, opts))
}
