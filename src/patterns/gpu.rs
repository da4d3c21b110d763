//! Patterns on the device: q and k uploaded, one pass of row stats, then the asked-for
//! reductions (patterns.wgsl), one submission and one readback.

use ndarray::{Array3, Array4, ArrayView4};

use crate::error::{AttentionError, Result};
use crate::gpu::device::buffers;
use crate::gpu::device::context::GpuContext;
use crate::gpu::device::readback::read_ranges;
use crate::gpu::device::scopes::ErrorScopes;
use crate::gpu::device::tensor::GpuTensor;
use crate::gpu::forward::io::{params_buffer, placeholder};
use crate::gpu::forward::upload;
use crate::gpu::kernels::dispatch::{bind_group, range};
use crate::gpu::kernels::params::Params;
use crate::gpu::kernels::patterns::{self, PatternParams, Stage};
use crate::gpu::kernels::pipelines::pipeline;
use crate::gpu::kernels::plan::{BindWindow, Chunk};
use crate::options::AttentionOptions;
use crate::patterns::output::{AttentionPatterns, PooledWeights};
use crate::patterns::request::{PatternOptions, PatternPlan};
use crate::problem::{validate, Problem};

/// One output's place in the result buffer: its element offset and shape.
struct Slot {
    arg: &'static str,
    offset: u64,
    shape: Vec<usize>,
}

impl Slot {
    fn len(&self) -> u64 {
        self.shape.iter().map(|&n| n as u64).product()
    }
}

/// Computes the attention patterns `ask` names for q and k under `opts` (scale, causal,
/// alignment, window, mask, key lengths), on the device, without the weights matrix:
/// device memory is q, k, the mask, the outputs and O(B·Hq·Lq) row stats.
///
/// Every value is exact against [`crate::patterns_reference`] within the bounds the
/// README gives for weights.
///
/// # Errors
/// The input errors of [`crate::validate`] (with v taken as shaped like k) and of
/// [`PatternOptions`]; [`AttentionError::TooLarge`] when q, k or the outputs exceed one
/// device binding (pool the window, or narrow it); [`AttentionError::Device`] when the
/// device fails.
pub async fn attention_patterns_async(
    ctx: &GpuContext,
    q: ArrayView4<'_, f32>,
    k: ArrayView4<'_, f32>,
    opts: &AttentionOptions<'_>,
    ask: &PatternOptions<'_>,
) -> Result<AttentionPatterns> {
    // CPU drivers may cap each invocation's loop iterations (llvmpipe before Mesa 25);
    // hardware runs every stage in one recording.
    let budget = (ctx.adapter_info().device_type == wgpu::DeviceType::Cpu)
        .then_some(patterns::CAPPED_ITERATIONS);
    patterns_within(ctx, (q, k), opts, ask, budget).await
}

/// [`attention_patterns_async`] with every invocation kept to `budget` loop iterations
/// per recording (None: one recording per stage), so that tests can slice small
/// problems as a capped driver slices long ones. Not part of the API.
#[doc(hidden)]
pub async fn attention_patterns_sliced_for_tests(
    ctx: &GpuContext,
    (q, k): (ArrayView4<'_, f32>, ArrayView4<'_, f32>),
    opts: &AttentionOptions<'_>,
    ask: &PatternOptions<'_>,
    budget: Option<u64>,
) -> Result<AttentionPatterns> {
    patterns_within(ctx, (q, k), opts, ask, budget).await
}

