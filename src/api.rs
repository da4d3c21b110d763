//! The public entry points: host arrays in and out, or tensors that stay on the device.
//! Every function is async at heart; the blocking forms are thin native-only wrappers.

use ndarray::ArrayView4;

use crate::error::{AttentionError, Result};
use crate::gpu::device::buffers;
use crate::gpu::device::context::GpuContext;
use crate::gpu::device::f16_tensor;
pub use crate::gpu::device::outputs::GpuOutputs;
use crate::gpu::device::tensor::GpuTensor;
use crate::gpu::forward::call::{Call, CallData, CallInputs};
use crate::gpu::forward::io::ForwardOutputs;
use crate::gpu::forward::paths::staged;
use crate::gpu::forward::route_table;
use crate::gpu::kernels::elem::Elem;
use crate::gpu::kernels::plan;
use crate::options::{AttentionOptions, KernelPath, Precision};
use crate::output::AttentionOutput;
use crate::problem::{validate, MaskKind, Problem};

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

/// How the kernels read q, k and v for `precision`.
pub(crate) fn elem_of(precision: Precision) -> Elem {
    match precision {
        Precision::F32 => Elem::F32,
        Precision::F16 => Elem::F16,
    }
}

/// Validates a call once and checks it against the device: the problem and the path it
/// takes. Every public entry starts here; nothing below sees the options again except
/// through [`CallData`].
pub(crate) fn check_call(
    ctx: &GpuContext,
    (q, k, v): (&[usize], &[usize], &[usize]),
    opts: &AttentionOptions<'_>,
) -> Result<(Problem, KernelPath)> {
    let p = validate(q, k, v, opts)?;
    let path = route_table::choose(ctx, &p, opts.path, elem_of(opts.precision))?;
    check_before_work(ctx, &p, path)?;
    Ok((p, path))
}

/// The one runner: prepares the call (tuning, probing, pipelines), then records and
/// submits it into `outputs`.
async fn run(
    ctx: &GpuContext,
    (p, path): (Problem, KernelPath),
    inputs: CallInputs<'_>,
    opts: &AttentionOptions<'_>,
    outputs: &GpuOutputs,
) -> Result<()> {
    let data = CallData {
        mask: opts.mask.as_ref(),
        kv_lens: opts.kv_lens,
    };
    let run_as = (path, elem_of(opts.precision));
    let call = Call::prepare(ctx, p, run_as, inputs, data).await?;
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
    check_call(ctx, (q, k, v), opts).map(|(_, path)| path)
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

/// Checks, before anything is uploaded or allocated, everything about the call's sizes
/// that the device decides: its tensors, and for the staged path, that one row of one
/// head fits a binding.
fn check_before_work(ctx: &GpuContext, p: &Problem, path: KernelPath) -> Result<()> {
    check_device_sizes(ctx, p)?;
    if path == KernelPath::Staged {
        plan::plan(p, &staged::limits(ctx))?;
    }
    Ok(())
}

/// Checks, before anything is allocated, that every tensor of the call fits one device
/// buffer and that row counts fit the kernels' 32-bit indices.
fn check_device_sizes(ctx: &GpuContext, p: &Problem) -> Result<()> {
    let (b, hq, hkv, lq, lk) = (p.batch, p.heads_q, p.heads_kv, p.len_q, p.len_k);
    let mut tensors = vec![
        ("q", vec![b, hq, lq, p.dim]),
        ("k", vec![b, hkv, lk, p.dim]),
        ("v", vec![b, hkv, lk, p.dim_v]),
        ("out", vec![b, hq, lq, p.dim_v]),
    ];
    if p.return_weights {
        tensors.push(("weights", vec![b, hq, lq, lk]));
    }
    if p.return_lse {
        tensors.push(("lse", vec![b, hq, lq]));
    }
    for (arg, shape) in &tensors {
        buffers::check_size(ctx, arg, shape, buffers::f32_bytes(arg, shape)?)?;
    }
    if let Some(m) = p.mask {
        let elem = match m.kind {
            MaskKind::Bool => 1,
            MaskKind::Additive => 4,
        };
        let bytes = (m.len as u64).saturating_mul(elem);
        buffers::check_size(ctx, "mask", &[m.len], bytes)?;
    }
    let rows = [("q", b, hq, lq), ("k", b, hkv, lk)];
    for (arg, b, h, l) in rows {
        let n = (b as u64).saturating_mul(h as u64).saturating_mul(l as u64);
        if n > u64::from(u32::MAX) {
            return Err(AttentionError::TooLarge {
                arg,
                detail: format!(
                    "B * H * L = {b} * {h} * {l} rows exceed the kernels' 32-bit row index"
                ),
            });
        }
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

/// Rejects a `written` buffer that is also read, or written twice, naming it.
pub(crate) fn check_buffer_aliases(
    read: &[(&'static str, &wgpu::Buffer)],
    written: &[(&'static str, &wgpu::Buffer)],
) -> Result<()> {
    for (n, &(arg, buffer)) in written.iter().enumerate() {
        let others = read.iter().chain(&written[n + 1..]);
        if let Some((other, _)) = others.into_iter().find(|(_, b)| *b == buffer) {
            return Err(AttentionError::option(
                arg,
                format!("shares its device buffer with {other}; outputs may not alias inputs or each other"),
            ));
        }
    }
    Ok(())
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
    let checked = check_call(ctx, (q.shape(), k.shape(), v.shape()), opts)?;
    check_outputs(&checked.0, outputs)?;
    check_no_alias(q, k, v, outputs, &checked.0)?;
    run(ctx, checked, f32_inputs(q, k, v), opts, outputs).await
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
    let checked = check_call(ctx, (q.shape(), k.shape(), v.shape()), opts)?;
    let outputs = GpuOutputs::for_problem(ctx, &checked.0)?;
    run(ctx, checked, f32_inputs(q, k, v), opts, &outputs).await?;
    Ok(outputs)
}

/// Runs attention on host arrays: uploads, one submission, one readback. With
/// [`Precision::F16`] the arrays are uploaded as f16 directly: half the transfer, no
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
    let checked = check_call(ctx, (q.shape(), k.shape(), v.shape()), opts)?;
    let elem = elem_of(opts.precision);
    let upload = |arg: &'static str, a: ArrayView4<'_, f32>| -> Result<wgpu::Buffer> {
        match elem {
            Elem::F16 => f16_tensor::upload(ctx, arg, a.into_dyn()),
            Elem::F32 => Ok(GpuTensor::upload(ctx, arg, a.into_dyn())?.buffer().clone()),
        }
    };
    let (qb, kb, vb) = (upload("q", q)?, upload("k", k)?, upload("v", v)?);
    let outputs = GpuOutputs::for_problem(ctx, &checked.0)?;
    let inputs = CallInputs {
        q: &qb,
        k: &kb,
        v: &vb,
        elem,
    };
    run(ctx, checked, inputs, opts, &outputs).await?;
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
