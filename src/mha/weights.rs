//! The parameters of a multi-head attention layer, with every shape checked once, at
//! construction.

use ndarray::{Array1, Array2};

use crate::error::{AttentionError, Result};

/// The sizes a layer's weights fix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MhaDims {
    /// E: the width of x, of queries and of the output.
    pub embed: usize,
    /// Ekv: the width of the key/value input (E for self-attention weights).
    pub kv_embed: usize,
    /// H: query heads.
    pub heads: usize,
    /// N: key/value heads (H unless grouped-query).
    pub kv_heads: usize,
    /// E / H: the width of each head.
    pub head_dim: usize,
}

impl MhaDims {
    /// Checks that `heads` divides `embed` and `kv_heads` (default `heads`) divides
    /// `heads`.
    ///
    /// # Errors
    /// [`AttentionError::InvalidOption`] naming `heads` or `kv_heads`.
    pub fn new(
        embed: usize,
        kv_embed: usize,
        heads: usize,
        kv_heads: Option<usize>,
    ) -> Result<Self> {
        if heads == 0 || !embed.is_multiple_of(heads) {
            return Err(AttentionError::option(
                "heads",
                format!("{heads} heads do not divide the embedding width E = {embed}"),
            ));
        }
        let kv_heads = kv_heads.unwrap_or(heads);
        if kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
            return Err(AttentionError::option(
                "kv_heads",
                format!("{kv_heads} key/value heads do not divide the {heads} query heads"),
            ));
        }
        Ok(Self {
            embed,
            kv_embed,
            heads,
            kv_heads,
            head_dim: embed / heads,
        })
    }

    /// N · E / H: the width of the key and value projections.
    pub fn kv_width(&self) -> usize {
        self.kv_heads * self.head_dim
    }
}

/// Projection matrices in PyTorch's `nn.Linear` convention (`y = x Wᵀ + b`, W is
/// `(out, in)`). A missing bias is zero (PyTorch's `bias=False`).
#[derive(Debug, Clone)]
pub struct Projections {
    /// `(E, E)`.
    pub q_weight: Array2<f32>,
    /// `(E,)`.
    pub q_bias: Option<Array1<f32>>,
    /// `(N·E/H, Ekv)`.
    pub k_weight: Array2<f32>,
    /// `(N·E/H,)`.
    pub k_bias: Option<Array1<f32>>,
    /// `(N·E/H, Ekv)`.
    pub v_weight: Array2<f32>,
    /// `(N·E/H,)`.
    pub v_bias: Option<Array1<f32>>,
    /// `(E, E)`.
    pub out_weight: Array2<f32>,
    /// `(E,)`.
    pub out_bias: Option<Array1<f32>>,
}

/// A validated layer: projections whose shapes agree with each other and with the head
/// counts. Made by [`MhaWeights::new`] or [`MhaWeights::from_safetensors`].
#[derive(Debug, Clone)]
pub struct MhaWeights {
    pub(crate) dims: MhaDims,
    pub(crate) wq: Array2<f32>,
    pub(crate) bq: Array1<f32>,
    pub(crate) wk: Array2<f32>,
    pub(crate) bk: Array1<f32>,
    pub(crate) wv: Array2<f32>,
    pub(crate) bv: Array1<f32>,
    pub(crate) wo: Array2<f32>,
    pub(crate) bo: Array1<f32>,
}

/// Names used in errors, as in PyTorch's `state_dict`.
pub(crate) struct Names {
    pub q_weight: &'static str,
    pub k_weight: &'static str,
    pub v_weight: &'static str,
    pub q_bias: &'static str,
    pub k_bias: &'static str,
    pub v_bias: &'static str,
}

pub(crate) const SEPARATE: Names = Names {
    q_weight: "q_proj_weight",
    k_weight: "k_proj_weight",
    v_weight: "v_proj_weight",
    q_bias: "in_proj_bias",
    k_bias: "in_proj_bias",
    v_bias: "in_proj_bias",
};

fn expect(arg: &'static str, got: &[usize], want: &[usize], why: &str) -> Result<()> {
    if got != want {
        return Err(AttentionError::shape(
            arg,
            format!("expected shape {want:?} ({why}), got {got:?}"),
        ));
    }
    Ok(())
}

fn bias(arg: &'static str, b: Option<Array1<f32>>, n: usize, why: &str) -> Result<Array1<f32>> {
    match b {
        None => Ok(Array1::zeros(n)),
        Some(b) => {
            expect(arg, b.shape(), &[n], why)?;
            Ok(b)
        }
    }
}

impl MhaWeights {
    /// Checks the projections against each other and the head counts: E comes from
    /// `out_weight` `(E, E)`, Ekv from `k_weight`'s columns.
    ///
    /// # Errors
    /// [`AttentionError::InvalidOption`] naming `heads` when H does not divide E, or
    /// `kv_heads` when N does not divide H; [`AttentionError::Shape`] naming the first
    /// tensor whose shape disagrees.
    pub fn new(p: Projections, heads: usize, kv_heads: Option<usize>) -> Result<Self> {
        Self::checked(p, heads, kv_heads, &SEPARATE)
    }

    pub(crate) fn checked(
        p: Projections,
        heads: usize,
        kv_heads: Option<usize>,
        names: &Names,
    ) -> Result<Self> {
        let out = p.out_weight.shape();
        let e = out[0];
        expect("out_proj.weight", out, &[e, e], "E x E")?;
        let ekv = p.k_weight.shape()[1];
        if e == 0 || ekv == 0 {
            let arg = if e == 0 {
                "out_proj.weight"
            } else {
                names.k_weight
            };
            return Err(AttentionError::shape(arg, "widths must be positive"));
        }
        let dims = MhaDims::new(e, ekv, heads, kv_heads)?;
        let kv = dims.kv_width();
        let kv_why = format!("N * E / H = {} * {e} / {heads} rows", dims.kv_heads);
        expect(
            names.q_weight,
            p.q_weight.shape(),
            &[e, e],
            "E x E, E from out_proj.weight",
        )?;
        expect(names.k_weight, p.k_weight.shape(), &[kv, ekv], &kv_why)?;
        expect(
            names.v_weight,
            p.v_weight.shape(),
            &[kv, ekv],
            &format!("{kv_why}, and the same input width as the keys: one tensor feeds both"),
        )?;
        Ok(Self {
            bq: bias(names.q_bias, p.q_bias, e, "E")?,
            bk: bias(names.k_bias, p.k_bias, kv, "N * E / H")?,
            bv: bias(names.v_bias, p.v_bias, kv, "N * E / H")?,
            bo: bias("out_proj.bias", p.out_bias, e, "E")?,
            dims,
            wq: p.q_weight,
            wk: p.k_weight,
            wv: p.v_weight,
            wo: p.out_weight,
        })
    }

    /// The sizes these weights fix.
    pub fn dims(&self) -> MhaDims {
        self.dims
    }
}
