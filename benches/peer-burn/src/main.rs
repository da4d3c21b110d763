//! burn's fused attention and wgpu-attention on the same adapter, shapes and inputs, in
//! one run. By default each library runs in a process of its own, one after the other,
//! for several rounds that alternate which goes first (separate.rs); `--mode interleaved`
//! runs both in this process with calls alternating (interleaved.rs). One JSON line per
//! shape on stdout; progress and the final table on stderr.
//!
//! Usage: peer-burn [--shapes "B,H,Lq,Lk,D[,causal];..."] [--iters N] [--warmup N]
//!                  [--rounds N] [--mode separate|interleaved] [--reference-max-gflop X]

mod burn_side;
mod inputs;
mod interleaved;
mod library;
mod ours;
mod report;
mod separate;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use wgpu_attention::attention_reference;

use burn_side::Burn;
use inputs::{DEFAULT_SHAPES, Inputs, Shape};
use library::Library;
use ours::Ours;
use report::{Row, Side, table};

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Separate,
    Interleaved,
}

pub struct Args {
    shapes: Vec<Shape>,
    iters: usize,
    warmup: usize,
    rounds: usize,
    mode: Mode,
    /// Shapes above this many GFLOP skip the float64 CPU reference (slow loops).
    reference_max_gflop: f64,
    /// Set in the children of the separate mode: the library to run, where to write.
    side: Option<(String, PathBuf)>,
}

const USAGE: &str = "usage: peer-burn [--shapes \"B,H,Lq,Lk,D[,causal];...\"] [--iters N (10)] \
[--warmup N (2)] [--rounds N (3)] [--mode separate|interleaved (separate)] \
[--reference-max-gflop X (5)]";

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        shapes: Vec::new(),
        iters: 10,
        warmup: 2,
        rounds: 3,
        mode: Mode::Separate,
        reference_max_gflop: 5.0,
        side: None,
    };
    let mut shapes = DEFAULT_SHAPES.to_string();
    let (mut side, mut out_dir) = (None, None);
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--shapes" => shapes = value()?,
            "--iters" => a.iters = count(&flag, &value()?)?,
            "--warmup" => a.warmup = count(&flag, &value()?)?,
            "--rounds" => a.rounds = count(&flag, &value()?)?,
            "--mode" => {
                a.mode = match value()?.as_str() {
                    "separate" => Mode::Separate,
                    "interleaved" => Mode::Interleaved,
                    other => {
                        return Err(format!(
                            "--mode takes separate or interleaved, got '{other}'"
                        ));
                    }
                }
            }
            "--reference-max-gflop" => {
                a.reference_max_gflop = value()?
                    .parse()
                    .map_err(|_| format!("{flag} needs a number"))?
            }
            // The separate mode's children.
            "--side" => side = Some(value()?),
            "--out-dir" => out_dir = Some(PathBuf::from(value()?)),
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument '{other}'\n{USAGE}")),
        }
    }
    a.side = match (side, out_dir) {
        (Some(s), Some(d)) if s == "ours" || s == "burn" => Some((s, d)),
        (None, None) => None,
        _ => return Err("--side ours|burn and --out-dir go together".into()),
    };
    a.shapes = shapes
        .split(';')
        .filter(|s| !s.trim().is_empty())
        .map(Shape::parse)
        .collect::<Result<_, _>>()?;
    if a.shapes.is_empty() {
        return Err("--shapes names no shape".into());
    }
    Ok(a)
}

/// A count of at least 1 (warm-up: the first call is always made and reported apart).
fn count(flag: &str, v: &str) -> Result<usize, String> {
    match v.parse() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("{flag} needs a count of at least 1, got '{v}'")),
    }
}

pub fn time_ms(f: impl FnOnce() -> Result<(), String>) -> Result<f64, String> {
    let started = Instant::now();
    f()?;
    Ok(started.elapsed().as_secs_f64() * 1e3)
}

/// The two libraries' adapters and one result per shape.
pub type Measurements = (String, String, Vec<Result<Measured, String>>);

/// One shape measured on both libraries, before the outputs are compared.
pub struct Measured {
    inputs: Inputs,
    ours_path: String,
    ours: Side,
    burn: Side,
    ours_out: Vec<f32>,
    burn_out: Vec<f32>,
}

