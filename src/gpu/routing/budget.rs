//! How many keys one workgroup of the fused or decode kernel may loop over on this
//! adapter.
//!
//! Some software drivers cap the loop iterations one invocation may run in total
//! (llvmpipe, behind lavapipe, stops every loop once a shared counter of 65,535 back
//! edges runs out), silently truncating a long key loop. On CPU adapters each fused
//! configuration is therefore probed once: one query row against many zero keys, whose
//! log-sum-exp is ln(keys actually visited). Where the loop was cut short, launches keep
//! every workgroup's key range to half of what the probe visited (the masked path runs
//! more iterations per tile than the probe's) and merge the ranges like split-KV
//! decoding. The decode kernel's configurations are probed the same way, in one key
//! range. Hardware adapters are not probed.

use crate::error::Result;
use crate::gpu::device::context::GpuContext;
use crate::gpu::device::recorder::Recorder;
use crate::gpu::forward::paths::split_kv::FirstPass;
use crate::gpu::kernels::decode::vec4_reads;
use crate::gpu::kernels::elem::Elem;
use crate::gpu::kernels::fused::{vec4s, FusedKind};
use crate::problem::Problem;

/// What a budget depends on: the pipeline (configuration, head dims, storage type).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct BudgetKey {
    pass: FirstPass,
    elem: Elem,
    dim4: u32,
    dim_v4: u32,
    // The K/V reading variant of the decode or tiled kernels (see `vec4_reads`); false
    // for the row kernel.
    vec4: bool,
}

/// Whether the kernel of `pass` has a K/V reading variant (see `vec4_reads`).
fn reads_vec4(pass: FirstPass) -> bool {
    match pass {
        FirstPass::Decode(_) | FirstPass::SubgroupDecode(_) => true,
        FirstPass::Fused(c) => !matches!(c.kind, FusedKind::Rows),
    }
}

/// Keys the probe offers: more than any problem is likely to loop over per workgroup.
const PROBE_KEYS: u64 = 1 << 17;

/// Keys one workgroup of `pass` may visit for `p`, or `None` when the adapter showed no
/// limit.
///
/// # Errors
/// Device errors while probing.
pub(crate) async fn key_budget(
    ctx: &GpuContext,
    p: &Problem,
    elem: Elem,
    pass: FirstPass,
) -> Result<Option<u64>> {
    if ctx.adapter_info().device_type != wgpu::DeviceType::Cpu {
        return Ok(None);
    }
    let key = BudgetKey {
        pass,
        elem,
        dim4: vec4s(p.dim),
        dim_v4: vec4s(p.dim_v),
        vec4: reads_vec4(pass) && vec4_reads(ctx, p, elem),
    };
    if let Some(b) = ctx.memo.get::<BudgetKey, Option<u64>>(&key) {
        return Ok(b);
    }
    let budget = probe::run(ctx, p, elem, pass).await?;
    ctx.memo.insert(key, budget);
    Ok(budget)
}

mod probe {
    use super::*;
    use crate::gpu::device::readback::read_ranges;
    use crate::gpu::forward::io::Recording;
    use crate::gpu::forward::paths::one_pass::OnePass;
    use crate::gpu::forward::paths::split_kv::{KeyRanges, SplitKv};

    const ONE_RANGE: KeyRanges = KeyRanges {
        workgroups: 1,
        budget: None,
    };
    use crate::gpu::forward::zero_run::{plain_problem, ZeroRun};

    pub(super) async fn run(
        ctx: &GpuContext,
        p: &Problem,
        elem: Elem,
        pass: FirstPass,
    ) -> Result<Option<u64>> {
        let row_bytes = p.dim.max(p.dim_v) as u64 * elem.bytes();
        let keys = u64::from(pass.tile_keys());
        let offered = (ctx.max_binding() / row_bytes / keys * keys).min(PROBE_KEYS);
        // Bindings too small for one tile: the plan reports that; and no workgroup can
        // loop over more keys than one binding holds anyway.
        if offered < keys {
            return Ok(None);
        }
        let pp = plain_problem(
            [1, 1, 1, p.dim],
            [1, offered as usize, p.dim_v],
            false,
            0,
            true,
        );
        let run = ZeroRun::new(ctx, "wgpu-attention loop probe", &pp, elem, true)?;
        let (inputs, outputs) = (run.inputs(), run.outputs());
        let mut encoder = ctx.device.create_command_encoder(&Default::default());
        let mut rec = Recorder::new(&mut encoder);
        let mut r = Recording {
            ctx,
            rec: &mut rec,
            p: &pp,
            inputs: &inputs,
            outputs: &outputs,
        };
        match pass {
            FirstPass::Fused(cfg) => OnePass::prepare(ctx, &pp, elem, cfg)
                .await?
                .record(&mut r)?,
            // One key range: the whole key loop in one workgroup.
            FirstPass::Decode(_) | FirstPass::SubgroupDecode(_) => {
                SplitKv::prepare(ctx, &pp, elem, pass, ONE_RANGE)
                    .await?
                    .record(&mut r)?
            }
        };
        drop(rec);
        ctx.queue.submit([encoder.finish()]);
        let Some(lse) = outputs.lse else {
            return Ok(None);
        };
        let read = read_ranges(ctx, &[(lse, 0, 4)]).await?;
        let lse = read.first().and_then(|v| v.first()).copied().unwrap_or(0.0);
        // Every logit is 0, so lse = ln(keys visited).
        let visited = f64::from(lse).exp();
        if visited.is_finite() && visited >= offered as f64 * 0.99 {
            // The lanes kernel runs one loop iteration per 8 keys, so a cap of 65,535
            // iterations lies past the keys the probe offers (PROBE_KEYS): what it saw is
            // all that is known, and longer key loops are cut to it. The other kernels
            // run more iterations per key and show such a cap within the probe.
            let lanes =
                matches!(pass, FirstPass::Fused(c) if matches!(c.kind, FusedKind::Lanes(_)));
            let capped = offered < ctx.max_binding() / row_bytes / keys * keys;
            if lanes && capped {
                return Ok(Some(offered));
            }
            return Ok(None);
        }
        let half = if visited.is_finite() {
            visited / 2.0
        } else {
            0.0
        };
        Ok(Some(((half as u64) / keys * keys).max(keys)))
    }
}
