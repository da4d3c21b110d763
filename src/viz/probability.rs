//! The check that a matrix holds attention probabilities before it is drawn as one.

use ndarray::ArrayView2;

/// How far a row's sum may stray from 1 (f32 softmax rows of a few thousand keys stay
/// well within this).
const ROW_SUM_TOLERANCE: f64 = 1e-3;

/// Ok when every entry is finite and in [0, 1] and every row sums to 1 (or to 0: a row
/// whose keys are all masked). The error names the first offending row or cell.
pub fn check_probability_rows(m: ArrayView2<f32>) -> Result<(), String> {
    for (i, row) in m.outer_iter().enumerate() {
        if let Some((j, &w)) = row
            .iter()
            .enumerate()
            .find(|(_, w)| !w.is_finite() || **w < 0.0 || **w > 1.0 + ROW_SUM_TOLERANCE as f32)
        {
            return Err(format!(
                "cell ({i}, {j}) is {w}: not a probability (expected attention weights in [0, 1])"
            ));
        }
        let sum: f64 = row.iter().map(|&w| w as f64).sum();
        if sum != 0.0 && (sum - 1.0).abs() > ROW_SUM_TOLERANCE {
            return Err(format!(
                "row {i} sums to {sum:.4}, not 1: not attention weights (softmax rows sum to 1)"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;

    #[test]
    fn softmax_rows_and_fully_masked_rows_pass() {
        assert!(check_probability_rows(array![[0.25f32, 0.75], [0.0, 0.0]].view()).is_ok());
    }

    #[test]
    fn logits_negative_values_and_nan_are_refused_naming_the_place() {
        let e = check_probability_rows(array![[0.5f32, 0.5], [2.0, -1.0]].view()).unwrap_err();
        assert!(e.contains("(1, 0)"), "{e}");
        let e = check_probability_rows(array![[0.5f32, 0.6]].view()).unwrap_err();
        assert!(e.contains("row 0 sums to 1.1"), "{e}");
        let e = check_probability_rows(array![[f32::NAN, 1.0]].view()).unwrap_err();
        assert!(e.contains("NaN"), "{e}");
    }
}
