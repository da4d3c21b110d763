//! The dense-layer kernels: `y = epilogue(x Wᵀ + b)` with head layouts on both sides,
//! W as checkpoints store it (`(out, in)`), f32 or f16 W with f32 accumulation, and the
//! bias, GELU and residual add fused into the store. Three kernels compute it:
//!
//! - `shaders/kernels/matmul_tiled.wgsl`, shaped for hardware GPUs: 64 x 64 tiles of y
//!   from slices of x and W staged in padded workgroup memory, a 4 x 4 register
//!   micro-tile per invocation;
//! - `shaders/kernels/matmul_split.wgsl`, for few rows on hardware GPUs (at most
//!   [`SPLIT_MAX_ROWS`]: a decoding step, a short input): K split across groups of 16
//!   lanes, each group four columns, the lanes' sums added through workgroup memory;
//! - `shaders/kernels/matmul_lanes.wgsl`, shaped for CPU adapters whose subgroups are the
//!   SIMD lanes (lavapipe's 8): one subgroup per workgroup, x rows shared by subgroup
//!   broadcasts, no workgroup memory; its tile (8 to 32 rows, 32 or 64 columns) comes
//!   from override constants.
//!
//! Each takes a prelude that reads x and W four elements at a time where the widths
//! allow (`matmul_vec4.wgsl`), one at a time otherwise (`matmul_scalar.wgsl`). Each
//! tensor is bound whole, so each must fit one storage binding; larger ones are a
//! [`AttentionError::TooLarge`] naming the tensor.

use bytemuck::{Pod, Zeroable};

use std::sync::Arc;

use crate::error::{AttentionError, Result};
use crate::gpu::device::buffers;
use crate::gpu::device::context::GpuContext;
use crate::gpu::device::recorder::Recorder;
use crate::gpu::device::scopes::ErrorScopes;
use crate::gpu::device::tensor::{GpuTensor, TENSOR_USAGE};
use crate::gpu::kernels::dispatch::{bind_group, grid, range};
use crate::gpu::kernels::elem::Elem;
use crate::gpu::kernels::layout::{uniform_layout, UniformLayout};
use crate::gpu::kernels::linear_class::LinearClass;
use crate::gpu::kernels::pipelines::{pipeline, Binding, KernelPipeline, KernelSpec};
use crate::gpu::kernels::source;
use crate::gpu::kernels::subgroups::subgroup_sizes;

/// Bindings: params, x, W, bias, residual, y.
const BINDINGS: &[Binding] = &[
    Binding::Uniform,
    Binding::Read,
    Binding::Read,
    Binding::Read,
    Binding::Read,
    Binding::ReadWrite,
];

const fn spec(name: &'static str, source: &'static str) -> KernelSpec {
    KernelSpec {
        name,
        source,
        bindings: BINDINGS,
        // Every index is in bounds: rows and columns past the tile's edges are clamped
        // before loading and skipped when storing, the head loop stays inside each
        // head's width, and `record` checks that every tensor holds what its layout
        // reaches (including off + len <= cap) before dispatching. Workgroup memory is
        // written before it is read.
        trusted: true,
        uniforms: &[linear_uniform],
    }
}

/// The tiled kernel: (f32 W, f32 W read one element at a time, f16 W, f16 one at a time).
pub(crate) const TILED_SPECS: [KernelSpec; 4] = [
    spec("matmul_tiled", source::MATMUL_TILED),
    spec("matmul_tiled_scalar", source::MATMUL_TILED_SCALAR),
    spec("matmul_tiled_f16", source::MATMUL_TILED_F16),
    spec("matmul_tiled_scalar_f16", source::MATMUL_TILED_SCALAR_F16),
];

/// The split kernel, in the order of [`TILED_SPECS`].
pub(crate) const SPLIT_SPECS: [KernelSpec; 4] = [
    spec("matmul_split", source::MATMUL_SPLIT),
    spec("matmul_split_scalar", source::MATMUL_SPLIT_SCALAR),
    spec("matmul_split_f16", source::MATMUL_SPLIT_F16),
    spec("matmul_split_scalar_f16", source::MATMUL_SPLIT_SCALAR_F16),
];

/// Columns of y a workgroup of the split kernel computes (GROUPS x 4 in matmul_split.wgsl).
pub(crate) const SPLIT_COLS: u64 = 16;

