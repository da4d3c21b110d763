//! Attention on WebGPU inside a web page: the page loads this module, which runs causal
//! multi-head attention on the browser's GPU, checks it against the CPU reference and
//! shows the largest error and the times. Build and serve with `examples/web/serve.sh`.

#![cfg(target_arch = "wasm32")]

use ndarray::Array4;
use wasm_bindgen::prelude::*;
use wgpu_attention::{attention_async, attention_cpu, AttentionOptions, GpuContext};

/// (B, H, L, D): a small model's layer, quick enough for the CPU reference too.
const SHAPE: (usize, usize, usize, usize) = (1, 8, 256, 64);

#[wasm_bindgen(start)]
pub fn start() {
    wasm_bindgen_futures::spawn_local(async {
        let (status, text) = match run().await {
            Ok(report) => ("ok", report),
            Err(e) => ("error", format!("error: {e}")),
        };
        show(status, &text);
    });
}

fn show(status: &str, text: &str) {
    let Some(el) = web_sys::window()
        .and_then(|w| w.document())
        .and_then(|d| d.get_element_by_id("result"))
    else {
        return;
    };
    el.set_text_content(Some(text));
    // For scripted checks of the page.
    let _ = el.set_attribute("data-status", status);
}

fn now_ms() -> f64 {
    web_sys::window()
        .and_then(|w| w.performance())
        .map_or(0.0, |p| p.now())
}

/// Deterministic inputs in [-1, 1): the page needs no randomness source.
fn input(seed: usize) -> Array4<f32> {
    Array4::from_shape_fn(SHAPE, |(_, h, i, d)| {
        let x = (seed * 7919 + h * 104_729 + i * 613 + d * 37) % 2003;
        x as f32 / 1001.5 - 1.0
    })
}

async fn run() -> Result<String, wgpu_attention::AttentionError> {
    let ctx = GpuContext::new_async().await?;
    let (q, k, v) = (input(1), input(2), input(3));
    let opts = AttentionOptions {
        causal: true,
        ..Default::default()
    };
    // The first call compiles the pipelines; the second shows the steady cost.
    let t0 = now_ms();
    attention_async(&ctx, q.view(), k.view(), v.view(), &opts).await?;
    let t1 = now_ms();
    let gpu = attention_async(&ctx, q.view(), k.view(), v.view(), &opts).await?;
    let t2 = now_ms();
    let cpu = attention_cpu(q.view(), k.view(), v.view(), &opts)?;
    let t3 = now_ms();
    let max_err = gpu
        .out
        .iter()
        .zip(&cpu.out)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    let info = ctx.adapter_info();
    let adapter = if info.name.is_empty() {
        "unnamed by the browser"
    } else {
        info.name.as_str()
    };
    let (b, h, l, d) = SHAPE;
    Ok(format!(
        "adapter      {adapter} ({:?}, {:?}, subgroup size {}..{})\n\
         problem      causal attention, B={b} H={h} L={l} D={d}\n\
         max |GPU - CPU|  {max_err:.2e}  ({})\n\
         GPU          {:.1} ms first call (compiles kernels), {:.1} ms second call\n\
         CPU          {:.1} ms (f64 reference, in wasm)\n\
         (times include upload and readback)",
        info.backend,
        info.device_type,
        info.subgroup_min_size,
        info.subgroup_max_size,
        if max_err < 1e-4 {
            "within tolerance"
        } else {
            "TOO LARGE"
        },
        t1 - t0,
        t2 - t1,
        t3 - t2,
    ))
}
