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
//!
//! The tuner in files: `candidates.rs` (the tables and the CPU adapters' preferences),
//! `class.rs` (what a decision is remembered under), `choose.rs` (first fitting, or the
//! fastest), `timing.rs` (timing on a proxy), `forcing.rs` (the subgroup decode kernel
//! forced for tests); here, the two entry points.

mod candidates;
mod choose;
mod class;
mod forcing;
mod timing;

pub(crate) use forcing::force_subgroup_decode;

use crate::error::Result;
use crate::gpu::device::context::GpuContext;
use crate::gpu::kernels::decode_subgroup::DecodeChoice;
use crate::gpu::kernels::elem::Elem;
use crate::gpu::kernels::fused::FusedConfig;
use crate::gpu::routing::tune::candidates::{
    decode_cpu_first, fused_cpu_first, ordered, Candidate, DECODE_CANDIDATES, FUSED_CANDIDATES,
    FUSED_CPU_TUNING_FIRST, OTHER_DECODE_TIMED, SUBGROUP_DECODE_CANDIDATES,
    SUBGROUP_DECODE_CPU_FIRST, TIMED,
};
use crate::gpu::routing::tune::choose::choose;
use crate::gpu::routing::tune::class::ClassKey;
use crate::gpu::routing::tune::forcing::{forced_decode, forced_subgroup_decode};
use crate::options::FusedKernel;
use crate::problem::Problem;

/// The fused configuration for `p` on this context.
///
/// # Errors
/// [`AttentionError::TooLarge`](crate::AttentionError::TooLarge) when no candidate fits the device; device errors while
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
        fused_cpu_first(p.len_q, p.len_k)
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

/// The decode configuration for `p` on this context. Where the adapter has subgroups,
/// the subgroup kernel's candidates come first on GPUs and after the others on CPU
/// adapters (both are timed when tuning is on).
///
/// # Errors
/// As [`fused_config`]; [`AttentionError::Unsupported`](crate::AttentionError::Unsupported) when the subgroup kernel is
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
    let lanes = ordered(ctx, DECODE_CANDIDATES, decode_cpu_first(p.len_k))
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

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    //! Every candidate the tuner may pick computes the reference's result.

    use ndarray::Array4;

    use super::*;
    use crate::error::AttentionError;
    use crate::gpu::device::outputs::GpuOutputs;
    use crate::gpu::device::recorder::Recorder;
    use crate::gpu::device::tensor::GpuTensor;
    use crate::gpu::forward::io::{ForwardInputs, ForwardOutputs, Recording};
    use crate::gpu::kernels::fused::FusedKind;
    use crate::gpu::kernels::subgroups::subgroup_sizes;
    use crate::gpu::routing::resolve;
    use crate::gpu::routing::tune::candidates::*;
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
        let mut rec = Recorder::new(&mut enc);
        let mut r = Recording {
            ctx,
            rec: &mut rec,
            p: &p,
            inputs: &inputs,
            outputs: &forward,
        };
        route.record(&mut r).unwrap();
        drop(rec);
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
        for list in [
            FUSED_CPU_FIRST,
            FUSED_CPU_TINY_FIRST,
            FUSED_CPU_SHORT_FIRST,
            FUSED_CPU_TUNING_FIRST,
        ] {
            for c in list {
                assert!(
                    FUSED_CANDIDATES.contains(c),
                    "{c:?} is not a fused candidate"
                );
            }
        }
        for c in DECODE_CPU_FIRST.iter().chain(DECODE_CPU_SHORT_FIRST) {
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
        for list in [FUSED_CPU_FIRST, FUSED_CPU_TINY_FIRST, FUSED_CPU_SHORT_FIRST] {
            assert!(!list[..list.len() - 2]
                .iter()
                .any(|c| matches!(c.kind, FusedKind::Lanes(_))));
        }
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
