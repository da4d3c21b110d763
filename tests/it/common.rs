//! Test helpers: seeded inputs, the tolerance check that names the worst element, and a
//! GPU context that fails (never skips) when no adapter is found.

use ndarray::{Array4, ArrayD, ArrayView, Dimension, IxDyn};
#[cfg(not(target_arch = "wasm32"))]
use wgpu_attention::GpuContext;
use wgpu_attention::{Alignment, AttentionOptions, AttentionOutput, Mask, Window};

/// One context for the whole test binary: pipelines compile once. Native only: on the
/// web a context is neither `Sync` nor made without awaiting (see tests/web.rs).
#[cfg(not(target_arch = "wasm32"))]
pub fn ctx() -> &'static GpuContext {
    use std::sync::OnceLock;
    static CTX: OnceLock<GpuContext> = OnceLock::new();
    CTX.get_or_init(|| {
        GpuContext::new().unwrap_or_else(|e| {
            panic!("no GPU adapter: {e}. Install a Vulkan driver (Debian: mesa-vulkan-drivers).")
        })
    })
}

/// A small, seeded, dependency-free normal generator (Box-Muller over SplitMix64).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed ^ 0x9e37_79b9_7f4a_7c15)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn normal(&mut self) -> f32 {
        let u1 = self.uniform().max(1e-300);
        let u2 = self.uniform();
        ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
    }
    pub fn array4(&mut self, shape: (usize, usize, usize, usize)) -> Array4<f32> {
        Array4::from_shape_simple_fn(shape, || self.normal())
    }
    /// Random q `(b, hq, lq, d)`, k `(b, hkv, lk, d)`, v `(b, hkv, lk, dv)`, drawn in
    /// that order.
    pub fn qkv(
        &mut self,
        (b, hq, hkv): (usize, usize, usize),
        (lq, lk): (usize, usize),
        (d, dv): (usize, usize),
    ) -> (Array4<f32>, Array4<f32>, Array4<f32>) {
        (
            self.array4((b, hq, lq, d)),
            self.array4((b, hkv, lk, d)),
            self.array4((b, hkv, lk, dv)),
        )
    }
    /// A boolean mask of `shape` with about `keep` of its entries true.
    pub fn bool_mask(&mut self, shape: &[usize], keep: f64) -> ArrayD<bool> {
        ArrayD::from_shape_simple_fn(IxDyn(shape), || self.uniform() < keep)
    }
    /// An additive mask of `shape`: small normal values, with about `hide` of them -inf.
    pub fn additive_mask(&mut self, shape: &[usize], hide: f64) -> ArrayD<f32> {
        ArrayD::from_shape_simple_fn(IxDyn(shape), || {
            if self.uniform() < hide {
                f32::NEG_INFINITY
            } else {
                self.normal()
            }
        })
    }
}

/// [`Rng::qkv`] from a fresh generator seeded with `seed`.
pub fn qkv(
    seed: u64,
    heads: (usize, usize, usize),
    lengths: (usize, usize),
    dims: (usize, usize),
) -> (Array4<f32>, Array4<f32>, Array4<f32>) {
    Rng::new(seed).qkv(heads, lengths, dims)
}

/// [`Rng::bool_mask`] from a fresh generator seeded with `seed`.
pub fn bool_mask(seed: u64, shape: &[usize], keep: f64) -> ArrayD<bool> {
    Rng::new(seed).bool_mask(shape, keep)
}

/// [`Rng::additive_mask`] from a fresh generator seeded with `seed`.
pub fn additive_mask(seed: u64, shape: &[usize], hide: f64) -> ArrayD<f32> {
    Rng::new(seed).additive_mask(shape, hide)
}

/// Causal attention aligned bottom-right, everything else default.
pub fn bottom_right_causal<'a>() -> AttentionOptions<'a> {
    AttentionOptions {
        causal: true,
        alignment: Alignment::BottomRight,
        ..Default::default()
    }
}

/// The masks and key lengths of [`EveryOption::cases`] for a batch of two with
/// `lq` queries against `lk` keys, made from `seed`.
pub struct EveryOption {
    keep: ArrayD<bool>,
    bias: ArrayD<f32>,
    lens: [u32; 2],
    lens_short: [u32; 2],
    window: Window,
}

