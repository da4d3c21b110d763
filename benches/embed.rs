//! MiniLM sentence embeddings on the GPU (`BertGpu::embed_ids`): what a batch costs by
//! its shape, and 32 sentences of mixed lengths embedded in batches of 32, 8 and 1, in
//! one run. Each batch of `B` sentences is one forward pass over `B x L` rows (`L` its
//! longest sentence, key padding for the rest), so the grid shows what rows, padding and
//! sentences each cost on this adapter; every timing is the median of three after one
//! untimed call (which builds the pipelines), and each batch's embeddings are checked
//! against the same sentences embedded one at a time (within 1e-5).
//!
//! Needs the fetched model (scripts/fetch-models.sh). `cargo bench --bench embed`; the
//! fused attention kernel the model's passes take can be chosen with
//! `WGPU_ATTENTION_KERNEL=rows|tiled|lanes` (see `FusedKernel`).

use std::time::Instant;

use ndarray::Array2;
use wgpu_attention::model::bert::{BertGpu, BertModel, Pooling};
use wgpu_attention::model::resolve_model_path;
use wgpu_attention::GpuContext;

/// Uniform batches: (sentences, tokens each).
const GRID: &[(usize, usize)] = &[
    (1, 8),
    (1, 32),
    (1, 64),
    (8, 8),
    (8, 32),
    (32, 8),
    (32, 32),
    (16, 64),
];

/// A sentence of `len` ids ([CLS] .. [SEP]), different for each `seed`.
fn sentence(len: usize, seed: usize) -> Vec<u32> {
    let mut ids = vec![101];
    ids.extend((0..len - 2).map(|i| 2000 + ((i * 7 + seed * 13) % 5000) as u32));
    ids.push(102);
    ids
}

struct Embedder<'a> {
    ctx: &'a GpuContext,
    weights: &'a BertGpu,
    pooling: Pooling,
}

impl Embedder<'_> {
    fn embed(&self, ids: &[Vec<u32>], batch: usize) -> Array2<f32> {
        pollster::block_on(self.weights.embed_ids(self.ctx, ids, self.pooling, batch))
            .expect("embedding failed")
    }

    /// The median of three timed calls after an untimed one, in ms, and the embeddings.
    fn time(&self, ids: &[Vec<u32>], batch: usize) -> (f64, Array2<f32>) {
        let out = self.embed(ids, batch);
        let mut times: Vec<f64> = (0..3)
            .map(|_| {
                let t = Instant::now();
                self.embed(ids, batch);
                t.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        times.sort_by(f64::total_cmp);
        (times[1], out)
    }
}

fn largest_difference(a: &Array2<f32>, b: &Array2<f32>) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn main() {
    let ctx = GpuContext::new().expect("no GPU adapter");
    let info = ctx.adapter_info();
    println!("adapter: {} ({})", info.name, info.driver_info);
    let path = resolve_model_path("minilm").expect("MiniLM: run scripts/fetch-models.sh");
    let model = BertModel::load(&path).expect("loading MiniLM");
    let weights = model.upload(&ctx).expect("uploading MiniLM");
    let e = Embedder {
        ctx: &ctx,
        weights: &weights,
        pooling: model.sentence_config().pooling,
    };
    for &(b, l) in GRID {
        let ids: Vec<Vec<u32>> = (0..b).map(|i| sentence(l, i)).collect();
        let (ms, _) = e.time(&ids, b);
        println!(
            "B {b:>2} x L {l:>2}: {ms:7.1} ms, {:.2} ms a row, {:.1} ms a sentence",
            ms / (b * l) as f64,
            ms / b as f64
        );
    }
    // 32 sentences of 4 to 60 tokens.
    let lens: Vec<usize> = (0..32).map(|i| 4 + (i * 37) % 57).collect();
    let ids: Vec<Vec<u32>> = lens
        .iter()
        .enumerate()
        .map(|(i, &l)| sentence(l, i))
        .collect();
    let tokens: usize = lens.iter().sum();
    let (alone_ms, alone) = e.time(&ids, 1);
    for batch in [32, 8, 1] {
        let (ms, out) = if batch == 1 {
            (alone_ms, alone.clone())
        } else {
            e.time(&ids, batch)
        };
        let diff = largest_difference(&out, &alone);
        assert!(diff < 1e-5, "batch {batch}: {diff} from one at a time");
        println!(
            "32 mixed sentences ({tokens} tokens), batch {batch:>2}: {ms:7.1} ms, {:.1} ms a sentence, {:.2}x one at a time (largest difference {diff:.1e})",
            ms / 32.0,
            alone_ms / ms
        );
    }
}