/// Rows the split kernels serve (this one untuned, and the quantized matmul's split
/// entry): more share each W load among enough rows for the tiled kernels.
pub(crate) const SPLIT_MAX_ROWS: u32 = 16;

/// The lanes kernel, in the order of [`TILED_SPECS`].
pub(crate) const LANES_SPECS: [KernelSpec; 4] = [
    spec("matmul_lanes", source::MATMUL_LANES),
    spec("matmul_lanes_scalar", source::MATMUL_LANES_SCALAR),
    spec("matmul_lanes_f16", source::MATMUL_LANES_F16),
    spec("matmul_lanes_scalar_f16", source::MATMUL_LANES_SCALAR_F16),
];

/// As TS in matmul_tiled.wgsl (rows and columns of a tile; checked by `reflection.rs`).
pub(crate) const TILED_TILE: u64 = 64;

/// As SG in matmul_lanes.wgsl: the subgroup size the lanes kernel is written for.
pub(crate) const LANES_SG: u32 = 8;

/// As LINEAR_RESIDUAL and LINEAR_GELU in matmul.wgsl (checked by `reflection.rs`).
pub(crate) const FLAG_RESIDUAL: u32 = 1;
pub(crate) const FLAG_GELU: u32 = 2;

/// Which kernel, and for the lanes kernel which tile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum LinearShape {
    /// matmul_tiled.wgsl.
    Tiled,
    /// matmul_lanes.wgsl with 8 x `row_groups` rows (1 to 4) and 32 x `col_sets`
    /// columns (1 or 2) per workgroup.
    Lanes { row_groups: u32, col_sets: u32 },
    /// matmul_split.wgsl with `rows` rows (1 or 4) and 16 columns per workgroup.
    Split { rows: u32 },
}

impl LinearShape {
    /// Rows and columns of y one workgroup computes.
    pub(crate) fn tile(self) -> (u64, u64) {
        match self {
            LinearShape::Tiled => (TILED_TILE, TILED_TILE),
            LinearShape::Lanes {
                row_groups,
                col_sets,
            } => (
                u64::from(LANES_SG * row_groups),
                u64::from(4 * LANES_SG * col_sets),
            ),
            LinearShape::Split { rows } => (u64::from(rows), SPLIT_COLS),
        }
    }

    /// Whether an untuned call of `rows` rows takes this shape (the first of the
    /// adapter's shapes that covers them): a tile at least as tall, or for the split
    /// kernel's four-row shape up to [`SPLIT_MAX_ROWS`] rows.
    fn covers(self, rows: u32) -> bool {
        match self {
            LinearShape::Split { rows: r } if r > 1 => rows <= SPLIT_MAX_ROWS,
            _ => self.tile().0 >= u64::from(rows),
        }
    }

    /// The override constants.
    pub(crate) fn constants(self) -> Vec<(&'static str, f64)> {
        match self {
            LinearShape::Tiled => Vec::new(),
            LinearShape::Lanes {
                row_groups,
                col_sets,
            } => vec![
                ("ROW_GROUPS", f64::from(row_groups)),
                ("COL_SETS", f64::from(col_sets)),
            ],
            LinearShape::Split { rows } => vec![("ROWS", f64::from(rows))],
        }
    }

    /// The kernel built for W stored as `elem`, read four elements at a time or not.
    pub(crate) fn spec(self, elem: Elem, vec4: bool) -> &'static KernelSpec {
        let specs = match self {
            LinearShape::Tiled => &TILED_SPECS,
            LinearShape::Lanes { .. } => &LANES_SPECS,
            LinearShape::Split { .. } => &SPLIT_SPECS,
        };
        &specs[match (elem, vec4) {
            (Elem::F32, true) => 0,
            (Elem::F32, false) => 1,
            (Elem::F16, true) => 2,
            (Elem::F16, false) => 3,
        }]
    }
}

/// Whether the adapter's subgroups are a CPU's 8 SIMD lanes, the lanes kernel's shape:
/// a CPU adapter with one fixed subgroup size of 8 (lavapipe), never on the web (where
/// shaders cannot enable subgroups yet).
pub(crate) fn lanes_adapter(ctx: &GpuContext) -> bool {
    ctx.adapter_info().device_type == wgpu::DeviceType::Cpu
        && subgroup_sizes(ctx) == Some((LANES_SG, LANES_SG))
}

