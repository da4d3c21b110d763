//! Sentences of different lengths as one batch for the encoder: token ids padded to the
//! longest, row-major `(B, L)`, with each sentence's length. The padding rows run through
//! the dense layers with the rest (a row's result depends on that row alone), attention
//! takes each sentence's length as its key length, so no token attends to padding, and
//! pooling reads only the real rows. No sentence is copied per batch on the device.

/// Any id inside the vocabulary would do: padding rows never reach a real token's result.
/// 0 is `[PAD]` in BERT vocabularies.
const PAD_ID: u32 = 0;

/// Token ids `(batch, len)` with the real length of each sentence.
pub(crate) struct PaddedBatch {
    pub ids: Vec<u32>,
    pub len: usize,
    pub lens: Vec<u32>,
}

impl PaddedBatch {
    /// One unpadded sequence.
    pub(crate) fn single(ids: &[u32]) -> Self {
        Self {
            ids: ids.to_vec(),
            len: ids.len(),
            lens: vec![ids.len() as u32],
        }
    }

    /// `sentences` padded to the longest (each already checked: 1 to 2^31 tokens).
    pub(crate) fn new(sentences: &[&[u32]]) -> Self {
        let len = sentences.iter().map(|s| s.len()).max().unwrap_or(0);
        let mut ids = Vec::with_capacity(len * sentences.len());
        for s in sentences {
            ids.extend_from_slice(s);
            ids.resize(ids.len() + len - s.len(), PAD_ID);
        }
        Self {
            ids,
            len,
            lens: sentences.iter().map(|s| s.len() as u32).collect(),
        }
    }

    pub(crate) fn batch(&self) -> usize {
        self.lens.len()
    }

    /// True when no sentence is shorter than the batch's length.
    pub(crate) fn unpadded(&self) -> bool {
        self.lens.iter().all(|&n| n as usize == self.len)
    }
}

/// The order sentence-transformers batches in: longest first (ties in input order), so
/// each batch holds sentences of similar lengths and pads little. Returns indices.
pub(crate) fn longest_first(lens: &[usize]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..lens.len()).collect();
    order.sort_by(|&a, &b| lens[b].cmp(&lens[a]).then(a.cmp(&b)));
    order
}

