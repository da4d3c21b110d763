//! What the model commands share (`model`, `model embed`, `heatmap --model`): loading a
//! model, mapping its errors to the command line's, and one forward pass.

use ndarray::Array4;
use wgpu_attention::model::{resolve_model_path, ForwardOutput, Model, ModelError, Token};
use wgpu_attention::GpuContext;

use super::args::{Backend, ModelArg, TextArg};
use super::exit::CliError;

/// A library error as the command line reports it: input errors name their flag.
pub(super) fn to_cli(e: ModelError) -> CliError {
    if !e.is_input_error() {
        return CliError::runtime(e.to_string());
    }
    match e {
        ModelError::Input { arg, detail } if arg.starts_with("--") => CliError::input(arg, detail),
        // Ids come from the text.
        ModelError::Input { detail, .. } => CliError::input("--text", detail),
        ModelError::Attention(a) => CliError::from(a),
        other => CliError::input("--model", other.to_string()),
    }
}

pub(super) fn load(arg: &ModelArg) -> Result<Model, CliError> {
    let path = resolve_model_path(&arg.model).map_err(to_cli)?;
    Model::load(&path).map_err(to_cli)
}

/// Tokenizes and checks the length against the model's positions.
pub(super) fn tokens(model: &Model, text: &TextArg) -> Result<Vec<Token>, CliError> {
    let tokens = model.tokenize(&text.text).map_err(to_cli)?;
    let max = model.info().max_positions;
    if tokens.len() > max {
        return Err(CliError::input(
            "--text",
            format!("{} tokens exceed the model's {max} positions", tokens.len()),
        ));
    }
    Ok(tokens)
}

pub(super) fn gpu() -> Result<GpuContext, CliError> {
    GpuContext::new().map_err(|e| CliError::runtime(e.to_string()))
}

/// Every layer's and head's attention probabilities `(layers, heads, L, L)` of `text`,
/// with its tokens (for `heatmap --model`).
pub(super) fn attention_of(
    model: &ModelArg,
    text: &TextArg,
    backend: Backend,
) -> Result<(Array4<f32>, Vec<Token>), CliError> {
    let model = load(model)?;
    let tokens = tokens(&model, text)?;
    let ids: Vec<u32> = tokens.iter().map(|t| t.id).collect();
    let probs = forward(&model, &ids, true, backend)?
        .attention
        .ok_or_else(|| CliError::runtime("the forward pass returned no attention probabilities"))?;
    Ok((probs, tokens))
}

pub(super) fn forward(
    model: &Model,
    ids: &[u32],
    attention: bool,
    backend: Backend,
) -> Result<ForwardOutput, CliError> {
    match backend {
        Backend::Cpu => model.forward_cpu(ids, attention).map_err(to_cli),
        Backend::Gpu => {
            let ctx = gpu()?;
            let weights = model.upload(&ctx).map_err(to_cli)?;
            pollster::block_on(weights.forward(&ctx, ids, attention)).map_err(to_cli)
        }
    }
}
