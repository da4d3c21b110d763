//! The outputs of `run` and `mha`: written all together or not at all. Two outputs
//! with one path are bad input (exit 2); a write that fails (a full disk, a file-size
//! limit) exits 1 and leaves no file of the set behind, nor a temporary one.

use crate::cli_common::{assert_bad_input, cli, cli_limited, stderr_of, RunArgs, TempDir};
use ndarray::Array4;

/// q, k, v of (1, 2, 16, 8) in `dir`: the outputs are 1 KiB, the weights 2 KiB.
fn inputs(dir: &TempDir) -> String {
    let a = Array4::from_shape_fn((1, 2, 16, 8), |(_, h, i, d)| (h + i * d) as f32 * 0.01);
    dir.npy("q.npy", &a)
}

#[test]
fn two_outputs_with_one_path_are_bad_input() {
    let dir = TempDir::new("outputs-collide");
    let q = inputs(&dir);
    let o = dir.arg("o.npy");
    let same = format!("{}/./o.npy", dir.arg(""));
    let run = RunArgs::new(&q).out(&o);
    for (what, flag, path) in [
        ("--lse on --out", "--lse", o.as_str()),
        ("--weights on --out", "--weights", same.as_str()),
    ] {
        let args = run.clone().backend("cpu").flag(flag, path).build();
        assert_bad_input(what, &args, flag);
        assert_eq!(dir.files_in(""), ["q.npy"], "{what}");
    }
    let w = dir.arg("nowhere/w.npy");
    assert_bad_input(
        "uncreatable output",
        &run.flag("--weights", &w).build(),
        "--weights",
    );
    assert_eq!(dir.files_in(""), ["q.npy"]);
}

/// A file-size limit (SIGXFSZ ignored, so a write past it fails with EFBIG) lets the
/// output through and stops the weights: nothing may be left.
#[test]
fn a_failed_write_exits_1_and_leaves_no_file() {
    let dir = TempDir::new("outputs-fail");
    let q = inputs(&dir);
    let (o, w, l) = (dir.arg("o.npy"), dir.arg("w.npy"), dir.arg("l.npy"));
    let args = RunArgs::new(&q)
        .out(&o)
        .flag("--lse", &l)
        .flag("--weights", &w)
        .backend("cpu")
        .build();
    let out = cli_limited("trap '' XFSZ; ulimit -f 3", &args);
    let msg = stderr_of(&out);
    assert_eq!(out.status.code(), Some(1), "{msg}");
    assert!(
        msg.contains("--weights") && msg.contains("cannot write"),
        "{msg}"
    );
    assert_eq!(msg.lines().count(), 1, "{msg}");
    assert_eq!(dir.files_in(""), ["q.npy"]);
    // Without the limit the same command writes all three.
    let out = cli(&args);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(dir.files_in(""), ["l.npy", "o.npy", "q.npy", "w.npy"]);
}

/// A full disk, for real: a 16 KiB tmpfs. Needs root to mount; .ci/run runs it.
#[test]
#[ignore = "needs root to mount a tmpfs; .ci/run runs it"]
fn a_full_disk_exits_1_and_leaves_no_file() {
    let dir = TempDir::new("outputs-full");
    let q = inputs(&dir);
    let disk = dir.path("disk");
    std::fs::create_dir(&disk).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=16k", "tmpfs"])
        .arg(&disk)
        .status()
        .expect("run mount");
    assert!(mounted.success(), "cannot mount a tmpfs (not root?)");
    // Fill it but for 2 KiB: the 1 KiB output fits, the 2 KiB weights do not.
    let filler = vec![0u8; 14 << 10];
    let _ = std::fs::write(disk.join("filler"), &filler);
    let (o, w) = (
        disk.join("o.npy").to_string_lossy().into_owned(),
        disk.join("w.npy").to_string_lossy().into_owned(),
    );
    let out = cli(&RunArgs::new(&q)
        .out(&o)
        .flag("--weights", &w)
        .backend("cpu")
        .build());
    let left: Vec<_> = std::fs::read_dir(&disk)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    let _ = std::process::Command::new("umount").arg(&disk).status();
    let msg = stderr_of(&out);
    assert_eq!(out.status.code(), Some(1), "{msg}");
    assert!(msg.contains("cannot write"), "{msg}");
    assert_eq!(left, ["filler"], "{msg}");
}
