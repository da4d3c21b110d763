//! The shapes to run and the seeded inputs both libraries get.

use std::fmt;

use ndarray::Array4;

/// One attention problem: `(B, H, Lq, Lk, D)`, Hkv = H and Dv = D, optionally causal
/// (aligned bottom-right, as burn aligns it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shape {
    pub batch: usize,
    pub heads: usize,
    pub len_q: usize,
    pub len_k: usize,
    pub dim: usize,
    pub causal: bool,
}

/// The default ladder: small and medium prefill, causal prefill, long causal prefill,
/// and one decoding step against a long cache.
pub const DEFAULT_SHAPES: &str =
    "1,8,128,128,64;1,8,512,512,64;1,8,512,512,64,causal;1,8,2048,2048,64,causal;1,8,1,4096,64";

impl Shape {
    /// `B,H,Lq,Lk,D` with an optional `,causal`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let parts: Vec<&str> = s.split(',').map(str::trim).collect();
        let (dims, causal) = match parts.as_slice() {
            [dims @ .., "causal"] => (dims, true),
            dims => (dims, false),
        };
        let dims: Vec<usize> = dims
            .iter()
            .map(|d| {
                d.parse()
                    .map_err(|_| format!("shape '{s}': '{d}' is not a count"))
            })
            .collect::<Result<_, _>>()?;
        match dims.as_slice() {
            &[batch, heads, len_q, len_k, dim] if !dims.contains(&0) => Ok(Self {
                batch,
                heads,
                len_q,
                len_k,
                dim,
                causal,
            }),
            _ => Err(format!(
                "shape '{s}': needs five positive counts B,H,Lq,Lk,D, then optionally ',causal'"
            )),
        }
    }

    /// The shape as `--shapes` takes it.
    pub fn arg(&self) -> String {
        let s = self;
        let causal = if s.causal { ",causal" } else { "" };
        format!(
            "{},{},{},{},{}{causal}",
            s.batch, s.heads, s.len_q, s.len_k, s.dim
        )
    }

    pub fn q_dims(&self) -> [usize; 4] {
        [self.batch, self.heads, self.len_q, self.dim]
    }

    pub fn kv_dims(&self) -> [usize; 4] {
        [self.batch, self.heads, self.len_k, self.dim]
    }

    /// Query/key pairs a causal mask aligned bottom-right allows, per head (all pairs
    /// when not causal).
    pub fn pairs_per_head(&self) -> f64 {
        let (lq, lk) = (self.len_q as u64, self.len_k as u64);
        if !self.causal {
            return (lq * lk) as f64;
        }
        // Row i may see keys 0..=i + Lk - Lq (none where that is negative).
        (0..lq)
            .map(|i| (i + lk + 1).saturating_sub(lq).min(lk))
            .sum::<u64>() as f64
    }

    /// Floating-point operations of one call: `2 * (D + Dv)` per allowed pair (q·k and
    /// weights·v), the same count for both libraries.
    pub fn flops(&self) -> f64 {
        self.pairs_per_head() * (self.batch * self.heads) as f64 * 4.0 * self.dim as f64
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{},{},{},{},{}{}",
            self.batch,
            self.heads,
            self.len_q,
            self.len_k,
            self.dim,
            if self.causal { " causal" } else { "" }
        )
    }
}

/// `n` values from Normal(0, 1), seeded (SplitMix64 and Box-Muller): every run and both
/// libraries see the same numbers.
pub fn normal(n: usize, seed: u64) -> Vec<f32> {
    let mut state = seed;
    let mut uniform = move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    };
    (0..n)
        .map(|_| {
            let (u1, u2) = (uniform().max(1e-300), uniform());
            ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
        })
        .collect()
}

/// One shape's inputs: q, k and v as seeded standard normals (seeds 1, 2, 3), so every
/// process of a run and both libraries see the same numbers.
pub struct Inputs {
    pub q: Array4<f32>,
    pub k: Array4<f32>,
    pub v: Array4<f32>,
}

impl Inputs {
    pub fn new(shape: &Shape) -> Result<Self, String> {
        let array = |d: [usize; 4], seed| {
            Array4::from_shape_vec(d, normal(d.iter().product(), seed)).map_err(|e| e.to_string())
        };
        Ok(Self {
            q: array(shape.q_dims(), 1)?,
            k: array(shape.kv_dims(), 2)?,
            v: array(shape.kv_dims(), 3)?,
        })
    }
}
