//! Ways for tests (and `wgpu-attention info`) to see inside: the device-error path on
//! purpose, the staged path's chunks, the probed loop budget. Not part of the API.

use bytemuck::Zeroable;

use crate::error::Result;
use crate::gpu::device::context::GpuContext;
use crate::gpu::device::recorder::Recorder;
use crate::gpu::device::scopes::ErrorScopes;
use crate::gpu::forward::io::{params_buffer, placeholder};
use crate::gpu::forward::paths::split_kv::FirstPass;
use crate::gpu::forward::zero_run::plain_problem;
use crate::gpu::kernels::dispatch::{bind_group, range};
use crate::gpu::kernels::elem::Elem;
use crate::gpu::kernels::params::Params;
use crate::gpu::kernels::pipelines::pipeline;
use crate::gpu::kernels::softmax;
use crate::gpu::routing::budget::key_budget;
use crate::gpu::routing::tune::fused_config;

/// Records and submits one dispatch of a real kernel with one workgroup more than the
/// device allows per dimension, inside the same error scopes every call uses, and
/// returns what the caller would see: an [`AttentionError::Device`](crate::error::AttentionError::Device)
/// naming the validation failure.
#[doc(hidden)]
pub async fn invalid_dispatch_for_tests(ctx: &GpuContext) -> Result<()> {
    ctx.check_alive()?;
    let pipe = pipeline(ctx, &softmax::SPEC, &[]).await?;
    let scopes = ErrorScopes::push(ctx);
    let (params, _) = params_buffer(ctx, &[Params::zeroed()])?;
    let (read, write) = (placeholder(ctx)?, placeholder(ctx)?);
    let scores = placeholder(ctx)?;
    let group = bind_group(
        ctx,
        "invalid dispatch",
        &pipe.layout,
        vec![
            range(&params, 0, std::mem::size_of::<Params>() as u64),
            scores.as_entire_binding(),
            read.as_entire_binding(),
            read.as_entire_binding(),
            write.as_entire_binding(),
        ],
    );
    let mut encoder = ctx.device.create_command_encoder(&Default::default());
    {
        let mut pass = encoder.begin_compute_pass(&Default::default());
        pass.set_pipeline(&pipe.pipeline);
        pass.set_bind_group(0, &group, &[]);
        let too_many = ctx
            .limits
            .max_compute_workgroups_per_dimension
            .saturating_add(1);
        pass.dispatch_workgroups(too_many, 1, 1);
    }
    ctx.queue.submit([encoder.finish()]);
    scopes.pop(ctx, "test dispatch").await
}

/// The chunks the staged path splits a problem into on this context, as
/// `(first flattened head, heads, first row, rows)`: lets tests check that a case
/// really exercises the splitting it means to.
#[doc(hidden)]
pub fn staged_plan_for_tests(
    ctx: &GpuContext,
    q: &[usize],
    k: &[usize],
    v: &[usize],
    opts: &crate::options::AttentionOptions<'_>,
) -> Result<Vec<(usize, usize, usize, usize)>> {
    let p = crate::problem::validate(q, k, v, opts)?;
    let chunks =
        crate::gpu::kernels::plan::plan(&p, &crate::gpu::forward::paths::staged::limits(ctx))?;
    Ok(chunks
        .iter()
        .map(|c| (c.bh_start, c.bh_count, c.row_start, c.row_count))
        .collect())
}

/// Makes every decode call on `ctx` run the subgroup decode kernel, with `d_split` lanes
/// per key (a power of two) or, when `None`, the first candidate that fits, as
/// `WGPU_ATTENTION_KERNEL=subgroup-decode` does for every context with subgroups. Calls
/// fail with [`AttentionError::Unsupported`](crate::error::AttentionError::Unsupported) where the
/// adapter has no subgroups of at least `d_split` lanes.
#[doc(hidden)]
pub fn force_subgroup_decode_for_tests(ctx: &GpuContext, d_split: Option<u32>) {
    crate::gpu::routing::tune::force_subgroup_decode(ctx, d_split);
}

/// Keys one workgroup of the fused kernel may loop over on this context, for f32 inputs
/// of head dim `dim` in the configuration an untuned call takes; `None` where the adapter
/// showed no limit (see `routing/budget.rs`). Tells which drivers cap shader loops, and so
/// whether long key ranges run in one pass or as merged ranges.
///
/// # Errors
/// [`AttentionError::TooLarge`](crate::error::AttentionError::TooLarge) when no fused
/// configuration fits `dim` on this device; device errors while probing.
#[doc(hidden)]
pub async fn fused_key_budget(ctx: &GpuContext, dim: usize) -> Result<Option<u64>> {
    ctx.check_alive()?;
    let p = plain_problem([1, 1, 1, dim], [1, 1, dim], false, 0, false);
    let cfg = fused_config(ctx, &p, Elem::F32).await?;
    key_budget(ctx, &p, Elem::F32, FirstPass::Fused(cfg)).await
}

