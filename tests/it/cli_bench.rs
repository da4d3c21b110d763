//! `wgpu-attention bench`: JSON lines with docs/DESIGN.md's keys for every (backend, path)
//! measured, and bad flags exit 2 naming the flag.

use std::process::Command;

fn bench(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_wgpu-attention"))
        .arg("bench")
        .args(args)
        .output()
        .expect("the binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn json_lines_for_both_backends() {
    let (code, stdout, stderr) = bench(&[
        "--shape",
        "1,4,9,33,16",
        "--hkv",
        "2",
        "--dv",
        "8",
        "--causal",
        "--backend",
        "both",
        "--iters",
        "2",
        "--json",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    for (line, backend) in lines.iter().zip(["gpu", "cpu"]) {
        assert_eq!(line["backend"], backend);
        assert_eq!(line["shape"], serde_json::json!([1, 4, 9, 33, 16]));
        assert_eq!(line["hkv"], 2);
        assert_eq!(line["dv"], 8);
        assert_eq!(line["causal"], true);
        assert_eq!(line["precision"], "f32");
        for key in ["median_ms", "gflops"] {
            assert!(
                line[key].as_f64().is_some_and(|x| x > 0.0),
                "{key} in {line}"
            );
        }
        assert!(line["peak_device_bytes"].is_u64(), "{line}");
        assert!(["timestamp", "wall"].contains(&line["timing"].as_str().unwrap_or("")));
        assert!(line["adapter"].is_string());
    }
    // Auto without weights runs the fused kernel; the CPU row is the reference.
    assert_eq!(lines[0]["path"], "fused");
    assert_eq!(lines[1]["path"], "cpu");
    assert_eq!(lines[1]["peak_device_bytes"], 0);
}

#[test]
fn the_staged_path_reports_its_score_matrix() {
    let (code, stdout, stderr) = bench(&[
        "--shape",
        "1,2,16,32,8",
        "--path",
        "staged",
        "--iters",
        "1",
        "--json",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let line: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
    assert_eq!(line["path"], "staged");
    // Two heads of 16 x 32 f32 scores, at least.
    assert!(line["peak_device_bytes"]
        .as_u64()
        .is_some_and(|b| b >= 2 * 16 * 32 * 4));
}

#[test]
fn bad_flags_exit_2_naming_the_flag() {
    for (args, flag) in [
        (vec!["--shape", "1,2,3"], "--shape"),
        (vec!["--shape", "1,4,8,8,8", "--hkv", "3"], "--hkv"),
        (vec!["--shape", "1,4,8,8,8", "--iters", "0"], "--iters"),
        (vec!["--shape", "1,1,4,4,300", "--path", "fused"], "--path"),
    ] {
        let (code, _, stderr) = bench(&args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        // The last line: the Vulkan loader may warn on stderr first.
        let line = stderr.lines().last().unwrap_or("");
        assert!(line.contains(flag), "{args:?}: {stderr}");
    }
}

/// Runs `bench` under an address-space limit, so that a build of the inputs before the
/// size checks fails the test (an abort, or a kill) instead of filling the machine.
fn bench_limited(args: &[&str]) -> (Option<i32>, String, std::time::Duration) {
    let started = std::time::Instant::now();
    let out = Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 4000000; exec \"$0\" bench \"$@\"")
        .arg(env!("CARGO_BIN_EXE_wgpu-attention"))
        .args(args)
        .output()
        .expect("the binary runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        started.elapsed(),
    )
}

#[test]
fn huge_shapes_and_iters_are_refused_before_any_work() {
    for (args, flag) in [
        (
            vec!["--shape", "1000000,1000000,1000000,1000000,1000000"],
            "--shape",
        ),
        (vec!["--shape", "4294967295,4294967295,1,1,1"], "--shape"),
        (vec!["--shape", "1,1024,65536,65536,128"], "--shape"),
        (vec!["--shape", "1,1,1,1,100000000"], "--shape"),
        (
            vec!["--shape", "1,1024,65536,65536,128", "--backend", "cpu"],
            "--shape",
        ),
        (
            vec!["--shape", "1,2,4,4,4", "--iters", "18446744073709551615"],
            "--iters",
        ),
        (
            vec!["--shape", "1,2,4,4,4", "--iters", "100000000"],
            "--iters",
        ),
    ] {
        let (code, stderr, took) = bench_limited(&args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        let line = stderr.lines().last().unwrap_or("");
        assert!(line.contains(flag), "{args:?}: {stderr}");
        // Not a timing target: a guard that nothing was built or uploaded first (the
        // checks take milliseconds; building the inputs took a minute).
        assert!(took.as_secs() < 20, "{args:?} took {took:?}");
    }
}
