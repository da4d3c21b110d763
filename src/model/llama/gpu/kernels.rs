//! Launchers for the llama kernels in `shaders/model/llama_*.wgsl`: each kernel's params
//! struct, binding layout, shape checks and dispatch arithmetic. As everywhere in the
//! crate, building the pipelines is async ([`LlamaKernels::prepare`]) and recording is
//! synchronous: each launcher encodes into an encoder and leaves submitting to the caller.

use std::sync::Arc;

use bytemuck::{Pod, Zeroable};

use super::device::{
    bind_group, buffers, grid, pipeline, range, Binding, HeadLayout, KernelPipeline, KernelSpec,
    Linear,
};
use crate::model::ModelError;
use crate::{GpuContext, GpuTensor};

/// Threads per workgroup of every kernel here (`@workgroup_size(64)`).
const WG: u64 = 64;

const EMBED: KernelSpec = KernelSpec {
    name: "llama_embed",
    source: include_str!("../../../../shaders/model/llama_embed.wgsl"),
    bindings: &[
        Binding::Uniform,
        Binding::Read,
        Binding::Read,
        Binding::ReadWrite,
    ],
    trusted: false,
};

const RMSNORM: KernelSpec = KernelSpec {
    name: "llama_rmsnorm",
    source: include_str!("../../../../shaders/model/llama_rmsnorm.wgsl"),
    bindings: &[
        Binding::Uniform,
        Binding::ReadWrite,
        Binding::Read,
        Binding::Read,
        Binding::ReadWrite,
    ],
    trusted: false,
};

const ROPE: KernelSpec = KernelSpec {
    name: "llama_rope",
    source: include_str!("../../../../shaders/model/llama_rope.wgsl"),
    bindings: &[Binding::Uniform, Binding::ReadWrite, Binding::Read],
    trusted: false,
};

const SILU_MUL: KernelSpec = KernelSpec {
    name: "llama_silu_mul",
    source: include_str!("../../../../shaders/model/llama_silu_mul.wgsl"),
    bindings: &[Binding::Uniform, Binding::ReadWrite, Binding::Read],
    trusted: false,
};

const FEW_ROWS: KernelSpec = KernelSpec {
    name: "llama_few_rows",
    source: include_str!("../../../../shaders/model/llama_few_rows.wgsl"),
    bindings: &[
        Binding::Uniform,
        Binding::Read,
        Binding::Read,
        Binding::ReadWrite,
    ],
    trusted: false,
};

/// Every llama kernel's name and WGSL source, for validation without a GPU.
pub const SOURCES: &[(&str, &str)] = &[
    (EMBED.name, EMBED.source),
    (RMSNORM.name, RMSNORM.source),
    (ROPE.name, ROPE.source),
    (SILU_MUL.name, SILU_MUL.source),
    (FEW_ROWS.name, FEW_ROWS.source),
];

/// Must match the WGSL struct `Embed` in llama_embed.wgsl.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
pub(crate) struct EmbedParams {
    pub rows: u32,
    pub hidden: u32,
    pub vocab: u32,
    pub _pad: u32,
}

/// Must match the WGSL struct `RmsNorm` in llama_rmsnorm.wgsl.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
pub(crate) struct RmsNormParams {
    pub rows: u32,
    pub width: u32,
    pub add: u32,
    pub eps: f32,
}

/// Must match the WGSL struct `Rope` in llama_rope.wgsl.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
pub(crate) struct RopeParams {
    pub rows: u32,
    pub heads: u32,
    pub dim: u32,
    pub cap: u32,
    pub off: u32,
    pub pos0: u32,
    pub positions: u32,
    pub _pad: u32,
}

/// Must match the WGSL struct `SiluMul` in llama_silu_mul.wgsl.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
pub(crate) struct SiluMulParams {
    pub n: u32,
    pub _pad: [u32; 3],
}

/// Must match the WGSL struct `FewRows` in llama_few_rows.wgsl.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
pub(crate) struct FewRowsParams {
    pub rows: u32,
    pub cols: u32,
    pub inner: u32,
    pub _pad0: u32,
    pub input: [u32; 5],
    pub output: [u32; 5],
    pub _pad1: [u32; 2],
}

fn u32_of(arg: &'static str, n: usize) -> Result<u32, ModelError> {
    u32::try_from(n).map_err(|_| ModelError::input(arg, format!("{n} exceeds 32 bits")))
}

/// Checks that `t` holds at least `need` values.
fn holds(arg: &'static str, t: &GpuTensor, need: usize) -> Result<(), ModelError> {
    if t.len() < need {
        return Err(ModelError::format(
            "llama gpu",
            format!(
                "{arg} of shape {:?} holds fewer than {need} values",
                t.shape()
            ),
        ));
    }
    Ok(())
}