/// The memo key of [`force_split_products`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct ForcedSplitProducts;

/// Makes products of few rows prepared on `ctx` from now on split K across lanes, as on
/// GPUs, whatever the adapter (see [`split_products`]).
pub(crate) fn force_split_products(ctx: &GpuContext) {
    ctx.memo.insert(ForcedSplitProducts, true);
}

/// Whether products of few rows (the dense layers' and the models' quantized ones) split
/// K across lanes on this adapter: on GPUs (discrete, integrated or virtual), where an
/// invocation per column has neighbouring lanes read W rows K apart, and wherever forced
/// ([`force_split_products`] on one context, `split-products` among the comma-separated
/// names of `WGPU_ATTENTION_KERNEL` for every context). CPU drivers keep their kernels:
/// there a lane is a SIMD lane and each storage load is one per lane whatever the
/// addresses, so splitting K only adds a reduction (a SmolLM2 step 2.3× slower on
/// lavapipe). Browsers report no device type, so they keep theirs too.
pub(crate) fn split_products(ctx: &GpuContext) -> bool {
    use wgpu::DeviceType::{DiscreteGpu, IntegratedGpu, VirtualGpu};
    let forced = ctx
        .memo
        .get::<ForcedSplitProducts, bool>(&ForcedSplitProducts)
        .unwrap_or(false)
        || crate::options::kernel_env_names()
            .iter()
            .any(|k| k == "split-products");
    forced
        || matches!(
            ctx.adapter_info().device_type,
            DiscreteGpu | IntegratedGpu | VirtualGpu
        )
}

/// Whether the dense layers of few rows take the split kernel: wherever products split
/// K ([`split_products`]), and on every adapter without the lanes kernel. A CPU driver
/// without it (SwiftShader, which runs WebGPU in browsers without a GPU; llvmpipe
/// through OpenGL) would otherwise run few rows in the tiled kernel's 64-row tiles,
/// mostly on rows that do not exist: MiniLM at 8 tokens took 589 against 130 ms on
/// SwiftShader, 189 against 62 ms on llvmpipe's OpenGL. Browsers report no device type;
/// there the split kernel is what a GPU takes too.
fn dense_split(ctx: &GpuContext) -> bool {
    split_products(ctx) || !lanes_adapter(ctx)
}

/// The shapes `record` chooses among on this adapter, by rows: where few rows split K
/// ([`dense_split`]), the split kernel's for one row and for up to [`SPLIT_MAX_ROWS`];
/// then the lanes kernel's on lanes adapters, with as few row groups as cover short
/// inputs (a workgroup's rows are its loads' reuse, so idle rows cost as much as live
/// ones); the tiled kernel everywhere else.
pub(crate) fn shapes(ctx: &GpuContext) -> Vec<LinearShape> {
    let mut all = if dense_split(ctx) {
        vec![
            LinearShape::Split { rows: 1 },
            LinearShape::Split { rows: 4 },
        ]
    } else {
        Vec::new()
    };
    if lanes_adapter(ctx) {
        // Measured on lavapipe (benches/matmul.rs): 8 and 16 rows for short inputs, 32
        // rows by 64 columns (the most reuse per load) for longer ones.
        all.extend(
            [(1, 1), (2, 1), (4, 2)].map(|(row_groups, col_sets)| LinearShape::Lanes {
                row_groups,
                col_sets,
            }),
        );
    } else {
        all.push(LinearShape::Tiled);
    }
    all
}

/// The shape for `rows` rows among `shapes` (as [`shapes`] lists them): the first whose
/// tile covers them, else the largest.
pub(super) fn shape_for(shapes: &[LinearShape], rows: u32) -> Option<LinearShape> {
    shapes
        .iter()
        .copied()
        .find(|s| s.covers(rows))
        .or_else(|| shapes.last().copied())
}

/// Where row `m = (b, l)` and column `c = (h, d)` of a matrix live in a buffer:
/// `((b * heads + h) * cap + off + l) * dim + d`. See shaders/prelude/matmul.wgsl.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HeadLayout {
    pub len: u32,
    pub heads: u32,
    pub dim: u32,
    pub cap: u32,
    pub off: u32,
}

