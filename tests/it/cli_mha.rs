//! `wgpu-attention mha`: the JAX fixtures through the binary on both backends (and
//! incrementally), and the exit code and one-line message of every bad input.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::cli_common::{assert_bad_input, cli, stderr_of, TempDir};
use crate::common::{assert_close, Rng, ATOL, RTOL};
use ndarray::{Array2, Array3, ArrayD, IxDyn};
use ndarray_npy::read_npy;

fn fixture(case: &str, file: &str) -> String {
    let p: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/mha")
        .join(case)
        .join(file);
    p.to_string_lossy().into_owned()
}

fn read<D: ndarray::Dimension>(path: &str) -> ndarray::Array<f32, D> {
    read_npy(path).unwrap_or_else(|e| panic!("read {path}: {e}"))
}

fn assert_success(what: &str, out: &Output) {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{what}: exit status {:?}, stderr: {}",
        out.status,
        stderr_of(out)
    );
}

/// Runs `mha` with `args` plus `--out` and `--attn-weights` in `dir`, and compares both
/// with the fixture's files.
fn check(dir: &TempDir, what: &str, case: &str, args: &[&str], attn_file: &str) {
    let (y, a) = (
        dir.arg(&format!("{what}-y.npy")),
        dir.arg(&format!("{what}-a.npy")),
    );
    let mut all = vec!["mha", "--weights"];
    let weights = fixture(case, "weights.safetensors");
    let x = fixture(case, "x.npy");
    all.extend([
        weights.as_str(),
        "--x",
        x.as_str(),
        "--out",
        y.as_str(),
        "--attn-weights",
        a.as_str(),
    ]);
    all.extend(args);
    assert_success(what, &cli(&all));
    let want_y: Array3<f32> = read(&fixture(case, "y.npy"));
    assert_close(
        &format!("{what}: y"),
        read::<ndarray::Ix3>(&y).view(),
        want_y.view(),
        ATOL,
        RTOL,
    );
    let want_a: ArrayD<f32> = read(&fixture(case, attn_file));
    assert_close(
        &format!("{what}: weights"),
        read::<IxDyn>(&a).view(),
        want_a.view(),
        ATOL,
        RTOL,
    );
}

#[test]
fn fixtures_through_the_binary() {
    let dir = TempDir::new("mha-fixtures");
    let kv = fixture("cross_separate", "kv.npy");
    let mask = fixture("cross_separate", "mask.npy");
    for backend in ["gpu", "cpu"] {
        let cross = [
            "--heads",
            "3",
            "--kv",
            kv.as_str(),
            "--key-padding-mask",
            mask.as_str(),
            "--backend",
            backend,
        ];
        check(
            &dir,
            &format!("cross-{backend}"),
            "cross_separate",
            &cross,
            "attn_avg.npy",
        );
        let mut per_head = cross.to_vec();
        per_head.push("--per-head-weights");
        check(
            &dir,
            &format!("cross-heads-{backend}"),
            "cross_separate",
            &per_head,
            "attn_heads.npy",
        );
    }
    // Grouped-query, causal, with a row whose only key is padding; the mask as int64.
    let pad: Array2<bool> = read_npy(fixture("gqa_causal_padded", "mask.npy")).unwrap();
    let ints = dir.npy("pad-int.npy", &pad.mapv(i64::from));
    let gqa = [
        "--heads",
        "4",
        "--kv-heads",
        "2",
        "--causal",
        "--key-padding-mask",
        ints.as_str(),
    ];
    check(&dir, "gqa-gpu", "gqa_causal_padded", &gqa, "attn_avg.npy");
    let mut incremental = gqa.to_vec();
    incremental.push("--incremental");
    check(
        &dir,
        "gqa-incremental",
        "gqa_causal_padded",
        &incremental,
        "attn_avg.npy",
    );
    incremental.push("--per-head-weights");
    check(
        &dir,
        "gqa-incremental-heads",
        "gqa_causal_padded",
        &incremental,
        "attn_heads.npy",
    );
}

