//! One call, decided then recorded: the validated problem, its route and the buffers it
//! reads, prepared once by an async step; then recorded (synchronously) and submitted by
//! one runner.

use crate::error::Result;
use crate::gpu::device::context::GpuContext;
use crate::gpu::device::recorder::Recorder;
use crate::gpu::device::scopes::ErrorScopes;
use crate::gpu::forward::io::{ForwardInputs, ForwardOutputs, Recording};
use crate::gpu::forward::paths::from_lse::FromLse;
use crate::gpu::forward::route::Route;
use crate::gpu::forward::upload;
use crate::gpu::kernels::cast::Cast;
use crate::gpu::kernels::elem::Elem;
use crate::gpu::routing::table::{self as route_table, Chosen};
use crate::options::{KernelPath, Mask};
use crate::problem::Problem;

/// The q, k and v buffers of a call and how they are stored.
pub(crate) struct CallInputs<'a> {
    pub q: &'a wgpu::Buffer,
    pub k: &'a wgpu::Buffer,
    pub v: &'a wgpu::Buffer,
    pub elem: Elem,
}

/// Host data a call uploads with its commands: the explicit mask and the key lengths.
#[derive(Clone, Copy, Default)]
pub(crate) struct CallData<'a, 'm> {
    pub mask: Option<&'a Mask<'m>>,
    pub kv_lens: Option<&'a [u32]>,
}

/// A call's decisions, apart from the buffers it reads: the problem, its route and the
/// f32 to f16 conversion when the kernels read f16 from f32 inputs. Prepared once, it
/// records into any encoder as often as asked.
pub(crate) struct Prepared {
    p: Problem,
    route: Route,
    /// The f32 to f16 conversion, when the inputs are f32 and the kernels read f16.
    cast: Option<Cast>,
    /// The weights from the log-sum-exp, when weights are asked of a path that has no
    /// score matrix (every path but the staged one).
    from_lse: Option<FromLse>,
}

impl Prepared {
    /// Prepares `p` on the path [`route_table::choose`] chose, from inputs stored as
    /// `input_elem`: tunes, probes and builds what the route needs.
    ///
    /// # Errors
    /// As [`route_table::prepare`].
    pub(crate) async fn prepare(
        ctx: &GpuContext,
        p: Problem,
        chosen: &Chosen,
        input_elem: Elem,
    ) -> Result<Self> {
        let (path, elem) = (chosen.path(), chosen.elem());
        let cast = if elem == Elem::F16 && input_elem == Elem::F32 {
            Some(Cast::prepare(ctx).await?)
        } else {
            None
        };
        let route = route_table::prepare(ctx, &p, chosen).await?;
        let from_lse = if p.return_weights && path != KernelPath::Staged {
            Some(FromLse::prepare(ctx, elem).await?)
        } else {
            None
        };
        Ok(Self {
            p,
            route,
            cast,
            from_lse,
        })
    }

    /// The validated problem.
    pub(crate) fn problem(&self) -> &Problem {
        &self.p
    }

