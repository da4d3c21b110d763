//! What one child measures and reports (one JSON object on stdout), the clock, and the
//! process's peak resident memory.

use std::time::Instant;

use serde::{Deserialize, Serialize};

/// MiniLM: load, forward medians, and the embeddings for the agreement check.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct BertRun {
    pub load_s: f64,
    pub l8_ms: f64,
    pub l128_ms: f64,
    pub batch_ms: f64,
    /// The first call at L = 8 (pipeline builds and tuning on the GPU side).
    pub first_ms: f64,
    /// Mean-pooled, L2-normalised embeddings: the L = 8 sentence, then the batch's 32.
    pub embeddings: Vec<Vec<f32>>,
    pub peak_rss_kib: u64,
}

/// SmolLM2: load, prompt and greedy generation.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LlamaRun {
    pub load_s: f64,
    pub prompt_tokens: usize,
    pub prompt_s: f64,
    pub tokens: Vec<u32>,
    /// Seconds for the tokens after the first (each one step with the KV cache).
    pub generate_s: f64,
    pub peak_rss_kib: u64,
}

pub fn seconds<T>(f: impl FnOnce() -> Result<T, String>) -> Result<(T, f64), String> {
    let start = Instant::now();
    let v = f()?;
    Ok((v, start.elapsed().as_secs_f64()))
}

/// The median of `iters` calls after one untimed call, in milliseconds; and the untimed
/// call's result and time.
pub fn median_ms<T>(
    iters: usize,
    mut f: impl FnMut() -> Result<T, String>,
) -> Result<(T, f64, f64), String> {
    let (first, first_s) = seconds(&mut f)?;
    let mut samples = Vec::with_capacity(iters);
    for _ in 0..iters.max(1) {
        samples.push(seconds(&mut f)?.1 * 1e3);
    }
    samples.sort_by(f64::total_cmp);
    Ok((first, samples[samples.len() / 2], first_s * 1e3))
}

/// VmHWM of this process (KiB): its peak resident set, which on a software Vulkan driver
/// includes what the "device" holds.
pub fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Mean over the real tokens and L2 normalisation, in f64 (both sides' hidden states
/// go through this same function for the agreement check; each side's timed batch does
/// its own pooling).
pub fn pool(rows: &[Vec<f32>]) -> Vec<f32> {
    let width = rows.first().map_or(0, Vec::len);
    let mut sum = vec![0.0f64; width];
    for r in rows {
        for (s, &v) in sum.iter_mut().zip(r) {
            *s += f64::from(v);
        }
    }
    let n = rows.len().max(1) as f64;
    let norm = sum
        .iter()
        .map(|s| (s / n).powi(2))
        .sum::<f64>()
        .sqrt()
        .max(1e-12);
    sum.iter().map(|s| (s / n / norm) as f32).collect()
}
