//! Attention rollout (Abnar & Zuidema, "Quantifying Attention Flow in Transformers", 2020,
//! §3): how much each output token draws on each input token through all layers, when the
//! residual connection is counted as attention of a token to itself.
//!
//! For layer `l` with attention `A_l` (the mean over its heads), the residual-augmented
//! matrix is `Â_l = (1 − r)·A_l + r·I` (`r` = 0.5 in the paper: `0.5·A + 0.5·I`, the
//! identity added and the rows renormalised), and the rollout is the product from the
//! first layer up: `R_0 = Â_0`, `R_l = Â_l · R_(l−1)`, so `R = Â_(n−1) ⋯ Â_1 · Â_0`. Row `i`
//! of `R` says where output token `i`'s representation came from; when every `A_l` row
//! is a probability distribution, so is every row of `R`. Causal attention is
//! lower-triangular, so `R` is too (its upper cells are exactly 0).

use ndarray::{Array2, Array3, ArrayD, ArrayView2, ArrayViewD, Axis, Dimension};

use super::layers::self_attention;
use crate::error::{AttentionError, Result};

/// How [`attention_rollout`] combines the layers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RolloutOptions {
    /// The weight `r` of the identity in `Â = (1 − r)·A + r·I`: 0.5 by default (the
    /// paper's), 0 multiplies the attention matrices alone, 1 gives the identity. Must be
    /// in [0, 1].
    pub residual: f64,
    /// Average the heads of each layer before the product (the paper's rollout, one
    /// (L, L) matrix; the default). When false, each head is rolled out on its own
    /// through the layers (head `h` of every layer), giving (heads, L, L).
    pub average_heads: bool,
}

impl Default for RolloutOptions {
    fn default() -> Self {
        Self {
            residual: 0.5,
            average_heads: true,
        }
    }
}

impl RolloutOptions {
    /// Ok when the residual weight is a number in [0, 1].
    ///
    /// # Errors
    /// [`AttentionError::InvalidOption`] naming `residual`.
    pub fn validate(&self) -> Result<()> {
        if self.residual.is_finite() && (0.0..=1.0).contains(&self.residual) {
            Ok(())
        } else {
            Err(AttentionError::option(
                "residual",
                format!("must be a number in [0, 1], got {}", self.residual),
            ))
        }
    }
}

