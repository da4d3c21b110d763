//! Token-level attention aggregated to whole words, as in Clark et al., "What Does BERT
//! Look At? An Analysis of BERT's Attention" (2019, §4): attention *to* a word is the sum
//! of the attention to its pieces, and attention *from* a word is the mean over its
//! pieces. Summing over keys keeps each query's row a probability distribution (the
//! pieces' weights are disjoint parts of the same row); averaging over queries keeps it
//! one too (a mean of distributions), so every word row still sums to 1, and a word cell
//! is exactly 0 exactly when every one of its token cells is (no piece of the query word
//! may look at any piece of the key word: the causal −∞ cells stay where they were).
//! Taking the maximum, or summing over queries, would break one or the other.

use std::ops::Range;

use ndarray::{Array2, ArrayView2};

/// Checks that `groups` tile `0..n` in order with no empty group.
fn check_tiling(groups: &[Range<usize>], n: usize, what: &str) -> Result<(), String> {
    let mut at = 0;
    for (k, g) in groups.iter().enumerate() {
        if g.start != at || g.end <= g.start {
            return Err(format!(
                "{what} word {k} covers tokens {}..{}: the words must cover the {n} tokens in order, each at least one",
                g.start, g.end
            ));
        }
        at = g.end;
    }
    if at != n {
        return Err(format!(
            "the {what} words cover {at} tokens, the weights have {n}"
        ));
    }
    Ok(())
}

/// `weights` (queries × keys, token level) as a (query words × key words) matrix: the
/// mean over each query word's rows of the sum over each key word's columns, computed in
/// float64. `query_words` and `key_words` are the token ranges of each word; they must
/// tile the rows and the columns.
///
/// # Errors
/// A message naming the word when the ranges do not tile the matrix.
pub fn word_attention(
    weights: ArrayView2<f32>,
    query_words: &[Range<usize>],
    key_words: &[Range<usize>],
) -> Result<Array2<f32>, String> {
    let (lq, lk) = weights.dim();
    check_tiling(query_words, lq, "query")?;
    check_tiling(key_words, lk, "key")?;
    let mut out = Array2::<f32>::zeros((query_words.len(), key_words.len()));
    for (a, q) in query_words.iter().enumerate() {
        for (b, k) in key_words.iter().enumerate() {
            let mut sum = 0.0f64;
            let mut any = false;
            for i in q.clone() {
                for j in k.clone() {
                    let w = weights[[i, j]];
                    any |= w != 0.0;
                    sum += f64::from(w);
                }
            }
            let mean = (sum / q.len() as f64) as f32;
            // A mean of subnormal weights can round to 0 in f32; it was not masked.
            out[[a, b]] = if any && mean == 0.0 {
                f32::from_bits(1).copysign(sum as f32)
            } else {
                mean
            };
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;
    use std::slice::from_ref;

    #[test]
    fn pieces_sum_over_keys_and_average_over_queries() {
        // Tokens: [a1 a2] [b]; causal.
        let w = array![[1.0f32, 0.0, 0.0], [0.25, 0.75, 0.0], [0.5, 0.25, 0.25]];
        let words = [0..2, 2..3];
        let m = word_attention(w.view(), &words, &words).unwrap();
        assert_eq!(m, array![[1.0f32, 0.0], [0.75, 0.25]]);
    }

    #[test]
    fn ranges_that_do_not_tile_are_refused() {
        let w = Array2::<f32>::from_elem((3, 3), 1.0 / 3.0);
        assert!(word_attention(w.view(), &[0..1, 2..3], from_ref(&(0..3))).is_err());
        assert!(word_attention(w.view(), from_ref(&(0..3)), from_ref(&(0..2))).is_err());
        assert!(word_attention(w.view(), &[0..0, 0..3], from_ref(&(0..3))).is_err());
    }
}