impl HeadLayout {
    /// `rows` rows of `per_batch` tokens, `heads` heads of width `dim`, stored as
    /// `(B, heads, cap, dim)` with these rows at positions `off..off + per_batch`.
    pub(crate) fn heads(per_batch: u32, heads: u32, dim: u32, cap: u32, off: u32) -> Self {
        Self {
            len: per_batch,
            heads,
            dim,
            cap,
            off,
        }
    }

    /// A plain row-major matrix with `width` columns, `per_batch` rows per batch.
    pub(crate) fn rows(per_batch: u32, width: u32) -> Self {
        Self::heads(per_batch, 1, width, per_batch, 0)
    }

    /// Elements a buffer needs to hold `rows` rows in this layout.
    pub(crate) fn elements(&self, rows: u64) -> u64 {
        let batch = rows.div_ceil(u64::from(self.len.max(1)));
        batch * u64::from(self.heads) * u64::from(self.cap) * u64::from(self.dim)
    }

    /// Checks that the layout describes `width` columns (`heads * dim`), that its rows
    /// fit their slots (`off + len <= cap`) and that no size is zero.
    fn check(&self, arg: &'static str, width: usize) -> Result<()> {
        let l = self;
        if l.len == 0 || l.heads == 0 || l.dim == 0 {
            return Err(AttentionError::shape(
                arg,
                format!("layout {l:?} has a zero length, head count or head width"),
            ));
        }
        if u64::from(l.heads) * u64::from(l.dim) != width as u64 {
            return Err(AttentionError::shape(
                arg,
                format!(
                    "layout of {} heads x {} columns does not make the layer's {width} columns",
                    l.heads, l.dim
                ),
            ));
        }
        if u64::from(l.off) + u64::from(l.len) > u64::from(l.cap) {
            return Err(AttentionError::shape(
                arg,
                format!(
                    "rows {}..{} do not fit a capacity of {}",
                    l.off,
                    u64::from(l.off) + u64::from(l.len),
                    l.cap
                ),
            ));
        }
        Ok(())
    }
}

/// As the WGSL struct `Linear` in matmul.wgsl (checked by `reflection.rs`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
pub(crate) struct LinearParams {
    pub rows: u32,
    pub cols: u32,
    pub inner: u32,
    pub tiles_n: u32,
    pub input: [u32; 5],
    pub output: [u32; 5],
    pub flags: u32,
    pub _pad0: u32,
}

/// [`LinearParams`] as `shaders/prelude/matmul.wgsl` declares it.
fn linear_uniform() -> UniformLayout {
    uniform_layout!(LinearParams as "Linear" {
        rows, cols, inner, tiles_n,
        input => ["in_len", "in_heads", "in_dim", "in_cap", "in_off"],
        output => ["out_len", "out_heads", "out_dim", "out_cap", "out_off"],
        flags, _pad0,
    })
}

impl LinearParams {
    pub(crate) fn new(
        (rows, cols, inner): (u32, u32, u32),
        tile_cols: u64,
        (input, output): (HeadLayout, HeadLayout),
        flags: u32,
    ) -> Self {
        let pack = |l: HeadLayout| [l.len, l.heads, l.dim, l.cap, l.off];
        Self {
            rows,
            cols,
            inner,
            tiles_n: u64::from(cols).div_ceil(tile_cols) as u32,
            input: pack(input),
            output: pack(output),
            flags,
            _pad0: 0,
        }
    }
}

/// Workgroups of `shape` for a `rows` x `cols` output.
pub(crate) fn workgroups(shape: LinearShape, rows: u32, cols: u32) -> u64 {
    let (tm, tn) = shape.tile();
    u64::from(rows).div_ceil(tm) * u64::from(cols).div_ceil(tn)
}

/// One dense layer: `rows` rows of `x` (in `x_layout`, `inner` wide) times `w`
/// `(cols, inner)`ᵀ plus `bias` `(cols,)`, written to `y` in `y_layout`.
pub(crate) struct Linear<'a> {
    pub x: (&'static str, &'a GpuTensor, HeadLayout),
    pub w: (&'static str, &'a GpuTensor),
    pub bias: (&'static str, &'a GpuTensor),
    pub y: (&'static str, &'a GpuTensor, HeadLayout),
    pub rows: usize,
}

