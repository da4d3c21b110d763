//! The `wgpu-attention` binary: `run` on both backends against the library's CPU
//! reference, the input formats it accepts, the exit codes and one-line messages of
//! every bad input, and the demo and `info`.

use std::path::Path;
use std::process::Output;

use crate::cli_common::{assert_bad_input, cli, stderr_of, RunArgs, TempDir};
use crate::common::{assert_close, Rng, ATOL, RTOL};
use ndarray::{Array1, Array2, Array3, Array4, ArrayD};
use ndarray_npy::read_npy;
use wgpu_attention::{
    attention_cpu, attention_reference, Alignment, AttentionOptions, Mask, Window,
};

fn assert_success(what: &str, out: &Output) {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{what}: exit status {:?}, stderr: {}",
        out.status,
        stderr_of(out)
    );
}

fn read4(path: &Path) -> Array4<f32> {
    read_npy(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// An f32 array written as an `.npy` file of another float dtype: the header's
/// descriptor is patched in place (same length) and the data re-encoded.
fn npy_bytes_as(a: &ArrayD<f32>, descr: &str) -> Vec<u8> {
    let mut bytes = Vec::new();
    ndarray_npy::WriteNpyExt::write_npy(a, &mut bytes).expect("encode npy");
    let header_len = bytes.len() - 4 * a.len();
    let mut out = patch(&bytes[..header_len], "'<f4'", &format!("'{descr}'"));
    for &x in a.iter() {
        match descr {
            "<f2" => out.extend(half::f16::from_f32(x).to_le_bytes()),
            ">f2" => out.extend(half::f16::from_f32(x).to_be_bytes()),
            // Complex: real and imaginary parts of 4 bytes each.
            "<c8" => out.extend(x.to_le_bytes().into_iter().chain(0f32.to_le_bytes())),
            _ => panic!("unknown descriptor {descr}"),
        }
    }
    out
}

/// `header` with the one occurrence of `from` replaced by `to`, of the same length.
fn patch(header: &[u8], from: &str, to: &str) -> Vec<u8> {
    assert_eq!(from.len(), to.len(), "the header length must not change");
    let at = header
        .windows(from.len())
        .position(|w| w == from.as_bytes())
        .unwrap_or_else(|| panic!("{from} not in the header"));
    let mut out = header.to_vec();
    out[at..at + to.len()].copy_from_slice(to.as_bytes());
    out
}

/// The same array as a Fortran-ordered `.npy` file.
fn npy_bytes_fortran(a: &ArrayD<f32>) -> Vec<u8> {
    let mut bytes = Vec::new();
    ndarray_npy::WriteNpyExt::write_npy(a, &mut bytes).expect("encode npy");
    let header_len = bytes.len() - 4 * a.len();
    // Same length: the header stays aligned.
    let mut out = patch(
        &bytes[..header_len],
        "'fortran_order': False",
        "'fortran_order': True ",
    );
    // Column-major data is the row-major data of the reversed-axes view.
    for &x in a.t().iter() {
        out.extend(x.to_le_bytes());
    }
    out
}

/// One `run` case: inputs, flags, and the options the library sees for the same flags.
struct Case<'a> {
    name: &'a str,
    q: Array4<f32>,
    k: Array4<f32>,
    v: Array4<f32>,
    flags: Vec<String>,
    opts: AttentionOptions<'a>,
}

/// Runs the case on both backends; each must match the library's reference
/// (the GPU within docs/DESIGN.md's f32 bound, the CPU backend exactly the library's
/// fast CPU path), for out, weights and lse.
fn check_both_backends(case: Case<'_>) {
    let dir = TempDir::new(case.name);
    let (q, k, v) = (
        dir.npy("q.npy", &case.q),
        dir.npy("k.npy", &case.k),
        dir.npy("v.npy", &case.v),
    );
    let opts = AttentionOptions {
        return_weights: true,
        return_lse: true,
        ..case.opts
    };
    let reference = attention_reference(case.q.view(), case.k.view(), case.v.view(), &opts)
        .expect("reference accepts the case");
    // The CPU backend runs the library's fast CPU path: it must write exactly what that
    // returns, which in turn must meet the f32 bound against the reference.
    let fast =
        crate::common::check_fast_cpu(case.name, &case.q, &case.k, &case.v, &opts, &reference);
    for backend in ["gpu", "cpu"] {
        let want = if backend == "gpu" { &reference } else { &fast };
        let out = dir.path(&format!("out-{backend}.npy"));
        let weights = dir.path(&format!("w-{backend}.npy"));
        let lse = dir.path(&format!("lse-{backend}.npy"));
        let (out_s, weights_s, lse_s) = (
            out.to_string_lossy(),
            weights.to_string_lossy(),
            lse.to_string_lossy(),
        );
        let flags: Vec<&str> = case.flags.iter().map(String::as_str).collect();
        let args = RunArgs::new(&q)
            .k(&k)
            .v(&v)
            .backend(backend)
            .out(&out_s)
            .flag("--weights", &weights_s)
            .flag("--lse", &lse_s)
            .args(&flags)
            .build();
        let what = format!("{} on {backend}", case.name);
        assert_success(&what, &cli(&args));
        let (atol, rtol) = if backend == "gpu" {
            (ATOL, RTOL)
        } else {
            (0.0, 0.0)
        };
        let got_out = read4(&out);
        let got_w = read4(&weights);
        let got_lse: Array3<f32> = read_npy(&lse).expect("read lse");
        assert_close(
            &format!("{what}: out"),
            got_out.view(),
            want.out.view(),
            atol,
            rtol,
        );
        let want_w = want.weights.as_ref().expect("weights requested");
        assert_close(
            &format!("{what}: weights"),
            got_w.view(),
            want_w.view(),
            atol,
            rtol,
        );
        let want_lse = want.lse.as_ref().expect("lse requested");
        assert_close(
            &format!("{what}: lse"),
            got_lse.view(),
            want_lse.view(),
            atol,
            rtol,
        );
    }
}

fn strings(flags: &[&str]) -> Vec<String> {
    flags.iter().map(|s| s.to_string()).collect()
}

#[test]
fn run_gqa_with_bool_mask() {
    let mut rng = Rng::new(11);
    let mask = Array2::from_shape_fn((17, 33), |(i, j)| (i * 7 + j * 3) % 5 != 0);
    let dir = TempDir::new("gqa-mask-file");
    let mask_path = dir.npy("mask.npy", &mask);
    let mask_dyn = mask.clone().into_dyn();
    check_both_backends(Case {
        name: "gqa-bool-mask",
        q: rng.array4((2, 4, 17, 16)),
        k: rng.array4((2, 2, 33, 16)),
        v: rng.array4((2, 2, 33, 8)),
        flags: strings(&["--mask", &mask_path]),
        opts: AttentionOptions {
            mask: Some(Mask::Bool(mask_dyn.view())),
            ..Default::default()
        },
    });
}

#[test]
fn run_causal_bottom_right_additive_mask_kv_lens() {
    let mut rng = Rng::new(12);
    // (B, 1, 1, Lk): a per-batch bias that broadcasts over heads and queries.
    let bias = Array4::from_shape_fn((2, 1, 1, 20), |(b, _, _, j)| {
        if j == 3 + b {
            f32::NEG_INFINITY
        } else {
            (j as f32 * 0.37).sin()
        }
    });
    let lens = Array1::from_vec(vec![20i64, 11]);
    let dir = TempDir::new("br-files");
    let bias_path = dir.npy("bias.npy", &bias);
    let lens_path = dir.npy("lens.npy", &lens);
    let bias_dyn = bias.clone().into_dyn();
    let lens_u32 = [20u32, 11];
    check_both_backends(Case {
        name: "causal-bottom-right",
        q: rng.array4((2, 3, 5, 8)),
        k: rng.array4((2, 3, 20, 8)),
        v: rng.array4((2, 3, 20, 8)),
        flags: strings(&[
            "--causal-bottom-right",
            "--mask",
            &bias_path,
            "--kv-lens",
            &lens_path,
        ]),
        opts: AttentionOptions {
            causal: true,
            alignment: Alignment::BottomRight,
            mask: Some(Mask::Additive(bias_dyn.view())),
            kv_lens: Some(&lens_u32),
            ..Default::default()
        },
    });
}

#[test]
fn run_window_and_scale_mqa() {
    let mut rng = Rng::new(13);
    check_both_backends(Case {
        name: "window-left-unbounded",
        q: rng.array4((1, 4, 16, 8)),
        k: rng.array4((1, 1, 16, 8)),
        v: rng.array4((1, 1, 16, 4)),
        flags: strings(&["--window", "-1,2", "--scale", "0.5"]),
        opts: AttentionOptions {
            window: Some(Window {
                left: None,
                right: Some(2),
            }),
            scale: Some(0.5),
            ..Default::default()
        },
    });
    check_both_backends(Case {
        name: "window-causal-int32-lens",
        q: rng.array4((1, 2, 9, 8)),
        k: rng.array4((1, 2, 9, 8)),
        v: rng.array4((1, 2, 9, 8)),
        flags: strings(&["--causal", "--window", "3,0", "--align", "bottom-right"]),
        opts: AttentionOptions {
            causal: true,
            alignment: Alignment::BottomRight,
            window: Some(Window::new(3, 0)),
            ..Default::default()
        },
    });
}

#[test]
fn run_reads_f64_f16_int32_and_fortran_inputs() {
    let mut rng = Rng::new(14);
    let q = rng.array4((1, 2, 6, 8));
    let k = rng.array4((1, 2, 7, 8));
    let v = rng.array4((1, 2, 7, 3));
    let dir = TempDir::new("dtypes");
    // q as f64 (exactly representable: converted back without loss), k as big-endian f16,
    // v Fortran-ordered, kv-lens int32.
    let q_path = dir.npy("q.npy", &q.mapv(f64::from));
    let k_path = dir.raw("k.npy", &npy_bytes_as(&k.clone().into_dyn(), ">f2"));
    let v_path = dir.raw("v.npy", &npy_bytes_fortran(&v.clone().into_dyn()));
    let lens_path = dir.npy("lens.npy", &Array1::from_vec(vec![5i32]));
    let out = dir.path("out.npy");
    let out_s = out.to_string_lossy();
    let status = cli(&RunArgs::new(&q_path)
        .k(&k_path)
        .v(&v_path)
        .out(&out_s)
        .flag("--kv-lens", &lens_path)
        .backend("cpu")
        .build());
    assert_success("f64/f16/fortran inputs", &status);
    let k16 = k.mapv(|x| half::f16::from_f32(x).to_f32());
    let lens = [5u32];
    let opts = AttentionOptions {
        kv_lens: Some(&lens),
        ..Default::default()
    };
    let want = attention_cpu(q.view(), k16.view(), v.view(), &opts).expect("reference");
    assert_close("out", read4(&out).view(), want.out.view(), 0.0, 0.0);

    // Little-endian f16 q on the GPU.
    let q_path = dir.raw("q16.npy", &npy_bytes_as(&q.clone().into_dyn(), "<f2"));
    let status = cli(&RunArgs::new(&q_path)
        .k(&k_path)
        .v(&v_path)
        .out(&out_s)
        .build());
    assert_success("f16 q on the GPU", &status);
    let q16 = q.mapv(|x| half::f16::from_f32(x).to_f32());
    let want = attention_reference(q16.view(), k16.view(), v.view(), &Default::default())
        .expect("reference");
    assert_close("out", read4(&out).view(), want.out.view(), ATOL, RTOL);
}

#[test]
fn precision_f16() {
    let mut rng = Rng::new(15);
    let q = rng.array4((1, 2, 8, 16));
    let dir = TempDir::new("precision");
    let q_path = dir.npy("q.npy", &q);
    let out = dir.path("out.npy");
    let out_s = out.to_string_lossy();
    let base = RunArgs::new(&q_path).out(&out_s);
    let rounded = q.mapv(|x| half::f16::from_f32(x).to_f32());
    let want = attention_cpu(
        rounded.view(),
        rounded.view(),
        rounded.view(),
        &Default::default(),
    )
    .expect("reference");

    // On the CPU, f16 storage is the reference on rounded inputs.
    let status = cli(&base
        .clone()
        .backend("cpu")
        .flag("--precision", "f16")
        .build());
    assert_success("cpu f16", &status);
    assert_close("cpu f16 out", read4(&out).view(), want.out.view(), 0.0, 0.0);

    // On the GPU it runs, or the adapter says it cannot: exit 1 with one line, never 2.
    let _ = std::fs::remove_file(&out);
    let status = cli(&base.flag("--precision", "f16").build());
    match status.status.code() {
        Some(0) => {
            let got = read4(&out);
            let err: f32 = got
                .iter()
                .zip(&want.out)
                .map(|(a, b)| (a - b).powi(2))
                .sum();
            let norm: f32 = want.out.iter().map(|b| b * b).sum();
            assert!(
                (err / norm).sqrt() < 2e-3,
                "f16 relative error {}",
                (err / norm).sqrt()
            );
        }
        Some(1) => {
            let msg = stderr_of(&status);
            assert_eq!(msg.lines().count(), 1, "one line: {msg}");
            assert!(msg.contains("f16"), "names f16: {msg}");
        }
        other => panic!("gpu f16: exit {other:?}, stderr: {}", stderr_of(&status)),
    }
}

#[test]
fn bad_inputs_exit_2_naming_the_flag() {
    let mut rng = Rng::new(16);
    let dir = TempDir::new("bad");
    let q = dir.npy("q.npy", &rng.array4((1, 2, 5, 8)));
    let k = dir.npy("k.npy", &rng.array4((1, 2, 7, 8)));
    let v = dir.npy("v.npy", &rng.array4((1, 2, 7, 4)));
    let k16 = dir.npy("k16.npy", &rng.array4((1, 2, 5, 16)));
    let v_short = dir.npy("v_short.npy", &rng.array4((1, 2, 6, 4)));
    let q3 = dir.npy("q3.npy", &rng.array4((1, 3, 5, 8)));
    let q_rank3 = dir.npy("q_rank3.npy", &Array3::<f32>::zeros((2, 5, 8)));
    let q_zero = dir.npy("q_zero.npy", &Array4::<f32>::zeros((1, 2, 0, 8)));
    let q_int = dir.npy("q_int.npy", &Array4::<i32>::zeros((1, 2, 5, 8)));
    let q_complex = dir.raw(
        "q_complex.npy",
        &npy_bytes_as(&Array4::<f32>::zeros((1, 2, 5, 8)).into_dyn(), "<c8"),
    );
    let mask_bad = dir.npy("mask_bad.npy", &Array2::from_elem((4, 7), true));
    let mask_rank1 = dir.npy("mask_rank1.npy", &Array1::from_elem(7, true));
    let mask_int = dir.npy("mask_int.npy", &Array2::<i64>::zeros((5, 7)));
    let lens_neg = dir.npy("lens_neg.npy", &Array1::from_vec(vec![-3i64]));
    let lens_len = dir.npy("lens_len.npy", &Array1::from_vec(vec![3i32, 3]));
    let lens_big = dir.npy("lens_big.npy", &Array1::from_vec(vec![8i64]));
    let lens_float = dir.npy("lens_float.npy", &Array1::from_vec(vec![3f32]));
    let full = std::fs::read(dir.path("k.npy")).expect("read k");
    let truncated = dir.raw("truncated.npy", &full[..full.len() - 9]);
    let header_cut = dir.raw("header_cut.npy", &full[..40]);
    let not_npy = dir.raw("not_npy.npy", b"q,k,v\n1,2,3\n");
    let empty = dir.raw("empty.npy", b"");
    let missing = dir.arg("missing.npy");
    let out = dir.arg("out.npy");
    let out_nodir = dir.arg("no/such/dir/out.npy");

    let run = |q, k, v| RunArgs::new(q).k(k).v(v);
    let inputs = |q, k, v| run(q, k, v).out(&out).build();
    // The good q, k and v with `extra` flags.
    let flags = |extra| run(&q, &k, &v).out(&out).args(extra).build();
    let cases: Vec<(&str, Vec<&str>, &str)> = vec![
        (
            "head dim",
            inputs(&q, &k16, &v),
            "--k: head dim 16 differs from q's 8",
        ),
        ("v length", inputs(&q, &k, &v_short), "--v:"),
        ("heads not a multiple", inputs(&q3, &k, &v), "--k:"),
        ("rank 3", inputs(&q_rank3, &k, &v), "--q:"),
        ("zero-size", inputs(&q_zero, &k, &v), "--q: zero-size"),
        ("int32 q", inputs(&q_int, &k, &v), "--q:"),
        ("complex q", inputs(&q_complex, &k, &v), "--q:"),
        ("mask broadcast", flags(&["--mask", &mask_bad]), "--mask:"),
        ("mask rank 1", flags(&["--mask", &mask_rank1]), "--mask:"),
        ("mask int", flags(&["--mask", &mask_int]), "--mask:"),
        (
            "lens negative",
            flags(&["--kv-lens", &lens_neg]),
            "--kv-lens:",
        ),
        (
            "lens length",
            flags(&["--kv-lens", &lens_len]),
            "--kv-lens:",
        ),
        ("lens > Lk", flags(&["--kv-lens", &lens_big]), "--kv-lens:"),
        (
            "lens float",
            flags(&["--kv-lens", &lens_float]),
            "--kv-lens:",
        ),
        ("missing file", inputs(&missing, &k, &v), "--q: cannot read"),
        ("truncated", inputs(&q, &truncated, &v), "--k:"),
        ("header cut", inputs(&q, &header_cut, &v), "--k:"),
        ("not npy", inputs(&q, &k, &not_npy), "--v:"),
        ("empty file", inputs(&q, &k, &empty), "--v:"),
        ("scale nan", flags(&["--scale", "nan"]), "--scale"),
        ("scale text", flags(&["--scale", "big"]), "--scale"),
        ("window side", flags(&["--window", "-2,0"]), "--window"),
        ("window arity", flags(&["--window", "3"]), "--window"),
        (
            "alignment conflict",
            flags(&["--causal-bottom-right", "--align", "top-left"]),
            "--causal-bottom-right",
        ),
        ("align value", flags(&["--align", "middle"]), "--align"),
        ("backend value", flags(&["--backend", "tpu"]), "--backend"),
        ("unknown flag", flags(&["--bogus"]), "--bogus"),
        (
            "output directory",
            run(&q, &k, &v).out(&out_nodir).build(),
            "--out:",
        ),
        ("missing --out", run(&q, &k, &v).build(), "--out"),
    ];
    for (what, args, needle) in &cases {
        assert_bad_input(what, args, needle);
    }
    assert!(!Path::new(&out).exists(), "no output written on bad input");
}

#[test]
fn help_and_version_exit_0() {
    for args in [
        &["--help"][..],
        &["--version"],
        &["run", "--help"],
        &["help", "run"],
    ] {
        let out = cli(args);
        assert_success(&format!("{args:?}"), &out);
        assert!(!out.stdout.is_empty(), "{args:?} prints to stdout");
    }
    let help = String::from_utf8_lossy(&cli(&["run", "--help"]).stdout).into_owned();
    for needle in [
        "--window <LEFT,RIGHT>",
        "-1",
        "--causal-bottom-right",
        "Exit status",
    ] {
        assert!(help.contains(needle), "run --help lacks {needle}");
    }
}

#[test]
fn info_lists_adapters_and_limits() {
    let out = cli(&["info"]);
    assert_success("info", &out);
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "adapters found:",
        "chosen:",
        "features used:",
        "max_storage_buffer_binding_size",
        "max_buffer_size",
        "max_compute_workgroup_storage_size",
        "max_compute_invocations_per_workgroup",
        "max_compute_workgroups_per_dimension",
        "subgroup size",
    ] {
        assert!(text.contains(needle), "info lacks {needle}:\n{text}");
    }
}