/// Splits sentences sorted longest first (their `lens`, as [`longest_first`] orders
/// them) into forward passes of at most `batch` sentences each, as index ranges into
/// `lens`, in order.
///
/// Without a `pass_rows` cost: consecutive runs of `batch` (one pass per batch, as
/// sentence-transformers runs). With one: the split that minimises the rows computed,
/// padding included, plus `pass_rows` for each pass, found exactly by dynamic
/// programming over the sorted lengths (a pass's length is its first sentence's). That
/// is the cost of a pass where every row costs the same whatever the batch, as on a
/// CPU adapter: there a batch of 32 sentences of 4 to 60 tokens padded to 60 computes
/// nearly twice its real rows, and cutting it where lengths drop pays for the extra
/// passes.
pub(crate) fn plan_passes(
    lens: &[usize],
    batch: usize,
    pass_rows: Option<usize>,
) -> Vec<std::ops::Range<usize>> {
    let n = lens.len();
    let batch = batch.max(1);
    let Some(pass_rows) = pass_rows else {
        return (0..n)
            .step_by(batch)
            .map(|start| start..(start + batch).min(n))
            .collect();
    };
    // best[i]: the least cost of the first i sentences; from[i]: where its last pass
    // starts. Ties take the later start, so that passes fill from the front as runs of
    // `batch` do.
    let mut best = vec![0u128; n + 1];
    let mut from = vec![0usize; n + 1];
    for i in 1..=n {
        let mut least = u128::MAX;
        for j in i.saturating_sub(batch)..i {
            let rows = (i - j) as u128 * lens[j] as u128;
            let cost = best[j] + pass_rows as u128 + rows;
            if cost <= least {
                least = cost;
                from[i] = j;
            }
        }
        best[i] = least;
    }
    let mut passes = Vec::new();
    let mut end = n;
    while end > 0 {
        passes.push(from[end]..end);
        end = from[end];
    }
    passes.reverse();
    passes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pads_to_the_longest_and_keeps_lengths() {
        let b = PaddedBatch::new(&[&[5, 6], &[7, 8, 9], &[4]]);
        assert_eq!(b.len, 3);
        assert_eq!(b.lens, vec![2, 3, 1]);
        assert_eq!(b.ids, vec![5, 6, PAD_ID, 7, 8, 9, 4, PAD_ID, PAD_ID]);
        assert!(!b.unpadded());
        assert!(PaddedBatch::single(&[1, 2]).unpadded());
        assert_eq!(longest_first(&[2, 3, 1, 3]), vec![1, 3, 0, 2]);
    }

    fn cost(lens: &[usize], passes: &[std::ops::Range<usize>], pass_rows: usize) -> usize {
        passes
            .iter()
            .map(|r| pass_rows + r.len() * lens[r.start])
            .sum()
    }

    fn check_cover(passes: &[std::ops::Range<usize>], n: usize, batch: usize) {
        let mut next = 0;
        for r in passes {
            assert_eq!(r.start, next, "{passes:?}");
            assert!(!r.is_empty() && r.len() <= batch, "{passes:?}");
            next = r.end;
        }
        assert_eq!(next, n, "{passes:?}");
    }

    #[test]
    fn without_a_pass_cost_passes_are_runs_of_the_batch() {
        let lens = [9, 8, 8, 5, 3, 1, 1];
        assert_eq!(plan_passes(&lens, 3, None), vec![0..3, 3..6, 6..7]);
        assert_eq!(plan_passes(&lens, 32, None), vec![0..7]);
        assert!(plan_passes(&[], 4, None).is_empty());
        assert!(plan_passes(&[], 4, Some(24)).is_empty());
    }

    #[test]
    fn a_pass_cost_splits_where_padding_costs_more() {
        // One long sentence and 31 short ones: padding them all to 60 costs 32 x 60 rows.
        let mut lens = vec![60];
        lens.extend([4; 31]);
        assert_eq!(plan_passes(&lens, 32, Some(24)), vec![0..1, 1..32]);
        // Equal lengths never gain from a split.
        assert_eq!(plan_passes(&[7; 10], 4, Some(24)), vec![0..4, 4..8, 8..10]);
        // A pass costlier than any padding keeps whole batches.
        assert_eq!(plan_passes(&lens, 32, Some(1 << 20)), vec![0..32]);
        // Free passes: each sentence alone costs exactly its rows.
        assert_eq!(plan_passes(&[5, 3, 1], 8, Some(0)), vec![0..1, 1..2, 2..3]);
    }

    /// The plan is the cheapest of every split into runs of at most `batch`, checked
    /// by enumerating all of them for short lists.
    #[test]
    fn the_plan_is_the_cheapest_split() {
        let mut seed = 7u64;
        for case in 0..200 {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let n = 1 + (seed >> 60) as usize % 9;
            let mut lens: Vec<usize> = (0..n)
                .map(|i| 1 + ((seed >> (i * 5)) as usize % 64))
                .collect();
            lens.sort_by(|a, b| b.cmp(a));
            let batch = 1 + case % 5;
            let pass_rows = (seed >> 20) as usize % 40;
            let plan = plan_passes(&lens, batch, Some(pass_rows));
            check_cover(&plan, n, batch);
            // Every split: bit i set means a pass starts at sentence i + 1.
            let least = (0..1usize << (n - 1))
                .filter_map(|cuts| {
                    let mut passes = Vec::new();
                    let mut start = 0;
                    for i in 1..n {
                        if cuts >> (i - 1) & 1 == 1 {
                            passes.push(start..i);
                            start = i;
                        }
                    }
                    passes.push(start..n);
                    passes
                        .iter()
                        .all(|r| r.len() <= batch)
                        .then(|| cost(&lens, &passes, pass_rows))
                })
                .min()
                .unwrap();
            assert_eq!(
                cost(&lens, &plan, pass_rows),
                least,
                "{lens:?} batch {batch}"
            );
        }
    }
}
