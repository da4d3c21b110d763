//! Each library in a process of its own (`--mode separate`, the default): the parent
//! starts this program once per library per round, with `--side ours|burn`, alternating
//! which goes first; each child runs every shape (first call, warm-up, timed calls) and
//! reports on stdout, writing its outputs into a folder for the parent to compare.
//!
//! Why: burn's device-service threads keep part of a core busy while idle (see
//! interleaved.rs), load that a user of this crate alone would not have; in a process of
//! its own each library runs as its users run it, on the same adapter and inputs.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::inputs::{Inputs, Shape};
use crate::library::Library;
use crate::report::Side;
use crate::{Args, Measured, Measurements, time_ms};

/// One library's results for one shape in one process.
struct Run {
    path: String,
    first_ms: f64,
    samples: Vec<f64>,
}

/// The child: runs `lib` on every shape and prints, per shape, `shape I path P first MS
/// samples MS,MS,...` (or `failed I MESSAGE`), its output written to `out_dir/I.f32`.
pub fn run_side(lib: &impl Library, args: &Args, out_dir: &Path) -> Result<(), String> {
    println!("adapter {}", lib.adapter());
    for (i, shape) in args.shapes.iter().enumerate() {
        match time_shape(lib, shape, args, &out_dir.join(format!("{i}.f32"))) {
            Ok(r) => {
                let samples: Vec<String> = r.samples.iter().map(|s| format!("{s:.4}")).collect();
                println!(
                    "shape {i} path {} first {:.4} samples {}",
                    r.path,
                    r.first_ms,
                    samples.join(",")
                );
            }
            Err(e) => println!("failed {i} {}", e.replace('\n', " ")),
        }
    }
    Ok(())
}

fn time_shape(lib: &impl Library, shape: &Shape, args: &Args, out: &Path) -> Result<Run, String> {
    let inputs = Inputs::new(shape)?;
    let p = lib.prepare(shape, &inputs)?;
    let first_ms = time_ms(|| lib.run(&p))?;
    for _ in 1..args.warmup {
        lib.run(&p)?;
    }
    let mut samples = Vec::with_capacity(args.iters);
    for _ in 0..args.iters {
        samples.push(time_ms(|| lib.run(&p))?);
    }
    let values = lib.read(&p)?;
    let bytes: Vec<u8> = values.iter().flat_map(|x| x.to_le_bytes()).collect();
    std::fs::write(out, bytes).map_err(|e| format!("writing {}: {e}", out.display()))?;
    Ok(Run {
        path: lib.path(&p),
        first_ms,
        samples,
    })
}

/// What the children of all rounds reported for one library.
struct Collected {
    adapter: String,
    /// Per shape: the path, the first round's first call, every round's samples.
    runs: Vec<Option<Run>>,
    failures: Vec<String>,
}

/// The parent: `args.rounds` rounds of one child per library, then one result per shape
/// (an error for a shape either library failed). Returns the two adapters too.
pub fn measure_all(args: &Args) -> Result<Measurements, String> {
    let dir = TempDir(std::env::temp_dir().join(format!("peer-burn-{}", std::process::id())));
    let dirs = [dir.0.join("ours"), dir.0.join("burn")];
    for d in &dirs {
        std::fs::create_dir_all(d).map_err(|e| format!("creating {}: {e}", d.display()))?;
    }
    let mut sides = [empty(args), empty(args)];
    for round in 0..args.rounds {
        // Alternate which library goes first.
        let order = if round % 2 == 0 { [1, 0] } else { [0, 1] };
        for i in order {
            let name = ["ours", "burn"][i];
            eprintln!("round {} of {}: {name}", round + 1, args.rounds);
            let text = child(name, args, &dirs[i])?;
            merge(&mut sides[i], &text)?;
        }
    }
    let [ours, burn] = sides;
    let mut results = Vec::new();
    for (i, shape) in args.shapes.iter().enumerate() {
        results.push(combine(i, shape, &ours, &burn, &dirs));
    }
    Ok((ours.adapter, burn.adapter, results))
}