/// What the store does after the bias: GELU (erf form, as BERT's), then adding a
/// residual tensor read in y's layout. `Epilogue::default()` is the bias alone.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Epilogue<'a> {
    pub gelu: bool,
    pub residual: Option<(&'static str, &'a GpuTensor)>,
}

/// W stored as f16 on the device: `(cols, inner)` halves, uploaded once.
#[derive(Debug)]
pub(crate) struct F16Weights {
    pub buffer: wgpu::Buffer,
    pub shape: [usize; 2],
}

impl F16Weights {
    /// Uploads `w` `(cols, inner)` rounded to f16 (to nearest even), padded to whole
    /// 4-byte words.
    ///
    /// # Errors
    /// [`AttentionError::TooLarge`] naming `arg` beyond the device's buffer size; a device
    /// error allocating.
    pub(crate) fn upload(
        ctx: &GpuContext,
        arg: &'static str,
        w: ndarray::ArrayView2<'_, f32>,
    ) -> Result<Self> {
        let shape = [w.nrows(), w.ncols()];
        let mut halves: Vec<half::f16> = w.iter().map(|&v| half::f16::from_f32(v)).collect();
        if halves.len() % 2 == 1 {
            halves.push(half::f16::ZERO);
        }
        buffers::check_size(ctx, arg, &shape, halves.len() as u64 * 2)?;
        let scopes = ErrorScopes::push(ctx);
        let buffer = buffers::with_contents(
            ctx,
            "wgpu-attention f16 weights",
            bytemuck::cast_slice(&halves),
            TENSOR_USAGE,
        )?;
        scopes.pop_now(ctx, &format!("uploading {arg} {shape:?}"))?;
        Ok(Self { buffer, shape })
    }
}

/// W of a layer: an f32 tensor, or f16 halves.
#[derive(Debug, Clone, Copy)]
pub(crate) enum WeightsRef<'a> {
    F32(&'a GpuTensor),
    F16(&'a F16Weights),
}

impl WeightsRef<'_> {
    fn shape(&self) -> &[usize] {
        match self {
            WeightsRef::F32(t) => t.shape(),
            WeightsRef::F16(h) => &h.shape,
        }
    }

    fn elem(&self) -> Elem {
        match self {
            WeightsRef::F32(_) => Elem::F32,
            WeightsRef::F16(_) => Elem::F16,
        }
    }

    fn buffer(&self) -> &wgpu::Buffer {
        match self {
            WeightsRef::F32(t) => t.buffer(),
            WeightsRef::F16(h) => &h.buffer,
        }
    }
}

fn small(arg: &'static str, what: &str, n: usize) -> Result<u32> {
    u32::try_from(n).map_err(|_| AttentionError::TooLarge {
        arg,
        detail: format!("{what} = {n} exceeds the kernel's 32-bit index"),
    })
}

/// Checks that `arg` (`len` values of `elem` in a buffer, of this shape) holds `need`
/// elements and fits one binding.
fn check(
    ctx: &GpuContext,
    arg: &'static str,
    (shape, len, elem): (&[usize], u64, Elem),
    need: u64,
) -> Result<()> {
    if len < need {
        return Err(AttentionError::shape(
            arg,
            format!("tensor of shape {shape:?} holds {len} values, the layer needs {need}"),
        ));
    }
    let bytes = len.saturating_mul(elem.bytes());
    let max = ctx.max_binding();
    if bytes > max {
        return Err(AttentionError::TooLarge {
            arg,
            detail: format!(
                "shape {shape:?} needs {bytes} bytes in one binding; the device binds at most {max}"
            ),
        });
    }
    Ok(())
}

/// A whole f32 tensor's binding.
fn whole(t: &GpuTensor) -> wgpu::BindingResource<'_> {
    range(t.buffer(), 0, (t.len() as u64 * 4).max(4))
}

fn of_tensor(t: &GpuTensor) -> (&[usize], u64, Elem) {
    (t.shape(), t.len() as u64, Elem::F32)
}

/// The dense-layer kernels, built: one pipeline per (shape, W storage, vec4 reads) it
/// was prepared for.
pub(crate) struct LinearKernel {
    pub(super) shapes: Vec<LinearShape>,
    pub(super) pipes: Vec<((LinearShape, Elem, bool), Arc<KernelPipeline>)>,
}

