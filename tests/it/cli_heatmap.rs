//! `wgpu-attention heatmap`: the figures hold what the weights say (a PNG read back through
//! the colour scale gives the weights within one level), the labels and masked cells are
//! drawn, and bad input exits 2 naming the flag.

use crate::cli_common::{assert_bad_input, cli, stderr_of, TempDir};
use ndarray::{s, Array2, Array4, Ix2};
use wgpu_attention::viz::{ColorScale, Heatmap, MASKED_RGB};

/// Softmax rows of a seeded pseudo-random (layers, heads, L, L) tensor, causal when asked
/// (so the upper triangle is exactly 0).
fn weights(layers: usize, heads: usize, l: usize, causal: bool) -> Array4<f32> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 40) as f64 / (1u64 << 24) as f64 * 6.0 - 3.0
    };
    let mut w = Array4::<f32>::zeros((layers, heads, l, l));
    for a in 0..layers {
        for b in 0..heads {
            for i in 0..l {
                let allowed = |j: usize| !causal || j <= i;
                let logits: Vec<f64> = (0..l).map(|_| next()).collect();
                let max = (0..l)
                    .filter(|&j| allowed(j))
                    .map(|j| logits[j])
                    .fold(f64::MIN, f64::max);
                let sum: f64 = (0..l)
                    .filter(|&j| allowed(j))
                    .map(|j| (logits[j] - max).exp())
                    .sum();
                for j in (0..l).filter(|&j| allowed(j)) {
                    w[[a, b, i, j]] = ((logits[j] - max).exp() / sum) as f32;
                }
            }
        }
    }
    w
}

fn decode_png(path: &std::path::Path) -> (usize, Vec<u8>) {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!(info.color_type, png::ColorType::Rgba, "resvg writes RGBA");
    (info.width as usize, buf[..info.buffer_size()].to_vec())
}

/// Reads every cell of `h`'s figure back from the PNG at `path` and checks it against the
/// weights (within one level of the colour scale; masked cells black).
fn assert_png_holds(path: &std::path::Path, h: &Heatmap) {
    let (width, rgba) = decode_png(path);
    let scale = ColorScale::new();
    let (rows, cols) = h.weights.dim();
    for i in 0..rows {
        for j in 0..cols {
            // A point inside the cell clear of the printed value (drawn in its lower half).
            let r = h.cell_rect(i, j);
            let (x, y) = ((r.x + r.size / 2.0) as usize, (r.y + r.size * 0.2) as usize);
            let p = &rgba[(y * width + x) * 4..][..3];
            let rgb = [p[0], p[1], p[2]];
            let want = h.weights[[i, j]];
            match scale.weight_of(rgb) {
                None => assert_eq!(want, 0.0, "cell ({i}, {j}) drawn masked, weight {want}"),
                Some(got) => assert!(
                    (got - want).abs() <= 1.0 / 255.0 + 1e-6,
                    "cell ({i}, {j}): read {got}, weight {want}, pixel {rgb:?}"
                ),
            }
        }
    }
}

#[test]
#[ignore = "needs the fetched models: scripts/fetch-models.sh"]
fn minilm_heatmap_png_reads_back_as_the_models_attention() {
    let dir = TempDir::new("minilm-png");
    let (a, t, png) = (dir.arg("a.npy"), dir.arg("t.json"), dir.arg("cat.png"));
    let text = "The cat sat on the mat";
    let run = cli(&[
        "model",
        "attention",
        "--model",
        "minilm",
        "--text",
        text,
        "--out",
        &a,
        "--tokens-out",
        &t,
    ]);
    assert!(run.status.success(), "{}", stderr_of(&run));
    let run = cli(&[
        "heatmap", "--model", "minilm", "--text", text, "--layer", "0", "--head", "0", "--values",
        "--title", "t", "--out", &png,
    ]);
    assert!(run.status.success(), "{}", stderr_of(&run));
    let probs: ndarray::ArrayD<f32> = ndarray_npy::read_npy(dir.path("a.npy")).unwrap();
    let tokens: Vec<String> =
        serde_json::from_str(&std::fs::read_to_string(dir.path("t.json")).unwrap()).unwrap();
    let m = probs
        .slice(s![0, 0, .., ..])
        .into_dimensionality::<Ix2>()
        .unwrap();
    let mut h = Heatmap::new(m);
    h.row_labels = tokens.clone();
    h.col_labels = tokens;
    h.title = "t".into();
    h.values = true;
    h.cell = 48.0;
    assert_png_holds(&dir.path("cat.png"), &h);
}

#[test]
fn a_png_read_back_through_the_colour_scale_gives_the_weights_within_one_level() {
    let dir = TempDir::new("png-readback");
    let w = weights(2, 3, 6, true);
    let file = dir.npy("w.npy", &w);
    let labels = ["The", "cat", "sat", "on", "the", "mat"];
    let out = dir.arg("cat.png");
    let run = cli(&[
        "heatmap",
        "--weights",
        &file,
        "--labels",
        &labels.join(","),
        "--layer",
        "1",
        "--head",
        "2",
        "--values",
        "--title",
        "t",
        "--out",
        &out,
    ]);
    assert!(run.status.success(), "{}", stderr_of(&run));
    // The same figure's geometry, from the library that drew it.
    let m = w
        .slice(s![1, 2, .., ..])
        .into_dimensionality::<Ix2>()
        .unwrap();
    let mut h = Heatmap::new(m);
    h.row_labels = labels.iter().map(|s| s.to_string()).collect();
    h.col_labels = h.row_labels.clone();
    h.title = "t".into();
    h.values = true;
    h.cell = 48.0;
    assert_png_holds(&dir.path("cat.png"), &h);
    let (width, rgba) = decode_png(&dir.path("cat.png"));
    for i in 0..6 {
        for j in i + 1..6 {
            let r = h.cell_rect(i, j);
            let (x, y) = ((r.x + r.size / 2.0) as usize, (r.y + r.size * 0.2) as usize);
            assert_eq!(
                &rgba[(y * width + x) * 4..][..3],
                MASKED_RGB,
                "the causal cell ({i}, {j}) is black"
            );
        }
    }
}

