//! The dense-layer kernels (matmul_tiled.wgsl, matmul_lanes.wgsl, matmul_split.wgsl) against a float64
//! reference of `y = epilogue(x Wᵀ + b)`: shapes straddling every tile edge, every head
//! layout (rows, split into heads, merged from heads, KV-cache slots), every epilogue,
//! f16 weights; outputs pre-filled with NaN, so elements never written fail and
//! elements outside the layout must stay NaN.

use ndarray::{Array1, Array2};
use wgpu_attention::{GpuTensor, LinearForTests, LinearLayout, LinearTile};

use crate::common::{ctx, Rng};

/// Every kernel shape this adapter runs, Auto first; lanes shapes only where the adapter
/// takes them (elsewhere `lanes_shapes_are_refused_where_they_do_not_fit` checks the
/// refusal). The split kernel (GPUs take it for few rows) runs on every adapter, at any
/// number of rows.
fn tiles() -> Vec<LinearTile> {
    let mut all = vec![
        LinearTile::Auto,
        LinearTile::Tiled,
        LinearTile::Split { rows: 1 },
        LinearTile::Split { rows: 4 },
    ];
    for (row_groups, col_sets) in [(1, 1), (2, 1), (4, 1), (1, 2), (4, 2), (3, 2)] {
        let t = LinearTile::Lanes {
            row_groups,
            col_sets,
        };
        if lanes_fit() {
            all.push(t);
        }
    }
    all
}

/// Whether the adapter's subgroups are 8 fixed lanes of a CPU (the lanes kernel's shape).
fn lanes_fit() -> bool {
    let info = ctx().adapter_info();
    info.device_type == wgpu::DeviceType::Cpu
        && ctx().features().contains(wgpu::Features::SUBGROUP)
        && info.subgroup_min_size == 8
        && info.subgroup_max_size == 8
}

fn rows_layout(per_batch: u32, width: u32) -> LinearLayout {
    [per_batch, 1, width, per_batch, 0]
}

/// Elements a buffer holds for `rows` rows of layout `l`.
fn elements(l: LinearLayout, rows: usize) -> usize {
    let [len, heads, dim, cap, _] = l.map(|v| v as usize);
    rows.div_ceil(len) * heads * cap * dim
}

/// Where row m, column c of layout `l` lives.
fn index(l: LinearLayout, m: usize, c: usize) -> usize {
    let [len, heads, dim, cap, off] = l.map(|v| v as usize);
    let (b, t, h, d) = (m / len, m % len, c / dim, c % dim);
    ((b * heads + h) * cap + off + t) * dim + d
}

fn gelu(v: f64) -> f64 {
    // erf through erfc's complement is accurate enough for a reference at f32 scale.
    0.5 * v * (1.0 + erf(v / std::f64::consts::SQRT_2))
}

/// erf to 1e-15 (series below 3, continued fraction above), for the GELU reference.
fn erf(x: f64) -> f64 {
    let z = x.abs();
    let r = if z < 3.0 {
        let mut term = z;
        let mut sum = z;
        let mut n = 0.0;
        while term.abs() > 1e-17 * sum.abs() {
            n += 1.0;
            term *= -z * z / n;
            sum += term / (2.0 * n + 1.0);
        }
        2.0 / std::f64::consts::PI.sqrt() * sum
    } else {
        let mut f = 0.0;
        for n in (1..60).rev() {
            f = n as f64 / 2.0 / (z + f);
        }
        1.0 - (-z * z).exp() / std::f64::consts::PI.sqrt() / (z + f)
    };
    r.copysign(x)
}

#[derive(Clone, Copy)]
struct Case {
    rows: usize,
    cols: usize,
    inner: usize,
    x: LinearLayout,
    y: LinearLayout,
    f16: bool,
    gelu: bool,
    residual: bool,
}