/// What a prepared kernel must be able to run: W's storage type and whether x and W
/// can be read four elements at a time (see [`vec4_reads`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LinearNeed {
    pub elem: Elem,
    pub vec4: bool,
}

/// Whether a layer may read x and W four elements at a time: the head width of x and
/// K multiples of 4 (then every vec4 lies in one head and is aligned).
pub(crate) fn vec4_reads(x_layout: HeadLayout, inner: usize) -> bool {
    x_layout.dim.is_multiple_of(4) && inner.is_multiple_of(4)
}

impl LinearKernel {
    /// Builds (or finds cached) the pipelines for f32 weights of any width, every shape
    /// (the tuner's tests).
    #[cfg(test)]
    pub(crate) async fn prepare(ctx: &GpuContext) -> Result<Self> {
        let needs = [true, false].map(|vec4| LinearNeed {
            elem: Elem::F32,
            vec4,
        });
        Self::prepare_shapes(ctx, shapes(ctx), &needs).await
    }

    /// As [`LinearKernel::prepare_for_problems`], with the shapes given (as [`shapes`]
    /// orders them: by rows covered): tests run each kernel on any adapter that can.
    ///
    /// # Errors
    /// As [`LinearKernel::prepare_for_problems`]; [`AttentionError::Unsupported`] for a lanes shape
    /// on an adapter whose subgroups are not 8 fixed lanes, or no shape at all.
    pub(crate) async fn prepare_shapes(
        ctx: &GpuContext,
        shapes: Vec<LinearShape>,
        needs: &[LinearNeed],
    ) -> Result<Self> {
        if shapes.is_empty() {
            return Err(AttentionError::Unsupported(
                "the dense-layer kernel needs a shape".into(),
            ));
        }
        for s in &shapes {
            let fits = match *s {
                LinearShape::Tiled => true,
                LinearShape::Split { rows } => rows == 1 || rows == 4,
                LinearShape::Lanes {
                    row_groups,
                    col_sets,
                } => {
                    lanes_adapter(ctx)
                        && (1..=4).contains(&row_groups)
                        && (1..=2).contains(&col_sets)
                }
            };
            if !fits {
                return Err(AttentionError::Unsupported(format!(
                    "the dense-layer shape {s:?} does not fit this adapter"
                )));
            }
        }
        let mut pipes = Vec::new();
        for need in needs {
            if need.elem == Elem::F16 && !ctx.features.contains(wgpu::Features::SHADER_F16) {
                return Err(AttentionError::Unsupported(
                    "f16 weights need the adapter's shader-f16 feature".into(),
                ));
            }
            for &shape in &shapes {
                let key = (shape, need.elem, need.vec4);
                if pipes.iter().any(|(k, _)| *k == key) {
                    continue;
                }
                let spec = shape.spec(need.elem, need.vec4);
                pipes.push((key, pipeline(ctx, spec, &shape.constants()).await?));
            }
        }
        Ok(Self { shapes, pipes })
    }

    /// Records the layer into the recorder's open compute pass (nothing is recorded for zero rows).
    ///
    /// # Errors
    /// [`AttentionError::TooLarge`] for a tensor beyond one binding or a launch beyond the
    /// grid; [`AttentionError::Shape`] when a tensor is too small for its layout or a
    /// layout does not match W; a device error allocating.
    pub(crate) fn record(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder<'_>,
        call: &Linear<'_>,
    ) -> Result<()> {
        self.record_with(
            ctx,
            rec,
            call,
            (call.w.0, WeightsRef::F32(call.w.1)),
            Epilogue::default(),
        )
    }

    /// As [`LinearKernel::record`], with W given as `w` (f32 or f16; `call.w` is then
    /// not read) and the epilogue `epi` fused into the store.
    ///
    /// # Errors
    /// As [`LinearKernel::record`]; [`AttentionError::Unsupported`] when the kernel was
    /// not prepared for W's storage type and widths.
    pub(crate) fn record_with(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder<'_>,
        call: &Linear<'_>,
        w: (&'static str, WeightsRef<'_>),
        epi: Epilogue<'_>,
    ) -> Result<()> {
        self.record_shaped(ctx, rec, call, w, epi, None)
    }

