//! Timing the dense-layer kernel's shapes per problem class, as the attention tuner times
//! its candidates (`routing/tune`). Off unless the context tunes
//! ([`GpuContext::set_autotune`], `WGPU_ATTENTION_TUNE=1`): then the first time a context
//! meets a class, every shape the kernel was prepared with runs on a proxy of the class
//! and the fastest is remembered in the context, where `LinearKernel::record` finds it.
//! Untuned, or where the kernel has one shape (the tiled kernel, on hardware GPUs), a
//! problem takes the first shape whose tile covers its rows. The web has no blocking
//! clock, so nothing is timed there. Preparing the kernel for the problems a pass will
//! record builds only the shapes they can take (`prepare_for_problems`).

use crate::error::Result;
use crate::gpu::device::context::GpuContext;
use crate::gpu::kernels::elem::Elem;
use crate::gpu::kernels::linear::{shape_for, shapes, LinearKernel, LinearNeed, LinearShape};
use crate::gpu::kernels::linear_class::{row_class, LinearClass};

/// One problem to tune for: `rows` rows of x `inner` wide times W `(cols, inner)`ᵀ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LinearProblem {
    pub rows: usize,
    pub cols: usize,
    pub inner: usize,
}

impl LinearProblem {
    /// Rows, columns and inner width as the kernel's 32-bit sizes; `None` where one
    /// does not fit.
    fn sizes(&self) -> Option<(u32, u32, u32)> {
        Some((
            u32::try_from(self.rows).ok()?,
            u32::try_from(self.cols).ok()?,
            u32::try_from(self.inner).ok()?,
        ))
    }

    /// The layer of this problem over row-major `x`, `w`, `bias` and `y`.
    #[cfg(not(target_arch = "wasm32"))]
    fn row_major<'a>(
        &self,
        [x, w, bias, y]: [&'a crate::gpu::device::tensor::GpuTensor; 4],
    ) -> crate::gpu::kernels::linear::Linear<'a> {
        use crate::gpu::kernels::linear::{HeadLayout, Linear};
        let layout = |width: usize| HeadLayout::rows(self.rows as u32, width as u32);
        Linear {
            x: ("x", x, layout(self.inner)),
            w: ("w", w),
            bias: ("bias", bias),
            y: ("y", y, layout(self.cols)),
            rows: self.rows,
        }
    }
}

impl LinearKernel {
    /// Builds (or finds cached) the pipelines `needs` ask for, in only the shapes that
    /// recording `problems` can take: every shape where tuning is on (the tuner times
    /// them all); otherwise the shape [`shapes`] gives each problem's rows and any shape
    /// a tuning earlier on this context chose for its class. On lavapipe each lanes
    /// shape takes about a tenth of a second to build, and a pass of one length uses one
    /// of them (a MiniLM pass's first call: 0.46 s with all three, 0.21 s with one).
    ///
    /// # Errors
    /// A device error building a pipeline;
    /// [`crate::error::AttentionError::Unsupported`] for f16 weights on a device without
    /// `shader-f16`.
    pub(crate) async fn prepare_for_problems(
        ctx: &GpuContext,
        needs: &[LinearNeed],
        problems: &[LinearProblem],
    ) -> Result<Self> {
        let all = shapes(ctx);
        if ctx.autotune() {
            return Self::prepare_shapes(ctx, all, needs).await;
        }
        let mut used = Vec::new();
        for p in problems {
            let Some((rows, cols, inner)) = p.sizes() else {
                // Too large for the kernel: recording reports it.
                continue;
            };
            used.extend(shape_for(&all, rows));
            for need in needs {
                let class = LinearClass::new(rows, cols, inner, need.elem, need.vec4);
                used.extend(ctx.memo.get::<LinearClass, LinearShape>(&class));
            }
        }
        // In the order of `shapes`, so that `record` picks among them as among all.
        let mut chosen: Vec<LinearShape> =
            all.iter().copied().filter(|s| used.contains(s)).collect();
        if chosen.is_empty() {
            // No problem fits 32 bits: the first shape will do to report it when recording.
            chosen.extend(all.first().copied());
        }
        Self::prepare_shapes(ctx, chosen, needs).await
    }

