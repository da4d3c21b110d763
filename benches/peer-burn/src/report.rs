//! One shape's results: a JSON line, and a row of the final table.

use crate::inputs::Shape;

/// Times of one library on one shape, in milliseconds.
#[derive(Debug, Clone, Default)]
pub struct Side {
    pub first_call_ms: f64,
    pub median_ms: f64,
    pub min_ms: f64,
    pub gflops: f64,
    /// Largest |difference| from the float64 CPU reference, when it was run.
    pub max_diff_vs_reference: Option<f64>,
}

impl Side {
    pub fn from_samples(first_call_ms: f64, mut samples: Vec<f64>, flops: f64) -> Self {
        samples.sort_by(f64::total_cmp);
        let n = samples.len();
        let median_ms = match n {
            0 => f64::NAN,
            _ if n % 2 == 1 => samples[n / 2],
            _ => (samples[n / 2 - 1] + samples[n / 2]) / 2.0,
        };
        Self {
            first_call_ms,
            median_ms,
            min_ms: samples.first().copied().unwrap_or(f64::NAN),
            gflops: flops / (median_ms * 1e6),
            max_diff_vs_reference: None,
        }
    }

    fn json(&self) -> String {
        format!(
            "{{\"median_ms\": {}, \"min_ms\": {}, \"gflops\": {}, \"first_call_ms\": {}, \"max_diff_vs_reference\": {}}}",
            num(self.median_ms),
            num(self.min_ms),
            num(self.gflops),
            num(self.first_call_ms),
            self.max_diff_vs_reference.map_or("null".into(), sci),
        )
    }
}

pub struct Row {
    pub shape: Shape,
    pub iters: usize,
    pub timing: &'static str,
    pub ours_path: String,
    pub ours: Side,
    pub burn: Side,
    pub max_diff_ours_vs_burn: f64,
}

impl Row {
    /// burn's median time over this crate's: above 1, this crate is faster.
    pub fn speedup(&self) -> f64 {
        self.burn.median_ms / self.ours.median_ms
    }

    pub fn json(&self, ours_adapter: &str, burn_adapter: &str) -> String {
        let s = &self.shape;
        format!(
            concat!(
                "{{\"shape\": [{}, {}, {}, {}, {}], \"causal\": {}, \"alignment\": \"bottom-right\", ",
                "\"iters\": {}, \"timing\": \"{}\", ",
                "\"flops\": {}, \"ours_path\": \"{}\", \"ours\": {}, \"burn\": {}, ",
                "\"speedup_ours_vs_burn\": {}, \"max_diff_ours_vs_burn\": {}, ",
                "\"ours_adapter\": {}, \"burn_adapter\": {}, \"burn_version\": \"0.22.1\"}}"
            ),
            s.batch,
            s.heads,
            s.len_q,
            s.len_k,
            s.dim,
            s.causal,
            self.iters,
            self.timing,
            s.flops(),
            self.ours_path,
            self.ours.json(),
            self.burn.json(),
            num(self.speedup()),
            sci(self.max_diff_ours_vs_burn),
            string(ours_adapter),
            string(burn_adapter),
        )
    }
}

/// The readable table, one row per shape.
pub fn table(rows: &[Row]) -> String {
    let mut t = String::from(
        "| B,H,Lq,Lk,D | causal | ours path | ours ms | burn ms | ours GFLOP/s | burn GFLOP/s | speedup (burn ms / ours ms) | first call ours / burn (s) | max |ours-burn| | max |err| ours / burn vs f64 |\n|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let s = &r.shape;
        let reference = match (r.ours.max_diff_vs_reference, r.burn.max_diff_vs_reference) {
            (Some(a), Some(b)) => format!("{} / {}", sci(a), sci(b)),
            _ => "not run".into(),
        };
        t.push_str(&format!(
            "| {},{},{},{},{} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.1} / {:.1} | {} | {} |\n",
            s.batch,
            s.heads,
            s.len_q,
            s.len_k,
            s.dim,
            if s.causal { "yes" } else { "no" },
            r.ours_path,
            r.ours.median_ms,
            r.burn.median_ms,
            r.ours.gflops,
            r.burn.gflops,
            r.speedup(),
            r.ours.first_call_ms / 1e3,
            r.burn.first_call_ms / 1e3,
            sci(r.max_diff_ours_vs_burn),
            reference,
        ));
    }
    t
}

fn num(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.6}")
    } else {
        "null".into()
    }
}

fn sci(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.1e}")
    } else {
        "null".into()
    }
}

fn string(s: &str) -> String {
    let mut out = String::from("\"");
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
