//! Choosing override constants per adapter and shape class. With tuning on, the first
//! time a context meets a class a few candidates that fit the device are timed on a
//! small proxy of the problem and the fastest is kept in the context. Every candidate
//! computes the same result; only speed differs.
//!
//! Tuning costs a pipeline build per candidate (seconds on software drivers), so it is
//! off by default: [`GpuContext::set_autotune`] or `WGPU_ATTENTION_TUNE=1` in the
//! environment turns it on (`wgpu-attention bench` does). Untuned, a class gets the
//! first fitting candidate from the adapter type's preferred order. On the web tuning
//! never runs (no blocking clock).

use crate::error::{AttentionError, Result};
use crate::gpu::device::context::GpuContext;
use crate::gpu::device::memo::Memoizable;
use crate::gpu::kernels::elem::Elem;
// Candidates become routes only to be timed, which the web cannot do.
#[cfg(not(target_arch = "wasm32"))]
use crate::gpu::forward::resolve;
#[cfg(not(target_arch = "wasm32"))]
use crate::gpu::forward::route::Route;
use crate::gpu::kernels::decode::DecodeCandidate;
use crate::gpu::kernels::decode_subgroup::{DecodeChoice, SubgroupDecodeCandidate};
use crate::gpu::kernels::fused::{vec4s, FusedConfig, FusedKind};
use crate::gpu::kernels::fused_lanes::{LanesShape, SLOW_COMPILE_FROM_LEN};
use crate::gpu::kernels::fused_tiled::TiledShape;
use crate::gpu::kernels::subgroups::subgroup_sizes;
use crate::options::FusedKernel;
use crate::problem::Problem;

const fn fused(wg: u32, rows: u32, keys: u32) -> FusedConfig {
    FusedConfig {
        wg,
        rows,
        keys,
        kind: FusedKind::Rows,
    }
}

/// A fused_tiled.wgsl configuration: key groups, vec4s of D per chunk (0: Q resident),
/// subgroup reductions.
const fn tiled(kg: u32, dc4: u32, subgroups: bool, row_fast: bool) -> FusedConfig {
    FusedConfig {
        wg: 16 * kg,
        rows: 4,
        keys: 4 * kg,
        kind: FusedKind::Tiled(TiledShape {
            kg,
            dc4,
            subgroups,
            row_fast,
        }),
    }
}

/// A fused_lanes.wgsl configuration: the subgroup size it is built for (one subgroup per
/// workgroup, keys per block) and query rows per invocation.
const fn lanes(sg: u32, rows: u32) -> FusedConfig {
    FusedConfig {
        wg: sg,
        rows,
        keys: sg,
        kind: FusedKind::Lanes(LanesShape { sg, rows }),
    }
}

/// Prefill candidates, most generally good first: the tiled kernel (Q resident where
/// workgroup memory allows, else staged in chunks of D; the last with half the keys per
/// tile for devices with 16 KiB of workgroup memory), then the row kernel. Its later,
/// smaller tiles exist for large head dims on devices with little workgroup memory.
pub(crate) const FUSED_CANDIDATES: &[FusedConfig] = &[
    tiled(8, 0, true, false),
    tiled(8, 0, false, false),
    tiled(8, 8, true, false),
    tiled(8, 4, false, false),
    tiled(4, 4, false, false),
    tiled(8, 8, false, true),
    tiled(8, 4, false, true),
    tiled(4, 4, false, true),
    fused(64, 1, 32),
    fused(32, 2, 32),
    fused(16, 4, 32),
    fused(32, 4, 16),
    fused(64, 1, 16),
    fused(64, 1, 8),
    fused(32, 1, 4),
    lanes(8, 8),
    lanes(8, 4),
    lanes(8, 16),
];

const fn decode(
    wg: u32,
    key_groups: u32,
    q_private: bool,
    prefetch_v: bool,
    workgroups: u32,
) -> DecodeCandidate {
    DecodeCandidate {
        wg,
        key_groups,
        q_private,
        prefetch_v,
        workgroups,
    }
}

