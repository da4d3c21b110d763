//! The lab's built-in model: a small, untrained embedding for the lecture's sentences.
//! Words become vectors by a seeded hash of their lowercase spelling plus a sinusoidal
//! position code; fixed seeded projections give four query heads over two key/value
//! heads of width 8. It shows what attention computes, not what a trained model learned:
//! the page says so.

use ndarray::{Array2, Array3, Array4};

pub const EMBED: usize = 32;
pub const HEADS: usize = 4;
pub const KV_HEADS: usize = 2;
pub const HEAD_DIM: usize = 8;
pub const MAX_TOKENS: usize = 64;

/// Words and punctuation: "I love AI !" gives I, love, AI, !; "fish;" gives fish and ;.
pub fn tokenize(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for word in text.split_whitespace() {
        let mut cur = String::new();
        for c in word.chars() {
            if c.is_ascii_punctuation() || matches!(c, '。' | '、' | '！' | '？') {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                out.push(c.to_string());
            } else {
                cur.push(c);
            }
        }
        if !cur.is_empty() {
            out.push(cur);
        }
    }
    out
}

/// The tokens of each whitespace-delimited word of `text`, as ranges of [`tokenize`]'s
/// tokens: punctuation belongs to the word it touches ("fish;" is one word of two tokens),
/// as in the real models' word view.
pub fn word_ranges(text: &str) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut at = 0;
    for word in text.split_whitespace() {
        let n = tokenize(word).len();
        if n > 0 {
            out.push(at..at + n);
            at += n;
        }
    }
    out
}

/// A splitmix64 stream: the same seed always gives the same numbers.
struct Stream(u64);

impl Stream {
    fn next(&mut self) -> f32 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        // Uniform in [-1, 1), scaled to unit variance.
        ((z >> 40) as f32 / (1u64 << 23) as f32 - 1.0) * 3f32.sqrt()
    }
}

fn hash(word: &str) -> u64 {
    word.to_lowercase()
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325, |h, b| {
            (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
        })
}

/// `(1, L, EMBED)`: each token's word vector plus its position code.
pub fn embed(tokens: &[String]) -> Array3<f32> {
    let mut x = Array3::zeros((1, tokens.len(), EMBED));
    for (i, t) in tokens.iter().enumerate() {
        let mut s = Stream(hash(t));
        for c in 0..EMBED {
            let freq = 1.0 / 10_000f32.powf((c / 2 * 2) as f32 / EMBED as f32);
            let pos = if c % 2 == 0 {
                (i as f32 * freq).sin()
            } else {
                (i as f32 * freq).cos()
            };
            x[[0, i, c]] = s.next() + 0.5 * pos;
        }
    }
    x
}

/// A seeded `(rows, EMBED)` projection scaled so projected entries have unit variance.
pub fn projection(seed: u64, rows: usize) -> Array2<f32> {
    let mut s = Stream(seed);
    let scale = 1.0 / (EMBED as f32).sqrt();
    Array2::from_shape_fn((rows, EMBED), |_| s.next() * scale)
}

/// Splits `x W^T` `(1, L, heads·D)` into heads `(1, heads, L, D)`.
pub fn heads(x: &Array3<f32>, w: &Array2<f32>, heads: usize) -> Array4<f32> {
    let l = x.shape()[1];
    let x2 = x.index_axis(ndarray::Axis(0), 0);
    let y = x2.dot(&w.t());
    Array4::from_shape_fn((1, heads, l, HEAD_DIM), |(_, h, i, d)| {
        y[[i, h * HEAD_DIM + d]]
    })
}

pub const WQ: u64 = 11;
pub const WK: u64 = 12;
pub const WV: u64 = 13;
pub const WO: u64 = 14;
