//! What every query block of one call reads: contiguous q, k, v, the masks broadcast to
//! `(B, Hq, Lq, Lk)`, the key lengths, and which value rows hold a NaN or an infinity.

use ndarray::{ArrayView4, ArrayViewD, CowArray, Ix4};

use crate::error::{AttentionError, Result};
use crate::host_memory::try_vec;
use crate::options::{AttentionOptions, Mask};
use crate::problem::Problem;

/// Below this many rows a block's products are loops of dot products and `axpy`s: the
/// matrix product's packing of K and V would cost more than it saves (decoding).
pub(crate) const GEMM_ROWS: usize = 4;

/// The call's read-only data, shared by every block (and thread).
pub(crate) struct Inputs<'a> {
    pub p: &'a Problem,
    pub q: CowArray<'a, f32, Ix4>,
    pub k: CowArray<'a, f32, Ix4>,
    pub v: CowArray<'a, f32, Ix4>,
    pub bool_mask: Option<ArrayView4<'a, bool>>,
    pub bias: Option<ArrayView4<'a, f32>>,
    pub kv_lens: Option<&'a [u32]>,
    /// Per `(b, kv head, key)`, row-major: whether that value row is all finite, so that
    /// a block of such rows may go through a matrix product (where a weight of exactly 0
    /// times an infinity would be NaN, a key the rule says adds nothing).
    pub v_finite: Vec<bool>,
    /// K transposed, per `(b, kv head)` a row-major `(D, Lk)` matrix, for blocks whose
    /// scores are a matrix product (see `block.rs`); empty when no block's are.
    pub kt: Vec<f32>,
}

impl<'a> Inputs<'a> {
    /// Gathers a validated call's inputs; copies q, k or v only if it is not already
    /// row-major and contiguous.
    pub(crate) fn new(
        p: &'a Problem,
        (q, k, v): (
            ArrayView4<'a, f32>,
            ArrayView4<'a, f32>,
            ArrayView4<'a, f32>,
        ),
        opts: &'a AttentionOptions<'_>,
    ) -> Result<Self> {
        let target = (p.batch, p.heads_q, p.len_q, p.len_k);
        // Validation proved the mask broadcasts, so these cannot fail.
        let bool_mask = match &opts.mask {
            Some(Mask::Bool(m)) => broadcast(m, target),
            _ => None,
        };
        let bias = match &opts.mask {
            Some(Mask::Additive(m)) => broadcast(m, target),
            _ => None,
        };
        let v = contiguous("v", v)?;
        let dv = p.dim_v;
        let rows = p.batch * p.heads_kv * p.len_k;
        let mut v_finite = try_vec("v", &[rows], rows, true)?;
        if let Some(vs) = v.as_slice() {
            for (flag, row) in v_finite.iter_mut().zip(vs.chunks_exact(dv)) {
                *flag = row.iter().all(|x| x.is_finite());
            }
        }
        let k = contiguous("k", k)?;
        let kt = match p.len_q >= GEMM_ROWS {
            true => transposed_heads(&k, p)?,
            false => Vec::new(),
        };
        Ok(Self {
            p,
            q: contiguous("q", q)?,
            k,
            kt,
            v,
            bool_mask,
            bias,
            kv_lens: opts.kv_lens,
            v_finite,
        })
    }

    /// Keys of batch `b` that may be attended at all.
    pub(crate) fn kv_len(&self, b: usize) -> usize {
        self.kv_lens.map_or(self.p.len_k, |l| l[b] as usize)
    }

    /// Query rows `rows` of head `h` of batch `b`, row-major.
    pub(crate) fn q_rows(&self, b: usize, h: usize, rows: std::ops::Range<usize>) -> &[f32] {
        let d = self.p.dim;
        let head = (b * self.p.heads_q + h) * self.p.len_q;
        &slice(&self.q)[(head + rows.start) * d..(head + rows.end) * d]
    }

