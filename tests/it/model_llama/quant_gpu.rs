//! The quantized matmul and embedding kernels against the CPU dequantizer and a float64
//! product, for every type, at shapes on the edges of their tiles: 1, 2, 15, 16 and 17
//! rows of x (one row per invocation, and tiles of four with a ragged last one); K of
//! one block, several blocks and a K-quant superblock; N below, at and past the 64
//! columns of a workgroup. Outputs start as NaN (see `quant_matmul_probe`).

use half::f16;
use wgpu_attention::model::llama::quant::{dequantize, GgmlType};
use wgpu_attention::model::{
    quant_embed_planes_probe, quant_embed_probe, quant_matmul_paged_probe,
    quant_matmul_planes_probe, quant_matmul_probe, QuantEntry,
};

use crate::common::{ctx, Rng};

/// (type, elements per block, bytes per block, byte offsets of its f16 fields).
const TYPES: &[(GgmlType, usize, usize, &[usize])] = &[
    (GgmlType::F32, 1, 4, &[]),
    (GgmlType::F16, 1, 2, &[]),
    (GgmlType::Q4_0, 32, 18, &[0]),
    (GgmlType::Q4_1, 32, 20, &[0, 2]),
    (GgmlType::Q8_0, 32, 34, &[0]),
    (GgmlType::Q4_K, 256, 144, &[0, 2]),
    (GgmlType::Q6_K, 256, 210, &[208]),
];

/// Every entry point, named for messages: the adapter's own (on 8-lane subgroups the one
/// that shares x across a subgroup, or the paged one), the one every other adapter runs,
/// and the one that splits K across lanes (GPUs, up to 16 rows).
const ENTRIES: [(QuantEntry, &str); 3] = [
    (QuantEntry::Adapter, ""),
    (QuantEntry::Plain, " without subgroups"),
    (QuantEntry::Split, " split across lanes"),
];

/// Random bytes for `rows` rows of `k` elements, with every f16 field a small finite
/// scale (random bits there would give infinities and NaNs, which a product cannot be
/// checked against), sized so that elements come out of the order of 0.02.
pub fn random_tensor(rng: &mut Rng, ty: GgmlType, rows: usize, k: usize) -> Vec<u8> {
    let &(_, per, size, fields) = TYPES.iter().find(|t| t.0 == ty).expect("type");
    let blocks = rows * k / per;
    let mut bytes: Vec<u8> = (0..blocks * size).map(|_| rng.next_u64() as u8).collect();
    // The largest |quantized value| times sub-block scale each type multiplies by d.
    let spread = match ty {
        GgmlType::Q8_0 => 64.0,
        GgmlType::Q4_K => 400.0,
        GgmlType::Q6_K => 2000.0,
        _ => 8.0,
    };
    let scale = |rng: &mut Rng| f16::from_f32(rng.normal() * 0.02 / spread).to_le_bytes();
    match ty {
        GgmlType::F32 => {
            for c in bytes.chunks_exact_mut(4) {
                c.copy_from_slice(&rng.normal().to_le_bytes());
            }
        }
        GgmlType::F16 => {
            for c in bytes.chunks_exact_mut(2) {
                c.copy_from_slice(&f16::from_f32(rng.normal()).to_le_bytes());
            }
        }
        _ => {
            for block in bytes.chunks_exact_mut(size) {
                for &o in fields {
                    block[o..o + 2].copy_from_slice(&scale(rng));
                }
            }
        }
    }
    bytes
}

/// Checks `got` against `x Wᵀ` in f64 with `w` dequantized on the CPU; the bound is
/// relative to the sum of the products' magnitudes (f32 accumulation over K).
fn check(what: &str, got: &[f32], x: &[f32], w: &[f32], (rows, n, k): (usize, usize, usize)) {
    assert_eq!(got.len(), rows * n, "{what}: length");
    let mut worst = (0.0f64, 0usize, 0.0f64, 0.0f64);
    for r in 0..rows {
        for c in 0..n {
            let (mut want, mut mag) = (0.0f64, 0.0f64);
            for i in 0..k {
                let p = f64::from(x[r * k + i]) * f64::from(w[c * k + i]);
                want += p;
                mag += p.abs();
            }
            let g = f64::from(got[r * n + c]);
            let ratio = if g.is_finite() {
                (g - want).abs() / (1e-6 + 2e-6 * mag)
            } else {
                f64::INFINITY
            };
            if ratio > worst.0 {
                worst = (ratio, r * n + c, g, want);
            }
        }
    }
    assert!(
        worst.0 <= 1.0,
        "{what}: worst element {} (row {}, column {}) is {}, expected {} ({}x the bound)",
        worst.1,
        worst.1 / n,
        worst.1 % n,
        worst.2,
        worst.3,
        worst.0
    );
}