impl EveryOption {
    /// For `lk` at least 702: the short key lengths are 700 and 1, under a 300,10 window.
    pub fn new(seed: u64, lq: usize, lk: usize) -> Self {
        assert!(lk > 701, "the short key lengths need more than 701 keys");
        Self::with_short_lens(seed, lq, lk, [700, 1], Window::new(300, 10))
    }

    /// As [`EveryOption::new`] for any `lk`: the short key lengths are `short` (each at
    /// most `lk`), under `window`.
    pub fn with_short_lens(
        seed: u64,
        lq: usize,
        lk: usize,
        short: [u32; 2],
        window: Window,
    ) -> Self {
        assert!(
            short.iter().all(|&n| n as usize <= lk),
            "short key lengths {short:?} exceed {lk} keys"
        );
        Self {
            keep: bool_mask(seed + 1, &[2, 1, lq, lk], 0.5),
            bias: additive_mask(seed + 2, &[lq, lk], 0.3),
            lens: [lk as u32 - 1, 0],
            lens_short: short,
            window,
        }
    }

    /// Each option of the contract once, named: a 4-D broadcast boolean mask, an
    /// additive mask with -inf under bottom-right causality, top-left causality, key
    /// lengths with an empty batch, short key lengths under a window, and a scale.
    pub fn cases(&self) -> Vec<(&'static str, AttentionOptions<'_>)> {
        vec![
            ("plain", AttentionOptions::default()),
            (
                "bool mask 4d broadcast",
                AttentionOptions {
                    mask: Some(Mask::Bool(self.keep.view())),
                    ..Default::default()
                },
            ),
            (
                "additive mask with -inf, causal bottom-right",
                AttentionOptions {
                    mask: Some(Mask::Additive(self.bias.view())),
                    ..bottom_right_causal()
                },
            ),
            (
                "causal top-left",
                AttentionOptions {
                    causal: true,
                    ..Default::default()
                },
            ),
            (
                "kv_lens with an empty batch",
                AttentionOptions {
                    kv_lens: Some(&self.lens),
                    ..Default::default()
                },
            ),
            (
                "kv_lens short, window",
                AttentionOptions {
                    kv_lens: Some(&self.lens_short),
                    window: Some(self.window),
                    alignment: Alignment::BottomRight,
                    ..Default::default()
                },
            ),
            (
                "scale",
                AttentionOptions {
                    scale: Some(0.05),
                    ..Default::default()
                },
            ),
        ]
    }
}

/// Every output's bits, out then weights then lse, for bitwise comparisons.
pub fn output_bits(o: &AttentionOutput) -> Vec<u32> {
    let mut all: Vec<u32> = o.out.iter().map(|x| x.to_bits()).collect();
    if let Some(w) = &o.weights {
        all.extend(w.iter().map(|x| x.to_bits()));
    }
    if let Some(l) = &o.lse {
        all.extend(l.iter().map(|x| x.to_bits()));
    }
    all
}

/// Asserts every element of `got` is within `atol + rtol * |want|` of `want`; NaN must
/// match NaN and infinities must match exactly. Panics naming the worst element.
pub fn assert_close<D: Dimension>(
    what: &str,
    got: ArrayView<'_, f32, D>,
    want: ArrayView<'_, f32, D>,
    atol: f32,
    rtol: f32,
) {
    assert_eq!(got.shape(), want.shape(), "{what}: shapes differ");
    let (got, want) = (got.into_dyn(), want.into_dyn());
    let mut worst: Option<(f32, Vec<usize>, f32, f32)> = None;
    for (idx, (&g, &w)) in got
        .indexed_iter()
        .zip(want.iter())
        .map(|((i, g), w)| (i, (g, w)))
    {
        let bad = if w.is_nan() {
            if g.is_nan() {
                0.0
            } else {
                f32::INFINITY
            }
        } else if w.is_infinite() {
            if g == w {
                0.0
            } else {
                f32::INFINITY
            }
        } else if g.is_nan() || g.is_infinite() {
            f32::INFINITY
        } else {
            (g - w).abs() - (atol + rtol * w.abs())
        };
        if bad > 0.0 && worst.as_ref().is_none_or(|(b, ..)| bad > *b) {
            worst = Some((bad, idx.as_array_view().to_vec(), g, w));
        }
    }
    if let Some((excess, idx, g, w)) = worst {
        panic!(
            "{what}: worst element {idx:?}: got {g}, want {w} (beyond atol {atol} + rtol {rtol}·|want| by {excess})"
        );
    }
}

