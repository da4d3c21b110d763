//! The public entry points: host arrays in and out, or tensors that stay on the device.
//! Every function is async at heart; the blocking forms are thin native-only wrappers.

use ndarray::{ArrayView4, Ix3, Ix4};

use crate::error::{AttentionError, Result};
use crate::gpu::buffers;
use crate::gpu::context::GpuContext;
use crate::gpu::f16;
use crate::gpu::forward::{self, CallInputs, Elem};
use crate::gpu::readback::read_ranges;
use crate::gpu::scopes::ErrorScopes;
use crate::gpu::staged::ForwardOutputs;
use crate::gpu::tensor::{to_array, GpuTensor};
use crate::options::{AttentionOptions, KernelPath, Precision};
use crate::output::AttentionOutput;
use crate::problem::{validate, MaskKind, Problem};

/// Outputs of a GPU-resident call: they stay on the device until read.
#[derive(Debug, Clone)]
pub struct GpuOutputs {
    /// `(B, Hq, Lq, Dv)`.
    pub out: GpuTensor,
    /// `(B, Hq, Lq, Lk)`, when requested.
    pub weights: Option<GpuTensor>,
    /// `(B, Hq, Lq)`, when requested.
    pub lse: Option<GpuTensor>,
}

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
        let (b, h, lq, lk) = (p.batch, p.heads_q, p.len_q, p.len_k);
        Ok(Self {
            out: GpuTensor::allocate(ctx, "out", &[b, h, lq, p.dim_v])?,
            weights: p
                .return_weights
                .then(|| GpuTensor::allocate(ctx, "weights", &[b, h, lq, lk]))
                .transpose()?,
            lse: p
                .return_lse
                .then(|| GpuTensor::allocate(ctx, "lse", &[b, h, lq]))
                .transpose()?,
        })
    }

    /// The output buffers a forward writes, for the outputs `p` requests.
    pub(crate) fn forward(&self, p: &Problem) -> ForwardOutputs<'_> {
        ForwardOutputs {
            out: self.out.buffer(),
            lse: self
                .lse
                .as_ref()
                .filter(|_| p.return_lse)
                .map(|t| t.buffer()),
            weights: self
                .weights
                .as_ref()
                .filter(|_| p.return_weights)
                .map(|t| (t.buffer(), 0)),
        }
    }

    /// Reads every output back to the host with one mapping.
    ///
    /// # Errors
    /// [`AttentionError::Device`] when the copy or mapping fails.
    pub async fn read_async(&self, ctx: &GpuContext) -> Result<AttentionOutput> {
        let tensors: Vec<&GpuTensor> = [Some(&self.out), self.weights.as_ref(), self.lse.as_ref()]
            .into_iter()
            .flatten()
            .collect();
        let ranges: Vec<_> = tensors
            .iter()
            .map(|t| (t.buffer(), 0, t.len() as u64 * 4))
            .collect();
        let mut data = read_ranges(ctx, &ranges).await?.into_iter();
        let mut next = |t: &GpuTensor| to_array(t.shape(), data.next().unwrap_or_default());
        let out = next(&self.out)?;
        let weights = self.weights.as_ref().map(&mut next).transpose()?;
        let lse = self.lse.as_ref().map(&mut next).transpose()?;
        Ok(AttentionOutput {
            out: into4(out)?,
            weights: weights.map(into4).transpose()?,
            lse: lse
                .map(|a| a.into_dimensionality::<Ix3>().map_err(shape_bug))
                .transpose()?,
        })
    }
}

fn shape_bug(e: ndarray::ShapeError) -> AttentionError {
    AttentionError::Device(format!("readback shape: {e}"))
}

fn into4(a: ndarray::ArrayD<f32>) -> Result<ndarray::Array4<f32>> {
    a.into_dimensionality::<Ix4>().map_err(shape_bug)
}

/// Checks what the GPU paths support beyond [`validate`] and picks the path.
fn check_gpu_options(
    ctx: &GpuContext,
    p: &Problem,
    opts: &AttentionOptions<'_>,
) -> Result<KernelPath> {
    forward::route(ctx, p, opts)
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
    let p = validate(q, k, v, opts)?;
    check_gpu_options(ctx, &p, opts)
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
pub(crate) fn check_before_work(ctx: &GpuContext, p: &Problem, path: KernelPath) -> Result<()> {
    check_device_sizes(ctx, p)?;
    if path == KernelPath::Staged {
        crate::gpu::plan::plan(p, &crate::gpu::staged::limits(ctx))?;
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
    let p = validate(q.shape(), k.shape(), v.shape(), opts)?;
    let path = check_gpu_options(ctx, &p, opts)?;
    check_before_work(ctx, &p, path)?;
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
    check_no_alias(q, k, v, outputs, &p)?;
    let inputs = CallInputs {
        q: q.buffer(),
        k: k.buffer(),
        v: v.buffer(),
        elem: Elem::F32,
    };
    run_into(ctx, &p, path, opts, &inputs, outputs).await?;
    Ok(())
}

/// Records and submits one call inside error scopes. Returns the device bytes it
/// allocated beyond inputs and outputs.
pub(crate) async fn run_into(
    ctx: &GpuContext,
    p: &Problem,
    path: KernelPath,
    opts: &AttentionOptions<'_>,
    inputs: &CallInputs<'_>,
    outputs: &GpuOutputs,
) -> Result<u64> {
    ctx.check_alive()?;
    let scopes = ErrorScopes::push(ctx);
    let mut encoder = ctx.device.create_command_encoder(&Default::default());
    let scratch = forward::encode(
        ctx,
        &mut encoder,
        p,
        path,
        opts,
        inputs,
        &outputs.forward(p),
    )
    .await?;
    ctx.queue.submit([encoder.finish()]);
    scopes.pop(ctx, "running attention").await?;
    Ok(scratch)
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
    let outputs = GpuOutputs::allocate(ctx, q.shape(), k.shape(), v.shape(), opts)?;
    attention_gpu_into_async(ctx, q, k, v, opts, &outputs).await?;
    Ok(outputs)
}

/// Runs attention on host arrays: uploads, one submission, one readback.
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
    let p = validate(q.shape(), k.shape(), v.shape(), opts)?;
    let path = check_gpu_options(ctx, &p, opts)?;
    check_before_work(ctx, &p, path)?;
    if opts.precision == Precision::F16 {
        // Uploaded as f16 directly: half the transfer, no conversion pass.
        let qb = f16::upload(ctx, "q", q.into_dyn())?;
        let kb = f16::upload(ctx, "k", k.into_dyn())?;
        let vb = f16::upload(ctx, "v", v.into_dyn())?;
        let outputs = GpuOutputs::allocate(ctx, q.shape(), k.shape(), v.shape(), opts)?;
        let inputs = CallInputs {
            q: &qb,
            k: &kb,
            v: &vb,
            elem: Elem::F16,
        };
        run_into(ctx, &p, path, opts, &inputs, &outputs).await?;
        return outputs.read_async(ctx).await;
    }
    let qt = GpuTensor::upload(ctx, "q", q.into_dyn())?;
    let kt = GpuTensor::upload(ctx, "k", k.into_dyn())?;
    let vt = GpuTensor::upload(ctx, "v", v.into_dyn())?;
    let outputs = GpuOutputs::allocate(ctx, q.shape(), k.shape(), v.shape(), opts)?;
    attention_gpu_into_async(ctx, &qt, &kt, &vt, opts, &outputs).await?;
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
