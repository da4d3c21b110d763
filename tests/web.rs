//! The core paths in a real browser: the library compiled to wasm32, run on the page's
//! WebGPU adapter, checked against the CPU reference compiled into the same module.
//!
//! Run with `cargo test --target wasm32-unknown-unknown --no-default-features --test web`
//! (.cargo/config.toml names the runner; ChromeDriver must be on PATH or in $CHROMEDRIVER).
//! Headless Chromium gives WebGPU on its SwiftShader adapter (subgroup size 4, no
//! `shader-f16`) only with `--enable-unsafe-webgpu`, which `webdriver.json` passes.

#![cfg(target_arch = "wasm32")]

// The tiny random BERT the native model tests build, shared with them.
#[path = "it/bert_tiny.rs"]
mod bert_tiny;
// The native suite's helpers; the browser tests use only the seeded inputs and the
// tolerance check of them.
#[path = "it/common.rs"]
#[allow(dead_code)]
mod common;

use std::cell::RefCell;
use std::rc::Rc;

use common::{assert_close, qkv, Rng, ATOL, RTOL};
use ndarray::{Array, Array2, Array4, ArrayD, IxDyn};
use wasm_bindgen_test::{console_log, wasm_bindgen_test, wasm_bindgen_test_configure};
use wgpu_attention::{
    attention_async, attention_gpu_into_async, attention_reference, fused_kernel_taken, Alignment,
    AttentionError, AttentionOptions, FusedKernel, GpuContext, GpuOutputs, GpuTensor, KernelPath,
    Mask, Precision, Window,
};

wasm_bindgen_test_configure!(run_in_browser);

thread_local! {
    static CTX: RefCell<Option<Rc<GpuContext>>> = const { RefCell::new(None) };
}

/// One context per page (pipelines compile once). Panics, failing the test, when the
/// browser has no WebGPU adapter: a test here never passes without running on the GPU.
async fn ctx() -> Rc<GpuContext> {
    if let Some(c) = CTX.with(|c| c.borrow().clone()) {
        return c;
    }
    let made = GpuContext::new_async().await.unwrap_or_else(|e| {
        panic!(
            "no WebGPU adapter in this browser: {e}. Chromium needs --enable-unsafe-webgpu \
             (webdriver.json) where WebGPU is not enabled by default."
        )
    });
    let info = made.adapter_info();
    console_log!(
        "adapter: {:?} on {:?}, subgroup size {}..{}, features {:?}",
        info.name,
        info.backend,
        info.subgroup_min_size,
        info.subgroup_max_size,
        made.features()
    );
    // Built with WGPU_ATTENTION_KERNEL=rows|tiled|lanes in the environment, the suite runs
    // with that fused kernel forced, as the variable does natively at run time.
    if let Some(names) = option_env!("WGPU_ATTENTION_KERNEL") {
        let kernel = names
            .split(',')
            .find_map(FusedKernel::from_name)
            .unwrap_or_else(|| panic!("WGPU_ATTENTION_KERNEL={names:?} names no fused kernel"));
        console_log!("fused kernel forced: {kernel:?}");
        made.set_fused_kernel(kernel);
    }
    let made = Rc::new(made);
    CTX.with(|c| *c.borrow_mut() = Some(made.clone()));
    made
}

/// A device tensor filled with NaN, so an element a kernel never writes fails the check.
fn nan_tensor(ctx: &GpuContext, shape: &[usize]) -> GpuTensor {
    GpuTensor::from_array(ctx, ArrayD::from_elem(IxDyn(shape), f32::NAN).view())
        .unwrap_or_else(|e| panic!("allocating a {shape:?} output: {e}"))
}

