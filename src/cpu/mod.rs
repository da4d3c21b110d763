//! The fast CPU path: flash attention in f32 on the host. Query blocks of each head meet
//! blocks of keys with an online softmax (`block.rs`), so memory beyond the inputs and
//! outputs is a few blocks per thread; the two products of a block go through
//! `matrixmultiply` (by way of ndarray's `general_mat_mul`), and blocks run in parallel
//! on rayon's threads (natively; one after another on wasm32, which has no threads
//! without shared memory). Same options, outputs, errors and row rules as the GPU
//! paths, checked against the float64 reference (`reference.rs`) as they are.

mod block;
mod inputs;
mod lanes;

use ndarray::{ArrayView4, Ix3, Ix4};

use crate::error::Result;
use crate::host_memory::try_zeros;
use crate::options::AttentionOptions;
use crate::output::AttentionOutput;
use crate::problem::validate;

use block::{Block, ROWS};
use inputs::Inputs;

/// Computes attention on the CPU in f32: the fast path, for applications without an
/// adapter and as the CPU side of `bench`. Same options (the GPU's `path` and
/// `precision` choose among kernels and storage and do not apply here; accumulation is
/// f32 as on every GPU path), same outputs and errors as the GPU, within the accuracy
/// bounds of docs/DESIGN.md of the float64 reference [`attention_reference`](crate::attention_reference).
///
/// ```
/// use ndarray::Array4;
/// use wgpu_attention::{attention_cpu, attention_reference, AttentionOptions};
///
/// let q = Array4::<f32>::from_shape_fn((1, 2, 5, 8), |(_, h, i, d)| (h + i * d) as f32 * 0.1);
/// let opts = AttentionOptions { causal: true, ..Default::default() };
/// let fast = attention_cpu(q.view(), q.view(), q.view(), &opts)?;
/// let exact = attention_reference(q.view(), q.view(), q.view(), &opts)?;
/// assert!(fast.out.iter().zip(&exact.out).all(|(a, b)| (a - b).abs() < 1e-5));
/// # Ok::<(), wgpu_attention::AttentionError>(())
/// ```
///
/// # Errors
/// Any input error of [`crate::validate`], and
/// [`AttentionError::TooLarge`](crate::AttentionError::TooLarge) when the outputs do not
/// fit in this machine's free memory.
pub fn attention_cpu(
    q: ArrayView4<'_, f32>,
    k: ArrayView4<'_, f32>,
    v: ArrayView4<'_, f32>,
    opts: &AttentionOptions<'_>,
) -> Result<AttentionOutput> {
    let p = validate(q.shape(), k.shape(), v.shape(), opts)?;
    let (nb, nh, lq, lk) = (p.batch, p.heads_q, p.len_q, p.len_k);
    let mut out = try_zeros::<f32, _>("out", Ix4(nb, nh, lq, p.dim_v))?;
    let mut weights = match p.return_weights {
        true => Some(try_zeros::<f32, _>("weights", Ix4(nb, nh, lq, lk))?),
        false => None,
    };
    let mut lse = match p.return_lse {
        true => Some(try_zeros::<f32, _>("lse", Ix3(nb, nh, lq))?),
        false => None,
    };
    let inputs = Inputs::new(&p, (q, k, v), opts)?;
    let blocks = blocks(
        &inputs,
        out.as_slice_mut().unwrap_or_default(),
        weights.as_mut().and_then(|w| w.as_slice_mut()),
        lse.as_mut().and_then(|l| l.as_slice_mut()),
    );
    for_each_block(&inputs, blocks)?;
    Ok(AttentionOutput { out, weights, lse })
}

/// Cuts the outputs into the disjoint parts each block of `ROWS` query rows writes.
fn blocks<'o>(
    inputs: &Inputs<'_>,
    out: &'o mut [f32],
    weights: Option<&'o mut [f32]>,
    lse: Option<&'o mut [f32]>,
) -> Vec<Block<'o>> {
    let p = inputs.p;
    let (lq, dv, lk) = (p.len_q, p.dim_v, p.len_k);
    let mut weight_heads = weights.map(|w| w.chunks_mut(lq * lk));
    let mut lse_heads = lse.map(|l| l.chunks_mut(lq));
    let mut blocks = Vec::new();
    for (bh, head) in out.chunks_mut(lq * dv).enumerate() {
        let next = |heads: &mut Option<std::slice::ChunksMut<'o, f32>>, size| {
            heads
                .as_mut()
                .and_then(Iterator::next)
                .map(|h| h.chunks_mut(size))
        };
        let mut weights = next(&mut weight_heads, ROWS * lk);
        let mut lse = next(&mut lse_heads, ROWS);
        for (n, out) in head.chunks_mut(ROWS * dv).enumerate() {
            let start = n * ROWS;
            blocks.push(Block {
                b: bh / p.heads_q,
                h: bh % p.heads_q,
                rows: start..(start + ROWS).min(lq),
                out,
                weights: weights.as_mut().and_then(Iterator::next),
                lse: lse.as_mut().and_then(Iterator::next),
            });
        }
    }
    blocks
}

#[cfg(not(target_arch = "wasm32"))]
fn for_each_block(inputs: &Inputs<'_>, blocks: Vec<Block<'_>>) -> Result<()> {
    use rayon::prelude::*;
    blocks
        .into_par_iter()
        .try_for_each(|b| block::run(inputs, b))
}

#[cfg(target_arch = "wasm32")]
fn for_each_block(inputs: &Inputs<'_>, blocks: Vec<Block<'_>>) -> Result<()> {
    blocks.into_iter().try_for_each(|b| block::run(inputs, b))
}