/// Decode candidates: invocations (and keys per tile), key groups for weights·V, q rows
/// in private memory, V prefetching, and how many workgroups to split the keys for.
pub(crate) const DECODE_CANDIDATES: &[DecodeCandidate] = &[
    decode(64, 4, false, false, 512),
    decode(64, 4, false, true, 512),
    decode(128, 8, false, false, 1024),
    decode(64, 1, false, false, 256),
    decode(64, 1, true, true, 64),
    decode(32, 1, true, true, 64),
    decode(64, 1, true, false, 64),
    decode(32, 2, false, false, 256),
];

const fn subgroup(wg: u32, d_split: u32, workgroups: u32) -> SubgroupDecodeCandidate {
    SubgroupDecodeCandidate {
        wg,
        d_split,
        workgroups,
    }
}

/// Subgroup decode candidates (adapters with subgroups): invocations, lanes per key, and
/// how many workgroups to split the keys for. Each fits only where `d_split` divides the
/// smallest subgroup size and the workgroup is a multiple of the largest; the later ones
/// serve adapters whose subgroups are 4 wide, or up to 128.
pub(crate) const SUBGROUP_DECODE_CANDIDATES: &[SubgroupDecodeCandidate] = &[
    subgroup(128, 8, 1024),
    subgroup(64, 4, 512),
    subgroup(256, 16, 1024),
    subgroup(64, 8, 64),
    subgroup(64, 4, 64),
    subgroup(128, 4, 512),
    subgroup(256, 4, 1024),
];

/// The candidates CPU adapters (software rasterisers) do best with, measured on
/// lavapipe, where every lane's load from memory is its own scalar load and a subgroup
/// broadcast is a register shuffle, named by value so that reordering the candidate
/// tables cannot change what they mean (`cpu_preferences_name_candidates` checks that
/// each is in its table). Untuned: the tiled kernel with row groups on neighbouring
/// invocations, then the row kernel with many rows per invocation. For decoding: q rows in private memory, V prefetched, and few key
/// ranges (few cores to fill). The tuner times the first four that fit; untuned calls
/// take the first. The tiled shapes come first: as fast as the row kernel's best on
/// lavapipe and a quarter of its compile time (measured with an empty shader cache, the
/// demo's first call: 2.3 s of CPU against 5.9 s).
const FUSED_CPU_FIRST: &[FusedConfig] = &[
    tiled(8, 8, false, true),
    tiled(8, 4, false, true),
    tiled(4, 4, false, true),
    fused(16, 4, 32),
    fused(32, 4, 16),
    lanes(8, 4),
    lanes(8, 8),
];
/// When tuning: the lanes kernel first (4 rows per invocation, the quicker to compile,
/// then 8 and 16), then [`FUSED_CPU_FIRST`]. It is several times the others' speed on
/// lavapipe, but its unrolled source takes the driver about 11 s (4 rows per invocation)
/// or 38 s (8 rows) to compile per head-dim class at D = 64 the first time (1 and 2.5 s
/// once in Mesa's disk cache), against a second for the row kernel, and its 16-row shape
/// minutes (timed only for long problems, `LanesShape::worth_timing`). Tuning pays that
/// once per class by choice; an untuned call never does, so a first call stays quick.
/// (More rows per invocation share each K and V load among more rows, and loads are what
/// lavapipe is slowest at.) Only the lanes shapes built for the adapter's subgroup size
/// fit, and only where its subgroups are fixed (not on the web, nor the GL backend).
const FUSED_CPU_TUNING_FIRST: &[FusedConfig] = &[
    lanes(8, 4),
    lanes(8, 8),
    lanes(8, 16),
    fused(16, 4, 32),
    fused(32, 4, 16),
    tiled(8, 8, false, true),
    tiled(8, 4, false, true),
    tiled(4, 4, false, true),
];
const DECODE_CPU_FIRST: &[DecodeCandidate] = &[
    decode(64, 1, true, true, 64),
    decode(32, 1, true, true, 64),
    decode(64, 1, true, false, 64),
];
/// CPU adapters have few cores to fill: few key ranges.
const SUBGROUP_DECODE_CPU_FIRST: &[SubgroupDecodeCandidate] =
    &[subgroup(64, 8, 64), subgroup(64, 4, 64)];

