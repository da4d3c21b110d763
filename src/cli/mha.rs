//! `wgpu-attention mha`: load the layer and the inputs, validate everything before a
//! device opens, run on the chosen backend, write y and the weights.

use std::time::Instant;

use ndarray::{Array2, Array3, ArrayD, Ix2, Ix3};
use wgpu_attention::{
    kernel_path, mha, mha_cpu, mha_incremental, AttentionError, AttentionOptions, GpuContext,
    HeadWeights, MhaGpuWeights, MhaOptions, MhaWeights,
};

use super::args::{Backend, MhaArgs};
use super::exit::CliError;
use super::info::describe;
use super::io::output::OutputSet;
use super::io::read::read_bounded;
use super::npy;
use super::progress::Progress;
use wgpu_attention::model::safetensors_len;

pub fn run(args: &MhaArgs, quiet: bool) -> Result<(), CliError> {
    if args.incremental && args.backend == Backend::Cpu {
        return Err(CliError::input(
            "--incremental",
            "the KV cache lives on the GPU; use --backend gpu (the CPU reference of the same result is --causal)",
        ));
    }
    // Claimed first: a colliding or uncreatable output is bad input before any work.
    let mut files = OutputSet::new();
    let y_slot = files.claim("--out", &args.out)?;
    let a_slot = args
        .attn_weights
        .as_deref()
        .map(|p| files.claim("--attn-weights", p))
        .transpose()?;
    let bytes = read_bounded("--weights", &args.weights, safetensors_len)?;
    let bytes = with_prefix(bytes, &args.prefix)?;
    let weights =
        MhaWeights::from_safetensors(&bytes, args.heads, args.kv_heads).map_err(to_cli)?;
    let x = rank3("--x", npy::read_floats("--x", &args.x)?, "(B, L, E)")?;
    let kv = args
        .kv
        .as_deref()
        .map(|p| rank3("--kv", npy::read_floats("--kv", p)?, "(B, S, Ekv)"))
        .transpose()?;
    let pad = args
        .key_padding_mask
        .as_deref()
        .map(|p| {
            padding(
                "--key-padding-mask",
                npy::read_padding_mask("--key-padding-mask", p)?,
            )
        })
        .transpose()?;
    let opts = MhaOptions {
        causal: args.causal || args.incremental,
        key_padding_mask: pad.as_ref().map(|m| m.view()),
        weights: match (&args.attn_weights, args.per_head_weights) {
            (None, _) => HeadWeights::None,
            (Some(_), false) => HeadWeights::Averaged,
            (Some(_), true) => HeadWeights::PerHead,
        },
    };
    // Input errors exit 2 before a device opens: the CPU path checks the same shapes.
    let cpu = mha_cpu_checked(&weights, &x, kv.as_ref(), &opts, args.backend)?;
    let started = Instant::now();
    let result = match cpu {
        Some(r) => {
            if args.verbose {
                eprintln!(
                    "backend: the CPU reference (f64); {:.1} ms",
                    started.elapsed().as_secs_f64() * 1e3
                );
            }
            r
        }
        None => {
            let ctx = GpuContext::new().map_err(to_cli)?;
            let progress = Progress::start(quiet, "GPU: building pipelines and running");
            let w = MhaGpuWeights::upload(&ctx, &weights).map_err(to_cli)?;
            let r = if args.incremental {
                mha_incremental(&ctx, &w, x.view(), &opts)
            } else {
                mha(&ctx, &w, x.view(), kv.as_ref().map(|a| a.view()), &opts)
            }
            .map_err(to_cli)?;
            drop(progress);
            if args.verbose {
                eprintln!(
                    "adapter: {}; kernel path: {}; {:.1} ms (device, pipelines, transfers)",
                    describe(ctx.adapter_info()),
                    core_path(&ctx, &weights, &x, kv.as_ref(), args, &opts),
                    started.elapsed().as_secs_f64() * 1e3
                );
            }
            r
        }
    };
    npy::write(&mut files, y_slot, &result.y)?;
    if let (Some(slot), Some(w)) = (a_slot, &result.weights) {
        npy::write(&mut files, slot, w)?;
    }
    files.commit()
}

/// Runs the CPU reference for `--backend cpu`; for the GPU, only checks the inputs.
fn mha_cpu_checked(
    w: &MhaWeights,
    x: &Array3<f32>,
    kv: Option<&Array3<f32>>,
    opts: &MhaOptions<'_>,
    backend: Backend,
) -> Result<Option<wgpu_attention::MhaOutput>, CliError> {
    match backend {
        Backend::Cpu => mha_cpu(w, x.view(), kv.map(|a| a.view()), opts)
            .map(Some)
            .map_err(to_cli),
        Backend::Gpu => {
            w.check_inputs(x.shape(), kv.map(|a| a.shape()), opts)
                .map_err(to_cli)?;
            Ok(None)
        }
    }
}