    /// Records the call into `rec` from `inputs` (with the mask and key lengths
    /// already on the device) into `outputs`: f32 inputs converted when the kernels read
    /// f16, then the route. Returns the device bytes allocated beyond inputs and outputs.
    ///
    /// # Errors
    /// As [`Route::record`], and device errors of the conversion.
    pub(crate) fn record(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder<'_>,
        inputs: &CallInputs<'_>,
        (mask, kv_lens): (Option<&wgpu::Buffer>, Option<&wgpu::Buffer>),
        outputs: &ForwardOutputs<'_>,
    ) -> Result<u64> {
        let p = &self.p;
        let mut scratch = 0;
        let converted = match &self.cast {
            Some(cast) => {
                let (b, hq, hkv) = (p.batch as u64, p.heads_q as u64, p.heads_kv as u64);
                let (lq, lk) = (p.len_q as u64, p.len_k as u64);
                let encoder = rec.encoder();
                let q = cast.record(ctx, encoder, inputs.q, b * hq * lq * p.dim as u64)?;
                let k = cast.record(ctx, encoder, inputs.k, b * hkv * lk * p.dim as u64)?;
                let v = cast.record(ctx, encoder, inputs.v, b * hkv * lk * p.dim_v as u64)?;
                scratch += q.size() + k.size() + v.size();
                Some((q, k, v))
            }
            None => None,
        };
        let (q, k, v) = match &converted {
            Some((q, k, v)) => (q, k, v),
            None => (inputs.q, inputs.k, inputs.v),
        };
        let inputs = ForwardInputs {
            q,
            k,
            v,
            mask,
            kv_lens,
        };
        let Some(from_lse) = &self.from_lse else {
            let mut r = Recording {
                ctx,
                rec,
                p,
                inputs: &inputs,
                outputs,
            };
            return Ok(scratch + self.route.record(&mut r)?);
        };
        // The route writes out and the log-sum-exp (the caller's, or a scratch one); then
        // the weights follow from them.
        let lse_scratch;
        let lse = match outputs.lse {
            Some(lse) => lse,
            None => {
                lse_scratch = FromLse::lse_scratch(ctx, p)?;
                scratch += lse_scratch.size();
                &lse_scratch
            }
        };
        let route_outputs = ForwardOutputs {
            out: outputs.out,
            lse: Some(lse),
            weights: None,
        };
        let mut r = Recording {
            ctx,
            rec: &mut *rec,
            p,
            inputs: &inputs,
            outputs: &route_outputs,
        };
        scratch += self.route.record(&mut r)?;
        let mut r = Recording {
            ctx,
            rec,
            p,
            inputs: &inputs,
            outputs,
        };
        scratch += from_lse.record(&mut r, lse)?;
        Ok(scratch)
    }
}

/// A call ready to record: everything that needed the device to decide is decided.
pub(crate) struct Call<'a, 'm> {
    prepared: Prepared,
    inputs: CallInputs<'a>,
    data: CallData<'a, 'm>,
}

impl<'a, 'm> Call<'a, 'm> {
    /// Prepares `p` on the path [`route_table::choose`] chose: tunes, probes and builds
    /// what the route needs.
    ///
    /// # Errors
    /// As [`route_table::prepare`].
    pub(crate) async fn prepare(
        ctx: &GpuContext,
        p: Problem,
        chosen: &Chosen,
        inputs: CallInputs<'a>,
        data: CallData<'a, 'm>,
    ) -> Result<Self> {
        let prepared = Prepared::prepare(ctx, p, chosen, inputs.elem).await?;
        Ok(Self {
            prepared,
            inputs,
            data,
        })
    }

    /// The validated problem.
    pub(crate) fn problem(&self) -> &Problem {
        self.prepared.problem()
    }

    /// Records the whole call into `rec`: the mask and key lengths uploaded, then
    /// [`Prepared::record`]. Returns the device bytes allocated beyond inputs (q, k, v,
    /// mask, key lengths) and outputs.
    ///
    /// # Errors
    /// As [`Prepared::record`], and device errors of the uploads.
    pub(crate) fn record(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder<'_>,
        outputs: &ForwardOutputs<'_>,
    ) -> Result<u64> {
        let mask = upload::mask(ctx, self.data.mask)?;
        let kv_lens = upload::kv_lens(ctx, self.data.kv_lens)?;
        self.prepared.record(
            ctx,
            rec,
            &self.inputs,
            (mask.as_ref(), kv_lens.as_ref()),
            outputs,
        )
    }

    /// Records and submits the call inside error scopes. Returns the device bytes it
    /// allocated beyond inputs and outputs.
    ///
    /// # Errors
    /// As [`Call::record`], and [`crate::error::AttentionError::Device`] for what the device
    /// rejects or when it has been lost.
    pub(crate) async fn run(&self, ctx: &GpuContext, outputs: &ForwardOutputs<'_>) -> Result<u64> {
        ctx.check_alive()?;
        let scopes = ErrorScopes::push(ctx);
        let mut encoder = ctx.device.create_command_encoder(&Default::default());
        let scratch = self.record(ctx, &mut Recorder::new(&mut encoder), outputs)?;
        ctx.queue.submit([encoder.finish()]);
        scopes.pop(ctx, "running attention").await?;
        Ok(scratch)
    }
}