/// docs/DESIGN.md's f32 bound: every element within `ATOL + RTOL * |ref|`.
pub const ATOL: f32 = 2e-5;
pub const RTOL: f32 = 1e-4;

/// Runs the GPU path with every output pre-filled with NaN, so an element the kernels
/// never write fails the comparison. Always asks for weights (when `with_weights`) and lse.
#[cfg(not(target_arch = "wasm32"))]
pub fn gpu_nan_prefilled(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    opts: &AttentionOptions<'_>,
) -> wgpu_attention::Result<AttentionOutput> {
    gpu_nan_prefilled_on(ctx(), q, k, v, opts)
}

/// [`gpu_nan_prefilled`] on a given context.
#[cfg(not(target_arch = "wasm32"))]
pub fn gpu_nan_prefilled_on(
    ctx: &GpuContext,
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    opts: &AttentionOptions<'_>,
) -> wgpu_attention::Result<AttentionOutput> {
    use wgpu_attention::{GpuOutputs, GpuTensor};
    let p = wgpu_attention::validate(q.shape(), k.shape(), v.shape(), opts)?;
    let nan = |shape: &[usize]| {
        GpuTensor::from_array(
            ctx,
            ndarray::Array::from_elem(IxDyn(shape), f32::NAN).view(),
        )
    };
    let (b, h, lq) = (p.batch, p.heads_q, p.len_q);
    let outputs = GpuOutputs {
        out: nan(&[b, h, lq, p.dim_v])?,
        weights: p
            .return_weights
            .then(|| nan(&[b, h, lq, p.len_k]))
            .transpose()?,
        lse: p.return_lse.then(|| nan(&[b, h, lq])).transpose()?,
    };
    let up = |a: &Array4<f32>| GpuTensor::from_array(ctx, a.view().into_dyn());
    let (qt, kt, vt) = (up(q)?, up(k)?, up(v)?);
    pollster::block_on(async {
        wgpu_attention::attention_gpu_into_async(ctx, &qt, &kt, &vt, opts, &outputs).await?;
        outputs.read_async(ctx).await
    })
}

/// Compares every output the options asked for, GPU (into NaN-prefilled outputs)
/// against CPU, at the f32 bound. Returns the GPU's outputs for further checks.
#[cfg(not(target_arch = "wasm32"))]
pub fn check_against_reference(
    what: &str,
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    opts: &AttentionOptions<'_>,
) -> AttentionOutput {
    check_against_reference_on(ctx(), what, q, k, v, opts)
}

/// [`check_against_reference`] on a given context.
#[cfg(not(target_arch = "wasm32"))]
pub fn check_against_reference_on(
    ctx: &GpuContext,
    what: &str,
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    opts: &AttentionOptions<'_>,
) -> AttentionOutput {
    let gpu =
        gpu_nan_prefilled_on(ctx, q, k, v, opts).unwrap_or_else(|e| panic!("{what}: gpu: {e}"));
    let cpu = wgpu_attention::attention_reference(q.view(), k.view(), v.view(), opts)
        .unwrap_or_else(|e| panic!("{what}: reference: {e}"));
    assert_matches_reference(&format!("{what}: gpu"), &gpu, &cpu, opts);
    check_fast_cpu(what, q, k, v, opts, &cpu);
    gpu
}

/// Runs the fast CPU path on what a GPU path was just checked on, against the same
/// reference result: every GPU check checks the CPU path too.
pub fn check_fast_cpu(
    what: &str,
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    opts: &AttentionOptions<'_>,
    reference: &AttentionOutput,
) -> AttentionOutput {
    let fast = wgpu_attention::attention_cpu(q.view(), k.view(), v.view(), opts)
        .unwrap_or_else(|e| panic!("{what}: fast cpu: {e}"));
    assert_matches_reference(&format!("{what}: fast cpu"), &fast, reference, opts);
    fast
}