/// The fused kernel an untuned call on `ctx` runs for f32 q of shape `q` (B, H, Lq, D)
/// against K/V of `kv` (Hkv, Lk, Dv), without a mask: with a kernel forced
/// ([`GpuContext::set_fused_kernel`]), whether it fits or another serves. Lets tests show
/// that the kernel they force is the one that ran.
///
/// # Errors
/// [`AttentionError::TooLarge`](crate::error::AttentionError::TooLarge) when no fused
/// configuration fits; device errors.
#[doc(hidden)]
pub async fn fused_kernel_taken(
    ctx: &GpuContext,
    q: [usize; 4],
    kv: [usize; 3],
    causal: bool,
) -> Result<crate::options::FusedKernel> {
    ctx.check_alive()?;
    let p = plain_problem(q, kv, causal, 0, false);
    Ok(fused_config(ctx, &p, Elem::F32).await?.kind.kernel())
}

/// Which dense-layer kernel [`LinearForTests`] runs.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinearTile {
    /// What the adapter's layers use.
    Auto,
    /// matmul_tiled.wgsl.
    Tiled,
    /// matmul_lanes.wgsl with 8 x `row_groups` rows and 32 x `col_sets` columns.
    Lanes { row_groups: u32, col_sets: u32 },
    /// matmul_split.wgsl with `rows` rows (1 or 4) a workgroup, for any number of rows.
    Split { rows: u32 },
}

/// A head layout as `[len, heads, dim, cap, off]` (see shaders/prelude/matmul.wgsl).
#[doc(hidden)]
pub type LinearLayout = [u32; 5];

/// One dense layer's weights on the device and its kernel, for tests and benchmarks of
/// the kernel itself: `y = epilogue(x Wᵀ + b)` with W `(N, K)`.
#[doc(hidden)]
pub struct LinearForTests {
    kernel: crate::gpu::kernels::linear::LinearKernel,
    w32: crate::gpu::device::tensor::GpuTensor,
    w16: Option<crate::gpu::kernels::linear::F16Weights>,
    bias: crate::gpu::device::tensor::GpuTensor,
    gelu: bool,
}

impl LinearForTests {
    /// Uploads W (as f16 where `f16`) and the bias, and builds the kernel of `tile`.
    ///
    /// # Errors
    /// As the kernel's preparation: [`crate::error::AttentionError::Unsupported`] for a tile the
    /// adapter cannot run or f16 without `shader-f16`; device errors.
    pub async fn new(
        ctx: &GpuContext,
        tile: LinearTile,
        w: ndarray::ArrayView2<'_, f32>,
        bias: ndarray::ArrayView1<'_, f32>,
        (f16, gelu): (bool, bool),
    ) -> Result<Self> {
        use crate::gpu::kernels::linear::{self, LinearKernel, LinearNeed, LinearShape};
        let elem = if f16 { Elem::F16 } else { Elem::F32 };
        let needs = [true, false].map(|vec4| LinearNeed { elem, vec4 });
        let shapes = match tile {
            LinearTile::Auto => linear::shapes(ctx),
            LinearTile::Tiled => vec![LinearShape::Tiled],
            LinearTile::Lanes {
                row_groups,
                col_sets,
            } => vec![LinearShape::Lanes {
                row_groups,
                col_sets,
            }],
            LinearTile::Split { rows } => vec![LinearShape::Split { rows }],
        };
        let kernel = LinearKernel::prepare_shapes(ctx, shapes, &needs).await?;
        let w16 = if f16 {
            Some(linear::F16Weights::upload(ctx, "w", w)?)
        } else {
            None
        };
        Ok(Self {
            kernel,
            w32: crate::gpu::device::tensor::GpuTensor::upload(ctx, "w", w.into_dyn())?,
            w16,
            bias: crate::gpu::device::tensor::GpuTensor::upload(ctx, "bias", bias.into_dyn())?,
            gelu,
        })
    }

    /// Records the layer for `rows` rows of `x` (in `x_layout`) into `y` (in
    /// `y_layout`), adding `residual` (in y's layout) when given.
    ///
    /// # Errors
    /// The kernel's shape and size errors.
    #[allow(clippy::too_many_arguments)]
    pub fn record(
        &self,
        ctx: &GpuContext,
        encoder: &mut wgpu::CommandEncoder,
        (x, x_layout): (&crate::gpu::device::tensor::GpuTensor, LinearLayout),
        (y, y_layout): (&crate::gpu::device::tensor::GpuTensor, LinearLayout),
        rows: usize,
        residual: Option<&crate::gpu::device::tensor::GpuTensor>,
    ) -> Result<()> {
        use crate::gpu::kernels::linear::{Epilogue, HeadLayout, Linear, WeightsRef};
        let layout = |[len, heads, dim, cap, off]: LinearLayout| HeadLayout {
            len,
            heads,
            dim,
            cap,
            off,
        };
        let call = Linear {
            x: ("x", x, layout(x_layout)),
            w: ("w", &self.w32),
            bias: ("bias", &self.bias),
            y: ("y", y, layout(y_layout)),
            rows,
        };
        let w = self
            .w16
            .as_ref()
            .map_or(WeightsRef::F32(&self.w32), WeightsRef::F16);
        let epi = Epilogue {
            gelu: self.gelu,
            residual: residual.map(|r| ("residual", r)),
        };
        self.kernel
            .record_with(ctx, &mut Recorder::new(encoder), &call, ("w", w), epi)
    }
}
