//! Outputs that are not plain files, for every subcommand that writes one: a symbolic
//! link is written through (its target gets the result, the link stays), a FIFO or a
//! character device is written in place and stays what it was, `-` is standard output,
//! and what cannot be an output is refused (exit 2) with nothing touched. Every special
//! file is made here, in a temporary folder; the machine's own `/dev` is never used.

#![cfg(unix)]

use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::cli_common::{assert_bad_input_output, cli, cli_limited, stderr_of, RunArgs, TempDir};
use crate::special_files::{char_device, mkfifo};
use ndarray::{Array4, ArrayD};
use ndarray_npy::ReadNpyExt;

/// What a path is, without following it: kind, inode, device number, permissions and a
/// link's target. Equal before and after a command = the command left it alone.
fn node(path: &Path) -> String {
    let m = std::fs::symlink_metadata(path).expect("the node exists");
    let t = m.file_type();
    let kind = if t.is_symlink() {
        format!("link to {:?}", std::fs::read_link(path).unwrap())
    } else if t.is_fifo() {
        "FIFO".into()
    } else if t.is_char_device() {
        "character device".into()
    } else if t.is_socket() {
        "socket".into()
    } else if t.is_dir() {
        "folder".into()
    } else {
        format!("file of {} bytes", m.len())
    };
    format!(
        "{kind}, inode {}, rdev {}, mode {:o}",
        m.ino(),
        m.rdev(),
        m.mode()
    )
}

/// Reads a FIFO to its end on a thread of its own.
struct FifoReader {
    path: PathBuf,
    thread: JoinHandle<std::io::Result<Vec<u8>>>,
}

impl FifoReader {
    fn start(path: &Path) -> Self {
        let p = path.to_path_buf();
        let thread = std::thread::spawn(move || {
            let mut bytes = Vec::new();
            std::fs::File::open(&p)?.read_to_end(&mut bytes)?;
            Ok(bytes)
        });
        Self {
            path: path.to_path_buf(),
            thread,
        }
    }

    /// What came through, once the command has exited. A reader still waiting for a
    /// writer (the command never opened the FIFO) is released with nothing.
    fn finish(self) -> Vec<u8> {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.thread.is_finished() {
            // Opening for writing without blocking wakes a reader waiting in open().
            let _ = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&self.path);
            assert!(
                Instant::now() < deadline,
                "the FIFO's reader never finished"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        self.thread
            .join()
            .expect("reader thread")
            .expect("read the FIFO")
    }
}

fn npy(what: &str, bytes: &[u8]) -> ArrayD<f32> {
    ArrayD::<f32>::read_npy(bytes).unwrap_or_else(|e| panic!("{what}: not a valid .npy: {e}"))
}

fn assert_ok(what: &str, out: &Output) {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{what}: exit {:?}, stderr: {}",
        out.status,
        stderr_of(out)
    );
}

/// `args` with every `OUT` replaced by `path`.
fn with_out<'a>(args: &[&'a str], path: &'a str) -> Vec<&'a str> {
    args.iter()
        .map(|&a| if a == "OUT" { path } else { a })
        .collect()
}

/// Runs `args` with `OUT` a FIFO named `name` that a reader drains: exit 0, the FIFO
/// still the same FIFO. Returns what came through.
fn through_fifo(dir: &TempDir, name: &str, args: &[&str]) -> Vec<u8> {
    let fifo = dir.path(name);
    mkfifo(&fifo);
    let before = node(&fifo);
    let reader = FifoReader::start(&fifo);
    let out = cli(&with_out(args, &dir.arg(name)));
    let bytes = reader.finish();
    assert_ok(&format!("{name} (FIFO)"), &out);
    assert_eq!(node(&fifo), before, "{name}: the FIFO changed");
    bytes
}