    /// With tuning on and more than one shape: for each of `problems` (f32 W, plain
    /// row-major x) whose class has no decision yet, times every shape of this kernel on
    /// the class's proxy and remembers the fastest. Otherwise nothing.
    ///
    /// # Errors
    /// [`crate::error::AttentionError::TooLarge`] for a proxy beyond the device's limits;
    /// device errors while timing.
    pub(crate) async fn tune(&self, ctx: &GpuContext, problems: &[LinearProblem]) -> Result<()> {
        if !ctx.autotune() || self.shapes.len() < 2 {
            return Ok(());
        }
        for p in problems {
            let Some((rows, cols, inner)) = p.sizes() else {
                // Too large for the kernel: recording reports it.
                continue;
            };
            if rows == 0 || cols == 0 || inner == 0 {
                continue;
            }
            let vec4 = inner.is_multiple_of(4);
            let class = LinearClass::new(rows, cols, inner, Elem::F32, vec4);
            if ctx.memo.get::<LinearClass, LinearShape>(&class).is_some() {
                continue;
            }
            let proxy = LinearProblem {
                rows: row_class(rows).1 as usize,
                ..*p
            };
            if let Some(best) = timing::fastest(ctx, self, proxy).await? {
                ctx.memo.insert(class, best);
            }
        }
        Ok(())
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod timing {
    use std::time::Instant;

    use super::LinearProblem;
    use crate::error::Result;
    use crate::gpu::device::context::GpuContext;
    use crate::gpu::device::recorder::Recorder;
    use crate::gpu::device::tensor::GpuTensor;
    use crate::gpu::kernels::linear::{Epilogue, LinearKernel, LinearShape, WeightsRef};

    /// Rounds over all shapes after one untimed launch each (which builds nothing: the
    /// kernel's pipelines exist); shapes take turns within a round, so a burst of load
    /// from elsewhere slows them alike, and each keeps its fastest run.
    const ROUNDS: usize = 3;
    /// Launches per timed submission.
    const LAUNCHES: usize = 4;

    /// The fastest of `kernel`'s shapes on `p` (zeros: the kernels take no data-dependent
    /// branch), or `None` where no shape ran.
    pub(super) async fn fastest(
        ctx: &GpuContext,
        kernel: &LinearKernel,
        p: LinearProblem,
    ) -> Result<Option<LinearShape>> {
        let x = GpuTensor::empty(ctx, &[p.rows, p.inner])?;
        let w = GpuTensor::empty(ctx, &[p.cols, p.inner])?;
        let bias = GpuTensor::empty(ctx, &[p.cols])?;
        let y = GpuTensor::empty(ctx, &[p.rows, p.cols])?;
        let call = p.row_major([&x, &w, &bias, &y]);
        let run = |shape: LinearShape, launches: usize| -> Result<f64> {
            let mut encoder = ctx.device.create_command_encoder(&Default::default());
            let mut rec = Recorder::new(&mut encoder);
            for _ in 0..launches {
                let w = ("w", WeightsRef::F32(&w));
                kernel.record_shaped(ctx, &mut rec, &call, w, Epilogue::default(), Some(shape))?;
            }
            drop(rec);
            let started = Instant::now();
            ctx.queue.submit([encoder.finish()]);
            ctx.wait_for_device()?;
            Ok(started.elapsed().as_secs_f64())
        };
        let shapes = kernel.shapes.clone();
        for &s in &shapes {
            run(s, 1)?;
        }
        let mut best = vec![f64::INFINITY; shapes.len()];
        for _ in 0..ROUNDS {
            for (i, &s) in shapes.iter().enumerate() {
                best[i] = best[i].min(run(s, LAUNCHES)?);
            }
        }
        Ok(best
            .iter()
            .enumerate()
            .min_by(|a, b| a.1.total_cmp(b.1))
            .map(|(i, _)| shapes[i]))
    }
}

#[cfg(target_arch = "wasm32")]
mod timing {
    use super::LinearProblem;
    use crate::error::Result;
    use crate::gpu::device::context::GpuContext;
    use crate::gpu::kernels::linear::{LinearKernel, LinearShape};

    /// The browser cannot block on the device: nothing is timed.
    pub(super) async fn fastest(
        _ctx: &GpuContext,
        _kernel: &LinearKernel,
        _p: LinearProblem,
    ) -> Result<Option<LinearShape>> {
        Ok(None)
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use ndarray::Array2;

    use super::*;
    use crate::gpu::device::recorder::Recorder;
    use crate::gpu::device::tensor::GpuTensor;

    #[test]
    fn row_classes_run_their_largest_rows() {
        for (rows, class) in [(1, 0), (8, 0), (9, 1), (16, 1), (17, 2), (32, 2), (33, 3)] {
            assert_eq!(row_class(rows).0, class, "{rows} rows");
            assert!(row_class(rows).1 >= rows, "{rows} rows");
        }
        assert_eq!(row_class(128), (3, 128));
        assert_eq!(row_class(129), (4, 256));
        assert_eq!(row_class(u32::MAX).0, 4);
    }

    fn problem() -> LinearProblem {
        LinearProblem {
            rows: 40,
            cols: 72,
            inner: 64,
        }
    }

    /// Tuned, a class gets one of the adapter's shapes (where it has several), and the
    /// layer it records computes x Wᵀ + b.
    #[test]
    fn a_tuned_class_takes_one_of_the_shapes_and_stays_exact() {
        let ctx = GpuContext::new().expect("no GPU adapter");
        ctx.set_autotune(true);
        let kernel = pollster::block_on(LinearKernel::prepare(&ctx)).expect("prepare");
        let p = problem();
        pollster::block_on(kernel.tune(&ctx, &[p])).expect("tune");
        let class = LinearClass::new(40, 72, 64, Elem::F32, true);
        let chosen = ctx.memo.get::<LinearClass, LinearShape>(&class);
        let all = shapes(&ctx);
        match chosen {
            Some(s) => assert!(all.len() > 1 && all.contains(&s), "{s:?} of {all:?}"),
            None => assert_eq!(all.len(), 1, "several shapes and none chosen"),
        }
        let x = Array2::from_shape_fn((p.rows, p.inner), |(i, k)| {
            ((i * 7 + k * 3) % 13) as f32 / 6.5 - 1.0
        });
        let w = Array2::from_shape_fn((p.cols, p.inner), |(n, k)| {
            ((n * 5 + k * 11) % 17) as f32 / 8.5 - 1.0
        });
        let b = ndarray::Array1::from_shape_fn(p.cols, |n| n as f32 / 72.0);
        let t = |a: ndarray::ArrayViewD<'_, f32>| GpuTensor::from_array(&ctx, a).expect("upload");
        let (xt, wt, bt) = (
            t(x.view().into_dyn()),
            t(w.view().into_dyn()),
            t(b.view().into_dyn()),
        );
        let yt = GpuTensor::empty(&ctx, &[p.rows, p.cols]).expect("y");
        let call = p.row_major([&xt, &wt, &bt, &yt]);
        let mut encoder = ctx.device.create_command_encoder(&Default::default());
        kernel
            .record(&ctx, &mut Recorder::new(&mut encoder), &call)
            .expect("record");
        ctx.queue.submit([encoder.finish()]);
        let got = yt.read(&ctx).expect("read");
        let want = x.mapv(f64::from).dot(&w.t().mapv(f64::from)) + b.mapv(f64::from);
        let worst = got
            .iter()
            .zip(want.iter())
            .map(|(&g, &w)| (f64::from(g) - w).abs())
            .fold(0.0, f64::max);
        assert!(worst < 1e-4, "largest error {worst}");
    }

    /// A kernel prepared for problems builds the shape untuned recording picks for their
    /// rows, adds any shape a tuning on this context chose for their class, and builds
    /// every shape while tuning is on (the tuner times them all).
    #[test]
    fn problems_prepare_only_the_shapes_they_take() {
        let ctx = GpuContext::new().expect("no GPU adapter");
        ctx.set_autotune(false);
        let needs = [LinearNeed {
            elem: Elem::F32,
            vec4: true,
        }];
        let prepare = |problems: &[LinearProblem]| {
            pollster::block_on(LinearKernel::prepare_for_problems(&ctx, &needs, problems))
                .expect("prepare")
        };
        let all = shapes(&ctx);
        let short = LinearProblem {
            rows: 1,
            ..problem()
        };
        let kernel = prepare(&[short]);
        assert_eq!(kernel.shapes, vec![all[0]], "one row of {all:?}");
        assert_eq!(kernel.pipes.len(), 1);
        // The longest problem takes the last shape: the one that covers the most rows.
        let long = LinearProblem {
            rows: 4096,
            ..problem()
        };
        let both = prepare(&[short, long]);
        let mut want = vec![all[0]];
        if all.len() > 1 {
            want.push(all[all.len() - 1]);
        }
        assert_eq!(both.shapes, want);
        // A class tuned earlier keeps its shape, though its rows alone would take another.
        let tuned = *all.last().expect("a shape");
        let class = LinearClass::new(1, 72, 64, Elem::F32, true);
        ctx.memo.insert(class, tuned);
        let kept = prepare(&[short]);
        assert!(kept.shapes.contains(&tuned) && kept.shapes.contains(&all[0]));
        ctx.set_autotune(true);
        assert_eq!(prepare(&[short]).shapes, all);
    }

    /// Untuned, nothing is timed or remembered.
    #[test]
    fn untuned_contexts_time_nothing() {
        let ctx = GpuContext::new().expect("no GPU adapter");
        ctx.set_autotune(false);
        let kernel = pollster::block_on(LinearKernel::prepare(&ctx)).expect("prepare");
        pollster::block_on(kernel.tune(&ctx, &[problem()])).expect("tune");
        let class = LinearClass::new(40, 72, 64, Elem::F32, true);
        assert!(ctx.memo.get::<LinearClass, LinearShape>(&class).is_none());
    }
}
