//! `wgpu-attention run`: read the tensors, validate everything before touching a device,
//! compute on the chosen backend, write the outputs.

use ndarray::{Array4, ArrayD, Ix4};
use std::time::Instant;

use wgpu_attention::{
    attention, attention_cpu, kernel_path, validate, Alignment, AttentionOptions, AttentionOutput,
    GpuContext, KernelPath, Mask, Precision,
};

use super::args::{AlignArg, Backend, PathArg, PrecisionArg, RunArgs};
use super::exit::CliError;
use super::info::describe;
use super::io::output::{OutputSet, Slot};
use super::npy::{self, MaskArray};
use super::progress::Progress;

pub fn run(args: &RunArgs, quiet: bool) -> Result<(), CliError> {
    let alignment = alignment(args)?;
    if args.align.is_some() && !(args.causal || args.causal_bottom_right || args.window.is_some()) {
        return Err(CliError::input(
            "--align",
            "has no effect without --causal or --window",
        ));
    }
    if args.path != PathArg::Auto && args.backend == Backend::Cpu {
        return Err(CliError::input(
            "--path",
            "picks a GPU kernel; --backend cpu runs the reference",
        ));
    }
    // Claimed first: a colliding or uncreatable output is bad input before any work.
    let mut files = OutputSet::new();
    let slots: Vec<_> = outputs(args)
        .map(|(flag, path)| files.claim(flag, path))
        .collect::<Result<_, _>>()?;
    let q = npy::read_floats("--q", &args.q)?;
    let k = npy::read_floats("--k", &args.k)?;
    let v = npy::read_floats("--v", &args.v)?;
    let mask = args
        .mask
        .as_deref()
        .map(|p| npy::read_mask("--mask", p))
        .transpose()?;
    let kv_lens = args
        .kv_lens
        .as_deref()
        .map(|p| npy::read_lens("--kv-lens", p))
        .transpose()?;

    let opts = AttentionOptions {
        scale: args.scale,
        causal: args.causal || args.causal_bottom_right,
        alignment,
        window: args.window,
        mask: mask.as_ref().map(|m| match m {
            MaskArray::Bool(a) => Mask::Bool(a.view()),
            MaskArray::Additive(a) => Mask::Additive(a.view()),
        }),
        kv_lens: kv_lens.as_deref(),
        return_weights: args.weights.is_some(),
        return_lse: args.lse.is_some(),
        precision: match args.precision {
            PrecisionArg::F32 => Precision::F32,
            PrecisionArg::F16 => Precision::F16,
        },
        path: match args.path {
            PathArg::Auto => KernelPath::Auto,
            PathArg::Staged => KernelPath::Staged,
            PathArg::Fused => KernelPath::Fused,
            PathArg::Decode => KernelPath::Decode,
        },
    };
    // Every shape and option is checked here, so input errors exit 2 before a device opens.
    validate(q.shape(), k.shape(), v.shape(), &opts)?;
    let (q, k, v) = (rank4("--q", q)?, rank4("--k", k)?, rank4("--v", v)?);

    let started = Instant::now();
    let result = match args.backend {
        Backend::Gpu => {
            let ctx = GpuContext::new()?;
            let path = kernel_path(&ctx, q.shape(), k.shape(), v.shape(), &opts)?;
            let progress = Progress::start(quiet, "GPU: building pipelines and running");
            let result = attention(&ctx, q.view(), k.view(), v.view(), &opts)?;
            drop(progress);
            if args.verbose {
                eprintln!(
                    "adapter: {}; kernel path: {path:?}; {:.1} ms (device, pipelines, transfers)",
                    describe(ctx.adapter_info()),
                    started.elapsed().as_secs_f64() * 1e3
                );
            }
            result
        }
        Backend::Cpu if args.precision == PrecisionArg::F16 => {
            // f16 storage on the CPU: round the inputs, then run the CPU path.
            let (q, k, v) = (round_f16(&q), round_f16(&k), round_f16(&v));
            attention_cpu(q.view(), k.view(), v.view(), &opts)?
        }
        Backend::Cpu => attention_cpu(q.view(), k.view(), v.view(), &opts)?,
    };
    if args.verbose && args.backend == Backend::Cpu {
        eprintln!(
            "backend: the CPU (f32 flash attention); {:.1} ms",
            started.elapsed().as_secs_f64() * 1e3
        );
    }
    write_outputs(files, &slots, result)
}

/// `--causal-bottom-right` is `--causal --align bottom-right`; it cannot be top-left too.
fn alignment(args: &RunArgs) -> Result<Alignment, CliError> {
    match (args.causal_bottom_right, args.align) {
        (true, Some(AlignArg::TopLeft)) => Err(CliError::input(
            "--causal-bottom-right",
            "conflicts with --align top-left",
        )),
        (true, _) | (false, Some(AlignArg::BottomRight)) => Ok(Alignment::BottomRight),
        (false, _) => Ok(Alignment::TopLeft),
    }
}

fn outputs(args: &RunArgs) -> impl Iterator<Item = (&'static str, &std::path::Path)> {
    [
        ("--out", Some(args.out.as_path())),
        ("--weights", args.weights.as_deref()),
        ("--lse", args.lse.as_deref()),
    ]
    .into_iter()
    .filter_map(|(flag, p)| p.map(|p| (flag, p)))
}

fn rank4(flag: &'static str, a: ArrayD<f32>) -> Result<Array4<f32>, CliError> {
    let shape = a.shape().to_vec();
    a.into_dimensionality::<Ix4>().map_err(|_| {
        CliError::input(
            flag,
            format!("expected rank 4 (B, H, L, D), got shape {shape:?}"),
        )
    })
}

fn round_f16(a: &Array4<f32>) -> Array4<f32> {
    a.mapv(|x| half::f16::from_f32(x).to_f32())
}

/// Writes the outputs in the order `outputs` claimed them, then renames them into place.
fn write_outputs(
    mut files: OutputSet,
    slots: &[Slot],
    result: AttentionOutput,
) -> Result<(), CliError> {
    let mut slots = slots.iter().copied();
    let mut next = || {
        slots
            .next()
            .ok_or_else(|| CliError::runtime("more results than claimed outputs"))
    };
    npy::write(&mut files, next()?, &result.out)?;
    if let Some(w) = &result.weights {
        npy::write(&mut files, next()?, w)?;
    }
    if let Some(l) = &result.lse {
        npy::write(&mut files, next()?, l)?;
    }
    files.commit()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn parse(extra: &[&str]) -> RunArgs {
        let base = [
            "wgpu-attention",
            "run",
            "--q",
            "q",
            "--k",
            "k",
            "--v",
            "v",
            "--out",
            "o",
        ];
        let cli = super::super::args::Cli::try_parse_from(base.iter().chain(extra)).unwrap();
        match cli.command {
            Some(super::super::args::Command::Run(r)) => *r,
            other => panic!("not a run: {other:?}"),
        }
    }

    #[test]
    fn alignment_flags() {
        assert_eq!(alignment(&parse(&[])).unwrap(), Alignment::TopLeft);
        assert_eq!(
            alignment(&parse(&["--causal-bottom-right"])).unwrap(),
            Alignment::BottomRight
        );
        assert_eq!(
            alignment(&parse(&[
                "--causal-bottom-right",
                "--align",
                "bottom-right"
            ]))
            .unwrap(),
            Alignment::BottomRight
        );
        assert!(alignment(&parse(&["--causal-bottom-right", "--align", "top-left"])).is_err());
    }
}