#[test]
fn quantized_matmul_matches_the_dequantized_product_at_edge_shapes() {
    let mut rng = Rng::new(20);
    for &(ty, per, _, _) in TYPES {
        let block = per.max(4);
        // K: one block, several blocks, and (for 32-element blocks) a superblock's
        // width plus one block, so the last block is not the first of a superblock.
        let ks = if per == 256 {
            vec![256, 512, 768]
        } else {
            vec![block, 3 * block, 256 + block]
        };
        let shapes = [
            (1, ks[0], 65),
            (2, ks[1], 63),
            (15, ks[2], 17),
            (16, ks[0], 130),
            (17, ks[1], 1),
            (1, ks[2], 64),
            // One row takes four columns per invocation and 256 per workgroup: fewer
            // than four, and a second workgroup with a ragged last group.
            (1, ks[1], 3),
            (1, ks[0], 258),
            // One row wider than the uniform copy of x holds (8,192 elements) takes the
            // four-row tiles read from storage.
            (1, 8192 + 256, 5),
        ];
        for (rows, k, n) in shapes {
            let bytes = random_tensor(&mut rng, ty, n, k);
            let x: Vec<f32> = (0..rows * k).map(|_| rng.normal()).collect();
            let w = dequantize(ty, &bytes);
            for (entry, name) in ENTRIES {
                let got = pollster::block_on(quant_matmul_probe(
                    ctx(),
                    entry,
                    ty,
                    (n, k),
                    (&bytes, &x, rows),
                ))
                .unwrap_or_else(|e| panic!("{}{name}: {e}", ty.name()));
                check(
                    &format!("{} {rows}x{k} by {n}{name}", ty.name()),
                    &got,
                    &x,
                    &w,
                    (rows, n, k),
                );
            }
        }
    }
}

/// W kept in uniform pages (a model's Q4_1 projections on lavapipe): the paged entry for
/// rows of x (more rows than its uniform copy holds at once, so several windows of
/// rows), and every other entry finding the rows in the pages, at pages of a few rows,
/// so that a product spans several chunks of pages (several dispatches of the paged
/// entry) with a ragged last one, and at pages as full as a binding allows. Shapes whose
/// rows are not whole blocks, or not whole words (which cannot be paged), are left out.
#[test]
fn paged_weights_give_the_dequantized_product_on_every_entry() {
    let mut rng = Rng::new(22);
    // (rows of x, K, N, rows a page at most).
    let shapes = [
        (1, 32, 1, 1),
        (1, 64, 100, 3),
        (1, 96, 37, 2),
        (1, 288, 260, 16),
        (1, 64, 2000, usize::MAX),
        (4, 64, 100, 3),
        (17, 96, 50, 2),
        // 12 rows of 640 fill the uniform copy: windows of 12, 12 and 1 rows.
        (25, 640, 30, 5),
        (1, 8192 + 256, 5, 1),
    ];
    let mut paged = 0;
    for &(ty, per, size, _) in TYPES {
        for (rows, k, n, page_rows) in shapes {
            if k % per != 0 || (k / per * size) % 4 != 0 {
                continue;
            }
            let bytes = random_tensor(&mut rng, ty, n, k);
            let x: Vec<f32> = (0..rows * k).map(|_| rng.normal()).collect();
            let w = dequantize(ty, &bytes);
            for (entry, name) in ENTRIES {
                let got = pollster::block_on(quant_matmul_paged_probe(
                    ctx(),
                    entry,
                    ty,
                    (n, k),
                    (&bytes, &x, rows),
                    page_rows,
                ))
                .unwrap_or_else(|e| panic!("{} paged{name}: {e}", ty.name()));
                check(
                    &format!(
                        "{} {rows}x{k} by {n} in pages of {page_rows}{name}",
                        ty.name()
                    ),
                    &got,
                    &x,
                    &w,
                    (rows, n, k),
                );
                paged += 1;
            }
        }
    }
    // Q4_1 (the paged entry's type) at every shape, and at least the other 32-element
    // types at some.
    assert!(paged >= 3 * 9 * 3, "{paged} paged products checked");
}