/// Compares every output `opts` asked for at the f32 bound, and that no other is there.
pub fn assert_matches_reference(
    what: &str,
    got: &AttentionOutput,
    want: &AttentionOutput,
    opts: &AttentionOptions<'_>,
) {
    assert_close(
        &format!("{what}: out"),
        got.out.view(),
        want.out.view(),
        ATOL,
        RTOL,
    );
    if let (Some(g), Some(c)) = (&got.weights, &want.weights) {
        assert_close(&format!("{what}: weights"), g.view(), c.view(), ATOL, RTOL);
    }
    if let (Some(g), Some(c)) = (&got.lse, &want.lse) {
        assert_close(&format!("{what}: lse"), g.view(), c.view(), ATOL, RTOL);
    }
    assert_eq!(
        got.weights.is_some(),
        opts.return_weights,
        "{what}: weights presence"
    );
    assert_eq!(got.lse.is_some(), opts.return_lse, "{what}: lse presence");
}

/// A device and queue opened by the test itself, as an application would, with the
/// adapter's limits adjusted by `limits` (e.g. to imitate a smaller GPU).
#[cfg(not(target_arch = "wasm32"))]
pub fn app_device(
    limits: impl FnOnce(wgpu::Limits) -> wgpu::Limits,
) -> (wgpu::Device, wgpu::Queue) {
    pollster::block_on(async {
        let instance =
            wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
        let adapter = instance
            .request_adapter(&Default::default())
            .await
            .expect("no GPU adapter: install a Vulkan driver (Debian: mesa-vulkan-drivers)");
        adapter
            .request_device(&wgpu::DeviceDescriptor {
                required_limits: limits(adapter.limits()),
                ..Default::default()
            })
            .await
            .expect("request_device")
    })
}

/// A context on a device with adjusted limits; see [`app_device`].
#[cfg(not(target_arch = "wasm32"))]
pub fn context_with_limits(limits: impl FnOnce(wgpu::Limits) -> wgpu::Limits) -> GpuContext {
    let (device, queue) = app_device(limits);
    GpuContext::from_device(device, queue)
}

/// Runs host arrays through both backends, which must reject them with the same error;
/// returns that error.
#[cfg(not(target_arch = "wasm32"))]
pub fn rejected_alike(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    opts: &AttentionOptions<'_>,
) -> wgpu_attention::AttentionError {
    let gpu = wgpu_attention::attention(ctx(), q.view(), k.view(), v.view(), opts).unwrap_err();
    let cpu = wgpu_attention::attention_reference(q.view(), k.view(), v.view(), opts).unwrap_err();
    assert_eq!(gpu, cpu, "backends disagree");
    let fast = wgpu_attention::attention_cpu(q.view(), k.view(), v.view(), opts).unwrap_err();
    assert_eq!(fast, cpu, "the fast CPU path disagrees with the reference");
    gpu
}

/// docs/DESIGN.md's f16 bound: the Frobenius relative error.
pub const F16_BOUND: f64 = 2e-3;

/// ||got - want||_F / ||want||_F, NaN if any element is not finite.
pub fn frobenius<D: Dimension>(got: ArrayView<'_, f32, D>, want: ArrayView<'_, f32, D>) -> f64 {
    assert_eq!(got.shape(), want.shape());
    let (mut diff, mut norm) = (0f64, 0f64);
    for (&g, &w) in got.iter().zip(want.iter()) {
        if !g.is_finite() || !w.is_finite() {
            return f64::NAN;
        }
        diff += (f64::from(g) - f64::from(w)).powi(2);
        norm += f64::from(w).powi(2);
    }
    (diff / norm.max(f64::MIN_POSITIVE)).sqrt()
}

/// Every pipeline this process has built so far is one the crate's kernel table lists:
/// the cache builds nothing the reflection tests have not checked.
pub fn assert_built_kernels_are_listed() {
    let listed: std::collections::BTreeSet<String> =
        wgpu_attention::kernel_names().into_iter().collect();
    let built = wgpu_attention::kernels_built();
    assert!(!built.is_empty(), "nothing built yet");
    for name in built {
        assert!(
            listed.contains(name),
            "{name} was built but is not in the kernel table"
        );
    }
}