async fn patterns_within(
    ctx: &GpuContext,
    (q, k): (ArrayView4<'_, f32>, ArrayView4<'_, f32>),
    opts: &AttentionOptions<'_>,
    ask: &PatternOptions<'_>,
    budget: Option<u64>,
) -> Result<AttentionPatterns> {
    let v_shape = [k.shape()[0], k.shape()[1], k.shape()[2], k.shape()[3]];
    let p = validate(q.shape(), k.shape(), &v_shape, opts)?;
    let plan = PatternPlan::new(&p, opts, ask)?;
    let (slots, total) = layout(&p, &plan)?;
    let max = ctx.max_binding();
    for (arg, view) in [("q", &q), ("k", &k)] {
        let bytes = buffers::f32_bytes(arg, view.shape())?;
        if bytes > max {
            return Err(AttentionError::TooLarge {
                arg,
                detail: format!(
                    "patterns bind {arg} whole: {bytes} bytes exceed the {max}-byte binding limit"
                ),
            });
        }
    }
    check_result_size(&slots, total, max)?;
    let selected: Vec<u32> = plan.selected(&p).iter().map(|&bh| bh as u32).collect();
    let n_stat = if plan.stats_for_all() {
        p.batch * p.heads_q
    } else {
        selected.len()
    };
    let stats_bytes = n_stat as u64 * plan.rows.len() as u64 * 16;
    if stats_bytes > max {
        return Err(AttentionError::TooLarge {
            arg: "rows",
            detail: format!(
                "{stats_bytes} bytes of row statistics exceed the {max}-byte binding limit"
            ),
        });
    }

    let qt = GpuTensor::upload(ctx, "q", q.into_dyn())?;
    let kt = GpuTensor::upload(ctx, "k", k.into_dyn())?;
    let scopes = ErrorScopes::push(ctx);
    let mask = upload::mask(ctx, opts.mask.as_ref())?;
    let kv_lens = upload::kv_lens(ctx, opts.kv_lens)?;
    let params = Params::new(
        &p,
        &whole(&p, qt.buffer().size(), kt.buffer().size(), mask.as_ref()),
        false,
    );
    let (params_buf, _) = params_buffer(ctx, &[params])?;
    let pp = pattern_params(&plan, &slots, selected.len(), n_stat);
    let mut stages = vec![Stage::Stats];
    if plan.weights {
        stages.push(Stage::Weights);
    }
    if plan.pool.is_some() {
        stages.push(Stage::Pool);
    }
    if plan.column_sums {
        stages.push(Stage::ColumnSums);
    }
    // Every recording of every stage, in order, each with its slice of the work.
    let shape = (p.len_k as u64, p.dim as u64);
    let recordings: Vec<(Stage, PatternParams)> = stages
        .iter()
        .flat_map(|&st| {
            st.slices(&pp, shape, budget)
                .into_iter()
                .map(move |s| (st, s))
        })
        .collect();
    let all: Vec<PatternParams> = recordings.iter().map(|r| r.1).collect();
    let (pattern_buf, stride) = buffers::uniform_array(ctx, "wgpu-attention pattern", &all)?;
    let heads = buffers::with_contents(
        ctx,
        "wgpu-attention pattern heads",
        bytemuck::cast_slice(&selected),
        wgpu::BufferUsages::STORAGE,
    )?;
    let stats = buffers::empty(
        ctx,
        "wgpu-attention row stats",
        stats_bytes,
        wgpu::BufferUsages::STORAGE,
    )?;
    let result = buffers::empty(
        ctx,
        "wgpu-attention patterns",
        total * 4,
        wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
    )?;
    let unused_mask = placeholder(ctx)?;
    let unused_lens = placeholder(ctx)?;
    let mut pipes = Vec::new();
    for &stage in &stages {
        pipes.push((
            stage,
            pipeline(ctx, &patterns::SPEC, &stage.constants()).await?,
        ));
    }
    let layout = &pipes[0].1.layout;
    let groups: Vec<wgpu::BindGroup> = (0..recordings.len() as u64)
        .map(|n| {
            bind_group(
                ctx,
                "patterns",
                layout,
                vec![
                    range(&params_buf, 0, std::mem::size_of::<Params>() as u64),
                    range(
                        &pattern_buf,
                        n * stride,
                        std::mem::size_of::<PatternParams>() as u64,
                    ),
                    whole_binding(qt.buffer()),
                    whole_binding(kt.buffer()),
                    whole_binding(mask.as_ref().unwrap_or(&unused_mask)),
                    whole_binding(kv_lens.as_ref().unwrap_or(&unused_lens)),
                    whole_binding(&heads),
                    whole_binding(&stats),
                    whole_binding(&result),
                ],
            )
        })
        .collect();
    let mut encoder = ctx.device.create_command_encoder(&Default::default());
    {
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("wgpu-attention patterns"),
            timestamp_writes: None,
        });
        for ((stage, pp), group) in recordings.iter().zip(&groups) {
            let pipe = pipes
                .iter()
                .find(|(s, _)| s == stage)
                .map(|(_, pipe)| pipe)
                .ok_or_else(|| ctx.device_error("a patterns stage without its pipeline"))?;
            patterns::record(ctx, &mut pass, (pipe, group), *stage, pp)?;
        }
    }
    ctx.queue.submit([encoder.finish()]);
    scopes.pop(ctx, "computing attention patterns").await?;
    let ranges: Vec<(&wgpu::Buffer, u64, u64)> = slots
        .iter()
        .map(|s| (&result, s.offset * 4, s.len() * 4))
        .collect();
    let mut data = read_ranges(ctx, &ranges).await?.into_iter();
    let scratch_bytes = params_buf.size()
        + pattern_buf.size()
        + heads.size()
        + stats.size()
        + unused_mask.size()
        + unused_lens.size();
    let mut take = |n: &Slot| -> Result<Vec<f32>> {
        let v = data.next().unwrap_or_default();
        if v.len() as u64 != n.len() {
            return Err(ctx.device_error(format!("reading {}: short readback", n.arg)));
        }
        Ok(v)
    };
    let mut out = AttentionPatterns {
        weights: None,
        pooled: None,
        entropy: None,
        column_sums: None,
        scratch_bytes,
    };
    let mut pool_max = None;
    for s in &slots {
        let v = take(s)?;
        let sh = &s.shape;
        match s.arg {
            "entropy" => out.entropy = Some(array3(sh, v)?),
            "column_sums" => out.column_sums = Some(array3(sh, v)?),
            "weights" => out.weights = Some(array4(sh, v)?),
            "pool_max" => pool_max = Some(array4(sh, v)?),
            "cut" if v.first().is_some_and(|&x| x != 0.0) => return Err(loop_cap(&p, &plan)),
            "cut" => {}
            _ => {
                let (row_edges, col_edges) = plan.edges().unwrap_or_default();
                out.pooled = Some(PooledWeights {
                    max: pool_max.take().unwrap_or_default(),
                    mean: array4(sh, v)?,
                    row_edges,
                    col_edges,
                });
            }
        }
    }
    Ok(out)
}