fn max_abs_diff<'a>(
    a: impl IntoIterator<Item = &'a f32>,
    b: impl IntoIterator<Item = &'a f32>,
) -> f64 {
    // NaN anywhere makes the difference NaN (reported as null), never silently 0.
    a.into_iter().zip(b).fold(0.0f64, |m, (x, y)| {
        let d = (f64::from(*x) - f64::from(*y)).abs();
        if d.is_nan() || m.is_nan() {
            f64::NAN
        } else {
            m.max(d)
        }
    })
}

/// The outputs compared with each other and, for small enough shapes, with the float64
/// CPU reference.
fn row(shape: &Shape, args: &Args, m: Measured) -> Result<Row, String> {
    let Measured {
        inputs,
        ours_path,
        mut ours,
        mut burn,
        ours_out,
        burn_out,
    } = m;
    if burn_out.len() != ours_out.len() {
        return Err(format!(
            "outputs differ in size: ours {}, burn {}",
            ours_out.len(),
            burn_out.len()
        ));
    }
    let diff = max_abs_diff(ours_out.iter(), burn_out.iter());
    if shape.flops() <= args.reference_max_gflop * 1e9 {
        let (q, k, v) = (inputs.q.view(), inputs.k.view(), inputs.v.view());
        let reference = attention_reference(q, k, v, &ours::options(shape))
            .map_err(|e| format!("reference: {e}"))?
            .out;
        ours.max_diff_vs_reference = Some(max_abs_diff(ours_out.iter(), reference.iter()));
        burn.max_diff_vs_reference = Some(max_abs_diff(burn_out.iter(), reference.iter()));
    }
    Ok(Row {
        shape: *shape,
        iters: args.iters
            * if args.mode == Mode::Separate {
                args.rounds
            } else {
                1
            },
        timing: match args.mode {
            Mode::Separate => "wall, launch to device idle, each library in its own process",
            Mode::Interleaved => "wall, launch to device idle, interleaved in one process",
        },
        ours_path,
        ours,
        burn,
        max_diff_ours_vs_burn: diff,
    })
}

/// Runs one side as a child of the separate mode.
fn child(side: &str, out_dir: &std::path::Path, args: &Args) -> Result<(), String> {
    if side == "ours" {
        separate::run_side(&Ours::new()?, args, out_dir)
    } else {
        separate::run_side(&Burn::new(), args, out_dir)
    }
}

/// Every shape on both libraries: the adapters and one result per shape.
fn measure(args: &Args) -> Result<Measurements, String> {
    match args.mode {
        Mode::Separate => separate::measure_all(args),
        Mode::Interleaved => {
            let ours = Ours::new()?;
            let burn = Burn::new();
            let results = args
                .shapes
                .iter()
                .map(|shape| {
                    eprintln!("shape {shape}");
                    interleaved::measure(&ours, &burn, shape, args)
                })
                .collect();
            Ok((ours.adapter(), burn.adapter(), results))
        }
    }
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    if let Some((side, dir)) = &args.side {
        return match child(side, dir, &args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{e}");
                ExitCode::from(1)
            }
        };
    }
    let (ours_adapter, burn_adapter, results) = match measure(&args) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(1);
        }
    };
    eprintln!("wgpu-attention adapter: {ours_adapter}\nburn adapter: {burn_adapter}");
    let mut rows = Vec::new();
    let mut failed = false;
    for (shape, result) in args.shapes.iter().zip(results) {
        match result.and_then(|m| row(shape, &args, m)) {
            Ok(row) => {
                println!("{}", row.json(&ours_adapter, &burn_adapter));
                rows.push(row);
            }
            Err(e) => {
                eprintln!("shape {shape} failed: {e}");
                failed = true;
            }
        }
    }
    let how = match args.mode {
        Mode::Separate => format!(
            "{} rounds of {} timed calls each after {} warm-up, each library in its own process",
            args.rounds, args.iters, args.warmup
        ),
        Mode::Interleaved => format!(
            "{} timed calls each after {} warm-up, interleaved in one process",
            args.iters, args.warmup
        ),
    };
    eprintln!(
        "\n{how}; wall clock from launch to device idle; GFLOP/s by allowed pairs, 4·D per pair\n{}",
        table(&rows)
    );
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
