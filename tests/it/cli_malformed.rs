//! The command line given malformed `.npy` files: wrong magic, bad versions, headers
//! that lie about their size, broken dictionaries, shapes that lie about the data,
//! Fortran order. Every one exits 2 with a one-line message naming the flag, and none
//! panics; the well-formed variants are read.

use std::process::Output;

use crate::cli_common::{assert_bad_input_output, cli, cli_limited, stderr_of, TempDir};
use crate::cli_mha::safetensors;

/// A `.npy` file: magic, version, header length (as given, or the true one), the
/// header text padded NumPy's way, then `data`.
fn npy(version: (u8, u8), dict: &str, data: &[u8], claimed_len: Option<u32>) -> Vec<u8> {
    let wide = version.0 >= 2;
    let prefix = if wide { 12 } else { 10 };
    let mut header = dict.as_bytes().to_vec();
    while !(prefix + header.len() + 1).is_multiple_of(64) {
        header.push(b' ');
    }
    header.push(b'\n');
    let len = claimed_len.unwrap_or(header.len() as u32);
    let mut out = b"\x93NUMPY".to_vec();
    out.extend([version.0, version.1]);
    if wide {
        out.extend(len.to_le_bytes());
    } else {
        out.extend((len as u16).to_le_bytes());
    }
    out.extend(header);
    out.extend(data);
    out
}

fn dict(descr: &str, fortran: &str, shape: &str) -> String {
    format!("{{'descr': {descr}, 'fortran_order': {fortran}, 'shape': {shape}, }}")
}

/// f32 little-endian bytes of `n` values 0.0, 0.1, ...
fn f32_data(n: usize) -> Vec<u8> {
    (0..n)
        .flat_map(|i| (i as f32 * 0.1).to_le_bytes())
        .collect()
}

/// K is (1, 2, 7, 8): 112 f32 values.
const K_SHAPE: &str = "(1, 2, 7, 8)";
const K_LEN: usize = 112;

/// K as little-endian f32 in C order, under `version`, with the header length
/// `claimed_len` (or the true one).
fn k_npy(version: (u8, u8), claimed_len: Option<u32>) -> Vec<u8> {
    npy(
        version,
        &dict("'<f4'", "False", K_SHAPE),
        &f32_data(K_LEN),
        claimed_len,
    )
}

/// Well-formed q (1, 2, 5, 8) and v (K's shape) in `dir`, and the output path: every
/// case varies only K.
struct Inputs {
    dir: TempDir,
    q: String,
    v: String,
    out: String,
}

impl Inputs {
    fn new(name: &str) -> Self {
        let dir = TempDir::new(name);
        let q = dir.raw(
            "q.npy",
            &npy(
                (1, 0),
                &dict("'<f4'", "False", "(1, 2, 5, 8)"),
                &f32_data(80),
                None,
            ),
        );
        let v = dir.raw("v.npy", &k_npy((1, 0), None));
        let out = dir.arg("out.npy");
        Self { dir, q, v, out }
    }

    /// Runs the CPU backend with `k_bytes` as K.
    fn run_with_k(&self, k_bytes: &[u8]) -> Output {
        let k = self.dir.raw("k.npy", k_bytes);
        cli(&[
            "run",
            "--backend",
            "cpu",
            "--q",
            &self.q,
            "--k",
            &k,
            "--v",
            &self.v,
            "--out",
            &self.out,
        ])
    }
}