/// Blocking form of [`attention_patterns_async`]. Native only.
///
/// ```
/// use ndarray::Array4;
/// use wgpu_attention::{attention_patterns, patterns_reference, AttentionOptions, GpuContext, PatternOptions};
///
/// let ctx = GpuContext::new()?;
/// let q = Array4::<f32>::from_shape_fn((1, 2, 40, 8), |(_, h, i, d)| ((h + i * d) % 7) as f32 * 0.3);
/// let opts = AttentionOptions { causal: true, ..Default::default() };
/// let ask = PatternOptions { heads: Some(&[1]), pool: Some(8), entropy: true, ..Default::default() };
/// let gpu = attention_patterns(&ctx, q.view(), q.view(), &opts, &ask)?;
/// let cpu = patterns_reference(q.view(), q.view(), &opts, &ask)?;
/// let (g, c) = (gpu.pooled.unwrap(), cpu.pooled.unwrap());
/// assert_eq!(g.mean.shape(), &[1, 1, 8, 8]);
/// assert!(g.mean.iter().zip(&c.mean).all(|(a, b)| (a - b).abs() < 1e-5));
/// # Ok::<(), wgpu_attention::AttentionError>(())
/// ```
///
/// # Errors
/// As [`attention_patterns_async`].
#[cfg(not(target_arch = "wasm32"))]
pub fn attention_patterns(
    ctx: &GpuContext,
    q: ArrayView4<'_, f32>,
    k: ArrayView4<'_, f32>,
    opts: &AttentionOptions<'_>,
    ask: &PatternOptions<'_>,
) -> Result<AttentionPatterns> {
    pollster::block_on(attention_patterns_async(ctx, q, k, opts, ask))
}

/// The error for a call whose loops the driver cut short.
fn loop_cap(p: &Problem, plan: &PatternPlan) -> AttentionError {
    AttentionError::TooLarge {
        arg: "rows",
        detail: format!(
            "this driver stops shader loops after a fixed count of iterations (llvmpipe before \
             Mesa 25 stops at 65,535), and these patterns (Lk {}, D {}, a window of {} x {}) \
             loop longer; narrow the window of rows and cols, or pool into more cells",
            p.len_k,
            p.dim,
            plan.rows.len(),
            plan.cols.len()
        ),
    }
}

fn array3(shape: &[usize], v: Vec<f32>) -> Result<Array3<f32>> {
    Array3::from_shape_vec((shape[0], shape[1], shape[2]), v)
        .map_err(|e| AttentionError::Device(format!("patterns readback: {e}")))
}

fn array4(shape: &[usize], v: Vec<f32>) -> Result<Array4<f32>> {
    Array4::from_shape_vec((shape[0], shape[1], shape[2], shape[3]), v)
        .map_err(|e| AttentionError::Device(format!("patterns readback: {e}")))
}

