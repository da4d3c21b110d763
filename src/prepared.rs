//! Attention recorded into the application's own command encoder, from and into the
//! application's own buffers: everything that needs the device to decide (path, tuning,
//! pipelines, the mask's upload) happens once in [`PreparedAttention::new`]; recording
//! only encodes, checks the buffers first, and never submits or waits.

use std::sync::{Arc, OnceLock};

use crate::checked_call::{check_buffer_aliases, CheckedCall};
use crate::error::{AttentionError, Result};
use crate::gpu::call::{CallInputs, Prepared};
use crate::gpu::device::buffers;
use crate::gpu::device::context::GpuContext;
use crate::gpu::device::recorder::Recorder;
use crate::gpu::device::scopes::ErrorScopes;
use crate::gpu::forward::io::ForwardOutputs;
use crate::gpu::forward::upload;
use crate::gpu::kernels::elem::Elem;
use crate::options::{AttentionOptions, KernelPath};
use crate::problem::{check_kv_lens, Problem};

/// The application's buffers one recorded call reads and writes: row-major f32 tensors
/// of the shapes the attention was prepared for (module docs of the crate), each starting
/// at offset 0. Inputs need [`wgpu::BufferUsages::STORAGE`]; so do `out` and `lse`;
/// `weights` needs `STORAGE | COPY_DST`. Outputs may not share a buffer with an input or
/// with each other. Larger buffers are fine: only the leading bytes are used.
#[derive(Debug, Clone, Copy)]
pub struct AttentionBuffers<'a> {
    /// `(B, Hq, Lq, D)`.
    pub q: &'a wgpu::Buffer,
    /// `(B, Hkv, Lk, D)`.
    pub k: &'a wgpu::Buffer,
    /// `(B, Hkv, Lk, Dv)`.
    pub v: &'a wgpu::Buffer,
    /// `(B, Hq, Lq, Dv)`, written.
    pub out: &'a wgpu::Buffer,
    /// `(B, Hq, Lq, Lk)`, written; required exactly when the options set `return_weights`.
    pub weights: Option<&'a wgpu::Buffer>,
    /// `(B, Hq, Lq)`, written; required exactly when the options set `return_lse`.
    pub lse: Option<&'a wgpu::Buffer>,
}

/// One attention call decided for fixed shapes and options on one context, ready to be
/// recorded into any number of the application's encoders.
///
/// ```
/// use wgpu_attention::{AttentionBuffers, AttentionOptions, GpuContext, PreparedAttention};
///
/// let ctx = GpuContext::new()?;
/// let (q, kv) = ([1, 2, 8, 16], [1, 2, 8, 16]);
/// let opts = AttentionOptions { causal: true, ..Default::default() };
/// let attn = pollster::block_on(PreparedAttention::new(&ctx, &q, &kv, &kv, &opts))?;
/// let storage = |bytes| ctx.device().create_buffer(&wgpu::BufferDescriptor {
///     label: None,
///     size: bytes,
///     usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
///     mapped_at_creation: false,
/// });
/// let (qb, kb, vb, out) = (storage(1024), storage(1024), storage(1024), storage(1024));
/// let mut encoder = ctx.device().create_command_encoder(&Default::default());
/// // ... the application's own passes ...
/// let buffers = AttentionBuffers { q: &qb, k: &kb, v: &vb, out: &out, weights: None, lse: None };
/// attn.record(&ctx, &mut encoder, &buffers)?;
/// // ... more passes that read `out` ...
/// ctx.queue().submit([encoder.finish()]);
/// # Ok::<(), wgpu_attention::AttentionError>(())
/// ```
pub struct PreparedAttention {
    prepared: Prepared,
    path: KernelPath,
    /// The context it was prepared on (its identity): the pipelines belong to its device.
    context: Arc<OnceLock<String>>,
    /// The explicit mask and key lengths, uploaded once.
    mask: Option<wgpu::Buffer>,
    kv_lens: Option<wgpu::Buffer>,
}

impl std::fmt::Debug for PreparedAttention {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p = self.prepared.problem();
        f.debug_struct("PreparedAttention")
            .field("path", &self.path)
            .field("q", &[p.batch, p.heads_q, p.len_q, p.dim])
            .field("k", &[p.batch, p.heads_kv, p.len_k, p.dim])
            .field("v", &[p.batch, p.heads_kv, p.len_k, p.dim_v])
            .finish_non_exhaustive()
    }
}