impl Case {
    fn plain(rows: usize, cols: usize, inner: usize) -> Self {
        Self {
            rows,
            cols,
            inner,
            x: rows_layout(rows as u32, inner as u32),
            y: rows_layout(rows as u32, cols as u32),
            f16: false,
            gelu: false,
            residual: false,
        }
    }
}

/// Runs `case` on `tile` into a NaN-filled output and checks every element against the
/// float64 reference: written elements within 1e-5 (1 + sum |x w| + |b|) (f32
/// accumulation of at most a few hundred products; a wrong element is off by O(1)),
/// elements outside the layout still NaN.
fn check(tile: LinearTile, case: Case, seed: u64) {
    let c = ctx();
    let what = format!(
        "{tile:?} M {} N {} K {} x {:?} y {:?} f16 {} gelu {} residual {}",
        case.rows, case.cols, case.inner, case.x, case.y, case.f16, case.gelu, case.residual
    );
    let mut rng = Rng::new(seed);
    let nx = elements(case.x, case.rows);
    let ny = elements(case.y, case.rows);
    let x = Array1::from_shape_simple_fn(nx, || rng.normal());
    let mut w = Array2::from_shape_simple_fn((case.cols, case.inner), || rng.normal());
    let b = Array1::from_shape_simple_fn(case.cols, || rng.normal());
    let res = Array1::from_shape_simple_fn(ny, || rng.normal());
    let layer = pollster::block_on(LinearForTests::new(
        c,
        tile,
        w.view(),
        b.view(),
        (case.f16, case.gelu),
    ))
    .unwrap_or_else(|e| panic!("{what}: {e}"));
    if case.f16 {
        // The reference multiplies by what the device holds.
        w.mapv_inplace(|v| half::f16::from_f32(v).to_f32());
    }
    let xt = GpuTensor::from_array(c, x.view().into_dyn()).unwrap();
    let yt = GpuTensor::from_array(c, Array1::from_elem(ny, f32::NAN).view().into_dyn()).unwrap();
    let rt = GpuTensor::from_array(c, res.view().into_dyn()).unwrap();
    let mut encoder = c.device().create_command_encoder(&Default::default());
    layer
        .record(
            c,
            &mut encoder,
            (&xt, case.x),
            (&yt, case.y),
            case.rows,
            case.residual.then_some(&rt),
        )
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    c.queue().submit([encoder.finish()]);
    let got = yt.read(c).unwrap();
    let got = got.as_slice().unwrap();

    let mut want = vec![(f64::NAN, 0.0); ny];
    for m in 0..case.rows {
        for n in 0..case.cols {
            let (mut acc, mut mag) = (f64::from(b[n]), f64::from(b[n].abs()));
            for k in 0..case.inner {
                let p = f64::from(x[index(case.x, m, k)]) * f64::from(w[[n, k]]);
                acc += p;
                mag += p.abs();
            }
            if case.gelu {
                acc = gelu(acc);
            }
            let i = index(case.y, m, n);
            if case.residual {
                acc += f64::from(res[i]);
                mag += f64::from(res[i].abs());
            }
            want[i] = (acc, mag);
        }
    }
    let mut worst: Option<(f64, usize)> = None;
    for (i, (&g, &(wv, mag))) in got.iter().zip(&want).enumerate() {
        let excess = if wv.is_nan() {
            if g.is_nan() {
                0.0
            } else {
                f64::INFINITY
            }
        } else if !g.is_finite() {
            f64::INFINITY
        } else {
            (f64::from(g) - wv).abs() - 1e-5 * (1.0 + mag)
        };
        if excess > 0.0 && worst.is_none_or(|(e, _)| excess > e) {
            worst = Some((excess, i));
        }
    }
    if let Some((excess, i)) = worst {
        panic!(
            "{what}: worst element {i}: got {}, want {} (beyond the bound by {excess})",
            got[i], want[i].0
        );
    }
}

/// Sizes around every tile edge: the lanes kernel's 8/16/32 rows and 32/64 columns, the
/// tiled kernel's 64 x 64 and 16-wide slices of K, and the vec4 reads.
const EDGES: [usize; 10] = [1, 15, 16, 17, 63, 64, 65, 127, 128, 129];