/// `list` in this adapter's preferred order: on CPU adapters the members of `cpu_first`
/// first, in its order, then the rest in `list`'s.
fn ordered<T: Copy + PartialEq>(ctx: &GpuContext, list: &[T], cpu_first: &[T]) -> Vec<T> {
    if ctx.adapter_info().device_type != wgpu::DeviceType::Cpu {
        return list.to_vec();
    }
    let first = cpu_first.iter().filter(|c| list.contains(c)).copied();
    let rest = list.iter().filter(|c| !cpu_first.contains(c)).copied();
    first.chain(rest).collect()
}

/// Candidates timed per class, at most.
const TIMED: usize = 4;
/// Decode candidates of the kernel an adapter type does not prefer, timed besides.
const OTHER_DECODE_TIMED: usize = 2;

/// What a tuning decision depends on besides the adapter (a context has one).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ClassKey {
    decode: bool,
    kernel: FusedKernel,
    elem: Elem,
    dim4: u32,
    dim_v4: u32,
    group: usize,
    causal: bool,
    len_q: u8,
    len_k: u8,
}

/// Length classes of a tuning decision. One boundary is where the tuner starts timing
/// the lanes kernel's slowest-compiling shapes, so that what a class times never depends
/// on which of its problems came first.
fn bucket(n: usize) -> u8 {
    match n {
        0..=16 => 0,
        17..=256 => 1,
        257..SLOW_COMPILE_FROM_LEN => 2,
        SLOW_COMPILE_FROM_LEN..=4096 => 3,
        _ => 4,
    }
}

impl ClassKey {
    fn new(p: &Problem, elem: Elem, decode: bool, ctx_kernel: FusedKernel) -> Self {
        Self {
            decode,
            kernel: ctx_kernel,
            elem,
            dim4: vec4s(p.dim),
            dim_v4: vec4s(p.dim_v),
            group: p.group().min(16),
            causal: p.causal,
            len_q: bucket(p.len_q),
            len_k: bucket(p.len_k),
        }
    }
}

fn none_fits(kernel: &str, p: &Problem) -> AttentionError {
    AttentionError::TooLarge {
        arg: "q",
        detail: format!(
            "no {kernel} configuration fits this device's workgroup limits for D {} and Dv {}",
            p.dim, p.dim_v
        ),
    }
}

/// One configuration to time.
#[derive(Debug, Clone, Copy)]
// The web has no timing (see `timing` below), so nothing reads the configurations there.
#[cfg_attr(target_arch = "wasm32", allow(dead_code))]
enum Candidate {
    Fused(FusedConfig),
    Decode(DecodeChoice),
}

#[cfg(not(target_arch = "wasm32"))]
impl Candidate {
    /// This configuration made into a route for `p` (see `forward/resolve.rs`).
    async fn prepare(self, ctx: &GpuContext, p: &Problem, elem: Elem) -> Result<Route> {
        match self {
            Candidate::Decode(d) => resolve::decode(ctx, p, elem, d).await,
            Candidate::Fused(f) => resolve::fused(ctx, p, elem, f).await,
        }
    }
}

/// The first of `fitting` (the adapter's preferred order, already cut to what fits), or
/// with tuning on the fastest of them, remembered in `memo` under the problem's class.
async fn choose<T: Copy + Memoizable, K: Eq + std::hash::Hash + Memoizable>(
    ctx: &GpuContext,
    p: &Problem,
    elem: Elem,
    key: K,
    fitting: Vec<T>,
    (kernel, wrap): (&str, fn(T) -> Candidate),
) -> Result<T> {
    let first = *fitting.first().ok_or_else(|| none_fits(kernel, p))?;
    let chosen = if !ctx.autotune() || fitting.len() == 1 {
        first
    } else {
        let candidates: Vec<Candidate> = fitting.iter().copied().map(wrap).collect();
        let index = timing::fastest_index(ctx, p, elem, &candidates).await?;
        index.and_then(|i| fitting.get(i).copied()).unwrap_or(first)
    };
    ctx.memo.insert(key, chosen);
    Ok(chosen)
}

