//! The table: each measure for both libraries and their ratio, oriented so that above 1
//! always means wgpu-attention is faster (or smaller); then whether the outputs agree.

use crate::Runs;
use crate::inputs::Inputs;
use crate::measure::{BertRun, LlamaRun};

/// The run with the median of `key` (the lower middle for an even count).
fn median_by<T: Clone>(runs: &[T], key: impl Fn(&T) -> f64) -> Option<T> {
    let mut sorted: Vec<&T> = runs.iter().collect();
    sorted.sort_by(|a, b| key(a).total_cmp(&key(b)));
    sorted
        .get(sorted.len().saturating_sub(1) / 2)
        .map(|r| (*r).clone())
}

fn rate(n: usize, s: f64) -> f64 {
    if s > 0.0 { n as f64 / s } else { f64::NAN }
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot = |x: &[f32], y: &[f32]| {
        x.iter()
            .zip(y)
            .map(|(&p, &q)| f64::from(p) * f64::from(q))
            .sum::<f64>()
    };
    dot(a, b) / (dot(a, a) * dot(b, b)).sqrt()
}

fn bert_agreement(ours: &BertRun, candle: &BertRun) -> String {
    let mut worst = (0usize, 0.0f64, 1.0f64);
    for (i, (a, b)) in ours.embeddings.iter().zip(&candle.embeddings).enumerate() {
        let diff = a
            .iter()
            .zip(b)
            .map(|(x, y)| f64::from((x - y).abs()))
            .fold(0.0, f64::max);
        let cos = cosine(a, b);
        if diff > worst.1 {
            worst.0 = i;
            worst.1 = diff;
        }
        worst.2 = worst.2.min(cos);
    }
    format!(
        "MiniLM embeddings (the L = 8 sentence and the batch's 32): largest |difference| {:.2e} (row {}), smallest cosine {:.8}",
        worst.1, worst.0, worst.2
    )
}

fn llama_agreement(ours: &LlamaRun, candle: &LlamaRun) -> String {
    match ours
        .tokens
        .iter()
        .zip(&candle.tokens)
        .position(|(a, b)| a != b)
    {
        None if ours.tokens.len() == candle.tokens.len() => {
            format!("SmolLM2 greedy tokens: all {} agree", ours.tokens.len())
        }
        None => format!(
            "SmolLM2 greedy tokens: the first {} agree; counts differ ({} against {})",
            ours.tokens.len().min(candle.tokens.len()),
            ours.tokens.len(),
            candle.tokens.len()
        ),
        Some(i) => format!(
            "SmolLM2 greedy tokens differ from token {i} on: wgpu-attention {:?}, candle {:?}",
            &ours.tokens[i..],
            &candle.tokens[i..]
        ),
    }
}

pub fn print(adapter: &str, inputs: &Inputs, ours: &Runs, candle: &Runs) {
    let (Some(ob), Some(cb)) = (
        median_by(&ours.bert, |r| r.l128_ms),
        median_by(&candle.bert, |r| r.l128_ms),
    ) else {
        eprintln!("no MiniLM runs");
        return;
    };
    let (Some(ol), Some(cl)) = (
        median_by(&ours.llama, |r| r.generate_s),
        median_by(&candle.llama, |r| r.generate_s),
    ) else {
        eprintln!("no SmolLM2 runs");
        return;
    };
    let n = inputs.batch.len();
    let mib = |k: u64| k as f64 / 1024.0;
    let per_step = |r: &LlamaRun| rate(r.tokens.len().saturating_sub(1), r.generate_s);
    // (measure, candle, ours, ratio with > 1 meaning ours is faster or smaller)
    let rows: Vec<(String, f64, f64, f64)> = vec![
        (
            "MiniLM load + upload (s)".into(),
            cb.load_s,
            ob.load_s,
            cb.load_s / ob.load_s,
        ),
        (
            "MiniLM first forward, L = 8 (ms)".into(),
            cb.first_ms,
            ob.first_ms,
            cb.first_ms / ob.first_ms,
        ),
        (
            "MiniLM forward, L = 8 (ms)".into(),
            cb.l8_ms,
            ob.l8_ms,
            cb.l8_ms / ob.l8_ms,
        ),
        (
            "MiniLM forward, L = 128 (ms)".into(),
            cb.l128_ms,
            ob.l128_ms,
            cb.l128_ms / ob.l128_ms,
        ),
        (
            format!("MiniLM embed, batch of {n} (ms)"),
            cb.batch_ms,
            ob.batch_ms,
            cb.batch_ms / ob.batch_ms,
        ),
        (
            "MiniLM peak RSS (MiB)".into(),
            mib(cb.peak_rss_kib),
            mib(ob.peak_rss_kib),
            cb.peak_rss_kib as f64 / ob.peak_rss_kib as f64,
        ),
        (
            "SmolLM2 load + upload (s)".into(),
            cl.load_s,
            ol.load_s,
            cl.load_s / ol.load_s,
        ),
        (
            format!("SmolLM2 prompt, {} tokens (tokens/s)", cl.prompt_tokens),
            rate(cl.prompt_tokens, cl.prompt_s),
            rate(ol.prompt_tokens, ol.prompt_s),
            rate(ol.prompt_tokens, ol.prompt_s) / rate(cl.prompt_tokens, cl.prompt_s),
        ),
        (
            format!(
                "SmolLM2 greedy generation, {} tokens (tokens/s)",
                cl.tokens.len()
            ),
            per_step(&cl),
            per_step(&ol),
            per_step(&ol) / per_step(&cl),
        ),
        (
            "SmolLM2 peak RSS (MiB)".into(),
            mib(cl.peak_rss_kib),
            mib(ol.peak_rss_kib),
            cl.peak_rss_kib as f64 / ol.peak_rss_kib as f64,
        ),
    ];
    eprintln!();
    eprintln!(
        "| measure | candle 0.11.1 (CPU) | wgpu-attention ({adapter}) | ratio (> 1: wgpu-attention faster or smaller) |"
    );
    eprintln!("| --- | ---: | ---: | ---: |");
    for (name, c, o, r) in rows {
        eprintln!("| {name} | {c:.2} | {o:.2} | {r:.2} |");
    }
    eprintln!();
    eprintln!("{}", bert_agreement(&ob, &cb));
    eprintln!("{}", llama_agreement(&ol, &cl));
}
