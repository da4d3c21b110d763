//! Every input path given something that is not a regular file: a FIFO with no writer, a
//! link to one, a character device, a folder. Each is refused at once with exit 2 and a
//! one-line message naming the flag; nothing waits for a writer and no device is read.
//! The model loaders refuse the same inside a model directory and as a `.gguf` file.
//! Every special file is made here, in a temporary folder; the machine's own `/dev` is
//! never used.

#![cfg(unix)]

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use ndarray::{Array2, Array4};
use wgpu_attention::model::bert::BertModel;
use wgpu_attention::model::llama::LlamaModel;
use wgpu_attention::model::ModelError;

use crate::bert_tiny::{tiny_bert, write_dir};
use crate::cli_common::{assert_bad_input_output, TempDir};
use crate::cli_mha::safetensors;
use crate::special_files::{device_node, mkfifo};

/// Longer than any refusal takes, even on a loaded machine; a command still running then
/// is waiting on the special file.
const DEADLINE: Duration = Duration::from_secs(90);

/// Runs the binary with `args`, killed (and the test failed) if it is still running after
/// [`DEADLINE`].
fn cli_within(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_wgpu-attention"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start wgpu-attention");
    let start = Instant::now();
    while child.try_wait().expect("wait for wgpu-attention").is_none() {
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?}: still running after {DEADLINE:?}, waiting on a special file");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("wgpu-attention's output")
}

/// The special files to give as inputs, made in `dir`: a FIFO, a link to it, a folder,
/// and a character device (1, 5), like /dev/zero, where this user may make one (it is
/// never opened). Each with a label for the messages.
fn specials(dir: &TempDir) -> Vec<(&'static str, String)> {
    let fifo = dir.path("fifo");
    mkfifo(&fifo);
    std::os::unix::fs::symlink(&fifo, dir.path("link-to-fifo")).expect("link");
    std::fs::create_dir(dir.path("folder")).expect("folder");
    let mut all = vec![
        ("a FIFO", dir.arg("fifo")),
        ("a link to a FIFO", dir.arg("link-to-fifo")),
        ("a folder", dir.arg("folder")),
    ];
    match device_node(&dir.path("zero"), 1, 5) {
        Ok(()) => all.push(("a character device", dir.arg("zero"))),
        Err(why) => eprintln!("not checked, a character device as an input: {why}"),
    }
    all
}

/// Runs `args` with `flag`'s value replaced by (or `flag` added with) each special file:
/// exit 2, one line naming `flag`, nothing on stdout, and no output file written.
fn refused_for_each(specials: &[(&str, String)], args: &[&str], flag: &str, out: &Path) {
    for (what, special) in specials {
        let mut a: Vec<&str> = args.to_vec();
        match a.iter().position(|x| *x == flag) {
            Some(i) => a[i + 1] = special,
            None => a.extend([flag, special.as_str()]),
        }
        let output = cli_within(&a);
        assert_bad_input_output(&format!("{flag} as {what}: {a:?}"), &output, flag);
        assert!(!out.exists(), "{flag} as {what}: an output was written");
    }
}

#[test]
fn input_flags_refuse_fifos_devices_and_folders_at_once() {
    let dir = TempDir::new("special-inputs");
    let specials = specials(&dir);
    let out_path = dir.path("out.npy");
    let out = dir.arg("out.npy");

    let q = dir.npy(
        "q.npy",
        &Array4::from_shape_fn((1, 1, 4, 8), |(_, _, i, d)| (i + d) as f32 * 0.1),
    );
    let run = ["run", "--q", &q, "--k", &q, "--v", &q, "--out", &out];
    for flag in ["--q", "--k", "--v", "--mask", "--kv-lens"] {
        refused_for_each(&specials, &run, flag, &out_path);
    }

    let weights = dir.raw(
        "w.safetensors",
        &safetensors(&[("in_proj_weight", &[6, 2]), ("out_proj.weight", &[2, 2])]),
    );
    let x = dir.npy(
        "x.npy",
        &ndarray::Array3::from_shape_fn((1, 3, 2), |(_, i, d)| (i + d) as f32),
    );
    let mha = [
        "mha",
        "--weights",
        &weights,
        "--x",
        &x,
        "--heads",
        "1",
        "--out",
        &out,
    ];
    for flag in ["--weights", "--x", "--kv", "--key-padding-mask"] {
        refused_for_each(&specials, &mha, flag, &out_path);
    }

    let svg_path = dir.path("h.svg");
    let svg = dir.arg("h.svg");
    let w = dir.npy("w.npy", &Array2::<f32>::from_elem((3, 3), 1.0 / 3.0));
    let heatmap = ["heatmap", "--weights", &w, "--out", &svg];
    for flag in ["--weights", "--tokens"] {
        refused_for_each(&specials, &heatmap, flag, &svg_path);
    }

    write_dir(&dir.path("tiny"), &tiny_bert(1));
    let tiny = dir.arg("tiny");
    let embed = [
        "model", "embed", "--model", &tiny, "--input", "-", "--out", &out,
    ];
    refused_for_each(&specials, &embed, "--input", &out_path);
    let attention = [
        "model",
        "attention",
        "--model",
        &tiny,
        "--text",
        "a b",
        "--out",
        &out,
    ];
    refused_for_each(&specials, &attention, "--model", &out_path);
}

