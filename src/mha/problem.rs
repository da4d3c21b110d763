//! Input checks of one call, done once before either backend runs.

use ndarray::{Array4, ArrayView2};

use crate::error::{AttentionError, Result};
use crate::mha::options::MhaOptions;
use crate::mha::weights::MhaDims;

/// The sizes of one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MhaProblem {
    pub batch: usize,
    /// L: query tokens.
    pub len_q: usize,
    /// S: key/value tokens.
    pub len_k: usize,
    pub dims: MhaDims,
}

/// Checks x `(B, L, E)`, kv `(B, S, Ekv)` (x itself when absent) and the options.
///
/// # Errors
/// [`AttentionError::Shape`] naming `x`, `kv` or `key_padding_mask`.
pub(crate) fn validate(
    dims: MhaDims,
    x: &[usize],
    kv: Option<&[usize]>,
    opts: &MhaOptions<'_>,
) -> Result<MhaProblem> {
    let [b, l, e] = rank3("x", x, "(B, L, E)")?;
    if e != dims.embed {
        return Err(AttentionError::shape(
            "x",
            format!(
                "shape {x:?} has width {e}, the weights take E = {}",
                dims.embed
            ),
        ));
    }
    let s = match kv {
        None if dims.kv_embed != dims.embed => {
            return Err(AttentionError::shape(
                "kv",
                format!(
                    "required: the key/value projections take width Ekv = {}, not x's E = {}",
                    dims.kv_embed, dims.embed
                ),
            ))
        }
        None => l,
        Some(kv) => {
            let [bk, s, ekv] = rank3("kv", kv, "(B, S, Ekv)")?;
            if bk != b || ekv != dims.kv_embed {
                return Err(AttentionError::shape(
                    "kv",
                    format!(
                        "expected ({b}, S, {}) (batch of x, width of the key/value weights), got {kv:?}",
                        dims.kv_embed
                    ),
                ));
            }
            s
        }
    };
    if let Some(m) = &opts.key_padding_mask {
        if m.shape() != [b, s] {
            return Err(AttentionError::shape(
                "key_padding_mask",
                format!("expected (B, S) = ({b}, {s}), got {:?}", m.shape()),
            ));
        }
    }
    Ok(MhaProblem {
        batch: b,
        len_q: l,
        len_k: s,
        dims,
    })
}

impl crate::mha::weights::MhaWeights {
    /// Checks x, kv and the options against these weights without computing anything,
    /// as every call does first.
    ///
    /// # Errors
    /// [`AttentionError::Shape`] naming `x`, `kv` or `key_padding_mask`.
    pub fn check_inputs(
        &self,
        x: &[usize],
        kv: Option<&[usize]>,
        opts: &MhaOptions<'_>,
    ) -> Result<()> {
        validate(self.dims, x, kv, opts).map(|_| ())
    }
}

fn rank3(arg: &'static str, shape: &[usize], what: &str) -> Result<[usize; 3]> {
    let dims = <[usize; 3]>::try_from(shape).map_err(|_| {
        AttentionError::shape(arg, format!("expected rank 3 {what}, got {shape:?}"))
    })?;
    if dims.contains(&0) {
        return Err(AttentionError::shape(
            arg,
            format!("zero-size dimension in shape {shape:?}"),
        ));
    }
    Ok(dims)
}

/// PyTorch's key padding mask (`true` = ignore key `j`) as the library's boolean mask
/// (`true` = may attend), shaped `(B, 1, 1, width)` to broadcast over heads and queries.
/// Columns past the mask's own width (cache slots not yet filled) are left attendable:
/// the key lengths exclude them.
pub(crate) fn allowed_keys(pad: ArrayView2<'_, bool>, width: usize) -> Array4<bool> {
    let (b, s) = pad.dim();
    Array4::from_shape_fn((b, 1, 1, width), |(bi, _, _, j)| j >= s || !pad[[bi, j]])
}