/// The children's output folder, removed however the parent returns.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn empty(args: &Args) -> Collected {
    Collected {
        adapter: String::new(),
        runs: args.shapes.iter().map(|_| None).collect(),
        failures: args.shapes.iter().map(|_| String::new()).collect(),
    }
}

/// Runs this program as one side's child and returns what it printed.
fn child(side: &str, args: &Args, out_dir: &Path) -> Result<String, String> {
    let exe = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
    let shapes: Vec<String> = args.shapes.iter().map(Shape::arg).collect();
    let out = Command::new(exe)
        .args(["--side", side, "--out-dir"])
        .arg(out_dir)
        .args(["--shapes", &shapes.join(";")])
        .args(["--iters", &args.iters.to_string()])
        .args(["--warmup", &args.warmup.to_string()])
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("starting the {side} process: {e}"))?;
    if !out.status.success() {
        return Err(format!("the {side} process failed ({})", out.status));
    }
    String::from_utf8(out.stdout).map_err(|_| format!("the {side} process printed non-UTF-8"))
}

/// Adds one child's report to what was collected for its library.
fn merge(c: &mut Collected, text: &str) -> Result<(), String> {
    let bad = |line: &str| format!("unexpected line from a child: {line:?}");
    for line in text.lines() {
        let words: Vec<&str> = line.split(' ').collect();
        match words.as_slice() {
            ["adapter", ..] => c.adapter = line["adapter ".len()..].to_string(),
            ["failed", i, ..] => {
                let i: usize = i.parse().map_err(|_| bad(line))?;
                let slot = c.failures.get_mut(i).ok_or_else(|| bad(line))?;
                *slot = words[2..].join(" ");
            }
            ["shape", i, "path", path, "first", first, "samples", samples] => {
                let i: usize = i.parse().map_err(|_| bad(line))?;
                let first: f64 = first.parse().map_err(|_| bad(line))?;
                let samples = samples
                    .split(',')
                    .map(|s| s.parse::<f64>().map_err(|_| bad(line)))
                    .collect::<Result<Vec<_>, _>>()?;
                let slot = c.runs.get_mut(i).ok_or_else(|| bad(line))?;
                match slot {
                    // Later rounds add samples; the first call reported is the first
                    // round's.
                    Some(run) => run.samples.extend(samples),
                    None => {
                        *slot = Some(Run {
                            path: path.to_string(),
                            first_ms: first,
                            samples,
                        })
                    }
                }
            }
            _ => return Err(bad(line)),
        }
    }
    Ok(())
}

fn combine(
    i: usize,
    shape: &Shape,
    ours: &Collected,
    burn: &Collected,
    dirs: &[PathBuf; 2],
) -> Result<Measured, String> {
    for (name, c) in [("ours", ours), ("burn", burn)] {
        if !c.failures[i].is_empty() {
            return Err(format!("{name}: {}", c.failures[i]));
        }
    }
    let (Some(o), Some(b)) = (&ours.runs[i], &burn.runs[i]) else {
        return Err("a library reported nothing for this shape".into());
    };
    let read = |d: &Path| -> Result<Vec<f32>, String> {
        let f = d.join(format!("{i}.f32"));
        let bytes = std::fs::read(&f).map_err(|e| format!("reading {}: {e}", f.display()))?;
        Ok(bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    };
    let flops = shape.flops();
    Ok(Measured {
        inputs: Inputs::new(shape)?,
        ours_path: o.path.clone(),
        ours: Side::from_samples(o.first_ms, o.samples.clone(), flops),
        burn: Side::from_samples(b.first_ms, b.samples.clone(), flops),
        ours_out: read(&dirs[0])?,
        burn_out: read(&dirs[1])?,
    })
}
