//! candle 0.11.1 on the CPU: candle-transformers' BERT (`models::bert`) on MiniLM's
//! safetensors, and its quantized llama (`models::quantized_llama`, GGUF blocks kept
//! quantized, dequantized in its matmuls) on SmolLM2's Q4_1 GGUF. As candle's own
//! examples use them: f32, a padded batch with an attention mask, mean pooling with the
//! mask, greedy decoding one token per forward with its KV cache.

use candle_core::quantized::gguf_file;
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use candle_transformers::models::quantized_llama::ModelWeights;

use crate::inputs::Inputs;
use crate::measure::{BertRun, LlamaRun, median_ms, peak_rss_kib, pool, seconds};

fn c<T>(r: candle_core::Result<T>) -> Result<T, String> {
    r.map_err(|e| e.to_string())
}

fn forward(model: &BertModel, ids: &[u32]) -> Result<Vec<Vec<f32>>, String> {
    let dev = &model.device;
    let input = c(Tensor::new(ids, dev).and_then(|t| t.unsqueeze(0)))?;
    let types = c(input.zeros_like())?;
    let hidden = c(model.forward(&input, &types, None))?;
    c(hidden.squeeze(0).and_then(|h| h.to_vec2::<f32>()))
}

/// The batch padded to its longest, with a mask; mean pooling over the mask, then L2
/// normalisation, in candle.
fn embed_batch(model: &BertModel, batch: &[Vec<u32>]) -> Result<Vec<Vec<f32>>, String> {
    let dev = &model.device;
    let len = batch.iter().map(Vec::len).max().unwrap_or(0);
    let mut ids = Vec::with_capacity(batch.len() * len);
    let mut mask = Vec::with_capacity(batch.len() * len);
    for s in batch {
        ids.extend(
            s.iter()
                .copied()
                .chain(std::iter::repeat(0).take(len - s.len())),
        );
        mask.extend((0..len).map(|i| u32::from(i < s.len())));
    }
    let shape = (batch.len(), len);
    let input = c(Tensor::from_vec(ids, shape, dev))?;
    let mask = c(Tensor::from_vec(mask, shape, dev))?;
    let types = c(input.zeros_like())?;
    let hidden = c(model.forward(&input, &types, Some(&mask)))?;
    let m = c(mask.to_dtype(DType::F32).and_then(|m| m.unsqueeze(2)))?;
    let summed = c(hidden.broadcast_mul(&m).and_then(|h| h.sum(1)))?;
    let counts = c(m.sum(1))?;
    let mean = c(summed.broadcast_div(&counts))?;
    let norm = c(mean
        .sqr()
        .and_then(|s| s.sum_keepdim(1))
        .and_then(|s| s.sqrt()))?;
    c(mean.broadcast_div(&norm).and_then(|e| e.to_vec2::<f32>()))
}

pub fn bert(inputs: &Inputs) -> Result<BertRun, String> {
    let dev = Device::Cpu;
    let (model, load_s) = seconds(|| {
        let config = std::fs::read_to_string(inputs.bert_dir.join("config.json"))
            .map_err(|e| e.to_string())?;
        let config: Config = serde_json::from_str(&config).map_err(|e| e.to_string())?;
        let weights = inputs.bert_dir.join("model.safetensors");
        // SAFETY: the file is not modified while mapped (the model cache is read-only here).
        let vb = c(unsafe { VarBuilder::from_mmaped_safetensors(&[weights], DType::F32, &dev) })?;
        c(BertModel::load(vb, &config))
    })?;
    let (rows, l8_ms, first_ms) = median_ms(inputs.iters, || forward(&model, &inputs.l8))?;
    let (_, l128_ms, _) = median_ms(inputs.iters, || forward(&model, &inputs.l128))?;
    let (batch, batch_ms, _) = median_ms(inputs.iters, || embed_batch(&model, &inputs.batch))?;
    let mut embeddings = vec![pool(&rows)];
    embeddings.extend(batch);
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

/// The most likely token; ties go to the lower id, as in this crate's greedy sampler.
fn argmax(logits: &Tensor) -> Result<u32, String> {
    let v = c(logits
        .squeeze(0)
        .and_then(|l| l.to_dtype(DType::F32))
        .and_then(|l| l.to_vec1::<f32>()))?;
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    Ok(best as u32)
}

pub fn llama(inputs: &Inputs) -> Result<LlamaRun, String> {
    let dev = Device::Cpu;
    let (mut model, load_s) = seconds(|| {
        let mut file = std::fs::File::open(&inputs.gguf).map_err(|e| e.to_string())?;
        let content = c(gguf_file::Content::read(&mut file))?;
        c(ModelWeights::from_gguf(content, &mut file, &dev))
    })?;
    let prompt = &inputs.prompt;
    let (first, prompt_s) = seconds(|| {
        let input = c(Tensor::new(prompt.as_slice(), &dev).and_then(|t| t.unsqueeze(0)))?;
        argmax(&c(model.forward(&input, 0))?)
    })?;
    let mut tokens = vec![first];
    let (_, generate_s) = seconds(|| {
        while tokens.len() < inputs.gen_tokens {
            let last = *tokens.last().unwrap_or(&first);
            let input = c(Tensor::new(&[last], &dev).and_then(|t| t.unsqueeze(0)))?;
            let pos = prompt.len() + tokens.len() - 1;
            tokens.push(argmax(&c(model.forward(&input, pos))?)?);
        }
        Ok(())
    })?;
    Ok(LlamaRun {
        load_s,
        prompt_tokens: prompt.len(),
        prompt_s,
        tokens,
        generate_s,
        peak_rss_kib: peak_rss_kib(),
    })
}