#[test]
fn the_svg_has_the_labels_the_title_the_values_and_the_masked_cells() {
    let dir = TempDir::new("svg");
    let w: Array2<f32> = weights(1, 1, 5, true).slice(s![0, 0, .., ..]).to_owned();
    let file = dir.npy("w.npy", &w);
    let tokens = dir.raw(
        "t.json",
        r#"["고양이가", "생선을", "먹었다", "그것은", "맛있었다"]"#.as_bytes(),
    );
    let out = dir.arg("ko.svg");
    let run = cli(&[
        "heatmap",
        "--weights",
        &file,
        "--tokens",
        &tokens,
        "--values",
        "--out",
        &out,
    ]);
    assert!(run.status.success(), "{}", stderr_of(&run));
    assert!(run.stdout.is_empty());
    let svg = std::fs::read_to_string(dir.path("ko.svg")).unwrap();
    assert!(svg.starts_with("<svg"));
    for label in ["고양이가", "맛있었다", "keys", "queries", "−∞ masked"] {
        assert!(svg.contains(label), "{label} missing");
    }
    assert!(
        svg.contains("“고양이가 생선을 먹었다 그것은 맛있었다”"),
        "the title names the sentence"
    );
    assert_eq!(
        svg.matches(">−∞</text>").count(),
        10,
        "the 10 causal cells are marked"
    );
    assert!(svg.contains(&format!(">{:.2}<", w[[1, 0]])));
}

#[test]
fn a_grid_draws_every_layer_and_head() {
    let dir = TempDir::new("grid");
    let file = dir.npy("w.npy", &weights(2, 3, 4, false));
    let out = dir.arg("grid.svg");
    let run = cli(&[
        "heatmap",
        "--weights",
        &file,
        "--grid",
        "--group",
        "3",
        "--out",
        &out,
    ]);
    assert!(run.status.success(), "{}", stderr_of(&run));
    let svg = std::fs::read_to_string(dir.path("grid.svg")).unwrap();
    for caption in ["L0 H0", "L0 H2", "L1 H0", "L1 H2"] {
        assert!(svg.contains(caption), "{caption} missing");
    }
    let one_layer = dir.arg("layer.svg");
    let run = cli(&[
        "heatmap",
        "--weights",
        &file,
        "--grid",
        "--layer",
        "1",
        "--out",
        &one_layer,
    ]);
    assert!(run.status.success(), "{}", stderr_of(&run));
    let svg = std::fs::read_to_string(dir.path("layer.svg")).unwrap();
    assert!(svg.contains("L1 H2") && !svg.contains("L0 H0"));
}

#[test]
fn bad_input_exits_2_naming_the_flag_and_writes_nothing() {
    let dir = TempDir::new("bad");
    let w = dir.npy("w.npy", &weights(2, 3, 4, false));
    let logits = dir.npy("logits.npy", &Array2::<f32>::from_elem((3, 3), 2.5));
    let rows = dir.npy("rows.npy", &Array2::<f32>::from_elem((3, 3), 0.5));
    let out = dir.arg("o.svg");
    let cases: &[(&str, Vec<&str>, &str)] = &[
        (
            "logits are not probabilities",
            vec!["--weights", &logits],
            "--weights",
        ),
        (
            "rows summing to 1.5",
            vec!["--weights", &rows],
            "row 0 sums to 1.5",
        ),
        (
            "no layer of a rank-4 tensor",
            vec!["--weights", &w, "--head", "0"],
            "--layer",
        ),
        ("no head", vec!["--weights", &w, "--layer", "0"], "--head"),
        (
            "layer out of range",
            vec!["--weights", &w, "--layer", "2", "--head", "0"],
            "--layer",
        ),
        (
            "head out of range",
            vec!["--weights", &w, "--layer", "0", "--head", "3"],
            "--head",
        ),
        (
            "labels of another length",
            vec![
                "--weights",
                &w,
                "--layer",
                "0",
                "--head",
                "0",
                "--labels",
                "a,b",
            ],
            "--labels",
        ),
        (
            "a layer of a matrix",
            vec!["--weights", &logits, "--layer", "0"],
            "--layer",
        ),
        (
            "a grid of one matrix",
            vec!["--weights", &rows, "--grid"],
            "--grid",
        ),
        (
            "a missing file",
            vec!["--weights", "/nonexistent/w.npy"],
            "--weights",
        ),
    ];
    for (what, args, needle) in cases {
        let mut full = vec!["heatmap"];
        full.extend(args.iter().copied());
        full.extend(["--out", &out]);
        assert_bad_input(what, &full, needle);
    }
    let jpg = dir.arg("o.jpg");
    assert_bad_input(
        "an unknown extension",
        &["heatmap", "--weights", &w, "--grid", "--out", &jpg],
        "--out",
    );
    assert!(
        !dir.path("o.svg").exists() && !dir.path("o.jpg").exists(),
        "no output on bad input"
    );
}