#[test]
fn demo_runs_and_checks_itself() {
    let out = cli(&[]);
    assert_success("demo", &out);
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "adapter:",
        "largest |out - cpu|",
        "GPU time",
        "CPU time",
        "wall clock",
    ] {
        assert!(text.contains(needle), "demo lacks {needle}:\n{text}");
    }
    assert!(text.trim_end().ends_with("ok"), "demo:\n{text}");
}

/// -h and --help print the same; every subcommand's help ends with an example and the
/// top-level help and `info --help` name the adapter variables.
#[test]
fn help_is_one_text_and_ends_with_an_example() {
    let subcommands: &[&[&str]] = &[
        &[],
        &["info"],
        &["run"],
        &["bench"],
        &["mha"],
        &["heatmap"],
        &["model"],
        &["model", "info"],
        &["model", "tokenize"],
        &["model", "attention"],
        &["model", "rollout"],
        &["model", "next"],
        &["model", "generate"],
    ];
    for &sub in subcommands {
        let with = |flag: &str| {
            let mut args = sub.to_vec();
            args.push(flag);
            let out = cli(&args);
            assert_success(&format!("{args:?}"), &out);
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let (short, long) = (with("-h"), with("--help"));
        assert_eq!(short, long, "{sub:?}: -h and --help differ");
        let tail: Vec<&str> = long.trim_end().lines().rev().take(3).collect();
        assert!(
            tail.iter()
                .any(|l| l.trim_start().starts_with("wgpu-attention "))
                && long.contains("Example:"),
            "{sub:?}: help does not end with an example:\n{long}"
        );
    }
    for sub in [&[][..], &["info"]] {
        let mut args = sub.to_vec();
        args.push("--help");
        let help = String::from_utf8_lossy(&cli(&args).stdout).into_owned();
        for var in ["WGPU_BACKEND", "WGPU_ADAPTER_NAME", "WGPU_POWER_PREF"] {
            assert!(help.contains(var), "{args:?} does not name {var}");
        }
    }
}

/// Negative numbers are values; a flag that would do nothing is refused; --verbose and
/// --path say and choose the kernel; no loader noise without XDG_RUNTIME_DIR.
#[test]
fn flags_behave_as_a_user_expects() {
    let dir = TempDir::new("manners");
    let mut rng = Rng::new(71);
    let q = dir.npy("q.npy", &rng.array4((1, 2, 8, 4)));
    let out = dir.arg("o.npy");
    let base = RunArgs::new(&q).out(&out);
    let with = |extra: &[&'static str]| base.clone().args(extra).build();
    assert_bad_input(
        "--scale -inf",
        &with(&["--scale", "-inf"]),
        "--scale: must be finite",
    );
    let r = cli(&with(&[
        "--scale",
        "-0.5",
        "--window",
        "-1,4",
        "--backend",
        "cpu",
    ]));
    assert_success("negative values", &r);
    assert_bad_input(
        "--align alone",
        &with(&["--align", "bottom-right"]),
        "--align: has no effect without --causal or --window",
    );
    for path in ["staged", "fused", "decode"] {
        let r = std::process::Command::new(env!("CARGO_BIN_EXE_wgpu-attention"))
            .args(with(&["--path", path, "--verbose"]))
            .env_remove("XDG_RUNTIME_DIR")
            .output()
            .unwrap();
        assert_success(path, &r);
        assert!(r.stdout.is_empty(), "{path}: stdout not empty");
        let err = String::from_utf8_lossy(&r.stderr);
        assert!(!err.contains("XDG_RUNTIME_DIR"), "{path}: {err}");
        let named = format!("kernel path: {}{}", path[..1].to_uppercase(), &path[1..]);
        assert!(
            err.contains("adapter: ") && err.contains(&named),
            "{path}: {err}"
        );
    }
}

/// +inf or NaN in an additive mask is bad input naming --mask (it cannot be a bias).
#[test]
fn non_finite_bias_in_a_mask_file_is_bad_input() {
    let dir = TempDir::new("mask-inf");
    let mut rng = Rng::new(72);
    let q = dir.npy("q.npy", &rng.array4((1, 1, 3, 4)));
    let out = dir.arg("o.npy");
    for (name, bad) in [("inf.npy", f32::INFINITY), ("nan.npy", f32::NAN)] {
        let mut m = Array2::<f32>::zeros((3, 3));
        m[[2, 1]] = bad;
        let mask = dir.npy(name, &m);
        for backend in ["cpu", "gpu"] {
            assert_bad_input(
                name,
                &RunArgs::new(&q)
                    .out(&out)
                    .flag("--mask", &mask)
                    .backend(backend)
                    .build(),
                "--mask: an additive mask holds",
            );
        }
    }
}

/// A reader that closes standard output before the command writes (`| head` that has
/// what it wanted) ends the command quietly with status 0: no panic, no error line.
#[test]
fn a_closed_standard_output_ends_quietly() {
    use std::process::{Command, Stdio};
    // `info`, and the demo (no subcommand).
    for args in [vec!["info"], vec![]] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_wgpu-attention"))
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        // The read end goes before the command has printed anything.
        drop(child.stdout.take());
        let out = child.wait_with_output().expect("wait");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
    }
}
