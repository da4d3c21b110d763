//! candle (CPU) and wgpu-attention (the default adapter) on the same MiniLM safetensors,
//! the same SmolLM2 GGUF and the same token ids, in one run. Each library and model runs
//! in a process of its own (the program starts itself with `--side`), so load times and
//! peak memory are each one's own; rounds alternate which library goes first. Prints one
//! JSON line per side and model on stdout, progress and the table of ratios on stderr.
//!
//! Usage: peer-candle [--iters N (3)] [--gen-tokens N (32)] [--rounds N (1)]

mod candle_side;
mod inputs;
mod measure;
mod ours;
mod report;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use measure::{BertRun, LlamaRun};

const USAGE: &str = "usage: peer-candle [--iters N (3)] [--gen-tokens N (32)] [--rounds N (1)]";

struct Args {
    iters: usize,
    gen_tokens: usize,
    rounds: usize,
    /// In a child: (library, model, inputs file).
    side: Option<(String, String, PathBuf)>,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        iters: 3,
        gen_tokens: 32,
        rounds: 1,
        side: None,
    };
    let mut it = std::env::args().skip(1);
    let number = |flag: &str, v: Option<String>| -> Result<usize, String> {
        v.and_then(|v| v.parse().ok())
            .filter(|&n: &usize| n >= 1)
            .ok_or_else(|| format!("{flag} needs a whole number of at least 1\n{USAGE}"))
    };
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--iters" => a.iters = number("--iters", it.next())?,
            "--gen-tokens" => a.gen_tokens = number("--gen-tokens", it.next())?,
            "--rounds" => a.rounds = number("--rounds", it.next())?,
            "--side" => {
                let (lib, model, file) = (it.next(), it.next(), it.next());
                match (lib, model, file) {
                    (Some(l), Some(m), Some(f)) => a.side = Some((l, m, PathBuf::from(f))),
                    _ => return Err(format!("--side needs LIBRARY MODEL INPUTS\n{USAGE}")),
                }
            }
            _ => return Err(format!("unknown argument {flag}\n{USAGE}")),
        }
    }
    Ok(a)
}

/// A child: runs one model on one library and prints its measurements as JSON.
fn child(lib: &str, model: &str, file: &Path) -> Result<(), String> {
    let inputs = inputs::read(file)?;
    let json = match (lib, model) {
        ("candle", "bert") => serde_json::to_string(&candle_side::bert(&inputs)?),
        ("candle", "llama") => serde_json::to_string(&candle_side::llama(&inputs)?),
        ("ours", "bert") => serde_json::to_string(&ours::bert(&inputs)?),
        ("ours", "llama") => serde_json::to_string(&ours::llama(&inputs)?),
        _ => return Err(format!("no side {lib} {model}")),
    };
    println!("{}", json.map_err(|e| e.to_string())?);
    Ok(())
}

fn run_child(lib: &str, model: &str, file: &Path) -> Result<String, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = Command::new(exe)
        .args(["--side", lib, model])
        .arg(file)
        .output()
        .map_err(|e| format!("starting the {lib} {model} child: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "the {lib} {model} child failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .last()
        .map(str::to_owned)
        .ok_or_else(|| format!("the {lib} {model} child printed nothing"))
}

/// The runs of one library over the rounds: the one with the median forward (BERT) or
/// generation time (llama) is reported.
#[derive(Default)]
struct Runs {
    bert: Vec<BertRun>,
    llama: Vec<LlamaRun>,
}

fn parent(args: &Args) -> Result<(), String> {
    eprintln!("making the inputs with wgpu-attention's tokenizers");
    let inputs = inputs::make(args.gen_tokens, args.iters)?;
    let dir = std::env::temp_dir().join(format!("peer-candle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let file = dir.join("inputs.json");
    let written = serde_json::to_string(&inputs)
        .map_err(|e| e.to_string())
        .and_then(|j| std::fs::write(&file, j).map_err(|e| e.to_string()));
    let result = written.and_then(|()| rounds(args, &file));
    let _ = std::fs::remove_dir_all(&dir);
    let (ours, candle) = result?;
    let (_, adapter) = ours::adapter()?;
    report::print(&adapter, &inputs, &ours, &candle);
    Ok(())
}

fn rounds(args: &Args, file: &Path) -> Result<(Runs, Runs), String> {
    let (mut ours, mut candle) = (Runs::default(), Runs::default());
    for round in 0..args.rounds {
        let order = if round % 2 == 0 {
            ["candle", "ours"]
        } else {
            ["ours", "candle"]
        };
        for model in ["bert", "llama"] {
            for lib in order {
                eprintln!("round {} of {}: {lib} {model}", round + 1, args.rounds);
                let line = run_child(lib, model, file)?;
                println!("{{\"library\": \"{lib}\", \"model\": \"{model}\", \"result\": {line}}}");
                let runs = if lib == "ours" {
                    &mut ours
                } else {
                    &mut candle
                };
                let parse = |e: serde_json::Error| format!("{lib} {model}: {e}");
                match model {
                    "bert" => runs.bert.push(serde_json::from_str(&line).map_err(parse)?),
                    _ => runs.llama.push(serde_json::from_str(&line).map_err(parse)?),
                }
            }
        }
    }
    Ok((ours, candle))
}

fn main() -> ExitCode {
    let outcome = parse_args().and_then(|a| match &a.side {
        Some((lib, model, file)) => child(lib, model, file),
        None => parent(&a),
    });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("peer-candle: {e}");
            ExitCode::FAILURE
        }
    }
}