fn whole(t: &GpuTensor) -> wgpu::BindingResource<'_> {
    range(t.buffer(), 0, (t.len() as u64 * 4).max(4))
}

/// Where RoPE applies: `rows` tokens at rows `off..` of a `(heads, cap, dim)` tensor,
/// as positions `pos0..`.
pub(crate) struct RopeSpan {
    pub heads: usize,
    pub dim: usize,
    pub cap: usize,
    pub off: usize,
    pub rows: usize,
    pub pos0: usize,
}

/// Rows of y the few-rows kernel computes: up to this many it replaces the tiled linear
/// kernel (see llama_few_rows.wgsl); beyond, the tiled kernel's reuse of W pays off.
pub(crate) const FEW_ROWS_MAX: usize = 96;

/// The llama kernels' pipelines, built (or found in the context's cache) once per pass.
pub(crate) struct LlamaKernels {
    embed: Arc<KernelPipeline>,
    rmsnorm: Arc<KernelPipeline>,
    rope: Arc<KernelPipeline>,
    silu_mul: Arc<KernelPipeline>,
    few_rows: Arc<KernelPipeline>,
}

/// Records one dispatch of `pipe` (built from `spec`) with `params` in binding 0,
/// `resources` after it, over `workgroups` workgroups laid out on the 2-D grid the
/// kernels read back linearly.
fn dispatch<P: Pod>(
    ctx: &GpuContext,
    encoder: &mut wgpu::CommandEncoder,
    (spec, pipe): (&KernelSpec, &KernelPipeline),
    params: &P,
    resources: Vec<wgpu::BindingResource<'_>>,
    workgroups: u64,
) -> Result<(), ModelError> {
    let (buffer, _) = buffers::uniform_array(ctx, spec.name, std::slice::from_ref(params))?;
    let mut all = vec![range(&buffer, 0, std::mem::size_of::<P>() as u64)];
    all.extend(resources);
    let group = bind_group(ctx, spec.name, &pipe.layout, all);
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

impl LlamaKernels {
    /// Builds (or finds cached) every llama pipeline.
    ///
    /// # Errors
    /// A device error building a pipeline.
    pub(crate) async fn prepare(ctx: &GpuContext) -> Result<Self, ModelError> {
        Ok(Self {
            embed: pipeline(ctx, &EMBED, &[]).await?,
            rmsnorm: pipeline(ctx, &RMSNORM, &[]).await?,
            rope: pipeline(ctx, &ROPE, &[]).await?,
            silu_mul: pipeline(ctx, &SILU_MUL, &[]).await?,
            few_rows: pipeline(ctx, &FEW_ROWS, &[]).await?,
        })
    }

    /// `x (rows, hidden)` = rows `ids` of `table (vocab, hidden)`.
    pub(crate) fn embed(
        &self,
        ctx: &GpuContext,
        encoder: &mut wgpu::CommandEncoder,
        ids: &wgpu::Buffer,
        rows: usize,
        table: &GpuTensor,
        x: &GpuTensor,
    ) -> Result<(), ModelError> {
        let [vocab, hidden] = <[usize; 2]>::try_from(table.shape())
            .map_err(|_| ModelError::format("llama gpu", "embedding table is not rank 2"))?;
        holds("x", x, rows * hidden)?;
        if ids.size() < rows as u64 * 4 {
            return Err(ModelError::format("llama gpu", "ids buffer too small"));
        }
        let params = EmbedParams {
            rows: u32_of("ids", rows)?,
            hidden: u32_of("hidden", hidden)?,
            vocab: u32_of("vocab", vocab)?,
            _pad: 0,
        };
        let n = (rows * hidden) as u64;
        let res = vec![
            range(ids, 0, (rows as u64 * 4).max(4)),
            whole(table),
            whole(x),
        ];
        dispatch(
            ctx,
            encoder,
            (&EMBED, &self.embed),
            &params,
            res,
            n.div_ceil(WG),
        )
    }

    /// The residual add (when `delta` is given) and RMSNorm of `rows` rows of `x`
    /// (`weight.len()` wide) into `out`. `dummy` is bound in `delta`'s place when there is
    /// none (a binding cannot be left empty, nor alias `x`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn rmsnorm(
        &self,
        ctx: &GpuContext,
        encoder: &mut wgpu::CommandEncoder,
        x: &GpuTensor,
        delta: Option<&GpuTensor>,
        dummy: &GpuTensor,
        weight: &GpuTensor,
        out: &GpuTensor,
        rows: usize,
        eps: f64,
    ) -> Result<(), ModelError> {
        let width = weight.len();
        for (arg, t) in [("x", x), ("out", out)]
            .into_iter()
            .chain(delta.map(|d| ("delta", d)))
        {
            holds(arg, t, rows * width)?;
        }
        let params = RmsNormParams {
            rows: u32_of("rows", rows)?,
            width: u32_of("width", width)?,
            add: u32::from(delta.is_some()),
            eps: eps as f32,
        };
        let res = vec![
            whole(x),
            whole(delta.unwrap_or(dummy)),
            whole(weight),
            whole(out),
        ];
        dispatch(
            ctx,
            encoder,
            (&RMSNORM, &self.rmsnorm),
            &params,
            res,
            rows as u64,
        )
    }

    /// Rotates `x` in place over `span`, reading cos/sin from `table (positions, dim/2, 2)`.
    pub(crate) fn rope(
        &self,
        ctx: &GpuContext,
        encoder: &mut wgpu::CommandEncoder,
        x: &GpuTensor,
        table: &GpuTensor,
        span: &RopeSpan,
    ) -> Result<(), ModelError> {
        let s = span;
        holds("x", x, s.heads * s.cap * s.dim)?;
        if s.off + s.rows > s.cap || !s.dim.is_multiple_of(2) {
            return Err(ModelError::format(
                "llama gpu",
                "rope span outside its tensor",
            ));
        }
        let positions = table.len() / s.dim.max(1);
        let params = RopeParams {
            rows: u32_of("rows", s.rows)?,
            heads: u32_of("heads", s.heads)?,
            dim: u32_of("dim", s.dim)?,
            cap: u32_of("cap", s.cap)?,
            off: u32_of("off", s.off)?,
            pos0: u32_of("pos", s.pos0)?,
            positions: u32_of("positions", positions)?,
            _pad: 0,
        };
        let pairs = (s.heads * s.rows * s.dim / 2) as u64;
        let res = vec![whole(x), whole(table)];
        dispatch(
            ctx,
            encoder,
            (&ROPE, &self.rope),
            &params,
            res,
            pairs.div_ceil(WG),
        )
    }

    /// `gate = silu(gate) * up` over the first `n` elements.
    pub(crate) fn silu_mul(
        &self,
        ctx: &GpuContext,
        encoder: &mut wgpu::CommandEncoder,
        gate: &GpuTensor,
        up: &GpuTensor,
        n: usize,
    ) -> Result<(), ModelError> {
        holds("gate", gate, n)?;
        holds("up", up, n)?;
        let params = SiluMulParams {
            n: u32_of("n", n)?,
            _pad: [0; 3],
        };
        let res = vec![whole(gate), whole(up)];
        dispatch(
            ctx,
            encoder,
            (&SILU_MUL, &self.silu_mul),
            &params,
            res,
            (n as u64).div_ceil(WG),
        )
    }

    /// `y = x Wᵀ` for `rows` rows through the few-rows kernel, with the crate linear layer's
    /// head layouts on both sides.
    pub(crate) fn few_rows(
        &self,
        ctx: &GpuContext,
        encoder: &mut wgpu::CommandEncoder,
        call: &Linear<'_>,
    ) -> Result<(), ModelError> {
        let (x, xl) = (call.x.1, call.x.2);
        let (w, y, yl) = (call.w.1, call.y.1, call.y.2);
        let [cols, inner] = <[usize; 2]>::try_from(w.shape())
            .map_err(|_| ModelError::format("llama gpu", "a weight matrix is not rank 2"))?;
        let rows = call.rows as u64;
        if xl.heads as usize * xl.dim as usize != inner
            || yl.heads as usize * yl.dim as usize != cols
        {
            return Err(ModelError::format(
                "llama gpu",
                format!(
                    "layouts of {} do not match its weight {:?}",
                    call.y.0,
                    w.shape()
                ),
            ));
        }
        // The furthest element each layout reaches must lie inside its tensor.
        for (arg, t, l) in [(call.x.0, x, xl), (call.y.0, y, yl)] {
            let batches = rows.div_ceil(u64::from(l.len.max(1)));
            let need = batches * u64::from(l.heads) * u64::from(l.cap) * u64::from(l.dim);
            if u64::from(l.off) + u64::from(l.len) > u64::from(l.cap) || (t.len() as u64) < need {
                return Err(ModelError::format(
                    "llama gpu",
                    format!("{arg} of shape {:?} is too small for its layout", t.shape()),
                ));
            }
        }
        let pack = |l: HeadLayout| [l.len, l.heads, l.dim, l.cap, l.off];
        let params = FewRowsParams {
            rows: u32_of("rows", call.rows)?,
            cols: u32_of("cols", cols)?,
            inner: u32_of("inner", inner)?,
            _pad0: 0,
            input: pack(xl),
            output: pack(yl),
            _pad1: [0; 2],
        };
        let res = vec![whole(x), whole(w), whole(y)];
        let n = rows * cols as u64;
        dispatch(
            ctx,
            encoder,
            (&FEW_ROWS, &self.few_rows),
            &params,
            res,
            n.div_ceil(WG),
        )
    }
}