/// Runs `opts` on the GPU into NaN-filled outputs (weights and lse where asked for) and
/// checks every requested output against the CPU reference.
async fn check_requested(
    what: &str,
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    opts: &AttentionOptions<'_>,
) {
    let ctx = ctx().await;
    let upload = |a: &Array4<f32>| {
        GpuTensor::from_array(&ctx, a.view().into_dyn())
            .unwrap_or_else(|e| panic!("{what}: uploading {:?}: {e}", a.shape()))
    };
    let (qs, vs) = (q.shape(), v.shape());
    let (b, h, lq, lk) = (qs[0], qs[1], qs[2], k.shape()[2]);
    let outputs = GpuOutputs {
        out: nan_tensor(&ctx, &[b, h, lq, vs[3]]),
        weights: opts
            .return_weights
            .then(|| nan_tensor(&ctx, &[b, h, lq, lk])),
        lse: opts.return_lse.then(|| nan_tensor(&ctx, &[b, h, lq])),
    };
    attention_gpu_into_async(&ctx, &upload(q), &upload(k), &upload(v), opts, &outputs)
        .await
        .unwrap_or_else(|e| panic!("{what}: GPU call failed: {e}"));
    let gpu = outputs
        .read_async(&ctx)
        .await
        .unwrap_or_else(|e| panic!("{what}: readback failed: {e}"));
    let cpu = attention_reference(q.view(), k.view(), v.view(), opts)
        .unwrap_or_else(|e| panic!("{what}: CPU reference failed: {e}"));
    let name = |part: &str| format!("{what}: {part}");
    assert_close(&name("out"), gpu.out.view(), cpu.out.view(), ATOL, RTOL);
    if opts.return_weights {
        let (gw, cw) = (
            gpu.weights.expect("weights"),
            cpu.weights.as_ref().expect("weights"),
        );
        assert_close(&name("weights"), gw.view(), cw.view(), ATOL, RTOL);
    }
    if opts.return_lse {
        let (gl, cl) = (gpu.lse.expect("lse"), cpu.lse.as_ref().expect("lse"));
        assert_close(&name("lse"), gl.view(), cl.view(), ATOL, RTOL);
    }
    // The fast CPU path as built for the browser (one thread, SIMD128 where enabled).
    common::check_fast_cpu(what, q, k, v, opts, &cpu);
}

/// [`check_requested`] with weights and lse both asked for.
async fn check(
    what: &str,
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    opts: AttentionOptions<'_>,
) {
    let opts = AttentionOptions {
        return_weights: true,
        return_lse: true,
        ..opts
    };
    check_requested(what, q, k, v, &opts).await;
}

#[wasm_bindgen_test]
async fn the_adapter_is_the_browsers_webgpu() {
    let ctx = ctx().await;
    assert_eq!(
        ctx.adapter_info().backend,
        wgpu::Backend::BrowserWebGpu,
        "the context must run on the browser's WebGPU"
    );
    let listed = wgpu_attention::enumerate_adapters().await;
    assert!(
        listed
            .iter()
            .any(|a| a.backend == wgpu::Backend::BrowserWebGpu),
        "enumerate_adapters lists no WebGPU adapter: {listed:?}"
    );
}

#[wasm_bindgen_test]
async fn causal_multi_head() {
    let (q, k, v) = qkv(1, (2, 3, 3), (33, 33), (16, 16));
    let opts = AttentionOptions {
        causal: true,
        ..Default::default()
    };
    check("causal", &q, &k, &v, opts).await;
}

/// Row lengths around the subgroup size (4) and the softmax workgroup (128).
#[wasm_bindgen_test]
async fn lengths_straddling_subgroup_and_workgroup_edges() {
    for (seed, lk) in [(2, 1), (3, 3), (4, 5), (5, 129)] {
        let (q, k, v) = qkv(seed, (1, 2, 2), (6, lk), (8, 5));
        check(&format!("lk={lk}"), &q, &k, &v, AttentionOptions::default()).await;
    }
}

#[wasm_bindgen_test]
async fn boolean_mask_broadcast_with_an_empty_row() {
    let (q, k, v) = qkv(6, (2, 2, 2), (9, 12), (8, 8));
    // (Lq, Lk), broadcast over batch and heads; row 4 allows nothing.
    let mask = Array2::from_shape_fn((9, 12), |(i, j)| i != 4 && (i + 2 * j) % 3 != 0);
    let opts = AttentionOptions {
        mask: Some(Mask::Bool(mask.view().into_dyn())),
        ..Default::default()
    };
    check("bool mask", &q, &k, &v, opts).await;
}