/// Runs `args` with `OUT` a relative link `name` to `real/name`, which holds old bytes:
/// exit 0, the link unchanged. Returns what its target holds.
fn through_link(dir: &TempDir, name: &str, args: &[&str]) -> Vec<u8> {
    std::fs::create_dir_all(dir.path("real")).unwrap();
    let target = dir.path("real").join(name);
    std::fs::write(&target, b"old bytes").unwrap();
    std::os::unix::fs::symlink(Path::new("real").join(name), dir.path(name)).unwrap();
    let before = node(&dir.path(name));
    let out = cli(&with_out(args, &dir.arg(name)));
    assert_ok(&format!("{name} (link)"), &out);
    assert_eq!(node(&dir.path(name)), before, "{name}: the link changed");
    std::fs::read(&target).unwrap()
}

/// Runs `args` with `OUT` as `-`: exit 0. Returns stdout.
fn through_stdout(args: &[&str]) -> Vec<u8> {
    let out = cli(&with_out(args, "-"));
    assert_ok("- (stdout)", &out);
    out.stdout
}

/// Runs `args` with `OUT` a character device like /dev/null (1, 3) made in `dir`: exit
/// 0, the node unchanged. Says so and checks nothing where no device can be made.
fn through_null_device(dir: &TempDir, name: &str, args: &[&str]) {
    let dev = dir.path(name);
    if let Err(why) = char_device(&dev, 1, 3) {
        eprintln!("not checked, a character device as {name}: {why}");
        return;
    }
    let before = node(&dev);
    let out = cli(&with_out(args, &dir.arg(name)));
    assert_ok(&format!("{name} (character device)"), &out);
    assert_eq!(node(&dev), before, "{name}: the device node changed");
}

/// q = k = v of (1, 2, 16, 8) in `dir`.
fn qkv(dir: &TempDir) -> String {
    let a = Array4::from_shape_fn((1, 2, 16, 8), |(_, h, i, d)| (h + i * d) as f32 * 0.01);
    dir.npy("q.npy", &a)
}

#[test]
fn run_writes_through_links_fifos_devices_and_stdout() {
    let dir = TempDir::new("targets-run");
    let q = qkv(&dir);
    let base = RunArgs::new(&q).backend("cpu").out("OUT").build();
    let reference = dir.arg("ref.npy");
    assert_ok("reference", &cli(&with_out(&base, &reference)));
    let want = npy("reference", &std::fs::read(&reference).unwrap());
    assert_eq!(want.shape(), [1, 2, 16, 8]);

    assert_eq!(npy("FIFO", &through_fifo(&dir, "fifo", &base)), want);
    assert_eq!(npy("link", &through_link(&dir, "link.npy", &base)), want);
    assert_eq!(npy("stdout", &through_stdout(&base)), want);
    through_null_device(&dir, "null", &base);

    // A chain of links, and a dangling link whose target is created.
    std::os::unix::fs::symlink("link.npy", dir.path("chain.npy")).unwrap();
    std::os::unix::fs::symlink("real/new.npy", dir.path("dangling.npy")).unwrap();
    for name in ["chain.npy", "dangling.npy"] {
        let before = node(&dir.path(name));
        assert_ok(name, &cli(&with_out(&base, &dir.arg(name))));
        assert_eq!(node(&dir.path(name)), before, "{name}: the link changed");
    }
    for target in ["real/link.npy", "real/new.npy"] {
        assert_eq!(
            npy(target, &std::fs::read(dir.path(target)).unwrap()),
            want,
            "{target}"
        );
    }
    assert_eq!(dir.files_in("real"), ["link.npy", "new.npy"]);

    // A FIFO and a file: the FIFO is sent once the file is complete.
    let (fifo2, lse) = (dir.arg("fifo2"), dir.arg("lse.npy"));
    mkfifo(&dir.path("fifo2"));
    let reader = FifoReader::start(&dir.path("fifo2"));
    let mut args = with_out(&base, &fifo2);
    args.extend(["--lse", &lse]);
    let out = cli(&args);
    assert_eq!(npy("FIFO beside a file", &reader.finish()), want);
    assert_ok("FIFO beside a file", &out);
    assert_eq!(
        npy("lse", &std::fs::read(&lse).unwrap()).shape(),
        [1, 2, 16]
    );
}