#[test]
fn malformed_npy_files_exit_2_without_panicking() {
    let inputs = Inputs::new("bad");
    let good = k_npy((1, 0), None);
    let true_len = (good.len() - 4 * K_LEN - 10) as u32;
    let with = |dict_text: &str, data: &[u8]| npy((1, 0), dict_text, data, None);
    let shaped = |shape: &str, n: usize| with(&dict("'<f4'", "False", shape), &f32_data(n));

    let mut wrong_magic = good.clone();
    wrong_magic[1..6].copy_from_slice(b"NUMPZ");
    let mut no_x93 = good.clone();
    no_x93[0] = b'N';
    let mut non_ascii = good.clone();
    non_ascii[12] = 0xff; // inside the dictionary
    let mut extra = good.clone();
    extra.extend([0, 0, 0, 0]);

    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty file", vec![]),
        ("wrong magic", wrong_magic),
        ("magic without \\x93", no_x93),
        ("magic only", b"\x93NUMPY".to_vec()),
        ("version only", b"\x93NUMPY\x01\x00".to_vec()),
        ("unknown version 9.9", k_npy((9, 9), None)),
        (
            "header length past the end of the file",
            k_npy((1, 0), Some(60_000)),
        ),
        ("v2 header length of 4 GiB", k_npy((2, 0), Some(u32::MAX))),
        (
            "header length into the data",
            k_npy((1, 0), Some(true_len + 16)),
        ),
        (
            "header length short of the header",
            k_npy((1, 0), Some(true_len - 20)),
        ),
        ("header length zero", k_npy((1, 0), Some(0))),
        ("non-ASCII header", non_ascii),
        (
            "header not a dictionary",
            with("[1, 2, 3]", &f32_data(K_LEN)),
        ),
        (
            "unterminated dictionary",
            with(
                "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2,",
                &f32_data(K_LEN),
            ),
        ),
        (
            "missing descr",
            with(
                &format!("{{'fortran_order': False, 'shape': {K_SHAPE}, }}"),
                &f32_data(K_LEN),
            ),
        ),
        (
            "missing shape",
            with(
                "{'descr': '<f4', 'fortran_order': False, }",
                &f32_data(K_LEN),
            ),
        ),
        (
            "missing fortran_order",
            with(
                &format!("{{'descr': '<f4', 'shape': {K_SHAPE}, }}"),
                &f32_data(K_LEN),
            ),
        ),
        (
            "fortran_order not a bool",
            with(&dict("'<f4'", "'yes'", K_SHAPE), &f32_data(K_LEN)),
        ),
        (
            "descr not a string",
            with(&dict("4", "False", K_SHAPE), &f32_data(K_LEN)),
        ),
        (
            "descr unknown",
            with(&dict("'<z9'", "False", K_SHAPE), &f32_data(K_LEN)),
        ),
        (
            "descr structured",
            with(&dict("[('a', '<f4')]", "False", K_SHAPE), &f32_data(K_LEN)),
        ),
        ("shape negative", shaped("(1, -2, 7, 8)", K_LEN)),
        ("shape not integers", shaped("(1, 2.5, 7, 8)", K_LEN)),
        ("shape a string", shaped("'1,2,7,8'", K_LEN)),
        (
            "shape overflows",
            shaped("(4611686018427387904, 4611686018427387904, 7, 8)", K_LEN),
        ),
        (
            "shape huge, data short",
            shaped("(1, 2, 1099511627776, 8)", K_LEN),
        ),
        ("shape larger than the data", shaped("(1, 2, 8, 8)", K_LEN)),
        ("shape smaller than the data", shaped("(1, 2, 6, 8)", K_LEN)),
        ("bytes after the data", extra),
        ("data cut mid-value", {
            let mut t = good.clone();
            t.pop();
            t
        }),
        ("scalar", shaped("()", 1)),
        ("rank 5", shaped("(1, 1, 2, 7, 8)", K_LEN)),
        ("zero-size", shaped("(1, 2, 0, 8)", 0)),
        (
            "Fortran order, data short",
            with(&dict("'<f4'", "True", K_SHAPE), &f32_data(K_LEN - 1)),
        ),
        (
            "Fortran order, wrong rank",
            with(&dict("'<f4'", "True", "(2, 7, 8)"), &f32_data(K_LEN)),
        ),
        (
            "big-endian f16, data short",
            with(&dict("'>f2'", "False", K_SHAPE), &vec![0u8; 2 * K_LEN - 1]),
        ),
        (
            "bool for a float input",
            with(&dict("'|b1'", "False", K_SHAPE), &[1u8; K_LEN]),
        ),
    ];
    let mut failures = Vec::new();
    for (what, bytes) in &cases {
        let out_run = inputs.run_with_k(bytes);
        let msg = stderr_of(&out_run);
        let ok = out_run.status.code() == Some(2)
            && msg.lines().count() == 1
            && msg.starts_with("error: --k:")
            && !msg.contains("panicked");
        if !ok {
            failures.push(format!(
                "{what}: exit {:?}, stderr: {msg}",
                out_run.status.code()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn well_formed_variants_are_read() {
    let inputs = Inputs::new("good");
    let be: Vec<u8> = (0..K_LEN)
        .flat_map(|i| (i as f32 * 0.1).to_be_bytes())
        .collect();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("version 2.0", k_npy((2, 0), None)),
        ("version 3.0", k_npy((3, 0), None)),
        (
            "Fortran order",
            npy(
                (1, 0),
                &dict("'<f4'", "True", K_SHAPE),
                &f32_data(K_LEN),
                None,
            ),
        ),
        (
            "big-endian f32",
            npy((1, 0), &dict("'>f4'", "False", K_SHAPE), &be, None),
        ),
        (
            "keys in another order",
            npy(
                (1, 0),
                &format!("{{'shape': {K_SHAPE}, 'fortran_order': False, 'descr': '<f4'}}"),
                &f32_data(K_LEN),
                None,
            ),
        ),
    ];
    for (what, bytes) in &cases {
        let o = inputs.run_with_k(bytes);
        assert_eq!(o.status.code(), Some(0), "{what}: {}", stderr_of(&o));
    }
}

/// A file of `header` followed by a hole up to `len` bytes: a huge file made instantly.
fn sparse(dir: &TempDir, name: &str, header: &[u8], len: u64) -> String {
    let path = dir.raw(name, header);
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(len).unwrap();
    path
}

/// Every input flag, given a stream (a FIFO made here, with no writer, which must not be
/// waited on) or a 3 GB file whose header promises 448 bytes, is refused under a 1 GB
/// address-space limit: nothing is read whole.
#[cfg(unix)]
#[test]
fn unbounded_inputs_are_refused_before_reading() {
    let dir = TempDir::new("unbounded");
    crate::special_files::mkfifo(&dir.path("stream"));
    let stream = dir.arg("stream");
    let k = dir.raw("k.npy", &k_npy((1, 0), None));
    let q = dir.raw(
        "q.npy",
        &npy(
            (1, 0),
            &dict("'<f4'", "False", "(1, 2, 5, 8)"),
            &f32_data(80),
            None,
        ),
    );
    let huge = sparse(&dir, "huge.npy", &k_npy((1, 0), None), 3 << 30);
    let st = safetensors(&[("in_proj_weight", &[6, 2]), ("out_proj.weight", &[2, 2])]);
    // The header alone (its 64 bytes of data cut), grown to 3 GB below.
    let header = &st[..st.len() - 64];
    let huge_st = sparse(&dir, "huge.safetensors", header, 3 << 30);
    let out = dir.arg("out.npy");
    let limit = "ulimit -v 1000000";
    for bad in [stream.as_str(), huge.as_str()] {
        let run = |flag: &str, extra: &[&str]| {
            let mut args = vec!["run", "--q", &q, "--k", &k, "--v", &k, "--out", &out];
            args.extend(extra);
            if let Some(i) = args.iter().position(|a| *a == flag) {
                args[i + 1] = bad;
            } else {
                args.extend([flag, bad]);
            }
            (format!("run {flag} {bad}"), cli_limited(limit, &args))
        };
        for flag in ["--q", "--k", "--v", "--mask", "--kv-lens"] {
            let (what, output) = run(flag, &["--backend", "cpu"]);
            assert_bad_input_output(&what, &output, flag);
        }
    }
    let x = dir.raw(
        "x.npy",
        &npy(
            (1, 0),
            &dict("'<f4'", "False", "(1, 3, 2)"),
            &f32_data(6),
            None,
        ),
    );
    for (flag, bad) in [
        ("--weights", stream.as_str()),
        ("--weights", huge_st.as_str()),
        ("--x", stream.as_str()),
        ("--x", huge.as_str()),
        ("--kv", stream.as_str()),
        ("--key-padding-mask", stream.as_str()),
        ("--key-padding-mask", huge.as_str()),
    ] {
        let st = dir.raw("w.safetensors", &st);
        let mut args = vec![
            "mha",
            "--weights",
            &st,
            "--x",
            &x,
            "--heads",
            "1",
            "--out",
            &out,
        ];
        if let Some(i) = args.iter().position(|a| *a == flag) {
            args[i + 1] = bad;
        } else {
            args.extend([flag, bad]);
        }
        args.extend(["--backend", "cpu"]);
        let output = cli_limited(limit, &args);
        assert_bad_input_output(&format!("mha {flag} {bad}"), &output, flag);
    }
    // The message says why.
    let output = cli_limited(
        limit,
        &[
            "run",
            "--q",
            stream.as_str(),
            "--k",
            &k,
            "--v",
            &k,
            "--out",
            &out,
        ],
    );
    assert!(
        stderr_of(&output).contains("not a regular file"),
        "{}",
        stderr_of(&output)
    );
    let output = cli_limited(
        limit,
        &["run", "--q", &huge, "--k", &k, "--v", &k, "--out", &out],
    );
    assert!(
        stderr_of(&output).contains("than the 576 its header promises"),
        "{}",
        stderr_of(&output)
    );
}