#[test]
fn plain_rows_straddling_every_tile_edge() {
    for tile in tiles() {
        for (i, &rows) in EDGES.iter().enumerate() {
            // Each size in each role, paired with different others.
            let cols = EDGES[(i * 3 + 1) % EDGES.len()];
            let inner = EDGES[(i * 7 + 2) % EDGES.len()];
            check(tile, Case::plain(rows, cols, inner), i as u64);
        }
    }
}

#[test]
fn inner_widths_that_are_not_multiples_of_4_read_one_element_at_a_time() {
    for tile in tiles() {
        for (rows, cols, inner) in [(5, 33, 3), (17, 31, 5), (33, 9, 18), (3, 65, 1)] {
            check(tile, Case::plain(rows, cols, inner), 7);
        }
    }
}

#[test]
fn the_adapters_choice_and_the_tiled_kernel_agree_at_the_models_shapes() {
    // MiniLM's projections at a short and a 128-token input. Every other shape meets the
    // tile edges above; these large ones run only the adapter's own choice (Auto) and the
    // GPU-shaped kernel, to keep the float64 reference's time small.
    for tile in [LinearTile::Auto, LinearTile::Tiled] {
        for (rows, cols, inner) in [(8, 384, 384), (128, 1536, 384), (128, 384, 1536)] {
            check(tile, Case::plain(rows, cols, inner), 11);
        }
    }
}

#[test]
fn projections_split_into_heads_and_merge_back() {
    for tile in tiles() {
        // Two batches of 17 tokens, 3 heads of 12 (split) and 5 heads of 7 (merge, read
        // one element at a time).
        for (heads, dim) in [(3u32, 12u32), (5, 7), (2, 64)] {
            let (b, l) = (2, 17u32);
            let rows = b * l as usize;
            let width = (heads * dim) as usize;
            let split = Case {
                x: rows_layout(l, 24),
                y: [l, heads, dim, l, 0],
                ..Case::plain(rows, width, 24)
            };
            check(tile, split, 1);
            let merge = Case {
                x: [l, heads, dim, l, 0],
                y: rows_layout(l, 20),
                ..Case::plain(rows, 20, width)
            };
            check(tile, merge, 2);
        }
    }
}

#[test]
fn keys_and_values_land_in_their_cache_slots() {
    for tile in tiles() {
        // Three batches of 5 new tokens written at positions 9..14 of a 16-slot cache,
        // and one token at the last slot; the rest of the cache stays NaN.
        for (l, off) in [(5u32, 9u32), (1, 15)] {
            let rows = 3 * l as usize;
            let case = Case {
                x: rows_layout(l, 40),
                y: [l, 4, 8, 16, off],
                ..Case::plain(rows, 32, 40)
            };
            check(tile, case, 3);
        }
    }
}

#[test]
fn epilogues_bias_gelu_and_residual() {
    for tile in tiles() {
        for (gelu, residual) in [(true, false), (false, true), (true, true)] {
            for (rows, cols, inner) in [(17, 65, 16), (64, 33, 129), (1, 1, 1)] {
                let case = Case {
                    gelu,
                    residual,
                    ..Case::plain(rows, cols, inner)
                };
                check(tile, case, 4);
            }
            // The residual in a head layout, as y.
            let heads = Case {
                gelu,
                residual,
                y: [9, 2, 16, 12, 3],
                ..Case::plain(18, 32, 20)
            };
            check(
                tile,
                Case {
                    x: rows_layout(9, 20),
                    ..heads
                },
                5,
            );
        }
    }
}