/// As the command line of `/dev/stdout`, without touching `/dev`: a link in the
/// temporary folder to the process's own standard output.
#[cfg(target_os = "linux")]
#[test]
fn a_link_to_standard_output_stays_a_link_and_the_array_comes_out() {
    let dir = TempDir::new("targets-proc-stdout");
    let q = qkv(&dir);
    let link = dir.path("stdout");
    std::os::unix::fs::symlink("/proc/self/fd/1", &link).unwrap();
    let before = node(&link);
    let stdout = dir.arg("stdout");
    let out = cli(&RunArgs::new(&q).backend("cpu").out(&stdout).build());
    assert_ok("a link to /proc/self/fd/1", &out);
    assert_eq!(npy("stdout", &out.stdout).shape(), [1, 2, 16, 8]);
    assert_eq!(node(&link), before);
    assert_eq!(dir.files_in(""), ["q.npy", "stdout"]);
}

/// A later output fails (a full device; a file past its size limit): nothing is left of
/// the earlier files, nothing reaches the stream, and every node stays as it was.
#[test]
fn a_failing_later_output_leaves_nothing_and_sends_nothing() {
    let dir = TempDir::new("targets-fail");
    let q = qkv(&dir);
    let (o, w) = (dir.arg("o.npy"), dir.arg("w.npy"));
    let run = RunArgs::new(&q).backend("cpu");
    // Like /dev/full (1, 7): every write fails with ENOSPC.
    let full = dir.path("full");
    match char_device(&full, 1, 7) {
        Err(why) => eprintln!("not checked, a full device as --lse: {why}"),
        Ok(()) => {
            let before = node(&full);
            let full_arg = dir.arg("full");
            let args = run
                .clone()
                .out(&o)
                .flag("--weights", &w)
                .flag("--lse", &full_arg);
            let out = cli(&args.build());
            let msg = stderr_of(&out);
            assert_eq!(out.status.code(), Some(1), "{msg}");
            assert!(msg.contains("--lse"), "{msg}");
            assert_eq!(node(&full), before);
            assert_eq!(dir.files_in(""), ["full", "q.npy"]);
        }
    }
    // The FIFO's array is written by the command before the weights, whose file
    // exceeds the size limit: the reader gets nothing.
    let fifo = dir.path("fifo");
    mkfifo(&fifo);
    let before = node(&fifo);
    let reader = FifoReader::start(&fifo);
    let fifo_arg = dir.arg("fifo");
    let args = run.out(&fifo_arg).flag("--weights", &w).build();
    let out = cli_limited("trap '' XFSZ; ulimit -f 3", &args);
    let sent = reader.finish();
    let msg = stderr_of(&out);
    assert_eq!(out.status.code(), Some(1), "{msg}");
    assert!(msg.contains("--weights"), "{msg}");
    assert!(sent.is_empty(), "{} bytes reached the FIFO", sent.len());
    assert_eq!(node(&fifo), before);
    assert!(!dir.path("w.npy").exists());
}

