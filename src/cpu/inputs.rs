//! What every query block of one call reads: contiguous q, k, v, the masks broadcast to
//! `(B, Hq, Lq, Lk)`, the key lengths, and which value rows hold a NaN or an infinity.

use ndarray::{ArrayView4, ArrayViewD, CowArray, Ix4};

use crate::error::{AttentionError, Result};
use crate::host_memory::try_vec;
use crate::options::{AttentionOptions, Mask};
use crate::problem::Problem;

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
        Ok(Self {
            p,
            q: contiguous("q", q)?,
            k: contiguous("k", k)?,
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