#[wasm_bindgen_test]
async fn additive_mask_with_neg_inf() {
    let (q, k, v) = qkv(7, (1, 2, 2), (7, 10), (16, 8));
    let mut rng = Rng::new(70);
    let bias = Array::from_shape_fn((1, 2, 7, 10), |(_, h, i, j)| {
        if (h + i + j) % 5 == 0 {
            f32::NEG_INFINITY
        } else {
            rng.normal()
        }
    });
    let opts = AttentionOptions {
        mask: Some(Mask::Additive(bias.view().into_dyn())),
        ..Default::default()
    };
    check("additive mask", &q, &k, &v, opts).await;
}

#[wasm_bindgen_test]
async fn grouped_query_and_multi_query_heads() {
    let (q, k, v) = qkv(8, (2, 6, 2), (11, 11), (16, 24));
    let opts = AttentionOptions {
        causal: true,
        ..Default::default()
    };
    check("gqa 6/2", &q, &k, &v, opts).await;
    let (q, k, v) = qkv(9, (1, 4, 1), (5, 17), (8, 8));
    check("mqa 4/1", &q, &k, &v, AttentionOptions::default()).await;
}

#[wasm_bindgen_test]
async fn cross_attention_with_key_padding() {
    let (q, k, v) = qkv(10, (2, 2, 2), (7, 19), (12, 20));
    let lens = [19, 6];
    let opts = AttentionOptions {
        kv_lens: Some(&lens[..]),
        scale: Some(0.3),
        ..Default::default()
    };
    check("cross", &q, &k, &v, opts).await;
}

#[wasm_bindgen_test]
async fn bottom_right_causal_window() {
    let (q, k, v) = qkv(11, (1, 2, 1), (4, 21), (8, 8));
    let opts = AttentionOptions {
        causal: true,
        alignment: Alignment::BottomRight,
        window: Some(Window::new(6, 0)),
        ..Default::default()
    };
    check("bottom-right window", &q, &k, &v, opts).await;
}

/// The host-array entry point, the one a web page calls.
#[wasm_bindgen_test]
async fn attention_async_matches_the_reference() {
    let (q, k, v) = qkv(12, (1, 2, 2), (8, 8), (8, 8));
    let ctx = ctx().await;
    let opts = AttentionOptions::default();
    let gpu = attention_async(&ctx, q.view(), k.view(), v.view(), &opts)
        .await
        .expect("GPU call");
    let cpu = attention_reference(q.view(), k.view(), v.view(), &opts).expect("CPU call");
    assert_close(
        "attention_async out",
        gpu.out.view(),
        cpu.out.view(),
        ATOL,
        RTOL,
    );
}

/// Without `shader-f16` (SwiftShader has none) the f16 path must say it is unavailable,
/// not fail obscurely; with it, f16 must either run within its bound or say so.
#[wasm_bindgen_test]
async fn f16_says_when_it_is_unavailable() {
    let ctx = ctx().await;
    let has_f16 = ctx.features().contains(wgpu::Features::SHADER_F16);
    let (q, k, v) = qkv(13, (1, 1, 1), (4, 4), (8, 8));
    let opts = AttentionOptions {
        precision: Precision::F16,
        ..Default::default()
    };
    let got = attention_async(&ctx, q.view(), k.view(), v.view(), &opts).await;
    match got {
        Err(AttentionError::Unsupported(msg)) => assert!(msg.contains("f16"), "{msg}"),
        Ok(gpu) if has_f16 => {
            let cpu = attention_reference(q.view(), k.view(), v.view(), &opts).expect("CPU call");
            let diff: f32 = (&gpu.out - &cpu.out).iter().map(|x| x * x).sum();
            let norm: f32 = cpu.out.iter().map(|x| x * x).sum();
            assert!(
                (diff / norm).sqrt() < 2e-3,
                "f16 relative error {}",
                (diff / norm).sqrt()
            );
        }
        other => panic!("f16 (adapter has shader-f16: {has_f16}) gave {other:?}"),
    }
}