#[test]
fn what_cannot_be_an_output_is_refused_and_left_alone() {
    let dir = TempDir::new("targets-refused");
    let q = qkv(&dir);
    std::fs::create_dir(dir.path("folder")).unwrap();
    std::fs::create_dir(dir.path("real")).unwrap();
    std::fs::write(dir.path("real/t.npy"), b"old").unwrap();
    std::os::unix::fs::symlink("folder", dir.path("to-folder")).unwrap();
    std::os::unix::fs::symlink("real/t.npy", dir.path("link.npy")).unwrap();
    std::os::unix::fs::symlink("nowhere/x.npy", dir.path("far.npy")).unwrap();
    let _socket = std::os::unix::net::UnixListener::bind(dir.path("socket")).unwrap();
    mkfifo(&dir.path("fifo"));
    let names = dir.files_in("");
    let nodes: Vec<String> = names.iter().map(|n| node(&dir.path(n))).collect();
    let p = |n: &str| dir.arg(n);
    let cases: Vec<(&str, Vec<String>, &str)> = vec![
        ("a folder", vec!["--out".into(), p("folder")], "--out"),
        (
            "a link to a folder",
            vec!["--out".into(), p("to-folder")],
            "--out",
        ),
        ("a socket", vec!["--out".into(), p("socket")], "--out"),
        (
            "a link into a missing folder",
            vec!["--out".into(), p("far.npy")],
            "--out",
        ),
        (
            "one file through a link",
            vec![
                "--out".into(),
                p("real/t.npy"),
                "--lse".into(),
                p("link.npy"),
            ],
            "--lse",
        ),
        (
            "stdout twice",
            vec!["--out".into(), "-".into(), "--weights".into(), "-".into()],
            "--weights",
        ),
        (
            "two streams",
            vec!["--out".into(), "-".into(), "--lse".into(), p("fifo")],
            "--lse",
        ),
    ];
    for (what, extra, flag) in cases {
        let reader = FifoReader::start(&dir.path("fifo"));
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let out = cli(&RunArgs::new(&q).backend("cpu").args(&extra).build());
        assert!(reader.finish().is_empty(), "{what}: the FIFO was written");
        assert_bad_input_output(what, &out, flag);
        assert_eq!(dir.files_in(""), names, "{what}");
        let after: Vec<String> = names.iter().map(|n| node(&dir.path(n))).collect();
        assert_eq!(after, nodes, "{what}");
        assert_eq!(std::fs::read(dir.path("real/t.npy")).unwrap(), b"old");
    }
}

#[test]
fn mha_writes_through_links_fifos_devices_and_stdout() {
    let dir = TempDir::new("targets-mha");
    let fixture = |f: &str| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/mha/self_packed")
            .join(f)
            .to_string_lossy()
            .into_owned()
    };
    let (w, x) = (fixture("weights.safetensors"), fixture("x.npy"));
    let base = [
        "mha",
        "--weights",
        &w,
        "--x",
        &x,
        "--heads",
        "2",
        "--backend",
        "cpu",
        "--out",
        "OUT",
    ];
    assert_eq!(
        npy("FIFO", &through_fifo(&dir, "fifo", &base)).shape(),
        [2, 5, 6]
    );
    assert_eq!(
        npy("link", &through_link(&dir, "y.npy", &base)).shape(),
        [2, 5, 6]
    );
    assert_eq!(npy("stdout", &through_stdout(&base)).shape(), [2, 5, 6]);
    through_null_device(&dir, "null", &base);
    // The weights through a FIFO beside y in a file.
    let y = dir.arg("y-file.npy");
    let mut args = vec![
        "mha",
        "--weights",
        &w,
        "--x",
        &x,
        "--heads",
        "2",
        "--backend",
        "cpu",
        "--out",
        &y,
    ];
    args.extend(["--attn-weights", "OUT"]);
    assert_eq!(
        npy("weights", &through_fifo(&dir, "a-fifo", &args)).shape(),
        [2, 5, 5]
    );
    assert_eq!(npy("y", &std::fs::read(&y).unwrap()).shape(), [2, 5, 6]);
}

#[test]
fn heatmap_writes_through_links_fifos_devices_and_stdout() {
    let dir = TempDir::new("targets-heatmap");
    let w = dir.npy(
        "w.npy",
        &ndarray::Array2::<f32>::from_elem((3, 3), 1.0 / 3.0),
    );
    let base = ["heatmap", "--weights", &w, "--out", "OUT"];
    let png = through_fifo(&dir, "fifo.png", &base);
    let decoder = png::Decoder::new(std::io::Cursor::new(png));
    let info = decoder.read_info().expect("a valid PNG came through");
    assert!(info.info().width > 0 && info.info().height > 0);
    let svg = String::from_utf8(through_link(&dir, "fig.svg", &base)).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    let svg = String::from_utf8(through_stdout(&base)).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    through_null_device(&dir, "null.png", &base);
}

