//! `wgpu-attention mha`: load the layer and the inputs, validate everything before a
//! device opens, run on the chosen backend, write y and the weights.

use ndarray::{Array2, Array3, ArrayD, Ix2, Ix3};
use wgpu_attention::{
    mha, mha_cpu, mha_incremental, AttentionError, GpuContext, HeadWeights, MhaGpuWeights,
    MhaOptions, MhaWeights,
};

use super::args::{Backend, MhaArgs};
use super::exit::CliError;
use super::io::output::OutputSet;
use super::io::read::{read_bounded, safetensors_len};
use super::npy;

pub fn run(args: &MhaArgs) -> Result<(), CliError> {
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
    let result = match cpu {
        Some(r) => r,
        None => {
            let ctx = GpuContext::new().map_err(to_cli)?;
            let w = MhaGpuWeights::upload(&ctx, &weights).map_err(to_cli)?;
            if args.incremental {
                mha_incremental(&ctx, &w, x.view(), &opts)
            } else {
                mha(&ctx, &w, x.view(), kv.as_ref().map(|a| a.view()), &opts)
            }
            .map_err(to_cli)?
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