/// The fused configuration for `p` on this context.
///
/// # Errors
/// [`AttentionError::TooLarge`] when no candidate fits the device; device errors while
/// timing.
pub(crate) async fn fused_config(ctx: &GpuContext, p: &Problem, elem: Elem) -> Result<FusedConfig> {
    let kernel = ctx.fused_kernel();
    let key = ClassKey::new(p, elem, false, kernel);
    if let Some(c) = ctx.memo.get::<ClassKey, FusedConfig>(&key) {
        return Ok(c);
    }
    let cpu_first = if ctx.autotune() {
        FUSED_CPU_TUNING_FIRST
    } else {
        FUSED_CPU_FIRST
    };
    let all: Vec<FusedConfig> = ordered(ctx, FUSED_CANDIDATES, cpu_first)
        .into_iter()
        .filter(|c| c.fits(ctx, p) && c.worth_timing(p))
        .collect();
    let wanted = |c: &FusedConfig| kernel == FusedKernel::Auto || c.kind.kernel() == kernel;
    let mut fitting: Vec<FusedConfig> = all.iter().copied().filter(wanted).take(TIMED).collect();
    // Forced onto the tiled kernel where none of its configurations fits: the row kernel.
    if fitting.is_empty() {
        fitting = all.into_iter().take(TIMED).collect();
    }
    choose(ctx, p, elem, key, fitting, ("fused", Candidate::Fused)).await
}

/// Forces the subgroup decode kernel on `ctx` (see [`decode_config`]): with `d_split`
/// lanes per key, or with the first candidate that fits when `None`.
pub(crate) fn force_subgroup_decode(ctx: &GpuContext, d_split: Option<u32>) {
    ctx.memo.insert(ForcedSubgroupDecode, d_split.unwrap_or(0));
}

/// The key of the forcing in the memo; its value is `d_split`, 0 for any.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct ForcedSubgroupDecode;

/// The subgroup decode kernel asked for, if any: by [`force_subgroup_decode`] on this
/// context (`Some(0)` is any width), or by `subgroup-decode` among the comma-separated
/// names of `WGPU_ATTENTION_KERNEL` for every context whose device has subgroups (the
/// others keep decode.wgsl, so a whole test suite can run with it set).
fn forced_subgroup_decode(ctx: &GpuContext) -> Option<u32> {
    if let Some(d) = ctx
        .memo
        .get::<ForcedSubgroupDecode, u32>(&ForcedSubgroupDecode)
    {
        return Some(d);
    }
    let named = std::env::var("WGPU_ATTENTION_KERNEL")
        .is_ok_and(|v| v.split(',').any(|k| k.trim() == "subgroup-decode"));
    (named && subgroup_sizes(ctx).is_some()).then_some(0)
}

/// The decode configuration for `p` on this context. Where the adapter has subgroups,
/// the subgroup kernel's candidates come first on GPUs and after the others on CPU
/// adapters (both are timed when tuning is on).
///
/// # Errors
/// As [`fused_config`]; [`AttentionError::Unsupported`] when the subgroup kernel is
/// forced and the adapter has no subgroups.
pub(crate) async fn decode_config(
    ctx: &GpuContext,
    p: &Problem,
    elem: Elem,
) -> Result<DecodeChoice> {
    if let Some(d_split) = forced_subgroup_decode(ctx) {
        return forced_decode(ctx, p, elem, d_split).await;
    }
    let key = ClassKey::new(p, elem, true, FusedKernel::Auto);
    if let Some(c) = ctx.memo.get::<ClassKey, DecodeChoice>(&key) {
        return Ok(c);
    }
    let fits = |c: &DecodeChoice| c.fits(ctx, p, elem);
    let lanes = ordered(ctx, DECODE_CANDIDATES, DECODE_CPU_FIRST)
        .into_iter()
        .map(DecodeChoice::Lanes)
        .filter(fits);
    let subgroups = ordered(ctx, SUBGROUP_DECODE_CANDIDATES, SUBGROUP_DECODE_CPU_FIRST)
        .into_iter()
        .map(DecodeChoice::Subgroup)
        .filter(fits);
    let fitting = if ctx.adapter_info().device_type == wgpu::DeviceType::Cpu {
        let other = subgroups.take(OTHER_DECODE_TIMED);
        lanes.take(TIMED).chain(other).collect()
    } else {
        let other = lanes.take(OTHER_DECODE_TIMED);
        subgroups.take(TIMED).chain(other).collect()
    };
    choose(ctx, p, elem, key, fitting, ("decode", Candidate::Decode)).await
}

