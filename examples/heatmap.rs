//! Draws the lecture's causal heatmap of "I love AI !": attention weights computed on the
//! GPU from a small fixed embedding, written as an SVG with the tokens on both axes, the
//! weights in the cells and the masked cells black with −∞.
//!
//!     cargo run --release --example heatmap -- [OUT.svg]

use ndarray::{s, Array4, Ix2};
use wgpu_attention::viz::Heatmap;
use wgpu_attention::{attention, AttentionOptions, GpuContext};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "heatmap.svg".to_string());
    let tokens = ["I", "love", "AI", "!"];
    let d = 4;
    // A toy embedding: one fixed vector per token, used as query, key and value.
    let table = [
        [0.9, 0.1, 0.0, 0.3],
        [0.2, 1.0, 0.4, 0.0],
        [0.7, 0.6, 0.9, 0.1],
        [0.1, 0.2, 0.3, 0.8],
    ];
    let x = Array4::from_shape_fn((1, 1, tokens.len(), d), |(_, _, i, c)| table[i][c] * 2.0);
    let ctx = GpuContext::new()?;
    let opts = AttentionOptions {
        causal: true,
        return_weights: true,
        ..Default::default()
    };
    let result = attention(&ctx, x.view(), x.view(), x.view(), &opts)?;
    let weights = result.weights.expect("asked for weights");
    let matrix = weights
        .slice(s![0, 0, .., ..])
        .into_dimensionality::<Ix2>()?;

    let mut figure = Heatmap::new(matrix);
    figure.row_labels = tokens.iter().map(|t| t.to_string()).collect();
    figure.col_labels = figure.row_labels.clone();
    figure.title = "masked self-attention · “I love AI !”".to_string();
    figure.values = true;
    figure.cell = 56.0;
    std::fs::write(&out, figure.svg())?;
    println!("wrote {out}");
    Ok(())
}
