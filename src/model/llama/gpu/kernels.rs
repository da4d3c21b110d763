//! Launchers for the llama kernels in `shaders/model/llama_*.wgsl`: each kernel's params
//! struct, binding layout, shape checks and dispatch arithmetic. They record into an
//! encoder and leave submitting to the caller.

use bytemuck::{Pod, Zeroable};

use super::device::{bind_group, buffers, grid, range, Binding, KernelSpec};
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

const MATVEC: KernelSpec = KernelSpec {
    name: "llama_matvec",
    source: include_str!("../../../../shaders/model/llama_matvec.wgsl"),
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
    (MATVEC.name, MATVEC.source),
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

/// Must match the WGSL struct `Matvec` in llama_matvec.wgsl.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
pub(crate) struct MatvecParams {
    pub cols: u32,
    pub inner: u32,
    pub x_off: u32,
    pub y_dim: u32,
    pub y_cap: u32,
    pub y_off: u32,
    pub _pad: [u32; 2],
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

/// Records one dispatch of `spec` with `params` in binding 0, `resources` after it, over
/// `workgroups` workgroups laid out on the 2-D grid the kernels read back linearly.
async fn dispatch<P: Pod>(
    ctx: &GpuContext,
    encoder: &mut wgpu::CommandEncoder,
    spec: &KernelSpec,
    params: &P,
    resources: Vec<wgpu::BindingResource<'_>>,
    workgroups: u64,
) -> Result<(), ModelError> {
    let (buffer, _) = buffers::uniform_array(ctx, spec.name, std::slice::from_ref(params))?;
    let pipe = ctx.pipeline(spec, &[]).await?;
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

/// `x (rows, hidden)` = rows `ids` of `table (vocab, hidden)`.
pub(crate) async fn embed(
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
    dispatch(ctx, encoder, &EMBED, &params, res, n.div_ceil(WG)).await
}

/// The residual add (when `delta` is given) and RMSNorm of `rows` rows of `x`
/// (`weight.len()` wide) into `out`. `dummy` is bound in `delta`'s place when there is
/// none (a binding cannot be left empty, nor alias `x`).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn rmsnorm(
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
    dispatch(ctx, encoder, &RMSNORM, &params, res, rows as u64).await
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

/// Rotates `x` in place over `span`, reading cos/sin from `table (positions, dim/2, 2)`.
pub(crate) async fn rope(
    ctx: &GpuContext,
    encoder: &mut wgpu::CommandEncoder,
    x: &GpuTensor,
    table: &GpuTensor,
    span: &RopeSpan,
) -> Result<(), ModelError> {
    let s = span;
    holds("x", x, s.heads * s.cap * s.dim)?;
    if s.off + s.rows > s.cap || s.dim % 2 != 0 {
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
    dispatch(ctx, encoder, &ROPE, &params, res, pairs.div_ceil(WG)).await
}

/// `gate = silu(gate) * up` over the first `n` elements.
pub(crate) async fn silu_mul(
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
        &SILU_MUL,
        &params,
        res,
        (n as u64).div_ceil(WG),
    )
    .await
}

/// Where a one-row product reads its row and writes its columns: the row starts at
/// element `x_off` of x; column `c = h * dim + d` goes to `(h * cap + off) * dim + d`.
pub(crate) struct MatvecLayout {
    pub x_off: usize,
    pub dim: usize,
    pub cap: usize,
    pub off: usize,
}

/// `y = x Wᵀ` for one row of x, with `w (cols, inner)`.
pub(crate) async fn matvec(
    ctx: &GpuContext,
    encoder: &mut wgpu::CommandEncoder,
    x: &GpuTensor,
    w: &GpuTensor,
    y: &GpuTensor,
    at: &MatvecLayout,
) -> Result<(), ModelError> {
    let [cols, inner] = <[usize; 2]>::try_from(w.shape())
        .map_err(|_| ModelError::format("llama gpu", "a weight matrix is not rank 2"))?;
    holds("x", x, at.x_off + inner)?;
    if at.dim == 0 || cols % at.dim != 0 || at.off >= at.cap {
        return Err(ModelError::format(
            "llama gpu",
            "matvec output layout does not tile y",
        ));
    }
    holds("y", y, cols / at.dim * at.cap * at.dim)?;
    let params = MatvecParams {
        cols: u32_of("cols", cols)?,
        inner: u32_of("inner", inner)?,
        x_off: u32_of("x_off", at.x_off)?,
        y_dim: u32_of("dim", at.dim)?,
        y_cap: u32_of("cap", at.cap)?,
        y_off: u32_of("off", at.off)?,
        _pad: [0; 2],
    };
    let res = vec![whole(x), whole(w), whole(y)];
    dispatch(
        ctx,
        encoder,
        &MATVEC,
        &params,
        res,
        (cols as u64).div_ceil(WG),
    )
    .await
}