impl PreparedAttention {
    /// Validates the shapes and options, chooses the kernel path, checks every tensor
    /// against the device's limits, builds (and, with autotuning on, times) the kernels
    /// and uploads the mask and key lengths of `opts`. The buffers come at
    /// [`PreparedAttention::record`]; they are f32 whatever `opts.precision` (with
    /// [`crate::Precision::F16`] the recording converts them first).
    ///
    /// # Errors
    /// As [`crate::attention_async`] before anything is uploaded: [`validate`](crate::validate)'s
    /// input errors, [`AttentionError::TooLarge`], [`AttentionError::Unsupported`], and
    /// [`AttentionError::Device`] when the device is lost or rejects the uploads.
    pub async fn new(
        ctx: &GpuContext,
        q: &[usize],
        k: &[usize],
        v: &[usize],
        opts: &AttentionOptions<'_>,
    ) -> Result<Self> {
        let checked = CheckedCall::new(ctx, (q, k, v), opts)?;
        let path = checked.path();
        let prepared = Prepared::prepare(ctx, checked.problem, &checked.chosen, Elem::F32).await?;
        let scopes = ErrorScopes::push(ctx);
        let mask = upload::mask(ctx, checked.data.mask)?;
        let kv_lens = upload::kv_lens(ctx, checked.data.kv_lens)?;
        scopes
            .pop(ctx, "uploading the mask and key lengths")
            .await?;
        Ok(Self {
            prepared,
            path,
            context: ctx.identity(),
            mask,
            kv_lens,
        })
    }

    /// Refuses a context other than the one this was prepared on: its pipelines and
    /// buffers belong to that device.
    fn check_context(&self, ctx: &GpuContext) -> Result<()> {
        if Arc::ptr_eq(&ctx.identity(), &self.context) {
            return Ok(());
        }
        Err(AttentionError::option(
            "ctx",
            "is not the context this attention was prepared on",
        ))
    }

    /// The kernel path the call runs ([`KernelPath::Auto`] resolved).
    pub fn path(&self) -> KernelPath {
        self.path
    }

    /// Replaces the per-batch key lengths (`opts.kv_lens`) this was prepared with, so
    /// that one preparation serves every step of a decoding loop whose cache grows:
    /// nothing the preparation chose depends on the lengths' values. The lengths are
    /// read when the commands run, so the new ones apply to every recorded call
    /// submitted after this (`wgpu::Queue::write_buffer` order), including calls recorded
    /// before it but not yet submitted.
    ///
    /// # Errors
    /// [`AttentionError::InvalidOption`] naming `kv_lens` when it was prepared without key
    /// lengths or a length exceeds the key length Lk, [`AttentionError::Shape`] for a
    /// count other than the batch, or `ctx` not being the context it was prepared on.
    pub fn set_kv_lens(&self, ctx: &GpuContext, lens: &[u32]) -> Result<()> {
        self.check_context(ctx)?;
        let Some(buffer) = &self.kv_lens else {
            return Err(AttentionError::option(
                "kv_lens",
                "this attention was prepared without key lengths",
            ));
        };
        let p = self.prepared.problem();
        check_kv_lens(lens, p.batch, p.len_k)?;
        ctx.check_alive()?;
        let scopes = ErrorScopes::push(ctx);
        ctx.queue
            .write_buffer(buffer, 0, bytemuck::cast_slice(lens));
        scopes.pop_now(ctx, "writing the key lengths")
    }

    /// Records the call into the application's `encoder`: nothing is submitted, and the
    /// results are in `buffers.out` (and `weights`, `lse`) once the application has
    /// submitted the encoder. Passes recorded before it may write the inputs; passes
    /// after it may read the outputs. The buffers are checked first, so a wrong one is
    /// an error here rather than a wgpu validation failure at submission. The split-KV
    /// path (decoding) allocates its scratch (partials, parameters) at the first record
    /// and reuses it in every later one, in any encoder, until this is dropped.
    ///
    /// # Errors
    /// [`AttentionError::Shape`] naming the buffer (`q`, `k`, `v`, `out`, `weights`,
    /// `lse`) that is too small or lacks a usage, [`AttentionError::InvalidOption`] for
    /// a missing or unexpected output or outputs aliasing, or `ctx` not being the context
    /// this was prepared on; [`AttentionError::Device`] when the device is lost or
    /// rejects the commands.
    pub fn record(
        &self,
        ctx: &GpuContext,
        encoder: &mut wgpu::CommandEncoder,
        buffers: &AttentionBuffers<'_>,
    ) -> Result<()> {
        let scopes = ErrorScopes::push(ctx);
        let mut rec = Recorder::new(encoder);
        let recorded = self.record_in(ctx, &mut rec, buffers);
        // The pass ends here, inside the scopes.
        drop(rec);
        recorded?;
        scopes.pop_now(ctx, "recording attention")
    }

