//! wgpu-attention on the default adapter (here lavapipe, Mesa's Vulkan driver on the
//! CPU): MiniLM's GPU forward (`BertGpu::forward`) and batched sentence embeddings
//! (`BertGpu::embed_ids`, key padding per sentence), SmolLM2's GPU generation with the KV
//! cache (`LlamaGpu::generate`, greedy, end-of-sequence ignored so both sides make the
//! same number of tokens).

use wgpu_attention::GpuContext;
use wgpu_attention::model::bert::{BertModel, Pooling};
use wgpu_attention::model::llama::LlamaModel;
use wgpu_attention::model::{GenerateOptions, Sampling};

use crate::inputs::Inputs;
use crate::measure::{BertRun, LlamaRun, median_ms, peak_rss_kib, pool, seconds};

fn s<T, E: std::fmt::Display>(r: Result<T, E>) -> Result<T, String> {
    r.map_err(|e| e.to_string())
}

pub fn adapter() -> Result<(GpuContext, String), String> {
    let ctx = s(GpuContext::new())?;
    let name = ctx.adapter_info().name.clone();
    Ok((ctx, name))
}

pub fn bert(inputs: &Inputs) -> Result<BertRun, String> {
    let (ctx, _) = adapter()?;
    let ((model, weights), load_s) = seconds(|| {
        let model = s(BertModel::load(&inputs.bert_dir))?;
        let weights = s(model.upload(&ctx))?;
        Ok((model, weights))
    })?;
    let forward = |ids: &[u32]| -> Result<Vec<Vec<f32>>, String> {
        let out = s(pollster::block_on(weights.forward(&ctx, ids, false)))?;
        Ok(out.hidden.rows().into_iter().map(|r| r.to_vec()).collect())
    };
    let (rows, l8_ms, first_ms) = median_ms(inputs.iters, || forward(&inputs.l8))?;
    let (_, l128_ms, _) = median_ms(inputs.iters, || forward(&inputs.l128))?;
    let pooling = model.sentence_config().pooling;
    assert_eq!(pooling, Pooling::MEAN_NORMALIZED, "MiniLM's modules.json");
    let (batch, batch_ms, _) = median_ms(inputs.iters, || {
        s(pollster::block_on(weights.embed_ids(
            &ctx,
            &inputs.batch,
            pooling,
            32,
        )))
    })?;
    let mut embeddings = vec![pool(&rows)];
    embeddings.extend(batch.rows().into_iter().map(|r| r.to_vec()));
    Ok(BertRun {
        load_s,
        l8_ms,
        l128_ms,
        batch_ms,
        first_ms,
        embeddings,
        peak_rss_kib: peak_rss_kib(),
    })
}

pub fn llama(inputs: &Inputs) -> Result<LlamaRun, String> {
    let (ctx, _) = adapter()?;
    let (weights, load_s) = seconds(|| {
        let model = s(LlamaModel::load(&inputs.gguf))?;
        s(model.upload(&ctx))
    })?;
    let opts = GenerateOptions {
        max_new_tokens: inputs.gen_tokens,
        sampling: Sampling::Greedy,
        use_cache: true,
        stop_at_eos: false,
    };
    let mut tokens = Vec::new();
    let stats = s(pollster::block_on(weights.generate(
        &ctx,
        &inputs.prompt,
        &opts,
        &mut |t| tokens.push(t),
    )))?;
    Ok(LlamaRun {
        load_s,
        prompt_tokens: stats.prompt_tokens,
        prompt_s: stats.prompt_seconds,
        tokens,
        generate_s: stats.generate_seconds,
        peak_rss_kib: peak_rss_kib(),
    })
}