/// Where each asked-for output sits in the one result buffer, and its total elements.
fn layout(p: &Problem, plan: &PatternPlan) -> Result<(Vec<Slot>, u64)> {
    let (b, hq, ns) = (p.batch, p.heads_q, plan.heads.len());
    let (nr, nc) = (plan.rows.len(), plan.cols.len());
    let mut slots = Vec::new();
    let mut at = 0u64;
    let mut push = |arg: &'static str, shape: Vec<usize>| {
        let s = Slot {
            arg,
            offset: at,
            shape,
        };
        at = at.saturating_add(s.len());
        slots.push(s);
    };
    if plan.entropy {
        push("entropy", vec![b, hq, nr]);
    }
    if plan.weights {
        push("weights", vec![b, ns, nr, nc]);
    }
    if let Some((pr, pc)) = plan.pool {
        push("pool_max", vec![b, ns, pr, pc]);
        push("pool_mean", vec![b, ns, pr, pc]);
    }
    if plan.column_sums {
        push("column_sums", vec![b, hq, nc]);
    }
    push("cut", vec![1]);
    Ok((slots, at))
}

/// Refuses outputs beyond one binding, naming the largest and how to shrink it.
fn check_result_size(slots: &[Slot], total: u64, max: u64) -> Result<()> {
    let bytes = total.saturating_mul(4);
    if bytes <= max && total < u64::from(u32::MAX) {
        return Ok(());
    }
    let biggest = slots
        .iter()
        .max_by_key(|s| s.len())
        .map_or("weights", |s| s.arg);
    let (arg, hint) = match biggest {
        "weights" => ("weights", "ask for a pooled map (pool: Some(P), --pool P), fewer heads, or a smaller window of rows and cols"),
        "pool_max" | "pool_mean" => ("pool", "ask for fewer cells or heads"),
        other => (other, "narrow the window of rows and cols"),
    };
    Err(AttentionError::TooLarge {
        arg,
        detail: format!(
            "the patterns need {bytes} bytes, above the {max}-byte binding limit; {hint}"
        ),
    })
}

/// Parameters of the whole problem as one chunk with every tensor bound from its start.
fn whole(p: &Problem, q_bytes: u64, k_bytes: u64, mask: Option<&wgpu::Buffer>) -> Chunk {
    let at0 = |size: u64| BindWindow {
        offset: 0,
        size,
        base_elem: 0,
    };
    Chunk {
        bh_start: 0,
        bh_count: p.batch * p.heads_q,
        row_start: 0,
        row_count: p.len_q,
        q: at0(q_bytes),
        k: at0(k_bytes),
        v: at0(4),
        out: at0(4),
        lse: at0(4),
        mask: mask.map(|m| at0(m.size())),
    }
}

fn pattern_params(
    plan: &PatternPlan,
    slots: &[Slot],
    n_sel: usize,
    n_stat: usize,
) -> PatternParams {
    let off = |arg: &str| {
        slots
            .iter()
            .find(|s| s.arg == arg)
            .map_or(0, |s| s.offset as u32)
    };
    let mut outputs = 0;
    if plan.entropy {
        outputs |= patterns::OUT_ENTROPY;
    }
    if plan.weights {
        outputs |= patterns::OUT_WEIGHTS;
    }
    if plan.pool.is_some() {
        outputs |= patterns::OUT_POOL;
    }
    if plan.column_sums {
        outputs |= patterns::OUT_COLSUM;
    }
    let (pr, pc) = plan.pool.unwrap_or((1, 1));
    PatternParams {
        n_sel: n_sel as u32,
        n_stat: n_stat as u32,
        stats_all: u32::from(plan.stats_for_all()),
        outputs,
        row_lo: plan.rows.start as u32,
        row_count: plan.rows.len() as u32,
        col_lo: plan.cols.start as u32,
        col_count: plan.cols.len() as u32,
        pool_rows: pr as u32,
        pool_cols: pc as u32,
        off_entropy: off("entropy"),
        off_weights: off("weights"),
        off_max: off("pool_max"),
        off_mean: off("pool_mean"),
        off_colsum: off("column_sums"),
        off_cut: slots
            .iter()
            .find(|s| s.arg == "cut")
            .map_or(0, |s| s.offset as u32),
        ..PatternParams::default()
    }
}

fn whole_binding(b: &wgpu::Buffer) -> wgpu::BindingResource<'_> {
    range(b, 0, b.size())
}
