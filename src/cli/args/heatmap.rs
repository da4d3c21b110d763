//! `wgpu-attention heatmap`'s flags.

use std::path::PathBuf;

use super::common::Backend;

/// `--order`: how the grid lays out its heads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GridOrderArg {
    /// Layer by layer, head by head.
    Layer,
    /// By increasing mean entropy, across layers.
    Entropy,
    /// Similar heads side by side, by Jensen-Shannon distance.
    Similarity,
}

/// Draws attention weights as in the lecture: queries on rows, keys on columns, darker is
/// more attention, masked cells (weight exactly 0) black and marked −∞.
///
/// The weights tensor has rank 2 (Lq, Lk), 3 (heads, Lq, Lk) or 4 (layers or batches,
/// heads, Lq, Lk); --layer and --head pick one matrix, --grid draws every head of the
/// chosen layer, or every layer × head when no layer is chosen. The output format
/// follows the extension of --out: .svg (text stays text) or .png.
///
/// --order lays the grid's heads out by layer (the default), by increasing mean entropy
/// (across layers), or by similarity (the head of lowest entropy first, then each time
/// the nearest head not yet drawn, by the mean Jensen-Shannon distance of `model heads`);
/// every thumbnail keeps its L H caption. --annotate prints each head's entropy in nats
/// under it, and with --order similarity its nearest head and their distance:
///   wgpu-attention heatmap --model minilm --text "The cat sat on the mat" --grid --order similarity --annotate --out heads.svg
///
/// The weights come from a .npy file (--weights) or from a model run on a text (--model
/// and --text: every layer and head of the model's attention, the tokens as labels).
///
/// --diff B.npy draws --weights minus B instead (both of the same shape, both attention
/// weights, the same --layer/--head/--grid picks from each): white is 0, red where the
/// first is larger, blue where the second is, on a symmetric scale of ±max |A − B| that
/// the legend and the title state. For two prompts of one token length, or one prompt
/// through both backends:
///   wgpu-attention model attention --model minilm --text "I love AI !" --backend cpu --out cpu.npy
///   wgpu-attention model attention --model minilm --text "I love AI !" --backend gpu --out gpu.npy
///   wgpu-attention heatmap --weights gpu.npy --diff cpu.npy --layer 0 --head 0 --values --out diff.svg
///
/// Tokens are labelled as people read them: a byte-level token's bytes decoded (a leading
/// space shown as ␣, a newline as ↵), a character split over several tokens named once,
/// on its first token, the rest marked ⋯, a WordPiece continuation with its ##.
/// --words draws whole words instead: attention to a word is the sum over its pieces,
/// attention from a word the mean over its pieces (so rows still sum to 1, and a cell is
/// masked only where no piece may look). A word is a whitespace-delimited run of the text
/// (punctuation belongs to the word it touches); special tokens are words of their own.
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["weights", "model"])))]
pub struct HeatmapArgs {
    /// The attention weights: float .npy of rank 2 to 4 whose rows are probabilities.
    #[arg(long, value_name = "W.npy")]
    pub weights: Option<PathBuf>,
    /// Draw --weights minus these weights (same shape) on a diverging scale centred on 0.
    #[arg(
        long,
        value_name = "B.npy",
        requires = "weights",
        conflicts_with = "model"
    )]
    pub diff: Option<PathBuf>,
    /// Draw a model's own attention instead: a model directory, a .gguf file, or
    /// `minilm` / `smollm2` (fetched by scripts/fetch-models.sh). Needs --text.
    #[arg(long, value_name = "PATH", requires = "text", conflicts_with_all = ["tokens", "labels", "query_labels"])]
    pub model: Option<String>,
    /// The sentence to run the model on.
    #[arg(
        long,
        value_name = "TEXT",
        requires = "model",
        allow_hyphen_values = true
    )]
    pub text: Option<String>,
    /// Where the model runs: the GPU kernels or the fast f32 CPU path.
    #[arg(long, value_enum, default_value_t = Backend::Gpu, requires = "model")]
    pub backend: Backend,
    /// Token labels for the keys (and for the queries when Lq = Lk): the JSON list
    /// `model attention --tokens-out` writes (which also gives --words its words), or a
    /// JSON list of strings.
    #[arg(long, value_name = "T.json", conflicts_with = "labels")]
    pub tokens: Option<PathBuf>,
    /// Token labels for the keys (and for the queries when Lq = Lk), comma-separated.
    #[arg(long, value_name = "a,b,c")]
    pub labels: Option<String>,
    /// Labels for the queries when they differ from the keys' (cross-attention, decoding),
    /// comma-separated.
    #[arg(long, value_name = "a,b,c")]
    pub query_labels: Option<String>,
    /// Which layer (or batch) of a rank-4 tensor.
    #[arg(long, value_name = "L")]
    pub layer: Option<usize>,
    /// Which head of a rank-3 or rank-4 tensor.
    #[arg(long, value_name = "H", conflicts_with = "grid")]
    pub head: Option<usize>,
    /// Every head of the layer (or every layer × head) as small multiples.
    #[arg(long)]
    pub grid: bool,
    /// Heads that share one key/value head (grouped-query attention) are boxed together in
    /// the grid, this many at a time.
    #[arg(long, value_name = "N", requires = "grid", default_value_t = 1)]
    pub group: usize,
    /// The order of the grid's heads: layer by layer, by increasing entropy, or similar
    /// heads side by side (default: layer). E.g. `--grid --order entropy --annotate`.
    #[arg(long, value_enum, value_name = "ORDER")]
    pub order: Option<GridOrderArg>,
    /// Print each head's entropy (nats) under its thumbnail in the grid, and with
    /// --order similarity its nearest head and their distance. E.g. `--grid --order
    /// similarity --annotate`.
    #[arg(long)]
    pub annotate: bool,
    /// Print each cell's weight.
    #[arg(long, conflicts_with = "grid")]
    pub values: bool,
    /// One row and column per word instead of per token: queries averaged over a word's
    /// pieces, keys summed (needs --model, or --tokens from `model attention
    /// --tokens-out`).
    #[arg(long, conflicts_with_all = ["labels", "query_labels"])]
    pub words: bool,
    /// The figure's title; by default it names the layer, the head and the sentence.
    #[arg(long)]
    pub title: Option<String>,
    /// Side of a cell in pixels (default 48 with --values, 64 for --values of differences
    /// under 0.05, 32 without, 6 in a grid).
    #[arg(long, value_name = "PX")]
    pub cell: Option<f64>,
    /// Where to write the figure: F.svg or F.png (`-`: SVG to standard output).
    #[arg(long, value_name = "F.svg|F.png|-")]
    pub out: PathBuf,
}