/// A class whose decode kernel is forced to be the subgroup one, remembered apart.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ForcedClass(ClassKey);

/// The forced subgroup decode kernel: one of `d_split` lanes per key in a workgroup of
/// at least 64 lanes, or, for `d_split` 0, the subgroup candidates that fit in the
/// adapter's order (timed when tuning is on).
async fn forced_decode(
    ctx: &GpuContext,
    p: &Problem,
    elem: Elem,
    d_split: u32,
) -> Result<DecodeChoice> {
    let (_, largest) = subgroup_sizes(ctx).ok_or_else(|| {
        AttentionError::Unsupported(format!(
            "the subgroup decode kernel was asked for, and adapter {:?} has no subgroups",
            ctx.adapter_info().name
        ))
    })?;
    if d_split != 0 {
        return Ok(DecodeChoice::Subgroup(subgroup(
            largest.max(64),
            d_split,
            256,
        )));
    }
    let key = ForcedClass(ClassKey::new(p, elem, true, FusedKernel::Auto));
    if let Some(c) = ctx.memo.get::<ForcedClass, DecodeChoice>(&key) {
        return Ok(c);
    }
    let fitting = ordered(ctx, SUBGROUP_DECODE_CANDIDATES, SUBGROUP_DECODE_CPU_FIRST)
        .into_iter()
        .map(DecodeChoice::Subgroup)
        .filter(|c| c.fits(ctx, p, elem))
        .take(TIMED)
        .collect();
    let wrap: fn(DecodeChoice) -> Candidate = Candidate::Decode;
    choose(ctx, p, elem, key, fitting, ("subgroup decode", wrap)).await
}

#[cfg(not(target_arch = "wasm32"))]
mod timing {
    //! Timing candidates on a proxy problem: the same head dims, group size and masking
    //! rule, few K/V heads, lengths capped so that a run takes milliseconds.

    use std::time::Instant;

    use super::*;
    use crate::gpu::device::timer::Timer;
    use crate::gpu::forward::io::Recording;
    use crate::gpu::forward::zero_run::{plain_problem, ZeroRun};

    /// Rounds over all candidates after one untimed warm-up each (which compiles the
    /// pipeline): at least MIN_ROUNDS, more while the rounds together took under
    /// MIN_TOTAL_MS, at most MAX_ROUNDS. Candidates take turns within a round, so a burst
    /// of load from elsewhere slows them alike; each keeps its fastest run.
    const MIN_ROUNDS: usize = 3;
    const MAX_ROUNDS: usize = 12;
    const MIN_TOTAL_MS: f64 = 40.0;

    /// Decoding reads every key once, so its speed depends on whether K and V fit in
    /// cache: its proxy keeps up to 8 K/V heads of up to 8,192 keys (32 MiB in f32 at
    /// D = 64, past the last-level cache of most CPUs), where one head would fit.
    fn proxy(p: &Problem, decode: bool) -> Problem {
        let g = p.group().min(8);
        let (hkv, lq, lk) = if decode {
            (p.heads_kv.min(8), p.len_q, p.len_k.min(8192))
        } else {
            // Enough query rows and heads for several workgroups per core even with the
            // largest tiles (a proxy of one workgroup would leave a CPU adapter's other
            // cores idle and favour the smallest tile).
            (p.heads_kv.min(2), p.len_q.min(512), p.len_k.min(512))
        };
        // Top-left or bottom-right alignment, as `p` has it.
        let pos_offset = if p.pos_offset == 0 {
            0
        } else {
            lk as i64 - lq as i64
        };
        plain_problem(
            [1, hkv * g, lq, p.dim],
            [hkv, lk, p.dim_v],
            p.causal,
            pos_offset,
            false,
        )
    }