/// The fused and decode kernels (the default without weights), into NaN-filled outputs.
#[wasm_bindgen_test]
async fn fused_and_decode_paths() {
    let keep = Array2::from_shape_fn((5, 70), |(i, j)| (i * 7 + j) % 5 != 0).into_dyn();
    for (n, path) in [KernelPath::Fused, KernelPath::Decode]
        .into_iter()
        .enumerate()
    {
        let (q, k, v) = qkv(20 + n as u64, (2, 4, 2), (5, 70), (16, 8));
        let opts = AttentionOptions {
            path,
            causal: true,
            alignment: Alignment::BottomRight,
            mask: Some(Mask::Bool(keep.view())),
            return_lse: true,
            ..Default::default()
        };
        check_requested(&format!("{path:?}"), &q, &k, &v, &opts).await;
    }
}

/// Each fused kernel forced on the browser's adapter (a context of its own): the row and
/// tiled kernels run as forced, their shapes fitting the browser's limits; the lanes
/// kernel needs subgroups, which wgpu's WebGPU backend does not offer, so others serve.
#[wasm_bindgen_test]
async fn forced_fused_kernels_run_where_they_fit() {
    let ctx = GpuContext::new_async()
        .await
        .expect("no WebGPU adapter in this browser");
    for kernel in [FusedKernel::Rows, FusedKernel::Tiled, FusedKernel::Lanes] {
        ctx.set_fused_kernel(kernel);
        for (d, causal) in [(64, false), (64, true), (20, false)] {
            let taken = fused_kernel_taken(&ctx, [1, 4, 100, d], [2, 200, d], causal)
                .await
                .unwrap();
            let what = format!("{kernel:?} forced, D {d}, causal {causal}: {taken:?} ran");
            if kernel == FusedKernel::Lanes {
                assert_ne!(taken, kernel, "{what}");
            } else {
                assert_eq!(taken, kernel, "{what}");
            }
        }
    }
}

// ---- BERT (model family) ----

/// A tiny random BERT built in memory: tokenized by the `tokenizers` crate compiled to
/// wasm32, run through the GPU forward pass (model kernels, linear kernel, the crate's
/// attention) on the page's WebGPU adapter, against the float64 CPU path.
#[wasm_bindgen_test]
async fn tiny_bert_forward_on_webgpu() {
    use wgpu_attention::model::bert::BertModel;
    let ctx = ctx().await;
    let t = bert_tiny::tiny_bert(7);
    let model = BertModel::from_parts(t.config.as_bytes(), &t.safetensors, t.tokenizer.as_bytes())
        .expect("tiny model");
    let tokens = model.tokenize("The cat sat on the mat").expect("tokenize");
    let ids: Vec<u32> = tokens.iter().map(|t| t.id).collect();
    assert_eq!(ids, [2, 4, 5, 6, 7, 4, 8, 3]);
    let gpu = model.upload(&ctx).expect("upload");
    let got = gpu.forward(&ctx, &ids, true).await.expect("gpu forward");
    let want = model
        .forward_reference(&ids, true)
        .expect("reference forward");
    // The fast f32 CPU path (single-threaded here) against the same reference.
    let fast = model.forward_cpu(&ids, true).expect("fast cpu forward");
    for (g, w) in fast.hidden.iter().zip(want.hidden.iter()) {
        assert!(
            (g - w).abs() <= 1e-4 + 1e-4 * w.abs(),
            "fast cpu hidden {g} against {w}"
        );
    }
    let (ga, wa) = (
        got.attention.expect("attention"),
        want.attention.expect("attention"),
    );
    assert_eq!(ga.dim(), (bert_tiny::LAYERS, bert_tiny::HEADS, 8, 8));
    for (g, w) in ga.iter().zip(wa.iter()) {
        assert!(
            (g - w).abs() <= 2e-4 + 1e-3 * w.abs(),
            "attention {g} against {w}"
        );
    }
    for (g, w) in got.hidden.iter().zip(want.hidden.iter()) {
        assert!(
            (g - w).abs() <= 1e-4 + 1e-4 * w.abs(),
            "hidden {g} against {w}"
        );
    }
}

// ---- The llama family: a tiny random model, made in memory, on the page's GPU against
// the float64 CPU path of the same module.