#[test]
fn model_commands_write_through_links_fifos_devices_and_stdout() {
    use crate::bert_tiny::{tiny_bert, write_dir, HEADS, LAYERS};
    let dir = TempDir::new("targets-model");
    write_dir(&dir.path("tiny"), &tiny_bert(1));
    let m = dir.arg("tiny");
    let base = [
        "model",
        "attention",
        "--model",
        &m,
        "--text",
        "the cat",
        "--backend",
        "cpu",
        "--out",
        "OUT",
    ];
    let shape = [LAYERS, HEADS, 4, 4];
    assert_eq!(
        npy("FIFO", &through_fifo(&dir, "fifo", &base)).shape(),
        shape
    );
    assert_eq!(
        npy("link", &through_link(&dir, "a.npy", &base)).shape(),
        shape
    );
    // The array alone on stdout: the summary line goes to stderr.
    assert_eq!(npy("stdout", &through_stdout(&base)).shape(), shape);
    through_null_device(&dir, "null", &base);
    let a = dir.arg("a-file.npy");
    let mut args = base.to_vec();
    *args.last_mut().unwrap() = &a;
    args.extend(["--tokens-out", "OUT"]);
    // One object per token; `raw` is the vocabulary's spelling.
    let raw = |bytes: &[u8]| -> Vec<String> {
        let tokens: Vec<serde_json::Value> = serde_json::from_slice(bytes).expect("JSON tokens");
        tokens
            .iter()
            .map(|t| t["raw"].as_str().expect("a raw spelling").to_owned())
            .collect()
    };
    assert_eq!(
        raw(&through_link(&dir, "t.json", &args)),
        ["[CLS]", "the", "cat", "[SEP]"]
    );
    assert_eq!(raw(&through_fifo(&dir, "t-fifo", &args)).len(), 4);

    // model next's logits, on the tiny llama.
    let gguf = dir.raw("tiny.gguf", &crate::model_llama::tiny::tiny_gguf(true));
    let next = [
        "model",
        "next",
        "--model",
        &gguf,
        "--text",
        "a the",
        "--backend",
        "cpu",
        "--logits-out",
        "OUT",
    ];
    assert_eq!(
        npy("logits FIFO", &through_fifo(&dir, "l-fifo", &next)).shape(),
        [258]
    );
    assert_eq!(
        npy("logits link", &through_link(&dir, "l.npy", &next)).shape(),
        [258]
    );
    assert_eq!(npy("logits stdout", &through_stdout(&next)).shape(), [258]);
}

#[test]
fn bench_json_goes_through_links_fifos_devices_and_files() {
    let dir = TempDir::new("targets-bench");
    let base = [
        "bench",
        "--shape",
        "1,1,4,4,8",
        "--backend",
        "cpu",
        "--iters",
        "1",
        "--json",
        "OUT",
    ];
    let line = |what: &str, bytes: Vec<u8>| {
        let text = String::from_utf8(bytes).unwrap();
        let v: serde_json::Value =
            serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{what}: {e}: {text}"));
        assert_eq!(v["backend"], "cpu", "{what}");
        assert_eq!(text.lines().count(), 1, "{what}");
    };
    line("FIFO", through_fifo(&dir, "fifo", &base));
    line("link", through_link(&dir, "b.jsonl", &base));
    line("stdout", through_stdout(&base));
    through_null_device(&dir, "null", &base);
    let file = dir.arg("b-file.jsonl");
    assert_ok("a file", &cli(&with_out(&base, &file)));
    line("a file", std::fs::read(&file).unwrap());
    let out = cli(&with_out(&base, &dir.arg("nowhere/b.jsonl")));
    assert_bad_input_output("a missing folder", &out, "--json");
}
