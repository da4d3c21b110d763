//! Random argument vectors never make the binary panic, abort or hang: every run exits
//! 0, 1 or 2, and a failure is one line on stderr.

use crate::cli_common::{stderr_of, TempDir};
use ndarray::{Array2, Array4};
use proptest::prelude::*;

/// Words the vectors are made of: subcommands, every flag, and values of every kind
/// (numbers, negatives, lists, paths to good, bad and missing files).
fn vocabulary(dir: &TempDir) -> Vec<String> {
    let q = dir.npy("q.npy", &Array4::<f32>::from_elem((1, 2, 3, 4), 0.5));
    let mask = dir.npy("m.npy", &Array2::from_elem((3, 3), true));
    let x = dir.npy("x.npy", &ndarray::Array3::<f32>::zeros((1, 3, 4)));
    let junk = dir.raw("junk.npy", b"\x93NUMPY\x01\x00\xff\xffnot a header");
    let out = dir.arg("out.npy");
    let out2 = dir.arg("out2.npy");
    // In place of /dev/zero, made here: a character device (1, 5) where this user may
    // make one, else a folder; either is not a regular file.
    let zero = dir.path("zero");
    if crate::special_files::device_node(&zero, 1, 5).is_err() {
        std::fs::create_dir(&zero).expect("a folder");
    }
    let zero = dir.arg("zero");
    let words = [
        "run",
        "bench",
        "mha",
        "info",
        "help",
        "--q",
        "--k",
        "--v",
        "--out",
        "--mask",
        "--causal",
        "--causal-bottom-right",
        "--align",
        "top-left",
        "bottom-right",
        "--window",
        "--kv-lens",
        "--scale",
        "--weights",
        "--lse",
        "--backend",
        "cpu",
        "gpu",
        "both",
        "--precision",
        "f16",
        "f32",
        "--path",
        "staged",
        "fused",
        "decode",
        "auto",
        "--shape",
        "--hkv",
        "--dv",
        "--iters",
        "--json",
        "--x",
        "--kv",
        "--heads",
        "--kv-heads",
        "--key-padding-mask",
        "--incremental",
        "--attn-weights",
        "--per-head-weights",
        "--prefix",
        "--verbose",
        "--quiet",
        "-h",
        "--help",
        "--version",
        "0",
        "1",
        "2",
        "-1",
        "3",
        "-inf",
        "nan",
        "1e40",
        "-1,4",
        "1,2",
        "2,2,3,3,4",
        "1,1,3,3,4",
        "0,1,1,1,1",
        "18446744073709551616",
        "4294967295,4294967295,1,1,1",
        "1000000,1000000,1000000,1000000,1000000",
        "",
        "=",
        "--",
        "-",
        "/nonexistent/f.npy",
        "é",
    ];
    let mut v: Vec<String> = words.iter().map(|w| w.to_string()).collect();
    v.extend([q, mask, x, junk, out, out2, zero]);
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn random_argument_vectors_never_panic(
        first in 0usize..5,
        picks in proptest::collection::vec(any::<prop::sample::Index>(), 0..12),
    ) {
        let dir = TempDir::new("random-args");
        let words = vocabulary(&dir);
        // Always a subcommand first: an empty vector is the demo, checked elsewhere.
        let mut args = vec![words[first].clone()];
        args.extend(picks.iter().map(|i| i.get(&words).clone()));
        let out = std::process::Command::new("timeout")
            .arg("120")
            .arg(env!("CARGO_BIN_EXE_wgpu-attention"))
            .args(&args)
            .output()
            .expect("run the binary");
        let msg = stderr_of(&out);
        prop_assert!(matches!(out.status.code(), Some(0..=2)), "{args:?}: {:?} {msg}", out.status);
        prop_assert!(!msg.contains("panicked"), "{args:?}: {msg}");
        if out.status.code() != Some(0) {
            prop_assert_eq!(msg.lines().count(), 1, "{:?}: {}", args, msg);
        }
    }
}