    /// Submits `encoder` (its timed work between `timer`'s marks) and times it.
    async fn time_run(
        ctx: &GpuContext,
        timer: Option<&Timer>,
        mut encoder: wgpu::CommandEncoder,
    ) -> Result<f64> {
        if let Some(t) = timer {
            t.stop(&mut encoder);
        }
        let started = Instant::now();
        ctx.queue.submit([encoder.finish()]);
        ctx.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| AttentionError::Device(format!("waiting for the device: {e}")))?;
        match timer {
            Some(t) => t.read_ms(ctx).await,
            None => Ok(started.elapsed().as_secs_f64() * 1e3),
        }
    }

    /// Index of the fastest of `candidates`, all of one kind.
    pub(super) async fn fastest_index(
        ctx: &GpuContext,
        p: &Problem,
        elem: Elem,
        candidates: &[Candidate],
    ) -> Result<Option<usize>> {
        let is_decode = matches!(candidates.first(), Some(Candidate::Decode(_)));
        let pp = proxy(p, is_decode);
        let zero = ZeroRun::new(ctx, "wgpu-attention tuning", &pp, elem, false)?;
        let (inputs, outputs) = (zero.inputs(), zero.outputs());
        let timer = Timer::new(ctx)?;
        // Decided before anything is timed: the timed runs record exactly what a call
        // with that configuration records.
        let mut routes = Vec::with_capacity(candidates.len());
        for &candidate in candidates {
            routes.push(candidate.prepare(ctx, &pp, elem).await?);
        }
        let record = |route: &Route| {
            let mut encoder = ctx.device.create_command_encoder(&Default::default());
            if let Some(t) = &timer {
                t.start(&mut encoder);
            }
            let mut r = Recording {
                ctx,
                encoder: &mut encoder,
                p: &pp,
                inputs: &inputs,
                outputs: &outputs,
            };
            route.record(&mut r)?;
            Ok::<_, AttentionError>(encoder)
        };
        // One untimed run each first.
        for route in &routes {
            time_run(ctx, timer.as_ref(), record(route)?).await?;
        }
        let mut fastest = vec![f64::INFINITY; candidates.len()];
        let mut total = 0.0;
        for round in 0..MAX_ROUNDS {
            if round >= MIN_ROUNDS && total >= MIN_TOTAL_MS {
                break;
            }
            for (i, route) in routes.iter().enumerate() {
                let ms = time_run(ctx, timer.as_ref(), record(route)?).await?;
                total += ms;
                if let Some(f) = fastest.get_mut(i) {
                    *f = f.min(ms);
                }
            }
        }
        let best = fastest
            .iter()
            .enumerate()
            .min_by(|a, b| a.1.total_cmp(b.1))
            .map(|(i, &ms)| (ms, i));
        Ok(best.map(|(_, i)| i))
    }
}

#[cfg(target_arch = "wasm32")]
mod timing {
    //! No blocking clock on the web: the first fitting candidate is used.

    use super::*;

