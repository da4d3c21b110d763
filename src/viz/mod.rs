//! Pictures of attention weights, drawn as in the lecture the project grew from: queries on
//! rows, keys on columns, darker is more attention, the weight printed in each cell, and
//! masked cells (weight exactly 0) black and marked −∞.
//!
//! [`Heatmap::svg`] writes one matrix as SVG with real text (any script renders, and the
//! figure scales for papers); [`Grid::svg`] writes many matrices as small multiples (every
//! head of a layer, or every layer × head: the model view). Both are plain strings, so the
//! same code serves the command line (which also rasterises them to PNG) and a web page.
//! [`word_attention`] aggregates token-level weights to whole words (the word view).
//! [`attention_rollout`] follows attention through every layer (Abnar & Zuidema 2020).
//! [`head_stats`] sums up every head: entropy, previous- and first-token attention, and
//! its nearest other head.
//! [`ColorScale`] maps a weight to a colour and a colour back to a weight, which is how
//! tests read a rendered picture back; [`DivergingScale`] does the same for signed
//! differences (`heatmap --diff`), white at 0.

mod colormap;
mod grid;
mod heads;
mod heatmap;
mod layers;
mod probability;
mod rollout;
mod svg;
mod words;

pub use colormap::{ColorScale, DivergingScale, MASKED_RGB};
pub use grid::{grid_order, Grid, GridOrder};
pub use heads::{head_stats, HeadStat, HeadStats, NearestHead};
pub use heatmap::{CellRect, Heatmap};
pub use probability::check_probability_rows;
pub use rollout::{attention_rollout, RolloutOptions};
pub use words::word_attention;