    /// As [`LinearKernel::record_with`], in `shape` where one is given (one this kernel
    /// was prepared with), else in the shape tuned for the problem's class or, untuned,
    /// the first of the kernel's shapes that covers its rows.
    pub(crate) fn record_shaped(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder<'_>,
        call: &Linear<'_>,
        (w_arg, w): (&'static str, WeightsRef<'_>),
        epi: Epilogue<'_>,
        shape: Option<LinearShape>,
    ) -> Result<()> {
        let (x_arg, x, x_layout) = call.x;
        let (bias_arg, bias) = call.bias;
        let (y_arg, y, y_layout) = call.y;
        let [cols, inner] = <[usize; 2]>::try_from(w.shape()).map_err(|_| {
            AttentionError::shape(w_arg, format!("expected rank 2, got {:?}", w.shape()))
        })?;
        if call.rows == 0 || cols == 0 {
            return Ok(());
        }
        if inner == 0 {
            return Err(AttentionError::shape(w_arg, "has no columns (K = 0)"));
        }
        let rows = small(x_arg, "rows", call.rows)?;
        let (cols32, inner32) = (small(w_arg, "rows", cols)?, small(w_arg, "columns", inner)?);
        x_layout.check(x_arg, inner)?;
        y_layout.check(y_arg, cols)?;
        let need_y = y_layout.elements(rows.into());
        check(ctx, x_arg, of_tensor(x), x_layout.elements(rows.into()))?;
        let w_len = w.shape().iter().product::<usize>() as u64;
        check(
            ctx,
            w_arg,
            (w.shape(), w_len, w.elem()),
            cols as u64 * inner as u64,
        )?;
        check(ctx, bias_arg, of_tensor(bias), cols as u64)?;
        check(ctx, y_arg, of_tensor(y), need_y)?;
        let mut flags = if epi.gelu { FLAG_GELU } else { 0 };
        if let Some((arg, r)) = epi.residual {
            check(ctx, arg, of_tensor(r), need_y)?;
            if r.buffer() == y.buffer() {
                return Err(AttentionError::option(
                    arg,
                    "the residual may not share a buffer with the output",
                ));
            }
            flags |= FLAG_RESIDUAL;
        }
        let vec4 = vec4_reads(x_layout, inner);
        let class = LinearClass::new(rows, cols32, inner32, w.elem(), vec4);
        let shape = shape
            .or_else(|| ctx.memo.get::<LinearClass, LinearShape>(&class))
            .or_else(|| shape_for(&self.shapes, rows))
            .ok_or_else(|| {
                AttentionError::Unsupported("the dense-layer kernel has no shape".into())
            })?;
        let key = (shape, w.elem(), vec4);
        let pipe = self
            .pipes
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, p)| p)
            .ok_or_else(|| {
                AttentionError::Unsupported(format!(
                    "the dense-layer kernel was not prepared for {} weights{}",
                    w.elem().name(),
                    if vec4 {
                        ""
                    } else {
                        " of widths not a multiple of 4"
                    }
                ))
            })?;
        let params = LinearParams::new(
            (rows, cols32, inner32),
            shape.tile().1,
            (x_layout, y_layout),
            flags,
        );
        let (params_buffer, _) =
            buffers::uniform_array(ctx, "wgpu-attention linear params", &[params])?;
        // F16Weights buffers are allocated in whole 4-byte words.
        let w_bytes = (w_len * w.elem().bytes()).next_multiple_of(4).max(4);
        // Without a residual the binding is unused (the flag is off): y stands in, bound
        // read-only beside itself, which WebGPU forbids, so bias stands in instead.
        let residual = epi.residual.map_or(whole(bias), |(_, r)| whole(r));
        let group = bind_group(
            ctx,
            "linear",
            &pipe.layout,
            vec![
                range(
                    &params_buffer,
                    0,
                    std::mem::size_of::<LinearParams>() as u64,
                ),
                whole(x),
                range(w.buffer(), 0, w_bytes),
                whole(bias),
                residual,
                whole(y),
            ],
        );
        let (gx, gy) = grid(ctx, workgroups(shape, rows, cols32), y_arg)?;
        let pass = rec.pass();
        pass.set_pipeline(&pipe.pipeline);
        pass.set_bind_group(0, &group, &[]);
        pass.dispatch_workgroups(gx, gy, 1);
        Ok(())
    }
}