#[path = "it/model_llama/tiny_model.rs"]
mod llama_tiny;

#[wasm_bindgen_test]
async fn llama_tiny_forward_and_cached_generation() {
    use wgpu_attention::model::GenerateOptions;
    let ctx = ctx().await;
    let m = llama_tiny::tiny_model(1, false);
    let ids = [84, 71, 256, 67, 64, 83, 12];
    let cpu = m.forward_reference(&ids, true).expect("llama CPU forward");
    let gpu = m.upload(&ctx).expect("llama upload");
    let got = gpu
        .forward(&ctx, &ids, true)
        .await
        .expect("llama GPU forward");
    let (ga, ca) = (
        got.attention.expect("weights"),
        cpu.attention.expect("weights"),
    );
    assert_close("llama attention", ga.view(), ca.view(), ATOL, RTOL);
    let (gl, cl) = (got.logits.expect("logits"), cpu.logits.expect("logits"));
    assert_close("llama logits", gl.view(), cl.view(), 1e-4, 1e-4);
    let opts = GenerateOptions {
        max_new_tokens: 8,
        stop_at_eos: false,
        ..Default::default()
    };
    let recompute = GenerateOptions {
        use_cache: false,
        ..opts
    };
    let cached = gpu
        .generate(&ctx, &ids, &opts, &mut |_| {})
        .await
        .expect("cached");
    let full = gpu
        .generate(&ctx, &ids, &recompute, &mut |_| {})
        .await
        .expect("full");
    let on_cpu = m
        .generate_reference(&ids, &opts, &mut |_| {})
        .expect("CPU generation");
    assert_eq!(cached.generated.len(), 8);
    assert_eq!(cached.generated, full.generated, "cached vs recomputed");
    assert_eq!(cached.generated, on_cpu.generated, "GPU vs CPU");
}

/// The products that split K across lanes (what hardware GPUs take for at most 16 rows;
/// the browser's adapter reports no device type, so it keeps the other kernels unless
/// forced): on a context of their own, the tiny BERT's forward pass (8 rows through the
/// dense split kernel) and the tiny llama's forward pass and cached generation (the
/// quantized matmul's split entry, one row a step) against the float64 CPU path.
#[wasm_bindgen_test]
async fn split_products_on_webgpu() {
    use wgpu_attention::model::bert::BertModel;
    use wgpu_attention::model::{force_split_products_for_tests, GenerateOptions};
    let ctx = GpuContext::new_async().await.expect("a second context");
    force_split_products_for_tests(&ctx);
    let t = bert_tiny::tiny_bert(8);
    let model = BertModel::from_parts(t.config.as_bytes(), &t.safetensors, t.tokenizer.as_bytes())
        .expect("tiny model");
    let ids = [2, 4, 5, 6, 7, 4, 8, 3];
    let gpu = model.upload(&ctx).expect("upload");
    let got = gpu.forward(&ctx, &ids, false).await.expect("gpu forward");
    let want = model.forward_reference(&ids, false).expect("reference");
    assert_close(
        "split BERT hidden",
        got.hidden.view(),
        want.hidden.view(),
        1e-4,
        1e-4,
    );
    let m = llama_tiny::tiny_model(2, false);
    let ids = [84, 71, 256, 67, 64, 83, 12];
    let gpu = m.upload(&ctx).expect("llama upload");
    let got = gpu.forward(&ctx, &ids, false).await.expect("llama forward");
    let cpu = m.forward_reference(&ids, false).expect("llama CPU forward");
    let (gl, cl) = (got.logits.expect("logits"), cpu.logits.expect("logits"));
    assert_close("split llama logits", gl.view(), cl.view(), 1e-4, 1e-4);
    let opts = GenerateOptions {
        max_new_tokens: 8,
        stop_at_eos: false,
        ..Default::default()
    };
    let cached = gpu
        .generate(&ctx, &ids, &opts, &mut |_| {})
        .await
        .expect("cached");
    let on_cpu = m
        .generate_reference(&ids, &opts, &mut |_| {})
        .expect("CPU generation");
    assert_eq!(cached.generated, on_cpu.generated, "split GPU vs CPU");
}