/// Q8_0 in planes (a model's Q8_0 logits head on lavapipe): every entry, at row counts
/// that are not multiples of four or of the scale plane's eight (a lane past the last
/// column reads other rows' scales and must store nothing), with one and several rows of
/// x and K of one block to wider than the uniform copy of x.
#[test]
fn q8_0_in_planes_gives_the_dequantized_product_on_every_entry() {
    let mut rng = Rng::new(23);
    // (rows of x, K, N).
    let shapes = [
        (1, 32, 1),
        (1, 32, 5),
        (1, 96, 13),
        (1, 288, 64),
        (1, 64, 258),
        (1, 576, 1000),
        (2, 64, 63),
        (17, 96, 9),
        (1, 8192 + 256, 5),
    ];
    for (rows, k, n) in shapes {
        let bytes = random_tensor(&mut rng, GgmlType::Q8_0, n, k);
        let x: Vec<f32> = (0..rows * k).map(|_| rng.normal()).collect();
        let w = dequantize(GgmlType::Q8_0, &bytes);
        for (entry, name) in ENTRIES {
            let got = pollster::block_on(quant_matmul_planes_probe(
                ctx(),
                entry,
                (n, k),
                (&bytes, &x, rows),
            ))
            .unwrap_or_else(|e| panic!("q8_0 in planes{name}: {e}"));
            check(
                &format!("q8_0 {rows}x{k} by {n} in planes{name}"),
                &got,
                &x,
                &w,
                (rows, n, k),
            );
        }
    }
}

#[test]
fn quantized_embedding_rows_are_the_dequantized_rows() {
    let mut rng = Rng::new(21);
    // Every type as stored, and Q8_0 in planes (a model's table on lavapipe), whose 37
    // rows are not whole groups of the scale plane's eight.
    let cases = TYPES
        .iter()
        .map(|&(ty, per, _, _)| (ty, per, false))
        .chain([(GgmlType::Q8_0, 32, true)]);
    for (ty, per, planes) in cases {
        let k = if per == 256 { 512 } else { 96 };
        let vocab = 37;
        let bytes = random_tensor(&mut rng, ty, vocab, k);
        let ids = [0u32, 36, 5, 5, 17];
        let name = format!("{}{}", ty.name(), if planes { " in planes" } else { "" });
        let got = if planes {
            pollster::block_on(quant_embed_planes_probe(ctx(), (vocab, k), &bytes, &ids))
        } else {
            pollster::block_on(quant_embed_probe(ctx(), ty, (vocab, k), &bytes, &ids))
        }
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        let table = dequantize(ty, &bytes);
        for (r, &id) in ids.iter().enumerate() {
            let want = &table[id as usize * k..(id as usize + 1) * k];
            let row = &got[r * k..(r + 1) * k];
            // A driver may fuse `d * q + m` into one rounding: a few ulps of the row.
            let bound = 4.0 * f32::EPSILON * want.iter().fold(0.0f32, |a, v| a.max(v.abs()));
            if let Some(i) = (0..k).find(|&i| row[i].is_nan() || (row[i] - want[i]).abs() > bound) {
                panic!(
                    "{name}: row {r} (id {id}) element {i} is {}, expected {}",
                    row[i], want[i]
                );
            }
        }
    }
}

#[test]
fn a_matrix_of_partial_blocks_is_refused() {
    let bytes = vec![0u8; 20 * 3];
    let e = pollster::block_on(quant_matmul_probe(
        ctx(),
        QuantEntry::Adapter,
        GgmlType::Q4_1,
        (3, 48),
        (&bytes, &[0.0; 48], 1),
    ))
    .expect_err("48 is not whole blocks of 32");
    assert!(e.to_string().contains("whole"), "{e}");
    let e = pollster::block_on(quant_matmul_probe(
        ctx(),
        QuantEntry::Adapter,
        GgmlType::Q4_1,
        (4, 32),
        (&bytes, &[0.0; 32], 1),
    ))
    .expect_err("3 rows of bytes for 4");
    assert!(e.to_string().contains("bytes"), "{e}");
}
