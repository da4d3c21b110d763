//! Helpers for the tests of the `wgpu-attention` binary: a temporary directory for its
//! files, running it, and its stderr without the Vulkan loader's noise.

use std::path::PathBuf;
use std::process::{Command, Output};

use ndarray::{Array, Dimension};
use ndarray_npy::{write_npy, WritableElement};

/// A fresh directory under the system temp dir, removed when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    /// `name` must be unique within the test binary (tests run in parallel threads).
    pub fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("wgpu-attention-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create temp dir");
        Self(dir)
    }

    pub fn path(&self, file: &str) -> PathBuf {
        self.0.join(file)
    }

    /// The names in the folder `sub` (`""`: the folder itself), sorted.
    pub fn files_in(&self, sub: &str) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.path(sub))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// The path of `file` as a string for the command line.
    pub fn arg(&self, file: &str) -> String {
        self.path(file).to_string_lossy().into_owned()
    }

    /// Writes `a` as `file` and returns its path as a string for the command line.
    pub fn npy<A: WritableElement, D: Dimension>(&self, file: &str, a: &Array<A, D>) -> String {
        write_npy(self.path(file), a).expect("write npy");
        self.arg(file)
    }

    /// Writes raw bytes as `file` and returns its path as a string for the command line.
    pub fn raw(&self, file: &str, bytes: &[u8]) -> String {
        std::fs::write(self.path(file), bytes).expect("write file");
        self.arg(file)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs the binary with `args`.
pub fn cli(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wgpu-attention"))
        .args(args)
        .output()
        .expect("start wgpu-attention")
}

/// stderr without the Vulkan loader's warning about XDG_RUNTIME_DIR on headless machines.
pub fn stderr_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| !l.contains("XDG_RUNTIME_DIR"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Runs `args` and checks: exit status 2, exactly one line on stderr starting with
/// `error: ` and containing `needle` (the flag), no panic, and nothing on stdout.
pub fn assert_bad_input(what: &str, args: &[&str], needle: &str) {
    let out = cli(args);
    let msg = stderr_of(&out);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{what}: exit {:?}, stderr: {msg}",
        out.status
    );
    assert_eq!(msg.lines().count(), 1, "{what}: want one line, got: {msg}");
    assert!(msg.starts_with("error: "), "{what}: {msg}");
    assert!(
        msg.contains(needle),
        "{what}: {msg:?} does not name {needle}"
    );
    assert!(!msg.contains("panicked"), "{what}: {msg}");
    assert!(out.stdout.is_empty(), "{what}: stdout not empty");
}

/// Runs the binary with `args` under a shell's limits, e.g. `ulimit -v 1000000` (address
/// space in KiB) so that a read or allocation that should not happen fails the test
/// instead of filling the machine.
pub fn cli_limited(limits: &str, args: &[&str]) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(format!("{limits}; exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_wgpu-attention"))
        .args(args)
        .output()
        .expect("start wgpu-attention")
}

/// As [`assert_bad_input`], for the output of a run already made.
pub fn assert_bad_input_output(what: &str, out: &Output, needle: &str) {
    let msg = stderr_of(out);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{what}: exit {:?}, stderr: {msg}",
        out.status
    );
    assert_eq!(msg.lines().count(), 1, "{what}: want one line, got: {msg}");
    assert!(msg.starts_with("error: "), "{what}: {msg}");
    assert!(
        msg.contains(needle),
        "{what}: {msg:?} does not name {needle}"
    );
    assert!(out.stdout.is_empty(), "{what}: stdout not empty");
}

/// The arguments of one `run`: `--q`, then `--k` and `--v` (q's file unless given),
/// `--out` (left out unless given), then the other flags in the order given.
///
/// `RunArgs::new(&q).out(&o).backend("cpu").flag("--lse", &l).build()` is
/// `["run", "--q", q, "--k", q, "--v", q, "--out", o, "--backend", "cpu", "--lse", l]`.
#[derive(Clone)]
pub struct RunArgs<'a> {
    q: &'a str,
    k: &'a str,
    v: &'a str,
    out: Option<&'a str>,
    rest: Vec<&'a str>,
}

impl<'a> RunArgs<'a> {
    pub fn new(q: &'a str) -> Self {
        Self {
            q,
            k: q,
            v: q,
            out: None,
            rest: Vec::new(),
        }
    }

    pub fn k(mut self, k: &'a str) -> Self {
        self.k = k;
        self
    }

    pub fn v(mut self, v: &'a str) -> Self {
        self.v = v;
        self
    }

    pub fn out(mut self, out: &'a str) -> Self {
        self.out = Some(out);
        self
    }

    pub fn backend(self, backend: &'a str) -> Self {
        self.flag("--backend", backend)
    }

    /// A flag and its value.
    pub fn flag(mut self, name: &'a str, value: &'a str) -> Self {
        self.rest.extend([name, value]);
        self
    }

    /// Further arguments as they are: switches, or flags with their values.
    pub fn args(mut self, args: &[&'a str]) -> Self {
        self.rest.extend_from_slice(args);
        self
    }

    pub fn build(&self) -> Vec<&'a str> {
        let mut all = vec!["run", "--q", self.q, "--k", self.k, "--v", self.v];
        if let Some(out) = self.out {
            all.extend(["--out", out]);
        }
        all.extend(&self.rest);
        all
    }
}