    pub(super) async fn fastest_index(
        _: &GpuContext,
        _: &Problem,
        _: Elem,
        _: &[Candidate],
    ) -> Result<Option<usize>> {
        Ok(None)
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    //! Every candidate the tuner may pick computes the reference's result.

    use ndarray::Array4;

    use super::*;
    use crate::gpu::device::outputs::GpuOutputs;
    use crate::gpu::device::tensor::GpuTensor;
    use crate::gpu::forward::io::{ForwardInputs, ForwardOutputs, Recording};
    use crate::options::{Alignment, AttentionOptions};
    use crate::problem::validate;
    use crate::reference::attention_reference;

    fn data(shape: (usize, usize, usize, usize), seed: usize) -> Array4<f32> {
        Array4::from_shape_fn(shape, |(b, h, i, d)| {
            let x = (b * 7919 + h * 104_729 + i * 31 + d * 17 + seed * 13) % 97;
            x as f32 / 48.5 - 1.0
        })
    }

    fn run(ctx: &GpuContext, c: Candidate, (lq, lk): (usize, usize), (d, dv): (usize, usize)) {
        let (q, k, v) = (
            data((2, 4, lq, d), 1),
            data((2, 2, lk, d), 2),
            data((2, 2, lk, dv), 3),
        );
        let lens = [lk as u32, (lk as u32).div_ceil(2)];
        let opts = AttentionOptions {
            causal: true,
            alignment: Alignment::BottomRight,
            kv_lens: Some(&lens),
            return_lse: true,
            ..Default::default()
        };
        let p = validate(q.shape(), k.shape(), v.shape(), &opts).unwrap();
        let up = |a: &Array4<f32>| GpuTensor::from_array(ctx, a.view().into_dyn()).unwrap();
        let (qt, kt, vt) = (up(&q), up(&k), up(&v));
        let outputs = GpuOutputs::for_problem(ctx, &p).unwrap();
        let kv_lens = crate::gpu::forward::upload::kv_lens(ctx, opts.kv_lens).unwrap();
        let inputs = ForwardInputs {
            q: qt.buffer(),
            k: kt.buffer(),
            v: vt.buffer(),
            mask: None,
            kv_lens: kv_lens.as_ref(),
        };
        let mut enc = ctx.device.create_command_encoder(&Default::default());
        if let Candidate::Fused(f) = c {
            assert!(f.fits(ctx, &p), "fused candidate {f:?} does not fit");
        }
        let forward = ForwardOutputs::of(&outputs, &p);
        let route = pollster::block_on(c.prepare(ctx, &p, Elem::F32)).unwrap();
        let mut r = Recording {
            ctx,
            encoder: &mut enc,
            p: &p,
            inputs: &inputs,
            outputs: &forward,
        };
        route.record(&mut r).unwrap();
        ctx.queue.submit([enc.finish()]);
        let got = pollster::block_on(outputs.read_async(ctx)).unwrap();
        let want = attention_reference(q.view(), k.view(), v.view(), &opts).unwrap();
        for (what, g, w) in [
            (
                "out",
                got.out.iter().collect::<Vec<_>>(),
                want.out.iter().collect::<Vec<_>>(),
            ),
            (
                "lse",
                got.lse.as_ref().unwrap().iter().collect(),
                want.lse.as_ref().unwrap().iter().collect(),
            ),
        ] {
            for (n, (&a, &b)) in g.iter().zip(&w).enumerate() {
                let ok = a == b || (a - b).abs() <= 2e-5 + 1e-4 * b.abs();
                assert!(
                    ok,
                    "candidate {c:?} Lq {lq} Lk {lk} D {d} Dv {dv}: {what}[{n}] = {a}, want {b}"
                );
            }
        }
    }

    /// The CPU preference lists name candidates by value: each must be in its table, or
    /// a change to the table would silently drop it from the adapter's order.
    #[test]
    fn cpu_preferences_name_candidates() {
        for list in [FUSED_CPU_FIRST, FUSED_CPU_TUNING_FIRST] {
            for c in list {
                assert!(
                    FUSED_CANDIDATES.contains(c),
                    "{c:?} is not a fused candidate"
                );
            }
        }
        for c in DECODE_CPU_FIRST {
            assert!(
                DECODE_CANDIDATES.contains(c),
                "{c:?} is not a decode candidate"
            );
        }
        for c in SUBGROUP_DECODE_CPU_FIRST {
            assert!(
                SUBGROUP_DECODE_CANDIDATES.contains(c),
                "{c:?} is not a subgroup decode candidate"
            );
        }
        // Untuned calls never start with the slow-compiling lanes kernel.
        assert!(!FUSED_CPU_FIRST[..FUSED_CPU_FIRST.len() - 2]
            .iter()
            .any(|c| matches!(c.kind, FusedKind::Lanes(_))));
    }

    /// The problem every fused candidate runs in the tests below.
    fn candidate_problem() -> Problem {
        validate(
            &[2, 4, 37, 20],
            &[2, 2, 70, 20],
            &[2, 2, 70, 23],
            &Default::default(),
        )
        .unwrap()
    }

    #[test]
    fn every_candidate_matches_the_reference() {
        let ctx = GpuContext::new().expect("no GPU adapter");
        // The lanes kernel's candidates run in the slow tier below.
        for &f in FUSED_CANDIDATES {
            if !matches!(f.kind, FusedKind::Lanes(_)) {
                run(&ctx, Candidate::Fused(f), (37, 70), (20, 23));
            }
        }
        // Head dims that read K and V one element at a time, and four at a time.
        for &d in DECODE_CANDIDATES {
            run(
                &ctx,
                Candidate::Decode(DecodeChoice::Lanes(d)),
                (3, 300),
                (20, 23),
            );
            run(
                &ctx,
                Candidate::Decode(DecodeChoice::Lanes(d)),
                (5, 300),
                (16, 8),
            );
        }
    }

    /// Every lanes candidate built for this adapter's subgroup size; on Mesa 22 their
    /// unrolled sources take the driver minutes to compile with a cold shader cache.
    #[test]
    #[ignore = "slow tier: the lanes kernel compiles for minutes cold; .ci/run runs it"]
    fn every_lanes_candidate_matches_the_reference() {
        let ctx = GpuContext::new().expect("no GPU adapter");
        let p = candidate_problem();
        let mut lanes_ran = 0;
        for &f in FUSED_CANDIDATES {
            // The lanes kernel is built per subgroup size: only the adapter's own fits.
            if matches!(f.kind, FusedKind::Lanes(_)) && f.fits(&ctx, &p) {
                lanes_ran += 1;
                run(&ctx, Candidate::Fused(f), (37, 70), (20, 23));
            }
        }
        // Where the subgroup size is fixed at one the kernel is built for, it ran, and
        // CPU adapters take it first when tuning.
        if let Some(sg) = crate::gpu::kernels::fused_lanes::lanes_size(&ctx) {
            assert!(
                lanes_ran >= 2,
                "{sg}-lane subgroups: {lanes_ran} lanes shapes ran"
            );
            if ctx.adapter_info().device_type == wgpu::DeviceType::Cpu {
                let first = ordered(&ctx, FUSED_CANDIDATES, FUSED_CPU_TUNING_FIRST)
                    .into_iter()
                    .find(|c| c.fits(&ctx, &p));
                assert!(
                    matches!(first.map(|c| c.kind), Some(FusedKind::Lanes(_))),
                    "{first:?}"
                );
            }
        }
    }

    /// Every subgroup candidate that fits this adapter, and every group width up to its
    /// smallest subgroup (each width takes a different number of shuffle steps in the
    /// dot product and in the merge of a subgroup's groups).
    #[test]
    #[ignore = "slow tier: dozens of subgroup pipelines; .ci/run runs it"]
    fn every_subgroup_candidate_and_width_matches_the_reference() {
        let ctx = GpuContext::new().expect("no GPU adapter");
        let p = validate(
            &[1, 1, 3, 20],
            &[1, 1, 300, 20],
            &[1, 1, 300, 23],
            &Default::default(),
        )
        .unwrap();
        let Some((smallest, largest)) = subgroup_sizes(&ctx) else {
            // Without subgroups the kernel is refused, never run.
            let c = DecodeChoice::Subgroup(SUBGROUP_DECODE_CANDIDATES[0]);
            let err = pollster::block_on(resolve::decode(&ctx, &p, Elem::F32, c)).err();
            assert!(
                matches!(err, Some(AttentionError::Unsupported(_))),
                "{err:?}"
            );
            return;
        };
        let widths = (0..8).map(|n| 1u32 << n).take_while(|&d| d <= smallest);
        let forced: Vec<_> = widths.map(|d| subgroup(largest.max(64), d, 256)).collect();
        let mut ran = 0;
        for c in SUBGROUP_DECODE_CANDIDATES
            .iter()
            .copied()
            .chain(forced.iter().copied())
        {
            let c = DecodeChoice::Subgroup(c);
            for (lq, lk, d, dv) in [(3, 300, 20, 23), (5, 300, 16, 8), (1, 700, 256, 256)] {
                let p = validate(
                    &[2, 4, lq, d],
                    &[2, 2, lk, d],
                    &[2, 2, lk, dv],
                    &Default::default(),
                )
                .unwrap();
                // Narrow groups cannot hold rows of 256 columns in a lane's registers;
                // the tuner never offers them there.
                if c.fits(&ctx, &p, Elem::F32) {
                    run(&ctx, Candidate::Decode(c), (lq, lk), (d, dv));
                    ran += 1;
                }
            }
        }
        // Every forced width serves the small head dims at least.
        assert!(ran >= 2 * forced.len(), "only {ran} runs");
    }
}
