//! A call checked once, before anything touches the device: its inputs validated into a
//! [`Problem`], its path chosen (and, for the staged path, planned), its sizes checked
//! against the device, the host data it uploads taken from the options. Every entry
//! point (`attention*`, [`crate::PreparedAttention`], [`crate::bench`]) starts here, and
//! nothing below sees [`AttentionOptions`] again.

use crate::error::{AttentionError, Result};
use crate::gpu::call::CallData;
use crate::gpu::device::buffers;
use crate::gpu::device::context::GpuContext;
use crate::gpu::kernels::elem::Elem;
use crate::gpu::routing::table::{self as route_table, Chosen};
use crate::options::{AttentionOptions, KernelPath, Precision};
use crate::problem::{validate, MaskKind, Problem};

/// A validated call and what was decided for it.
pub(crate) struct CheckedCall<'a, 'm> {
    pub problem: Problem,
    pub chosen: Chosen,
    pub data: CallData<'a, 'm>,
}

impl<'a, 'm> CheckedCall<'a, 'm> {
    /// Validates a call with these q, k and v shapes and options, and checks it against
    /// the device.
    ///
    /// # Errors
    /// Input errors of [`validate`]; [`AttentionError::TooLarge`] for a tensor beyond the
    /// device's buffer limits (checked next, whatever the path); then the errors of the
    /// path's choice (an option this adapter or path cannot run, a staged call whose one
    /// row does not fit a binding).
    pub(crate) fn new(
        ctx: &GpuContext,
        (q, k, v): (&[usize], &[usize], &[usize]),
        opts: &'a AttentionOptions<'m>,
    ) -> Result<Self> {
        let problem = validate(q, k, v, opts)?;
        check_device_sizes(ctx, &problem)?;
        let elem = match opts.precision {
            Precision::F32 => Elem::F32,
            Precision::F16 => Elem::F16,
        };
        let chosen = route_table::choose(ctx, &problem, opts.path, elem)?;
        let data = CallData {
            mask: opts.mask.as_ref(),
            kv_lens: opts.kv_lens,
        };
        Ok(Self {
            problem,
            chosen,
            data,
        })
    }

    /// The path the call takes ([`KernelPath::Auto`] resolved).
    pub(crate) fn path(&self) -> KernelPath {
        self.chosen.path()
    }

    /// How the kernels read q, k and v.
    pub(crate) fn elem(&self) -> Elem {
        self.chosen.elem()
    }
}

/// Checks, before anything is allocated, that every tensor of the call fits one device
/// buffer and that row counts fit the kernels' 32-bit indices.
pub(crate) fn check_device_sizes(ctx: &GpuContext, p: &Problem) -> Result<()> {
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
        let fits = buffers::f32_bytes(arg, shape)
            .and_then(|bytes| buffers::check_size(ctx, arg, shape, bytes));
        if let Err(AttentionError::TooLarge {
            arg: "weights",
            detail,
        }) = fits
        {
            return Err(AttentionError::TooLarge {
                arg: "weights",
                detail: format!(
                    "{detail}; for long contexts ask attention_patterns for a pooled map, \
                     selected heads or a window (the CLI's --pool P, --heads, --rows)"
                ),
            });
        }
        fits?;
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