    /// As [`PreparedAttention::record`], into the recorder's open compute pass, so that a
    /// model's kernels before and after share it (the caller's error scopes cover it).
    pub(crate) fn record_in(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder<'_>,
        buffers: &AttentionBuffers<'_>,
    ) -> Result<()> {
        self.check_context(ctx)?;
        ctx.check_alive()?;
        let p = self.prepared.problem();
        check_buffers(p, buffers)?;
        let inputs = CallInputs {
            q: buffers.q,
            k: buffers.k,
            v: buffers.v,
            elem: Elem::F32,
        };
        let outputs = ForwardOutputs {
            out: buffers.out,
            lse: buffers.lse,
            weights: buffers.weights.map(|w| (w, 0)),
        };
        self.prepared.record(
            ctx,
            rec,
            &inputs,
            (self.mask.as_ref(), self.kv_lens.as_ref()),
            &outputs,
        )?;
        Ok(())
    }
}

/// Every buffer of `b` against what `p` reads and writes: present when needed, absent
/// otherwise, large enough, with the usages the kernels bind it with, and no output
/// sharing a buffer with another buffer.
fn check_buffers(p: &Problem, b: &AttentionBuffers<'_>) -> Result<()> {
    let (bs, hq, hkv, lq, lk) = (p.batch, p.heads_q, p.heads_kv, p.len_q, p.len_k);
    let storage = wgpu::BufferUsages::STORAGE;
    let copied = storage | wgpu::BufferUsages::COPY_DST;
    let wanted =
        |arg: &'static str, given: bool, requested: bool, option: &str| match (given, requested) {
            (false, true) => Err(AttentionError::option(
                arg,
                format!("{option} is set, but no {arg} buffer was given"),
            )),
            (true, false) => Err(AttentionError::option(
                arg,
                format!("a buffer was given, but {option} is not set"),
            )),
            _ => Ok(()),
        };
    wanted(
        "weights",
        b.weights.is_some(),
        p.return_weights,
        "return_weights",
    )?;
    wanted("lse", b.lse.is_some(), p.return_lse, "return_lse")?;
    let mut all = vec![
        ("q", b.q, vec![bs, hq, lq, p.dim], storage),
        ("k", b.k, vec![bs, hkv, lk, p.dim], storage),
        ("v", b.v, vec![bs, hkv, lk, p.dim_v], storage),
        ("out", b.out, vec![bs, hq, lq, p.dim_v], storage),
    ];
    all.extend(
        b.weights
            .map(|w| ("weights", w, vec![bs, hq, lq, lk], copied)),
    );
    all.extend(b.lse.map(|l| ("lse", l, vec![bs, hq, lq], storage)));
    for (arg, buffer, shape, usage) in &all {
        check_buffer(arg, buffer, shape, *usage)?;
    }
    let read = [("q", b.q), ("k", b.k), ("v", b.v)];
    let mut written = vec![("out", b.out)];
    written.extend(b.weights.map(|w| ("weights", w)));
    written.extend(b.lse.map(|l| ("lse", l)));
    check_buffer_aliases(&read, &written)
}

fn check_buffer(
    arg: &'static str,
    buffer: &wgpu::Buffer,
    shape: &[usize],
    usage: wgpu::BufferUsages,
) -> Result<()> {
    let need = buffers::f32_bytes(arg, shape)?;
    if buffer.size() < need {
        return Err(AttentionError::shape(
            arg,
            format!(
                "buffer of {} bytes cannot hold an f32 tensor of shape {shape:?} ({need} bytes)",
                buffer.size()
            ),
        ));
    }
    if !buffer.usage().contains(usage) {
        return Err(AttentionError::shape(
            arg,
            format!(
                "buffer has usages {:?}; the kernels need {usage:?}",
                buffer.usage()
            ),
        ));
    }
    Ok(())
}