/// The attention rollout of `attention`, shaped `(layers, heads, L, L)` as the models'
/// forward passes return it (and `model attention` writes it): `(L, L)` with heads
/// averaged (the default), `(heads, L, L)` without. Computed in float64, returned as f32.
///
/// Any finite weights are accepted: rows need not sum to 1 (a row of padding or a row whose
/// keys are all masked sums to 0), negative values are not refused, and nothing is
/// renormalised; `Â = (1 − r)·A + r·I` is used as it is written, which equals "add the
/// identity and renormalise the rows" exactly when the rows of `A` sum to 1, and then
/// every row of the result sums to 1 too.
///
/// # Errors
/// [`AttentionError::Shape`] naming `attention` when it is not of rank 4, is empty (no
/// layer, head or token), or is not square in its last two axes (queries and keys
/// differ: rollout follows a token through self-attention);
/// [`AttentionError::InvalidOption`] naming `attention` when it holds NaN or ±inf (the
/// first such cell is named), or when the product leaves f32's range, and naming
/// `residual` when that is not in [0, 1]. No input panics.
pub fn attention_rollout(
    attention: ArrayViewD<'_, f32>,
    options: &RolloutOptions,
) -> Result<ArrayD<f32>> {
    options.validate()?;
    let a = self_attention(attention, "rollout needs")?;
    let (_, heads, lq, _) = a.dim();
    let r = options.residual;
    let n = lq;
    // Â = (1 − r)·A + r·I, in f64.
    let augment = |mut m: Array2<f64>| {
        m.mapv_inplace(|x| (1.0 - r) * x);
        for i in 0..n {
            m[[i, i]] += r;
        }
        m
    };
    let as_f64 = |m: ArrayView2<f32>| m.mapv(f64::from);
    let roll = |steps: &mut dyn Iterator<Item = Array2<f64>>| {
        steps.fold(None::<Array2<f64>>, |acc, b| {
            Some(match acc {
                None => b,
                Some(prev) => b.dot(&prev),
            })
        })
    };
    let out: ArrayD<f64> = if options.average_heads {
        let mut steps = a.outer_iter().map(|layer| {
            let mut mean = Array2::<f64>::zeros((n, n));
            for head in layer.outer_iter() {
                mean += &as_f64(head);
            }
            augment(mean / heads as f64)
        });
        roll(&mut steps).expect("layers > 0").into_dyn()
    } else {
        let mut out = Array3::<f64>::zeros((heads, n, n));
        for (h, mut slot) in out.outer_iter_mut().enumerate() {
            let mut steps = a
                .outer_iter()
                .map(|layer| augment(as_f64(layer.index_axis(Axis(0), h))));
            slot.assign(&roll(&mut steps).expect("layers > 0"));
        }
        out.into_dyn()
    };
    let out = out.mapv(|x| x as f32);
    if let Some((index, w)) = out.indexed_iter().find(|(_, w)| !w.is_finite()) {
        return Err(AttentionError::option(
            "attention",
            format!(
                "the rollout reaches {w} at {:?}, beyond f32's range: the weights are far from probabilities",
                index.slice()
            ),
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{array, Array4, Ix2};

    fn rollout2(a: &Array4<f32>) -> Array2<f32> {
        attention_rollout(a.view().into_dyn(), &RolloutOptions::default())
            .unwrap()
            .into_dimensionality::<Ix2>()
            .unwrap()
    }

    #[test]
    fn identity_attention_rolls_out_to_the_identity() {
        let mut a = Array4::<f32>::zeros((3, 2, 4, 4));
        for mut m in a.outer_iter_mut() {
            for mut h in m.outer_iter_mut() {
                h.assign(&Array2::eye(4));
            }
        }
        assert_eq!(rollout2(&a), Array2::<f32>::eye(4));
    }

    /// Layer 0: two heads whose mean is [[1,0,0],[.5,.5,0],[.25,.25,.5]];
    /// layer 1: the cyclic shift [[0,1,0],[0,0,1],[1,0,0]] in both heads. By hand:
    /// Â_0 = [[1,0,0],[.25,.75,0],[.125,.125,.75]], Â_1 = [[.5,.5,0],[0,.5,.5],[.5,0,.5]],
    /// R = Â_1 Â_0 = [[.625,.375,0],[.1875,.4375,.375],[.5625,.0625,.375]]
    /// (Â_0 Â_1 would start [[.5,.5,0], ...]). Every number is exact in binary.
    fn two_layers() -> Array4<f32> {
        let h0 = array![[1.0f32, 0.0, 0.0], [1.0, 0.0, 0.0], [0.5, 0.0, 0.5]];
        let h1 = array![[1.0f32, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.5, 0.5]];
        let shift = array![[0.0f32, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]];
        let mut a = Array4::<f32>::zeros((2, 2, 3, 3));
        a.slice_mut(ndarray::s![0, 0, .., ..]).assign(&h0);
        a.slice_mut(ndarray::s![0, 1, .., ..]).assign(&h1);
        a.slice_mut(ndarray::s![1, 0, .., ..]).assign(&shift);
        a.slice_mut(ndarray::s![1, 1, .., ..]).assign(&shift);
        a
    }

    #[test]
    fn two_layers_by_hand_first_layer_on_the_right() {
        let want = array![
            [0.625f32, 0.375, 0.0],
            [0.1875, 0.4375, 0.375],
            [0.5625, 0.0625, 0.375]
        ];
        assert_eq!(rollout2(&two_layers()), want);
    }

    #[test]
    fn residual_zero_is_the_plain_product_and_one_the_identity() {
        let a = two_layers();
        let opts = |residual| RolloutOptions {
            residual,
            ..Default::default()
        };
        let plain = attention_rollout(a.view().into_dyn(), &opts(0.0)).unwrap();
        // shift · mean_0: row i of mean_0 shifted up by one.
        let want = array![[0.5f32, 0.5, 0.0], [0.25, 0.25, 0.5], [1.0, 0.0, 0.0]].into_dyn();
        assert_eq!(plain, want);
        let id = attention_rollout(a.view().into_dyn(), &opts(1.0)).unwrap();
        assert_eq!(id, Array2::<f32>::eye(3).into_dyn());
    }

    #[test]
    fn per_head_rollout_follows_each_head() {
        let a = two_layers();
        let opts = RolloutOptions {
            average_heads: false,
            ..Default::default()
        };
        let r = attention_rollout(a.view().into_dyn(), &opts).unwrap();
        assert_eq!(r.shape(), &[2, 3, 3]);
        for h in 0..2 {
            let one = a.slice(ndarray::s![.., h..h + 1, .., ..]).to_owned();
            assert_eq!(r.index_axis(Axis(0), h), rollout2(&one).into_dyn());
        }
    }

    #[test]
    fn causal_attention_stays_lower_triangular_with_unit_rows() {
        let n = 5;
        let mut a = Array4::<f32>::zeros((4, 3, n, n));
        for ((l, h, i, j), w) in a.indexed_iter_mut() {
            if j <= i {
                *w = (1 + l + 2 * h + 3 * i + j) as f32;
            }
        }
        for mut m in a.rows_mut() {
            let s = m.sum();
            m /= s;
        }
        let r = rollout2(&a);
        for ((i, j), &w) in r.indexed_iter() {
            if j > i {
                assert_eq!(w, 0.0, "({i}, {j})");
            } else {
                assert!(w > 0.0, "({i}, {j})");
            }
        }
        for row in r.rows() {
            assert!((row.sum() - 1.0).abs() < 1e-6, "{row}");
        }
    }

    #[test]
    fn rows_that_do_not_sum_to_one_are_used_as_they_are() {
        // One layer, one head, a zero row (padding): Â keeps r on its diagonal.
        let a = array![[[[0.5f32, 0.5], [0.0, 0.0]]]];
        let r = attention_rollout(a.view().into_dyn(), &RolloutOptions::default()).unwrap();
        assert_eq!(r, array![[0.75f32, 0.25], [0.0, 0.5]].into_dyn());
    }

    fn err(a: ArrayViewD<f32>, residual: f64) -> AttentionError {
        let opts = RolloutOptions {
            residual,
            ..Default::default()
        };
        attention_rollout(a, &opts).unwrap_err()
    }

    #[test]
    fn bad_inputs_are_typed_errors_naming_the_argument() {
        let shape = |e: AttentionError, needle: &str| match e {
            AttentionError::Shape { arg, detail } => {
                assert_eq!(arg, "attention");
                assert!(detail.contains(needle), "{detail}");
            }
            other => panic!("{other:?}"),
        };
        let ok = Array4::<f32>::from_elem((1, 1, 2, 2), 0.5);
        shape(
            err(
                ndarray::Array3::<f32>::zeros((1, 2, 2)).view().into_dyn(),
                0.5,
            ),
            "rank 4",
        );
        shape(
            err(
                ndarray::Array::<f32, _>::zeros(ndarray::IxDyn(&[])).view(),
                0.5,
            ),
            "rank 4",
        );
        for empty in [(0, 1, 2, 2), (1, 0, 2, 2), (1, 1, 0, 0)] {
            shape(
                err(Array4::<f32>::zeros(empty).view().into_dyn(), 0.5),
                "empty",
            );
        }
        shape(
            err(Array4::<f32>::zeros((1, 1, 2, 3)).view().into_dyn(), 0.5),
            "2 queries and 3 keys",
        );
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut a = ok.clone();
            a[[0, 0, 1, 0]] = bad;
            match err(a.view().into_dyn(), 0.5) {
                AttentionError::InvalidOption { arg, detail } => {
                    assert_eq!(arg, "attention");
                    assert!(detail.contains("(0, 0, 1, 0)"), "{detail}");
                }
                other => panic!("{other:?}"),
            }
        }
        for residual in [-0.1, 1.5, f64::NAN, f64::INFINITY] {
            match err(ok.view().into_dyn(), residual) {
                AttentionError::InvalidOption { arg, .. } => assert_eq!(arg, "residual"),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn a_product_beyond_f32_is_an_error_not_inf() {
        let a = Array4::<f32>::from_elem((8, 1, 4, 4), 1e30);
        match err(a.view().into_dyn(), 0.5) {
            AttentionError::InvalidOption { arg, detail } => {
                assert_eq!(arg, "attention");
                assert!(detail.contains("f32"), "{detail}");
            }
            other => panic!("{other:?}"),
        }
    }
}