    /// Key rows `keys` of kv head `g` of batch `b`.
    pub(crate) fn k_rows(&self, b: usize, g: usize, keys: std::ops::Range<usize>) -> &[f32] {
        let d = self.p.dim;
        let head = (b * self.p.heads_kv + g) * self.p.len_k;
        &slice(&self.k)[(head + keys.start) * d..(head + keys.end) * d]
    }

    /// Rows `d` x columns `keys` of K transposed for kv head `g` of batch `b`, as a
    /// `(keys, D)` view with column stride Lk (K itself, read column-major).
    pub(crate) fn k_block_transposed(
        &self,
        b: usize,
        g: usize,
        keys: std::ops::Range<usize>,
    ) -> Option<ndarray::ArrayView2<'_, f32>> {
        use ndarray::ShapeBuilder;
        let (d, lk) = (self.p.dim, self.p.len_k);
        let head = (b * self.p.heads_kv + g) * d * lk;
        let data = self.kt.get(head + keys.start..head + d * lk)?;
        ndarray::ArrayView2::from_shape((keys.len(), d).strides((1, lk)), data).ok()
    }

    /// Value rows `keys` of kv head `g` of batch `b`, and whether all are finite.
    pub(crate) fn v_rows(
        &self,
        b: usize,
        g: usize,
        keys: std::ops::Range<usize>,
    ) -> (&[f32], bool) {
        let dv = self.p.dim_v;
        let head = (b * self.p.heads_kv + g) * self.p.len_k;
        let rows = head + keys.start..head + keys.end;
        let finite = self.v_finite[rows.clone()].iter().all(|&f| f);
        (&slice(&self.v)[rows.start * dv..rows.end * dv], finite)
    }
}

/// Each `(Lk, D)` head of `k` as a row-major `(D, Lk)` matrix, allocated fallibly: the
/// layout in which the matrix product packs K with contiguous copies.
fn transposed_heads(k: &CowArray<'_, f32, Ix4>, p: &Problem) -> Result<Vec<f32>> {
    let (d, lk) = (p.dim, p.len_k);
    let n = k.len();
    let mut kt = try_vec("k", k.shape(), n, 0f32)?;
    let transpose = |(src, dst): (&[f32], &mut [f32])| {
        for (j, row) in src.chunks_exact(d).enumerate() {
            for (e, &x) in row.iter().enumerate() {
                dst[e * lk + j] = x;
            }
        }
    };
    #[cfg(not(target_arch = "wasm32"))]
    {
        use rayon::prelude::*;
        let heads = slice(k).par_chunks_exact(lk * d);
        heads
            .zip(kt.par_chunks_exact_mut(lk * d))
            .for_each(transpose);
    }
    #[cfg(target_arch = "wasm32")]
    {
        let heads = slice(k).chunks_exact(lk * d);
        heads.zip(kt.chunks_exact_mut(lk * d)).for_each(transpose);
    }
    Ok(kt)
}

/// A standard-layout array's elements (`contiguous` made every input one).
fn slice<'b>(a: &'b CowArray<'_, f32, Ix4>) -> &'b [f32] {
    a.as_slice().unwrap_or_default()
}

/// `a` itself when row-major and contiguous, else a row-major copy, allocated fallibly.
fn contiguous<'a>(arg: &'static str, a: ArrayView4<'a, f32>) -> Result<CowArray<'a, f32, Ix4>> {
    if a.is_standard_layout() {
        return Ok(a.into());
    }
    let mut data = try_vec(arg, a.shape(), a.len(), 0f32)?;
    for (d, &x) in data.iter_mut().zip(a.iter()) {
        *d = x;
    }
    ndarray::Array4::from_shape_vec(a.raw_dim(), data)
        .map(CowArray::from)
        .map_err(|e| AttentionError::shape(arg, e.to_string()))
}

fn broadcast<'a, T: Copy>(
    m: &'a ArrayViewD<'_, T>,
    target: (usize, usize, usize, usize),
) -> Option<ArrayView4<'a, T>> {
    m.broadcast(target)
        .and_then(|v| v.into_dimensionality::<Ix4>().ok())
}