fn rank3(flag: &'static str, a: ArrayD<f32>, what: &str) -> Result<Array3<f32>, CliError> {
    let shape = a.shape().to_vec();
    a.into_dimensionality::<Ix3>()
        .map_err(|_| CliError::input(flag, format!("expected rank 3 {what}, got shape {shape:?}")))
}

fn padding(flag: &'static str, a: ArrayD<bool>) -> Result<Array2<bool>, CliError> {
    let shape = a.shape().to_vec();
    a.into_dimensionality::<Ix2>()
        .map_err(|_| CliError::input(flag, format!("expected rank 2 (B, S), got shape {shape:?}")))
}

/// Library errors as CLI errors, blaming the flag that supplied the argument.
fn to_cli(e: AttentionError) -> CliError {
    let arg = match &e {
        AttentionError::Shape { arg, .. }
        | AttentionError::InvalidOption { arg, .. }
        | AttentionError::TooLarge { arg, .. } => *arg,
        _ => return CliError::runtime(e.to_string()),
    };
    let flag = match arg {
        "x" => "--x",
        "kv" => "--kv",
        "key_padding_mask" => "--key-padding-mask",
        "heads" => "--heads",
        "kv_heads" => "--kv-heads",
        "kv_cache" => "--incremental",
        "y" => "--out",
        "weights" => "--weights",
        "attn_weights" => "--attn-weights",
        name if name.contains("proj") => {
            // A tensor of the weights file: the message names it after the flag.
            return CliError::input("--weights", e.to_string());
        }
        _ => {
            if !e.is_input_error() {
                return CliError::runtime(e.to_string());
            }
            return CliError::Input {
                flag: None,
                msg: e.to_string(),
            };
        }
    };
    let msg = e.to_string();
    let detail = msg
        .strip_prefix(&format!("{arg}: "))
        .unwrap_or(&msg)
        .to_string();
    CliError::input(flag, detail)
}

/// The attention core's kernel path for `--verbose`: the route a call of the layer's
/// head shapes takes (the staged path whenever weights are returned).
fn core_path(
    ctx: &GpuContext,
    w: &MhaWeights,
    x: &Array3<f32>,
    kv: Option<&Array3<f32>>,
    args: &MhaArgs,
    opts: &MhaOptions<'_>,
) -> String {
    let d = w.dims();
    let (b, l, _) = x.dim();
    let s = kv.map_or(if args.incremental { 1 } else { l }, |a| a.dim().1);
    let core = AttentionOptions {
        causal: opts.causal,
        return_weights: opts.weights != HeadWeights::None,
        ..Default::default()
    };
    let rows = if args.incremental { 1 } else { l };
    let q = [b, d.heads, rows, d.head_dim];
    let k = [b, d.kv_heads, s, d.head_dim];
    match kernel_path(ctx, &q, &k, &k, &core) {
        Ok(p) if args.incremental => format!("{p:?} per step (KV cache)"),
        Ok(p) => format!("{p:?}"),
        Err(e) => format!("unknown ({e})"),
    }
}

/// The tensors whose names start with `prefix`, renamed without it, as a safetensors
/// file of their own (the whole file when the prefix is empty).
fn with_prefix(bytes: Vec<u8>, prefix: &str) -> Result<Vec<u8>, CliError> {
    if prefix.is_empty() {
        return Ok(bytes);
    }
    let st = safetensors::SafeTensors::deserialize(&bytes)
        .map_err(|e| CliError::input("--weights", format!("not a valid safetensors file: {e}")))?;
    let picked: Vec<(String, safetensors::tensor::TensorView<'_>)> = st
        .tensors()
        .into_iter()
        .filter_map(|(name, t)| name.strip_prefix(prefix).map(|n| (n.to_string(), t)))
        .collect();
    if picked.is_empty() {
        let mut names = st.names();
        names.sort();
        let shown: Vec<&str> = names.iter().take(12).map(|n| &n[..]).collect();
        return Err(CliError::input(
            "--prefix",
            format!(
                "no tensor name starts with {prefix:?}; the file holds {}{}",
                shown.join(", "),
                if names.len() > shown.len() {
                    ", ..."
                } else {
                    ""
                }
            ),
        ));
    }
    safetensors::serialize(picked, None)
        .map_err(|e| CliError::runtime(format!("--prefix: cannot select the tensors: {e}")))
}