/// A model directory whose files are each, in turn, a FIFO or a link to one; and a
/// `.gguf` path that is a FIFO or a device. `model info` (every file read, hashed) and
/// `model attention` refuse them naming `--model`.
#[test]
fn model_files_refuse_fifos_and_devices_at_once() {
    let dir = TempDir::new("special-model-files");
    let tiny = dir.path("tiny");
    write_dir(&tiny, &tiny_bert(1));
    let out_path = dir.path("out.npy");
    let out = dir.arg("out.npy");
    for file in ["config.json", "tokenizer.json", "model.safetensors"] {
        let real = tiny.join(file);
        let kept = dir.path("kept");
        std::fs::rename(&real, &kept).expect("move the file aside");
        mkfifo(&real);
        for args in [
            vec!["model", "info", "--model", tiny.to_str().unwrap()],
            vec![
                "model",
                "attention",
                "--model",
                tiny.to_str().unwrap(),
                "--text",
                "a b",
                "--out",
                &out,
            ],
        ] {
            let output = cli_within(&args);
            assert_bad_input_output(&format!("{file} as a FIFO: {args:?}"), &output, "--model");
            assert!(
                !out_path.exists(),
                "{file} as a FIFO: an output was written"
            );
        }
        std::fs::remove_file(&real).expect("remove the FIFO");
        std::fs::rename(&kept, &real).expect("put the file back");
    }

    mkfifo(&dir.path("fifo.gguf"));
    let mut ggufs = vec![dir.arg("fifo.gguf")];
    match device_node(&dir.path("zero.gguf"), 1, 5) {
        Ok(()) => ggufs.push(dir.arg("zero.gguf")),
        Err(why) => eprintln!("not checked, a character device as a .gguf: {why}"),
    }
    for gguf in &ggufs {
        let output = cli_within(&["model", "info", "--model", gguf]);
        assert_bad_input_output(gguf, &output, "--model");
        assert!(
            output
                .stderr
                .windows(18)
                .any(|w| w == b"not a regular file"),
            "{gguf}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// `BertModel::load` and `LlamaModel::load` on the same: an `Io` error, at once.
#[test]
fn loaders_refuse_fifos_at_once() {
    let dir = TempDir::new("special-loaders");
    let tiny = dir.path("tiny");
    write_dir(&tiny, &tiny_bert(1));
    std::fs::remove_file(tiny.join("tokenizer.json")).expect("remove");
    mkfifo(&tiny.join("tokenizer.json"));
    let gguf = dir.path("fifo.gguf");
    mkfifo(&gguf);

    let (tx, rx) = mpsc::channel();
    let bert_tx = tx.clone();
    std::thread::spawn(move || {
        let _ = bert_tx.send(("BERT", BertModel::load(&tiny).err()));
    });
    std::thread::spawn(move || {
        let _ = tx.send(("llama", LlamaModel::load(&gguf).err()));
    });
    for _ in 0..2 {
        let (which, err) = rx
            .recv_timeout(DEADLINE)
            .expect("a loader is still waiting on a FIFO");
        match err {
            Some(ModelError::Io { detail, .. }) => {
                assert!(detail.contains("not a regular file"), "{which}: {detail}")
            }
            other => panic!("{which}: want an Io error, got {other:?}"),
        }
    }
}
