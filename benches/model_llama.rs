//! SmolLM2-135M generation speed, with and without the KV cache, GPU and CPU, in one run
//! on the same prompt: each pair must yield the same tokens (checked here), and the
//! cached run's time per generated token is compared with the recomputing run's.
//!
//! Needs the fetched model (scripts/fetch-models.sh). `cargo bench --bench model_llama`;
//! `LLAMA_BENCH_TOKENS` (default 64) new tokens on the GPU, `LLAMA_BENCH_CPU_TOKENS`
//! (default 16) on the CPU, whose recomputing run is slow. `LLAMA_BENCH_PROFILE=1` first
//! times single forward passes of 1, 5, 6 and 16 tokens.

use std::time::Instant;

use wgpu_attention::model::llama::LlamaModel;
use wgpu_attention::model::{resolve_model_path, GenerateOptions, GenerateStats};
use wgpu_attention::GpuContext;

const PROMPT: &str = "The capital of France is";

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn opts(n: usize, use_cache: bool) -> GenerateOptions {
    GenerateOptions {
        max_new_tokens: n,
        use_cache,
        stop_at_eos: false,
        ..Default::default()
    }
}

fn report(what: &str, s: &GenerateStats) -> f64 {
    let per = s.generate_seconds / (s.generated.len().max(2) - 1) as f64;
    println!(
        "{what}: prompt {} tokens in {:.3} s ({:.1} tok/s); {} new tokens, {:.1} ms/token after the first ({:.2} tok/s)",
        s.prompt_tokens,
        s.prompt_seconds,
        s.prompt_tokens as f64 / s.prompt_seconds,
        s.generated.len(),
        per * 1e3,
        1.0 / per
    );
    per
}

fn main() {
    let path = resolve_model_path("smollm2").expect("run scripts/fetch-models.sh first");
    let t = Instant::now();
    let model = LlamaModel::load(&path).expect("load");
    println!("load: {:.2} s", t.elapsed().as_secs_f64());
    let prompt: Vec<u32> = model
        .tokenize(PROMPT)
        .expect("tokenize")
        .iter()
        .map(|t| t.id)
        .collect();
    let ctx = GpuContext::new().expect("no GPU adapter");
    println!("adapter: {}", ctx.adapter_info().name);
    let t = Instant::now();
    let gpu = model.upload(&ctx).expect("upload");
    println!("upload: {:.2} s", t.elapsed().as_secs_f64());
    let (device, file) = (gpu.weight_bytes(), model.tensors().bytes());
    println!(
        "weights on the device: {:.1} MB for {:.1} MB of tensors in the file ({:.3}x)",
        device as f64 / 1e6,
        file as f64 / 1e6,
        device as f64 / file as f64
    );
    if std::env::var("LLAMA_BENCH_PROFILE").is_ok() {
        for l in [5, 5, 6, 6, 1, 1, 16, 16] {
            let ids = vec![504u32; l];
            for attention in [false, true] {
                let t = Instant::now();
                pollster::block_on(gpu.forward(&ctx, &ids, attention)).expect("forward");
                println!(
                    "forward L = {l}, attention {attention}: {:.3} s",
                    t.elapsed().as_secs_f64()
                );
            }
        }
    }
    // Warm-up: compiles every pipeline.
    pollster::block_on(gpu.generate(&ctx, &prompt, &opts(2, true), &mut |_| {})).expect("warm");

    let n = env("LLAMA_BENCH_TOKENS", 64);
    let gen = |use_cache| {
        pollster::block_on(gpu.generate(&ctx, &prompt, &opts(n, use_cache), &mut |_| {}))
            .expect("generate")
    };
    let (cached, full) = (gen(true), gen(false));
    assert_eq!(
        cached.generated, full.generated,
        "gpu: cached and recomputed tokens differ"
    );
    let (a, b) = (
        report("gpu cached", &cached),
        report("gpu recomputed", &full),
    );
    println!(
        "gpu: the cache is {:.1}x faster per token over {n} tokens",
        b / a
    );
    println!(
        "text: {:?}",
        model.decode(&cached.generated).expect("decode")
    );

    let n = env("LLAMA_BENCH_CPU_TOKENS", 16);
    let t = Instant::now();
    model.weights();
    println!(
        "dequantize for the CPU path: {:.2} s",
        t.elapsed().as_secs_f64()
    );
    let gen = |use_cache| {
        model
            .generate_cpu(&prompt, &opts(n, use_cache), &mut |_| {})
            .expect("generate")
    };
    let (cached, full) = (gen(true), gen(false));
    assert_eq!(
        cached.generated, full.generated,
        "cpu: cached and recomputed tokens differ"
    );
    let (a, b) = (
        report("cpu cached", &cached),
        report("cpu recomputed", &full),
    );
    println!(
        "cpu: the cache is {:.1}x faster per token over {n} tokens",
        b / a
    );
}