/// A `.safetensors` file of f32 zeros of these shapes.
pub fn safetensors(tensors: &[(&str, &[usize])]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    let mut offset = 0;
    for (name, shape) in tensors {
        let bytes = 4 * shape.iter().product::<usize>();
        header.insert(name.to_string(), serde_json::json!({"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + bytes]}));
        offset += bytes;
    }
    let mut text = serde_json::to_vec(&serde_json::Value::Object(header)).unwrap();
    while !text.len().is_multiple_of(8) {
        text.push(b' ');
    }
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend(text);
    out.resize(out.len() + offset, 0);
    out
}

#[test]
fn bad_inputs_exit_2_naming_the_flag() {
    let dir = TempDir::new("mha-bad");
    let mut rng = Rng::new(5);
    let good = [
        ("in_proj_weight", &[18usize, 6][..]),
        ("out_proj.weight", &[6, 6]),
    ];
    let w = dir.raw("w.safetensors", &safetensors(&good));
    let no_out = dir.raw("no-out.safetensors", &safetensors(&good[..1]));
    let bad_shape = dir.raw(
        "bad.safetensors",
        &safetensors(&[("in_proj_weight", &[18, 5]), ("out_proj.weight", &[6, 6])]),
    );
    let x = dir.npy(
        "x.npy",
        &Array3::from_shape_simple_fn((2, 4, 6), || rng.normal()),
    );
    let x5 = dir.npy(
        "x5.npy",
        &Array3::from_shape_simple_fn((2, 4, 5), || rng.normal()),
    );
    let pad_wrong = dir.npy("pad.npy", &Array2::from_elem((2, 5), false));
    let pad_float = dir.npy("padf.npy", &Array2::<f32>::zeros((2, 4)));
    let out = dir.arg("y.npy");
    let base = |w: &str, x: &str| {
        vec![
            "mha".to_string(),
            "--weights".into(),
            w.into(),
            "--x".into(),
            x.into(),
            "--out".into(),
            out.clone(),
        ]
    };
    let cases: Vec<(&str, Vec<&str>, &str, &str)> = vec![
        (
            "missing tensor",
            vec!["--heads", "3"],
            &no_out,
            "--weights: out_proj.weight: missing",
        ),
        (
            "wrong tensor shape",
            vec!["--heads", "3"],
            &bad_shape,
            "--weights: in_proj_weight",
        ),
        ("heads not dividing E", vec!["--heads", "4"], &w, "--heads"),
        (
            "kv heads not dividing H",
            vec!["--heads", "3", "--kv-heads", "2"],
            &w,
            "--kv-heads",
        ),
        (
            "mask shape",
            vec!["--heads", "3", "--key-padding-mask", &pad_wrong],
            &w,
            "--key-padding-mask",
        ),
        (
            "float mask",
            vec!["--heads", "3", "--key-padding-mask", &pad_float],
            &w,
            "--key-padding-mask",
        ),
        (
            "incremental on cpu",
            vec!["--heads", "3", "--incremental", "--backend", "cpu"],
            &w,
            "--incremental",
        ),
        (
            "incremental cross",
            vec!["--heads", "3", "--incremental", "--kv", &x],
            &w,
            "--incremental",
        ),
        (
            "per-head without file",
            vec!["--heads", "3", "--per-head-weights"],
            &w,
            "--attn-weights",
        ),
        (
            "missing weights file",
            vec!["--heads", "3"],
            "/nonexistent/w.safetensors",
            "--weights",
        ),
    ];
    for (what, extra, weights, needle) in &cases {
        let mut args = base(weights, &x);
        args.extend(extra.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_bad_input(what, &args, needle);
    }
    for backend in ["gpu", "cpu"] {
        let mut args = base(&w, &x5);
        args.extend(["--heads", "3", "--backend", backend].map(String::from));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_bad_input("x width", &args, "--x");
    }
}

/// Attention weights too large for the device or for memory blame `--attn-weights`,
/// not the weights file, on both backends.
#[test]
fn attention_weights_too_large_name_attn_weights() {
    let dir = TempDir::new("mha-attn-too-large");
    let w = dir.raw(
        "w.safetensors",
        &safetensors(&[("in_proj_weight", &[6, 2]), ("out_proj.weight", &[2, 2])]),
    );
    // (1, 1, L, L) weights: 6.4 GB in f32 (beyond one device buffer), 4 TB at L = 2^20.
    for (backend, len) in [("gpu", 40_000), ("cpu", 1 << 20)] {
        let x = dir.npy(
            &format!("x-{backend}.npy"),
            &Array3::<f32>::zeros((1, len, 2)),
        );
        let (out, a) = (dir.arg("y.npy"), dir.arg("a.npy"));
        let args = [
            "mha",
            "--weights",
            &w,
            "--x",
            &x,
            "--heads",
            "1",
            "--out",
            &out,
            "--attn-weights",
            &a,
            "--backend",
            backend,
        ];
        assert_bad_input(backend, &args, "--attn-weights");
    }
}

/// A whole model's state dict: --prefix picks the layer; a wrong prefix or a missing
/// tensor lists the names the file holds.
#[test]
fn prefix_selects_a_layer_and_missing_names_list_what_was_found() {
    let dir = TempDir::new("mha-prefix");
    let p = "encoder.layers.0.self_attn.";
    let w = dir.raw(
        "model.safetensors",
        &safetensors(&[
            (&format!("{p}in_proj_weight"), &[18, 6]),
            (&format!("{p}out_proj.weight"), &[6, 6]),
            ("encoder.norm.weight", &[6]),
        ]),
    );
    let x = dir.npy("x.npy", &Array3::<f32>::zeros((1, 4, 6)));
    let out = dir.arg("y.npy");
    let base = [
        "mha",
        "--weights",
        &w,
        "--x",
        &x,
        "--heads",
        "3",
        "--out",
        &out,
        "--backend",
        "cpu",
    ];
    let mut args = base.to_vec();
    args.extend(["--prefix", p]);
    assert_success("--prefix", &cli(&args));
    assert_bad_input(
        "no prefix",
        &base,
        "the file holds encoder.layers.0.self_attn.in_proj_weight",
    );
    let mut args = base.to_vec();
    args.extend(["--prefix", "decoder."]);
    assert_bad_input(
        "wrong prefix",
        &args,
        "--prefix: no tensor name starts with",
    );
}