#[test]
fn f16_weights_accumulate_in_f32() {
    if !ctx().features().contains(wgpu::Features::SHADER_F16) {
        let w = Array2::<f32>::zeros((4, 4));
        let b = Array1::<f32>::zeros(4);
        let e = pollster::block_on(LinearForTests::new(
            ctx(),
            LinearTile::Auto,
            w.view(),
            b.view(),
            (true, false),
        ));
        assert!(matches!(
            e,
            Err(wgpu_attention::AttentionError::Unsupported(_))
        ));
        return;
    }
    for tile in tiles() {
        for (rows, cols, inner) in [(17, 65, 64), (128, 33, 5), (1, 129, 127)] {
            let case = Case {
                f16: true,
                ..Case::plain(rows, cols, inner)
            };
            check(tile, case, 6);
        }
        let merge = Case {
            f16: true,
            gelu: true,
            x: [7, 3, 8, 7, 0],
            ..Case::plain(14, 16, 24)
        };
        check(tile, merge, 8);
    }
}

#[test]
fn lanes_shapes_are_refused_where_they_do_not_fit() {
    let w = Array2::<f32>::zeros((4, 4));
    let b = Array1::<f32>::zeros(4);
    let make = |tile| {
        pollster::block_on(LinearForTests::new(
            ctx(),
            tile,
            w.view(),
            b.view(),
            (false, false),
        ))
    };
    let lanes = make(LinearTile::Lanes {
        row_groups: 2,
        col_sets: 1,
    });
    assert_eq!(lanes.is_ok(), lanes_fit());
    // Outside the shapes the kernel is written for, on every adapter.
    for (row_groups, col_sets) in [(0, 1), (5, 1), (1, 3)] {
        let e = make(LinearTile::Lanes {
            row_groups,
            col_sets,
        });
        assert!(
            matches!(e, Err(wgpu_attention::AttentionError::Unsupported(_))),
            "{row_groups} {col_sets}"
        );
    }
}

#[test]
fn layouts_that_do_not_match_w_or_overflow_their_slots_are_shape_errors() {
    let c = ctx();
    let w = Array2::<f32>::zeros((8, 12));
    let b = Array1::<f32>::zeros(8);
    let layer = pollster::block_on(LinearForTests::new(
        c,
        LinearTile::Auto,
        w.view(),
        b.view(),
        (false, false),
    ))
    .unwrap();
    let t = GpuTensor::from_array(c, Array1::<f32>::zeros(4096).view().into_dyn()).unwrap();
    let y = GpuTensor::from_array(c, Array1::<f32>::zeros(4096).view().into_dyn()).unwrap();
    let bad: [(LinearLayout, LinearLayout, &str); 5] = [
        // x's heads x dim is not K = 12.
        ([4, 2, 5, 4, 0], rows_layout(4, 8), "x"),
        // y's heads x dim is not N = 8.
        (rows_layout(4, 12), [4, 3, 3, 4, 0], "y"),
        // Rows 3..7 do not fit 6 slots.
        (rows_layout(4, 12), [4, 2, 4, 6, 3], "y"),
        // Zero sizes would divide by zero in the kernel.
        ([0, 1, 12, 4, 0], rows_layout(4, 8), "x"),
        (rows_layout(4, 12), [4, 8, 0, 4, 0], "y"),
    ];
    for (xl, yl, arg) in bad {
        let mut encoder = c.device().create_command_encoder(&Default::default());
        match layer.record(c, &mut encoder, (&t, xl), (&y, yl), 4, None) {
            Err(wgpu_attention::AttentionError::Shape { arg: a, .. }) => {
                assert_eq!(a, arg, "{xl:?} {yl:?}")
            }
            other => panic!("{xl:?} {yl:?}: {other:?}"),
        }
    }
    // A tensor too small for its layout.
    let small = GpuTensor::from_array(c, Array1::<f32>::zeros(47).view().into_dyn()).unwrap();
    let mut encoder = c.device().create_command_encoder(&Default::default());
    let e = layer.record(
        c,
        &mut encoder,
        (&small, rows_layout(4, 12)),
        (&y, rows_layout(4, 8)),
        4,
        None,
    );
    assert!(
        matches!(
            e,
            Err(wgpu_attention::AttentionError::Shape { arg: "x", .. })
        ),
        "{e:?}"
    );
}
