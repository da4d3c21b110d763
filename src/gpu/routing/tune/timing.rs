//! Timing candidates on a proxy problem: the same head dims, group size and masking
//! rule, few K/V heads, lengths capped so that a run takes milliseconds. The web has no
//! blocking clock: there the first fitting candidate is used.

#[cfg(not(target_arch = "wasm32"))]
pub(super) use native::fastest_index;
#[cfg(target_arch = "wasm32")]
pub(super) use web::fastest_index;

#[cfg(not(target_arch = "wasm32"))]
mod native {
    use std::time::Instant;

    use crate::error::{AttentionError, Result};
    use crate::gpu::device::context::GpuContext;
    use crate::gpu::device::recorder::Recorder;
    use crate::gpu::device::timer::Timer;
    use crate::gpu::forward::io::Recording;
    use crate::gpu::forward::route::Route;
    use crate::gpu::forward::zero_run::{plain_problem, ZeroRun};
    use crate::gpu::kernels::elem::Elem;
    use crate::gpu::routing::tune::candidates::Candidate;
    use crate::problem::Problem;

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
        ctx.wait_for_device()?;
        match timer {
            Some(t) => t.read_ms(ctx).await,
            None => Ok(started.elapsed().as_secs_f64() * 1e3),
        }
    }

    /// Index of the fastest of `candidates`, all of one kind.
    pub(crate) async fn fastest_index(
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
            let mut rec = Recorder::new(&mut encoder);
            let mut r = Recording {
                ctx,
                rec: &mut rec,
                p: &pp,
                inputs: &inputs,
                outputs: &outputs,
            };
            route.record(&mut r)?;
            drop(rec);
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
mod web {
    use crate::error::Result;
    use crate::gpu::device::context::GpuContext;
    use crate::gpu::kernels::elem::Elem;
    use crate::gpu::routing::tune::candidates::Candidate;
    use crate::problem::Problem;

    pub(crate) async fn fastest_index(
        _: &GpuContext,
        _: &Problem,
        _: Elem,
        _: &[Candidate],
    ) -> Result<Option<usize>> {
        Ok(None)
    }
}
