//! burn's fused attention and wgpu-attention on the same adapter, shapes and inputs, in
//! one run: calls alternate between the two libraries, so load from elsewhere slows
//! both alike. One JSON line per shape on stdout; progress and the final table on stderr.
//!
//! Usage: peer-burn [--shapes "B,H,Lq,Lk,D[,causal];..."] [--iters N] [--warmup N]
//!                  [--reference-max-gflop X]

mod burn_side;
mod inputs;
mod ours;
mod report;

use std::process::ExitCode;
use std::time::Instant;

use ndarray::Array4;
use wgpu_attention::attention_cpu;

use burn_side::Burn;
use inputs::{DEFAULT_SHAPES, Shape, normal};
use ours::Ours;
use report::{Row, Side, table};

struct Args {
    shapes: Vec<Shape>,
    iters: usize,
    warmup: usize,
    /// Shapes above this many GFLOP skip the float64 CPU reference (slow loops).
    reference_max_gflop: f64,
}

const USAGE: &str = "usage: peer-burn [--shapes \"B,H,Lq,Lk,D[,causal];...\"] [--iters N (10)] \
[--warmup N (2)] [--reference-max-gflop X (5)]";

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        shapes: Vec::new(),
        iters: 10,
        warmup: 2,
        reference_max_gflop: 5.0,
    };
    let mut shapes = DEFAULT_SHAPES.to_string();
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--shapes" => shapes = value()?,
            "--iters" => a.iters = count(&flag, &value()?)?,
            "--warmup" => a.warmup = count(&flag, &value()?)?,
            "--reference-max-gflop" => {
                a.reference_max_gflop = value()?
                    .parse()
                    .map_err(|_| format!("{flag} needs a number"))?
            }
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument '{other}'\n{USAGE}")),
        }
    }
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

fn time_ms(f: impl FnOnce() -> Result<(), String>) -> Result<f64, String> {
    let started = Instant::now();
    f()?;
    Ok(started.elapsed().as_secs_f64() * 1e3)
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

fn measure(ours: &Ours, burn: &Burn, shape: &Shape, args: &Args) -> Result<Row, String> {
    let (qd, kd) = (shape.q_dims(), shape.kv_dims());
    let n = |d: [usize; 4]| d.iter().product::<usize>();
    let data = [normal(n(qd), 1), normal(n(kd), 2), normal(n(kd), 3)];
    let array = |x: &Vec<f32>, d: [usize; 4]| {
        Array4::from_shape_vec(d, x.clone()).map_err(|e| e.to_string())
    };
    let (q, k, v) = (
        array(&data[0], qd)?,
        array(&data[1], kd)?,
        array(&data[2], kd)?,
    );
    let op = ours.prepare(shape, &q, &k, &v)?;
    let bp = burn.prepare((qd, kd), data, shape.causal)?;

    // First calls: shader compilation and each library's tuning.
    let burn_first = time_ms(|| burn.run(&bp))?;
    let ours_first = time_ms(|| ours.run(&op))?;
    eprintln!("  first call: ours {ours_first:.0} ms, burn {burn_first:.0} ms");
    for _ in 1..args.warmup {
        burn.run(&bp)?;
        ours.run(&op)?;
    }
    let (mut tb, mut to) = (Vec::new(), Vec::new());
    for i in 0..args.iters {
        // Alternate which goes first, so neither always follows the other's work.
        if i % 2 == 0 {
            tb.push(time_ms(|| burn.run(&bp))?);
            to.push(time_ms(|| ours.run(&op))?);
        } else {
            to.push(time_ms(|| ours.run(&op))?);
            tb.push(time_ms(|| burn.run(&bp))?);
        }
    }
    let flops = shape.flops();
    let mut ours_side = Side::from_samples(ours_first, to, flops);
    let mut burn_side = Side::from_samples(burn_first, tb, flops);

    let ours_out = ours.read(&op)?;
    let burn_out = burn.read(&bp)?;
    if burn_out.len() != ours_out.len() {
        return Err(format!(
            "outputs differ in size: ours {}, burn {}",
            ours_out.len(),
            burn_out.len()
        ));
    }
    let diff = max_abs_diff(ours_out.iter(), burn_out.iter());
    if flops <= args.reference_max_gflop * 1e9 {
        let reference = attention_cpu(q.view(), k.view(), v.view(), &ours::options(shape))
            .map_err(|e| format!("reference: {e}"))?
            .out;
        ours_side.max_diff_vs_reference = Some(max_abs_diff(ours_out.iter(), reference.iter()));
        burn_side.max_diff_vs_reference = Some(max_abs_diff(burn_out.iter(), reference.iter()));
    }
    Ok(Row {
        shape: *shape,
        iters: args.iters,
        ours_path: ours.path(&op),
        ours: ours_side,
        burn: burn_side,
        max_diff_ours_vs_burn: diff,
    })
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let ours = match Ours::new() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(1);
        }
    };
    let burn = Burn::new();
    let (ours_adapter, burn_adapter) = (ours.adapter(), burn.adapter());
    eprintln!("wgpu-attention adapter: {ours_adapter}\nburn adapter: {burn_adapter}");
    let mut rows = Vec::new();
    let mut failed = false;
    for shape in &args.shapes {
        eprintln!("shape {shape}");
        match measure(&ours, &burn, shape, &args) {
            Ok(row) => {
                println!("{}", row.json(&ours_adapter, &burn_adapter));
                rows.push(row);
            }
            Err(e) => {
                eprintln!("  failed: {e}");
                failed = true;
            }
        }
    }
    eprintln!(
        "\n{} timed calls each after {} warm-up, wall clock from launch to device idle, \
         interleaved; GFLOP/s by allowed pairs, 4·D per pair\n{}",
        args.iters,
        args.warmup,
        table(&rows)
    );
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
