//! `wgpu-attention heatmap`: the figures hold what the weights say (a PNG read back through
//! the colour scale gives the weights within one level), the labels and masked cells are
//! drawn, and bad input exits 2 naming the flag.

use crate::cli_common::{assert_bad_input, cli, stderr_of, TempDir};
use ndarray::{s, Array2, Array4, Ix2};
use wgpu_attention::viz::{ColorScale, DivergingScale, Heatmap, MASKED_RGB};

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
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path("t.json")).unwrap()).unwrap();
    let tokens: Vec<String> = json
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["text"].as_str().unwrap().to_string())
        .collect();
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

/// The colour of the PNG at `path` inside cell (`i`, `j`) of `h`'s figure, clear of the
/// printed value.
fn cell_pixel(path: &std::path::Path, h: &Heatmap, i: usize, j: usize) -> [u8; 3] {
    let (width, rgba) = decode_png(path);
    let r = h.cell_rect(i, j);
    let (x, y) = ((r.x + r.size / 2.0) as usize, (r.y + r.size * 0.2) as usize);
    let p = &rgba[(y * width + x) * 4..][..3];
    [p[0], p[1], p[2]]
}

#[test]
fn a_diff_of_a_tensor_with_itself_draws_every_cell_white_and_says_identical() {
    let dir = TempDir::new("diff-self");
    let w = weights(2, 3, 4, true);
    let file = dir.npy("w.npy", &w);
    let png = dir.arg("d.png");
    let run = cli(&[
        "heatmap",
        "--weights",
        &file,
        "--diff",
        &file,
        "--layer",
        "1",
        "--head",
        "2",
        "--out",
        &png,
    ]);
    assert!(run.status.success(), "{}", stderr_of(&run));
    let zero = Array2::<f32>::zeros((4, 4));
    let mut h = Heatmap::new(zero.view());
    h.cell = 32.0;
    for i in 0..4 {
        for j in 0..4 {
            assert_eq!(
                cell_pixel(&dir.path("d.png"), &h, i, j),
                DivergingScale::NEUTRAL_RGB,
                "cell ({i}, {j}), masked or not, is white"
            );
        }
    }
    // The SVG of one matrix with its values, and of every layer × head.
    let svg_out = dir.arg("d.svg");
    let run = cli(&[
        "heatmap",
        "--weights",
        &file,
        "--diff",
        &file,
        "--layer",
        "0",
        "--head",
        "1",
        "--values",
        "--out",
        &svg_out,
    ]);
    assert!(run.status.success(), "{}", stderr_of(&run));
    let svg = std::fs::read_to_string(dir.path("d.svg")).unwrap();
    assert_eq!(
        svg.matches(r#"text-anchor="middle" fill="black">0</text>"#)
            .count(),
        16,
        "every cell prints 0"
    );
    assert!(svg.contains("w.npy − w.npy") && svg.contains("identical") && svg.contains("A − B"));
    assert!(!svg.contains("−∞"), "a difference masks nothing");
    let grid_out = dir.arg("g.svg");
    let run = cli(&[
        "heatmap",
        "--weights",
        &file,
        "--diff",
        &file,
        "--grid",
        "--out",
        &grid_out,
    ]);
    assert!(run.status.success(), "{}", stderr_of(&run));
    let svg = std::fs::read_to_string(dir.path("g.svg")).unwrap();
    let white = format!(
        r#"fill="{}"/>"#,
        ColorScale::hex(DivergingScale::NEUTRAL_RGB)
    );
    for caption in ["L0 H0", "L1 H2"] {
        assert!(svg.contains(caption), "{caption} missing");
    }
    assert!(svg.contains("identical"));
    // Every thumbnail cell is white: 2 × 3 heads of 4 × 4.
    let cell_rects = svg
        .lines()
        .filter(|l| {
            l.starts_with("<rect x=") && !l.contains("stroke") && !l.contains(r#"width="18""#)
        })
        .collect::<Vec<_>>();
    assert_eq!(cell_rects.len(), 2 * 3 * 16, "{}", cell_rects.len());
    assert!(
        cell_rects.iter().all(|l| l.ends_with(&white)),
        "every cell is white"
    );
}

#[test]
fn a_known_difference_gives_the_signed_colours_at_the_extremes() {
    let dir = TempDir::new("diff-2x2");
    let a = dir.npy("a.npy", &ndarray::array![[1.0f32, 0.0], [0.6, 0.4]]);
    let b = dir.npy("b.npy", &ndarray::array![[0.2f32, 0.8], [0.4, 0.6]]);
    let png = dir.arg("d.png");
    let run = cli(&[
        "heatmap",
        "--weights",
        &a,
        "--diff",
        &b,
        "--values",
        "--out",
        &png,
    ]);
    assert!(run.status.success(), "{}", stderr_of(&run));
    // A − B = [[0.8, −0.8], [0.2, −0.2]] on a scale of ±0.8.
    let d = ndarray::array![[0.8f32, -0.8], [0.2, -0.2]];
    let mut h = Heatmap::new(d.view());
    h.cell = 48.0;
    let at = |i, j| cell_pixel(&dir.path("d.png"), &h, i, j);
    assert_eq!(
        at(0, 0),
        DivergingScale::POSITIVE_RGB,
        "the most positive cell"
    );
    assert_eq!(
        at(0, 1),
        DivergingScale::NEGATIVE_RGB,
        "the most negative cell"
    );
    let scale = DivergingScale::new();
    for (i, j, want) in [(1, 0, 0.25f32), (1, 1, -0.25)] {
        let got = scale.value_of(at(i, j));
        assert!(
            (got - want).abs() <= 1.0 / 255.0 + 1e-6,
            "cell ({i}, {j}): {got} vs {want}"
        );
    }
    let svg_out = dir.arg("d.svg");
    let run = cli(&[
        "heatmap",
        "--weights",
        &a,
        "--diff",
        &b,
        "--values",
        "--out",
        &svg_out,
    ]);
    assert!(run.status.success(), "{}", stderr_of(&run));
    let svg = std::fs::read_to_string(dir.path("d.svg")).unwrap();
    for text in [
        ">+0.80<",
        ">−0.80<",
        ">+0.20<",
        ">−0.20<",
        "a.npy − b.npy",
        "±0.800",
        "A − B",
    ] {
        assert!(svg.contains(text), "{text} missing");
    }
    assert!(svg.contains(&ColorScale::hex(DivergingScale::POSITIVE_RGB)));
    assert!(svg.contains(&ColorScale::hex(DivergingScale::NEGATIVE_RGB)));
}

#[test]
fn a_diff_of_another_shape_or_of_bad_weights_exits_2_naming_the_file_and_writes_nothing() {
    let dir = TempDir::new("diff-bad");
    let w = dir.npy("w.npy", &weights(2, 3, 4, false));
    let other = dir.npy("o.npy", &weights(2, 3, 5, false));
    let mut nan = weights(2, 3, 4, false);
    nan[[1, 2, 3, 0]] = f32::NAN;
    let nan = dir.npy("nan.npy", &nan);
    let mut inf = weights(2, 3, 4, false);
    inf[[0, 0, 0, 0]] = f32::INFINITY;
    let inf = dir.npy("inf.npy", &inf);
    let logits = dir.npy("logits.npy", &Array4::<f32>::from_elem((2, 3, 4, 4), 2.5));
    let out = dir.arg("o.svg");
    let png = dir.arg("o.png");
    for target in [&out, &png] {
        let run = cli(&[
            "heatmap",
            "--weights",
            &w,
            "--diff",
            &other,
            "--layer",
            "0",
            "--head",
            "0",
            "--out",
            target,
        ]);
        let msg = stderr_of(&run);
        assert_eq!(run.status.code(), Some(2), "{msg}");
        assert!(
            msg.contains("--diff") && msg.contains("[2, 3, 5, 5]") && msg.contains("[2, 3, 4, 4]"),
            "names --diff and both shapes: {msg}"
        );
    }
    let pick = ["--layer", "1", "--head", "2"];
    let cases: &[(&str, Vec<&str>, &str)] = &[
        (
            "NaN in --diff",
            vec!["--weights", &w, "--diff", &nan],
            "--diff",
        ),
        (
            "NaN in --diff, grid",
            vec!["--weights", &w, "--diff", &nan, "--grid"],
            "NaN",
        ),
        (
            "inf in --weights",
            vec!["--weights", &inf, "--diff", &w, "--grid"],
            "--weights",
        ),
        (
            "logits in --diff",
            vec!["--weights", &w, "--diff", &logits],
            "--diff",
        ),
        (
            "a missing --diff",
            vec!["--weights", &w, "--diff", "/nonexistent/b.npy"],
            "--diff",
        ),
    ];
    for (what, args, needle) in cases {
        let mut full = vec!["heatmap"];
        full.extend(args.iter().copied());
        if !args.contains(&"--grid") {
            full.extend(pick);
        }
        full.extend(["--out", &out]);
        assert_bad_input(what, &full, needle);
        if *needle == "--diff" {
            assert!(!stderr_of(&cli(&full)).contains("--weights:"), "{what}");
        }
    }
    let run = cli(&[
        "heatmap", "--model", "minilm", "--text", "hi", "--diff", &w, "--out", &out,
    ]);
    assert_eq!(
        run.status.code(),
        Some(2),
        "--diff needs --weights, not --model"
    );
    assert!(stderr_of(&run).contains("--diff"), "{}", stderr_of(&run));
    assert!(
        !dir.path("o.svg").exists() && !dir.path("o.png").exists(),
        "no output on bad input"
    );
}

/// The text elements of an SVG: (the opening tag's attributes, the text unescaped).
fn svg_texts(svg: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = svg;
    while let Some(at) = rest.find("<text") {
        rest = &rest[at + 5..];
        let Some(close) = rest.find('>') else { break };
        let attrs = rest[..close].to_string();
        let body = &rest[close + 1..];
        let Some(end) = body.find("</text>") else {
            break;
        };
        let text = body[..end]
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&#39;", "'")
            .replace("&amp;", "&");
        out.push((attrs, text));
        rest = &body[end..];
    }
    out
}

/// The key labels (turned 45 degrees over the columns) and the query labels (right-aligned
/// left of the rows) of a single heatmap's SVG.
fn axis_labels(svg: &str) -> (Vec<String>, Vec<String>) {
    let texts = svg_texts(svg);
    let keys = texts
        .iter()
        .filter(|(a, _)| a.contains("rotate(-45)"))
        .map(|(_, t)| t.clone())
        .collect();
    let queries = texts
        .iter()
        .filter(|(a, _)| a.contains(r#"text-anchor="end""#))
        .map(|(_, t)| t.clone())
        .collect();
    (keys, queries)
}

/// No GPT-2 byte symbol, no replacement character anywhere in the figure but its title
/// (labels, values, tooltips); the title separates its parts with `·`.
fn assert_no_byte_symbols(what: &str, svg: &str) {
    let title_end = svg.find("</text>").unwrap_or(0);
    let title_start = svg[..title_end].rfind("<text").unwrap_or(title_end);
    let rest = format!("{}{}", &svg[..title_start], &svg[title_end..]);
    if let Some(c) = rest.chars().find(|&c| crate::tokens::is_byte_symbol(c)) {
        panic!("{what}: the SVG holds the byte symbol {c:?}");
    }
}

/// The tiny byte-level llama (one token per byte) as a GGUF file in `dir`.
fn tiny_gguf(dir: &TempDir) -> String {
    use crate::model_llama::gguf_writer::{llama_meta, llama_tensors, write};
    use crate::model_llama::tiny_model::{tiny_tokenizer_spec, tiny_weights, TINY};
    let bytes = write(
        &llama_meta(&TINY, &tiny_tokenizer_spec()),
        &llama_tensors(&TINY, &tiny_weights(3, true)),
    );
    dir.raw("tiny.gguf", &bytes)
}

fn run_ok(args: &[&str]) -> String {
    let out = cli(args);
    assert!(out.status.success(), "{args:?}: {}", stderr_of(&out));
    String::from_utf8(out.stdout).expect("utf-8 stdout")
}

#[test]
fn a_byte_level_models_heatmap_reads_as_korean_per_token_and_per_word() {
    use crate::tokens::{assert_reads_as, KOREAN};
    let dir = TempDir::new("korean-tiny");
    let model = tiny_gguf(&dir);
    let (tokens_svg, words_svg) = (dir.arg("ko_tokens.svg"), dir.arg("ko.svg"));
    for (out, words) in [(&tokens_svg, false), (&words_svg, true)] {
        let mut args = vec![
            "heatmap",
            "--model",
            &model,
            "--text",
            KOREAN,
            "--backend",
            "cpu",
            "--layer",
            "1",
            "--head",
            "2",
            "--values",
            "--out",
            out,
        ];
        if words {
            args.push("--words");
        }
        run_ok(&args);
    }
    let svg = std::fs::read_to_string(dir.path("ko_tokens.svg")).unwrap();
    assert_no_byte_symbols("token view", &svg);
    let (keys, queries) = axis_labels(&svg);
    assert_eq!(keys.len(), KOREAN.len(), "one key per byte-level token");
    assert_reads_as(KOREAN, &keys);
    assert_reads_as(KOREAN, &queries);
    assert_eq!(
        keys[12], "␣",
        "the space before 생선을 is its own byte-level token"
    );

    let svg = std::fs::read_to_string(dir.path("ko.svg")).unwrap();
    assert_no_byte_symbols("word view", &svg);
    let (keys, queries) = axis_labels(&svg);
    let want: Vec<&str> = KOREAN.split(' ').collect();
    assert_eq!(keys, want);
    assert_eq!(queries, want);
    assert_eq!(svg.matches("</title></rect>").count(), 25, "a 5 × 5 matrix");
    assert_eq!(
        svg.matches(">−∞</text>").count(),
        10,
        "the causal cells stay masked"
    );
    assert!(
        svg.contains("words · “고양이가"),
        "the title names the view and the sentence"
    );
}

#[test]
fn tokenize_and_tokens_out_carry_labels_raw_strings_and_words() {
    let dir = TempDir::new("tokens-out");
    let model = tiny_gguf(&dir);
    let text = "I love AI !";
    let out = run_ok(&["model", "tokenize", "--model", &model, "--text", text]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 11, "{out}");
    assert!(lines[1].contains("␣ ") && lines[1].ends_with('Ġ'), "{out}");
    assert!(lines[2].contains(" word 1 "), "{out}");
    let (a, t) = (dir.arg("a.npy"), dir.arg("t.json"));
    run_ok(&[
        "model",
        "attention",
        "--model",
        &model,
        "--text",
        text,
        "--backend",
        "cpu",
        "--out",
        &a,
        "--tokens-out",
        &t,
    ]);
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path("t.json")).unwrap()).unwrap();
    let list = json.as_array().expect("a list");
    assert_eq!(list.len(), 11);
    assert_eq!(list[1]["raw"], "Ġ");
    assert_eq!(list[1]["text"], "␣");
    assert_eq!(list[1]["word"], 1);
    assert_eq!(list[2]["word_text"], "love");
    assert_eq!(list[2]["bytes"], serde_json::json!([108]));
    assert_eq!(list[2]["span"], serde_json::json!([2, 3]));
    // The file gives --words its words: the same figure as from the model.
    let (from_file, from_model) = (dir.arg("file.svg"), dir.arg("model.svg"));
    run_ok(&[
        "heatmap",
        "--weights",
        &a,
        "--tokens",
        &t,
        "--words",
        "--layer",
        "0",
        "--head",
        "1",
        "--values",
        "--title",
        "t",
        "--out",
        &from_file,
    ]);
    run_ok(&[
        "heatmap",
        "--model",
        &model,
        "--text",
        text,
        "--backend",
        "cpu",
        "--words",
        "--layer",
        "0",
        "--head",
        "1",
        "--values",
        "--title",
        "t",
        "--out",
        &from_model,
    ]);
    let svg = std::fs::read_to_string(dir.path("file.svg")).unwrap();
    assert_eq!(svg, std::fs::read_to_string(dir.path("model.svg")).unwrap());
    let (keys, _) = axis_labels(&svg);
    assert_eq!(keys, ["I", "love", "AI", "!"]);
    // Plain labels carry no words.
    assert_bad_input(
        "--words without words",
        &[
            "heatmap",
            "--weights",
            &a,
            "--tokens",
            &dir.raw("plain.json", b"[\"a\"]"),
            "--words",
            "--layer",
            "0",
            "--head",
            "0",
            "--out",
            &dir.arg("x.svg"),
        ],
        "--words",
    );
    assert_bad_input(
        "--words with a token list of another length",
        &[
            "heatmap",
            "--weights",
            &a,
            "--tokens",
            &dir.raw("short.json", br#"[{"text": "a", "word": 0}]"#),
            "--words",
            "--layer",
            "0",
            "--head",
            "0",
            "--out",
            &dir.arg("y.svg"),
        ],
        "--tokens",
    );
    assert!(!dir.path("x.svg").exists() && !dir.path("y.svg").exists());
}

#[test]
fn a_grid_fills_its_page_names_the_sentence_and_labels_the_edges() {
    let dir = TempDir::new("grid-fill");
    let w = weights(2, 12, 5, true);
    let file = dir.npy("w.npy", &w);
    let out = dir.arg("grid.svg");
    run_ok(&[
        "heatmap",
        "--weights",
        &file,
        "--labels",
        "The,cat,sat,on,mat",
        "--grid",
        "--layer",
        "1",
        "--out",
        &out,
    ]);
    let svg = std::fs::read_to_string(dir.path("grid.svg")).unwrap();
    for h in 0..12 {
        assert!(svg.contains(&format!(">L1 H{h}</text>")), "caption L1 H{h}");
    }
    let texts = svg_texts(&svg);
    assert!(
        texts[0].1.contains("every head of layer 1") && texts[0].1.contains("“The cat sat on mat”"),
        "{:?}",
        texts[0]
    );
    // The labels: five queries beside each thumbnail of the first column, five keys under
    // each column's lowest one.
    let rows = texts
        .iter()
        .filter(|(a, _)| a.contains(r#"text-anchor="end""#))
        .count();
    let cols = texts
        .iter()
        .filter(|(a, _)| a.contains("rotate(45)"))
        .count();
    assert!(
        rows >= 5 && rows % 5 == 0 && cols >= 5 && cols % 5 == 0,
        "{rows} {cols}"
    );
    assert_eq!(
        cols / 5 * (rows / 5),
        12,
        "columns × rows hold the 12 heads"
    );
    assert!(
        cols / 5 > 1 && rows / 5 > 1,
        "not one long row: {} × {}",
        rows / 5,
        cols / 5
    );
    // No band of empty page taller than a thumbnail under the last row.
    let attr = |tag: &str, name: &str| -> f64 {
        let at = tag.find(&format!("{name}=\"")).unwrap() + name.len() + 2;
        tag[at..].split('"').next().unwrap().parse().unwrap()
    };
    let height = attr(&svg[..svg.find('>').unwrap()], "height");
    // The thumbnails' cells (the legend's are 18 wide).
    let cells: Vec<&str> = svg
        .lines()
        .filter(|l| {
            l.starts_with("<rect x=") && !l.contains("stroke") && !l.contains(r#"width="18""#)
        })
        .collect();
    let bottom = cells
        .iter()
        .map(|l| attr(l, "y") + attr(l, "height"))
        .fold(0.0, f64::max);
    let thumb = cells
        .iter()
        .map(|l| attr(l, "height"))
        .fold(f64::MAX, f64::min)
        * 5.0;
    assert!(
        height - bottom <= thumb,
        "height {height}, cells end at {bottom}, thumbnail {thumb}"
    );
}

#[test]
#[ignore = "needs the fetched models: scripts/fetch-models.sh"]
fn smollm2_korean_reads_as_korean_per_token_and_per_word() {
    use crate::tokens::{assert_reads_as, assert_word_view, KOREAN};
    let dir = TempDir::new("smollm2-korean");
    let (a, t) = (dir.arg("a.npy"), dir.arg("t.json"));
    run_ok(&[
        "model",
        "attention",
        "--model",
        "smollm2",
        "--text",
        KOREAN,
        "--out",
        &a,
        "--tokens-out",
        &t,
    ]);
    let (tokens_svg, words_svg) = (dir.arg("ko_tokens.svg"), dir.arg("ko.svg"));
    for (out, words) in [(&tokens_svg, false), (&words_svg, true)] {
        let mut args = vec![
            "heatmap",
            "--weights",
            &a,
            "--tokens",
            &t,
            "--layer",
            "3",
            "--head",
            "0",
            "--values",
            "--out",
            out,
        ];
        if words {
            args.push("--words");
        }
        run_ok(&args);
    }
    let svg = std::fs::read_to_string(dir.path("ko_tokens.svg")).unwrap();
    assert_no_byte_symbols("token view", &svg);
    let (keys, queries) = axis_labels(&svg);
    assert_reads_as(KOREAN, &keys);
    assert_reads_as(KOREAN, &queries);
    let svg = std::fs::read_to_string(dir.path("ko.svg")).unwrap();
    assert_no_byte_symbols("word view", &svg);
    let (keys, queries) = axis_labels(&svg);
    let want: Vec<&str> = KOREAN.split(' ').collect();
    assert_eq!(keys, want);
    assert_eq!(queries, want);
    // The word view against a float64 aggregation of the model's own token weights,
    // computed here from the definition.
    let probs: ndarray::Array4<f32> = ndarray_npy::read_npy(dir.path("a.npy")).unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path("t.json")).unwrap()).unwrap();
    let word_of: Vec<usize> = json
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["word"].as_u64().unwrap() as usize)
        .collect();
    let n = word_of.last().unwrap() + 1;
    assert_eq!(n, 5);
    let ranges: Vec<std::ops::Range<usize>> = (0..n)
        .map(|w| {
            let start = word_of.iter().position(|&x| x == w).unwrap();
            let end = word_of.iter().rposition(|&x| x == w).unwrap() + 1;
            start..end
        })
        .collect();
    for (l, h) in [(0, 0), (3, 0), (29, 8)] {
        let m = probs.slice(s![l, h, .., ..]);
        let want = ndarray::Array2::from_shape_fn((n, n), |(x, y)| {
            let mut sum = 0.0f64;
            for i in ranges[x].clone() {
                for j in ranges[y].clone() {
                    sum += f64::from(m[[i, j]]);
                }
            }
            sum / ranges[x].len() as f64
        });
        let got = wgpu_attention::viz::word_attention(m, &ranges, &ranges).unwrap();
        assert_word_view(&format!("L{l} H{h}"), got.view(), want.view());
    }
}

#[test]
#[ignore = "needs the fetched models: scripts/fetch-models.sh"]
fn the_english_lecture_sentences_get_one_label_per_word_from_both_models() {
    let dir = TempDir::new("lecture-words");
    for (k, (model, text)) in [
        ("smollm2", "I love AI !"),
        ("smollm2", "The cat sat on the mat"),
        ("minilm", "The cat sat on the mat"),
        ("minilm", "I love AI !"),
    ]
    .into_iter()
    .enumerate()
    {
        let out = dir.arg(&format!("w{k}.svg"));
        run_ok(&[
            "heatmap", "--model", model, "--text", text, "--words", "--layer", "0", "--head", "0",
            "--values", "--out", &out,
        ]);
        let svg = std::fs::read_to_string(dir.path(&format!("w{k}.svg"))).unwrap();
        assert_no_byte_symbols(text, &svg);
        let (keys, _) = axis_labels(&svg);
        let keys: Vec<&str> = keys
            .iter()
            .map(String::as_str)
            .filter(|k| !k.starts_with('['))
            .collect();
        let want: Vec<&str> = text.split_whitespace().collect();
        assert_eq!(keys, want, "{model}: {text}");
    }
    // The token view of "I love AI !" shows the space mark, never GPT-2's Ġ.
    let out = dir.arg("love.svg");
    run_ok(&[
        "heatmap",
        "--model",
        "smollm2",
        "--text",
        "I love AI !",
        "--layer",
        "3",
        "--head",
        "0",
        "--values",
        "--out",
        &out,
    ]);
    let svg = std::fs::read_to_string(dir.path("love.svg")).unwrap();
    assert_eq!(axis_labels(&svg).0, ["I", "␣love", "␣AI", "␣!"]);
}

/// The captions of a grid's thumbnails (`L0 H2`), in the SVG's order, which is the
/// reading order.
fn grid_captions(svg: &str) -> Vec<String> {
    svg_texts(svg)
        .into_iter()
        .map(|(_, t)| t)
        .filter(|t| {
            let mut parts = t.split(' ');
            let (Some(l), Some(h), None) = (parts.next(), parts.next(), parts.next()) else {
                return false;
            };
            let num = |s: &str, p: char| {
                s.strip_prefix(p)
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            };
            num(l, 'L') && num(h, 'H')
        })
        .collect()
}

/// A (2, 3, 5, 5) tensor whose heads are of clearly different sharpness: the seeded
/// softmax rows raised to a per-head power and renormalised.
fn varied_weights() -> Array4<f32> {
    let mut w = weights(2, 3, 5, false);
    let powers = [1.0f32, 6.0, 0.3, 3.0, 0.1, 1.7];
    for l in 0..2 {
        for h in 0..3 {
            for i in 0..5 {
                let mut row = w.slice_mut(s![l, h, i, ..]);
                row.mapv_inplace(|x| x.powf(powers[l * 3 + h]));
                let sum: f32 = row.sum();
                row.mapv_inplace(|x| x / sum);
            }
        }
    }
    w
}

#[test]
fn grid_order_layer_is_the_default_and_entropy_puts_the_lowest_entropy_head_first() {
    use wgpu_attention::viz::{grid_order, head_stats, GridOrder};
    let dir = TempDir::new("grid-order");
    let w = varied_weights();
    let file = dir.npy("w.npy", &w);
    let svg_of = |extra: &[&str]| {
        let mut args = vec!["heatmap", "--weights", &file, "--grid"];
        args.extend_from_slice(extra);
        args.extend(["--out", "-"]);
        run_ok(&args)
    };
    let default = svg_of(&[]);
    assert_eq!(svg_of(&["--order", "layer"]), default, "byte for byte");
    let layer_order: Vec<String> = (0..2)
        .flat_map(|l| (0..3).map(move |h| format!("L{l} H{h}")))
        .collect();
    assert_eq!(grid_captions(&default), layer_order);
    let stats = head_stats(w.view().into_dyn()).unwrap();
    let lowest = stats
        .stats
        .iter()
        .min_by(|a, b| a.entropy.total_cmp(&b.entropy))
        .unwrap();
    for (name, order) in [
        ("entropy", GridOrder::Entropy),
        ("similarity", GridOrder::Similarity),
    ] {
        let svg = svg_of(&["--order", name]);
        let captions = grid_captions(&svg);
        assert_eq!(
            captions[0],
            format!("L{} H{}", lowest.layer, lowest.head),
            "{name}: {captions:?}"
        );
        let want: Vec<String> = grid_order(&stats, order)
            .into_iter()
            .map(|(l, h)| format!("L{l} H{h}"))
            .collect();
        assert_eq!(captions, want, "{name}");
        assert!(
            svg.contains(&format!("by {name}")),
            "{name}: the title says so"
        );
    }
    let entropies: Vec<f64> = grid_captions(&svg_of(&["--order", "entropy"]))
        .iter()
        .map(|c| {
            let (l, h) = c[1..].split_once(" H").unwrap();
            let st = stats.get(l.parse().unwrap(), h.parse().unwrap()).unwrap();
            st.entropy
        })
        .collect();
    assert!(entropies.windows(2).all(|p| p[0] <= p[1]), "{entropies:?}");
    // One layer's heads reorder too.
    let one = svg_of(&["--layer", "1", "--order", "entropy"]);
    let mut heads: Vec<usize> = (0..3).collect();
    heads.sort_by(|&a, &b| {
        let e = |h| stats.get(1, h).unwrap().entropy;
        e(a).total_cmp(&e(b))
    });
    let want: Vec<String> = heads.iter().map(|h| format!("L1 H{h}")).collect();
    assert_eq!(grid_captions(&one), want);
}

#[test]
fn annotate_prints_each_heads_entropy_and_with_similarity_its_nearest_head() {
    use wgpu_attention::viz::head_stats;
    let dir = TempDir::new("grid-annotate");
    let w = varied_weights();
    let file = dir.npy("w.npy", &w);
    let stats = head_stats(w.view().into_dyn()).unwrap();
    let texts = |extra: &[&str]| -> Vec<String> {
        let mut args = vec!["heatmap", "--weights", &file, "--grid", "--annotate"];
        args.extend_from_slice(extra);
        args.extend(["--out", "-"]);
        svg_texts(&run_ok(&args))
            .into_iter()
            .map(|(_, t)| t)
            .collect()
    };
    let plain = texts(&[]);
    let notes: Vec<&String> = plain.iter().filter(|t| t.ends_with(" nats")).collect();
    let want: Vec<String> = stats
        .stats
        .iter()
        .map(|h| format!("{:.3} nats", h.entropy))
        .collect();
    assert_eq!(notes, want.iter().collect::<Vec<_>>(), "layer order");
    assert!(
        !plain.iter().any(|t| t.starts_with('≈')),
        "no nearest heads"
    );
    let similar = texts(&["--order", "similarity"]);
    for h in &stats.stats {
        let n = h.nearest.unwrap();
        let caption = format!("L{} H{}", h.layer, h.head);
        let at = similar.iter().position(|t| *t == caption).unwrap();
        assert_eq!(
            similar[at + 1],
            format!("{:.3} nats", h.entropy),
            "{caption}"
        );
        assert_eq!(
            similar[at + 2],
            format!("≈ L{} H{} · {:.3}", n.layer, n.head, n.distance),
            "{caption}"
        );
    }
}

#[test]
fn a_models_grid_annotates_the_entropies_of_model_heads() {
    let dir = TempDir::new("grid-model");
    let model = tiny_gguf(&dir);
    let text = "I love AI !";
    let json = run_ok(&[
        "model",
        "heads",
        "--model",
        &model,
        "--text",
        text,
        "--backend",
        "cpu",
        "--json",
        "-",
    ]);
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    let mut heads: Vec<(f64, String)> = doc["heads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["entropy"].as_f64().unwrap(),
                format!("L{} H{}", h["layer"], h["head"]),
            )
        })
        .collect();
    let svg = run_ok(&[
        "heatmap",
        "--model",
        &model,
        "--text",
        text,
        "--backend",
        "cpu",
        "--grid",
        "--order",
        "entropy",
        "--annotate",
        "--out",
        "-",
    ]);
    heads.sort_by(|a, b| a.0.total_cmp(&b.0));
    let captions = grid_captions(&svg);
    assert_eq!(captions[0], heads[0].1, "{captions:?}");
    let texts: Vec<String> = svg_texts(&svg).into_iter().map(|(_, t)| t).collect();
    for (entropy, caption) in &heads {
        let at = texts.iter().position(|t| t == caption).unwrap();
        assert_eq!(texts[at + 1], format!("{entropy:.3} nats"), "{caption}");
    }
}

#[test]
fn order_and_annotate_without_a_grid_or_with_a_diff_exit_2_naming_the_flag() {
    let dir = TempDir::new("grid-order-bad");
    let w = dir.npy("w.npy", &weights(2, 3, 4, false));
    let cross = dir.npy("cross.npy", &Array4::<f32>::from_elem((1, 2, 2, 4), 0.25));
    let out = dir.arg("o.svg");
    let one = ["--layer", "0", "--head", "0"];
    let cases: Vec<(&str, Vec<&str>, &str)> = vec![
        (
            "--order without --grid",
            [&["--weights", &w, "--order", "entropy"][..], &one].concat(),
            "--order",
        ),
        (
            "--order layer without --grid",
            [&["--weights", &w, "--order", "layer"][..], &one].concat(),
            "--order",
        ),
        (
            "--annotate without --grid",
            [&["--weights", &w, "--annotate"][..], &one].concat(),
            "--annotate",
        ),
        (
            "--order of a difference",
            vec![
                "--weights",
                &w,
                "--diff",
                &w,
                "--grid",
                "--order",
                "similarity",
            ],
            "--order",
        ),
        (
            "--annotate of a difference",
            vec!["--weights", &w, "--diff", &w, "--grid", "--annotate"],
            "--annotate",
        ),
        (
            "--order entropy with --group boxes",
            vec![
                "--weights",
                &w,
                "--grid",
                "--group",
                "3",
                "--order",
                "entropy",
            ],
            "--order",
        ),
        (
            "--order of cross-attention",
            vec!["--weights", &cross, "--grid", "--order", "entropy"],
            "--order",
        ),
        (
            "--annotate of cross-attention",
            vec!["--weights", &cross, "--grid", "--annotate"],
            "--annotate",
        ),
        (
            "an unknown order",
            vec!["--weights", &w, "--grid", "--order", "random"],
            "--order",
        ),
    ];
    for (what, args, needle) in &cases {
        let mut full = vec!["heatmap"];
        full.extend(args.iter().copied());
        full.extend(["--out", &out]);
        assert_bad_input(what, &full, needle);
    }
    assert!(!dir.path("o.svg").exists(), "no output on bad input");
    // --order layer keeps the --group boxes.
    run_ok(&[
        "heatmap",
        "--weights",
        &w,
        "--grid",
        "--group",
        "3",
        "--order",
        "layer",
        "--annotate",
        "--out",
        &out,
    ]);
}

#[test]
fn help_documents_order_and_annotate_with_an_example() {
    let help = run_ok(&["heatmap", "--help"]);
    assert!(
        help.contains("--order <ORDER>") && help.contains("--annotate"),
        "{help}"
    );
    assert!(
        help.contains("--grid --order similarity --annotate"),
        "an example: {help}"
    );
}
