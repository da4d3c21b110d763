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
}
