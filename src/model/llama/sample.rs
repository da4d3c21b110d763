//! Picking the next token from logits: greedy, or a seeded draw at a temperature over the
//! top k. The generator is splitmix64, so a seed gives the same tokens on every platform.

use crate::model::{ModelError, Sampling};

/// splitmix64 (Steele, Lea and Flood): a tiny generator with a full 2^64 period.
#[derive(Debug, Clone)]
pub(crate) struct SplitMix64(u64);

impl SplitMix64 {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)` from the top 53 bits.
    pub(crate) fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Checks the sampling options.
///
/// # Errors
/// [`ModelError::Input`] naming `--temperature` when it is not a finite positive number.
pub(crate) fn check(s: &Sampling) -> Result<(), ModelError> {
    if let Sampling::Sample { temperature, .. } = *s {
        if !(temperature.is_finite() && temperature > 0.0) {
            return Err(ModelError::input(
                "--temperature",
                format!("must be a finite number above 0, got {temperature}"),
            ));
        }
    }
    Ok(())
}

/// The token picker of one generation run.
#[derive(Debug, Clone)]
pub(crate) struct Sampler {
    sampling: Sampling,
    rng: SplitMix64,
}

impl Sampler {
    pub(crate) fn new(sampling: Sampling) -> Self {
        let seed = match sampling {
            Sampling::Sample { seed, .. } => seed,
            Sampling::Greedy => 0,
        };
        Self {
            sampling,
            rng: SplitMix64::new(seed),
        }
    }

    /// The next token. NaN logits never win: they rank below every number.
    pub(crate) fn pick(&mut self, logits: &[f32]) -> u32 {
        match self.sampling {
            Sampling::Greedy => argmax(logits),
            Sampling::Sample {
                temperature, top_k, ..
            } => {
                let mut order: Vec<u32> = (0..logits.len() as u32).collect();
                let key = |i: &u32| {
                    let v = logits[*i as usize];
                    if v.is_nan() {
                        f32::NEG_INFINITY
                    } else {
                        v
                    }
                };
                // Highest first; ties to the lower id (the sort is stable).
                order.sort_by(|a, b| key(b).total_cmp(&key(a)));
                if top_k > 0 {
                    order.truncate(top_k);
                }
                let t = f64::from(temperature);
                let max = order.first().map_or(0.0, |i| f64::from(key(i)));
                let weights: Vec<f64> = order
                    .iter()
                    .map(|i| ((f64::from(key(i)) - max) / t).exp())
                    .collect();
                let total: f64 = weights.iter().sum();
                let mut u = self.rng.next_f64() * total;
                for (i, w) in order.iter().zip(&weights) {
                    if u < *w {
                        return *i;
                    }
                    u -= w;
                }
                order.first().copied().unwrap_or(0)
            }
        }
    }
}

/// The index of the largest logit, the lowest on ties.
pub(crate) fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0usize;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] || (logits[best].is_nan() && !v.is_nan()) {
            best = i;
        }
    }
    best as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argmax_takes_the_lowest_id_on_ties_and_skips_nan() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
        assert_eq!(argmax(&[f32::NAN, 0.5, 0.7]), 2);
    }

    #[test]
    fn a_seed_gives_the_same_draws_and_top_k_bounds_them() {
        let logits: Vec<f32> = (0..50).map(|i| (i % 7) as f32).collect();
        let s = Sampling::Sample {
            temperature: 1.0,
            top_k: 3,
            seed: 42,
        };
        let (mut a, mut b) = (Sampler::new(s), Sampler::new(s));
        let da: Vec<u32> = (0..20).map(|_| a.pick(&logits)).collect();
        let db: Vec<u32> = (0..20).map(|_| b.pick(&logits)).collect();
        assert_eq!(da, db);
        // The top 3 are the lowest ids with logit 6: 6, 13, 20.
        assert!(da.iter().all(|t| [6, 13, 20].contains(t)), "{da:?}");
        assert!(da.iter().any(|&t| t != da[0]), "all draws equal: {da:?}");
    }
}
