//! `wgpu-attention bench`: measures one shape on the GPU, the fast CPU path or both, and
//! prints a table, or writes one JSON object per line (to stdout or a file).

use super::io::stdout::out;
use wgpu_attention::bench::{bench_cpu, bench_gpu, BenchConfig, BenchResult, Timing, MAX_ITERS};
use wgpu_attention::{AttentionError, GpuContext, KernelPath, Precision};

use super::args::{BenchArgs, BenchBackend, PathArg, PrecisionArg};
use super::exit::CliError;
use super::io::output::OutputSet;
use super::progress::Progress;

fn config(args: &BenchArgs) -> Result<BenchConfig, CliError> {
    let [batch, heads, len_q, len_k, dim] = args.shape;
    if !(1..=MAX_ITERS).contains(&args.iters) {
        return Err(CliError::input(
            "--iters",
            format!("must be between 1 and {MAX_ITERS}, got {}", args.iters),
        ));
    }
    let hkv = args.hkv.unwrap_or(heads);
    if hkv == 0 || heads % hkv != 0 {
        return Err(CliError::input(
            "--hkv",
            format!("must divide the query heads H = {heads}, got {hkv}"),
        ));
    }
    let dv = args.dv.unwrap_or(dim);
    if dv == 0 {
        return Err(CliError::input("--dv", "must be positive"));
    }
    Ok(BenchConfig {
        batch,
        heads_q: heads,
        heads_kv: hkv,
        len_q,
        len_k,
        dim,
        dim_v: dv,
        causal: args.causal,
        path: match args.path {
            PathArg::Auto => KernelPath::Auto,
            PathArg::Staged => KernelPath::Staged,
            PathArg::Fused => KernelPath::Fused,
            PathArg::Decode => KernelPath::Decode,
        },
        precision: match args.precision {
            PrecisionArg::F32 => Precision::F32,
            PrecisionArg::F16 => Precision::F16,
        },
        iters: args.iters,
    })
}

/// Input errors blamed on the bench's own flags: shapes on --shape, the rest by name.
fn blame(e: AttentionError) -> CliError {
    if !e.is_input_error() {
        return CliError::from(e);
    }
    let (flag, detail) = match &e {
        AttentionError::InvalidOption { arg, detail } => match *arg {
            "path" => ("--path", detail.clone()),
            "precision" => ("--precision", detail.clone()),
            "iters" => ("--iters", detail.clone()),
            _ => ("--shape", e.to_string()),
        },
        _ => ("--shape", e.to_string()),
    };
    CliError::input(flag, detail)
}

fn print_table(results: &[BenchResult]) {
    out!(
        "{:<8} {:<7} {:<5} {:>11} {:>10} {:>8} {:>14} {:>10} {:>10}  timing",
        "backend",
        "path",
        "prec",
        "median ms",
        "GFLOP/s",
        "GB/s",
        "device bytes",
        "upload ms",
        "read ms"
    );
    for r in results {
        let precision = match r.config.precision {
            Precision::F32 => "f32",
            Precision::F16 => "f16",
        };
        let timing = match (r.timing, r.backend) {
            (Timing::Timestamp, _) => "timestamp queries",
            (Timing::Wall, "cpu") => "wall clock",
            (Timing::Wall, _) => "wall clock (the adapter has no timestamp queries)",
        };
        out!(
            "{:<8} {:<7} {:<5} {:>11.3} {:>10.2} {:>8.2} {:>14} {:>10.2} {:>10.2}  {timing}",
            r.backend,
            r.path,
            precision,
            r.median_ms,
            r.gflops,
            r.gbps,
            r.peak_device_bytes,
            r.upload_ms,
            r.download_ms
        );
    }
    if let Some(r) = results.iter().find(|r| r.backend == "gpu") {
        out!("adapter: {}", r.adapter);
    }
}

pub fn run(args: &BenchArgs, quiet: bool) -> Result<(), CliError> {
    // Claimed first: an unwritable --json file is bad input before any work.
    let mut files = OutputSet::new();
    let json = args
        .json
        .as_deref()
        .map(|p| files.claim_text("--json", p))
        .transpose()?;
    let config = config(args)?;
    // Shape and option errors before any device work.
    config.flops().map_err(blame)?;
    let mut results = Vec::new();
    if matches!(args.backend, BenchBackend::Gpu | BenchBackend::Both) {
        let ctx = GpuContext::new()?;
        // Measure the configuration this adapter runs best, timed once per shape class.
        ctx.set_autotune(true);
        let _progress = Progress::start(
            quiet,
            &format!(
                "GPU: building pipelines and tuning, then {} timed runs",
                config.iters
            ),
        );
        results.push(bench_gpu(&ctx, &config).map_err(blame)?);
    }
    if matches!(args.backend, BenchBackend::Cpu | BenchBackend::Both) {
        let _progress = Progress::start(
            quiet,
            &format!("CPU (f32 flash attention): {} timed runs", config.iters),
        );
        results.push(bench_cpu(&config).map_err(blame)?);
    }
    match json {
        Some(slot) => {
            files.write(slot, |w| {
                results
                    .iter()
                    .try_for_each(|r| writeln!(w, "{}", r.to_json()))
            })?;
            files.commit()
        }
        None => {
            print_table(&results);
            Ok(())
        }
    }
}
