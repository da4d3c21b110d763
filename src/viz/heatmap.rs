//! One attention matrix as an SVG figure.

use std::fmt::Write;

use ndarray::ArrayView2;

use super::colormap::{ColorScale, DivergingScale, MASKED_RGB};
use super::svg::{escape, text_width, FONT_FAMILY};

const LABEL_FONT: f64 = 14.0;
const VALUE_FONT: f64 = 11.0;
const TITLE_FONT: f64 = 16.0;
const PAD: f64 = 12.0;
const LEGEND_GAP: f64 = 28.0;
const LEGEND_BAR: f64 = 18.0;
const LEGEND_STEPS: usize = 64;

/// Where one cell lies in the figure, in SVG user units (pixels at scale 1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CellRect {
    pub x: f64,
    pub y: f64,
    pub size: f64,
}

/// A matrix of attention weights with its labels: rows are queries, columns keys.
#[derive(Debug, Clone)]
pub struct Heatmap<'a> {
    pub weights: ArrayView2<'a, f32>,
    /// One per row (query); empty means row numbers.
    pub row_labels: Vec<String>,
    /// One per column (key); empty means column numbers.
    pub col_labels: Vec<String>,
    pub title: String,
    /// Print each cell's weight (two decimals), and −∞ on masked cells.
    pub values: bool,
    /// Side of a cell in pixels.
    pub cell: f64,
    /// Draw signed differences instead of weights: the diverging scale spans ± this
    /// range (white at 0, red positive, blue negative), and no cell is masked. `None`
    /// draws probabilities.
    pub difference: Option<f32>,
}

impl<'a> Heatmap<'a> {
    /// A figure of `weights` with numbered rows and columns and no title.
    pub fn new(weights: ArrayView2<'a, f32>) -> Self {
        Self {
            weights,
            row_labels: Vec::new(),
            col_labels: Vec::new(),
            title: String::new(),
            values: false,
            cell: 36.0,
            difference: None,
        }
    }

    fn labels(given: &[String], n: usize) -> Vec<String> {
        if given.is_empty() {
            (0..n).map(|i| i.to_string()).collect()
        } else {
            given.to_vec()
        }
    }

    fn row_names(&self) -> Vec<String> {
        Self::labels(&self.row_labels, self.weights.nrows())
    }

    fn col_names(&self) -> Vec<String> {
        Self::labels(&self.col_labels, self.weights.ncols())
    }

    /// Left edge of the cells: room for the row labels and the "queries" caption.
    /// (Measured over every label, drawn or not, so that the grid does not move.)
    fn grid_x(&self) -> f64 {
        let widest = self
            .row_names()
            .iter()
            .map(|l| text_width(l, LABEL_FONT))
            .fold(0.0, f64::max);
        PAD + LABEL_FONT * 1.5 + widest + 8.0
    }

    /// Top edge of the cells: room for the title, the "keys" caption and the column
    /// labels, which are drawn turned 45 degrees.
    fn grid_y(&self) -> f64 {
        let widest = self
            .col_names()
            .iter()
            .map(|l| text_width(l, LABEL_FONT))
            .fold(0.0, f64::max);
        PAD + TITLE_FONT * 1.6 + LABEL_FONT * 1.4 + widest * std::f64::consts::FRAC_1_SQRT_2 + 12.0
    }

    /// The rectangle of cell (`row`, `col`).
    pub fn cell_rect(&self, row: usize, col: usize) -> CellRect {
        CellRect {
            x: self.grid_x() + col as f64 * self.cell,
            y: self.grid_y() + row as f64 * self.cell,
            size: self.cell,
        }
    }

    /// Width and height of the whole figure.
    pub fn size(&self) -> (f64, f64) {
        let grid_w = self.weights.ncols() as f64 * self.cell;
        let grid_h = self.weights.nrows() as f64 * self.cell;
        let legend_w = LEGEND_GAP + LEGEND_BAR + 8.0 + legend_text_width(self.difference);
        let title_w = text_width(&self.title, TITLE_FONT) + 2.0 * PAD;
        let width = (self.grid_x() + grid_w + legend_w + PAD).max(title_w);
        let height = self.grid_y() + grid_h.max(legend_height(grid_h) + 40.0) + PAD;
        (width.ceil(), height.ceil())
    }

    /// The figure as a standalone SVG document.
    pub fn svg(&self) -> String {
        let scale = ColorScale::new();
        let diverging = DivergingScale::new();
        let (width, height) = self.size();
        let (gx, gy) = (self.grid_x(), self.grid_y());
        let (rows, cols) = self.weights.dim();
        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="{FONT_FAMILY}">"#
        );
        let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
        if !self.title.is_empty() {
            let _ = writeln!(
                s,
                r#"<text x="{PAD}" y="{:.1}" font-size="{TITLE_FONT}" font-weight="bold">{}</text>"#,
                PAD + TITLE_FONT,
                escape(&self.title)
            );
        }
        // Axis captions: keys across the top, queries down the left.
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{:.1}" font-size="{LABEL_FONT}" fill="#555">keys →</text>"##,
            gx,
            PAD + TITLE_FONT * 1.6 + LABEL_FONT
        );
        let _ = writeln!(
            s,
            r##"<text transform="translate({:.1},{:.1}) rotate(90)" font-size="{LABEL_FONT}" fill="#555">queries →</text>"##,
            PAD + 2.0,
            gy
        );
        let (row_names, col_names) = (self.row_names(), self.col_names());
        // Cells smaller than a label (a long text, a pooled map) label every n-th row and
        // column, so labels never overlap; every cell's tooltip still names both.
        let row_step = label_step(LABEL_FONT * 1.15, self.cell);
        let col_step = label_step(LABEL_FONT * 1.15 * std::f64::consts::SQRT_2, self.cell);
        for (j, label) in col_names.iter().enumerate().step_by(col_step) {
            let x = gx + (j as f64 + 0.5) * self.cell;
            let _ = writeln!(
                s,
                r#"<text transform="translate({x:.1},{:.1}) rotate(-45)" font-size="{LABEL_FONT}">{}</text>"#,
                gy - 6.0,
                escape(label)
            );
        }
        for (i, label) in row_names.iter().enumerate().step_by(row_step) {
            let y = gy + (i as f64 + 0.5) * self.cell + LABEL_FONT * 0.35;
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{y:.1}" font-size="{LABEL_FONT}" text-anchor="end">{}</text>"#,
                gx - 8.0,
                escape(label)
            );
        }
        for (i, row_name) in row_names.iter().enumerate().take(rows) {
            for (j, col_name) in col_names.iter().enumerate().take(cols) {
                let w = self.weights[[i, j]];
                let rgb = cell_rgb(&scale, &diverging, self.difference, w);
                let masked = w == 0.0 && self.difference.is_none();
                let r = self.cell_rect(i, j);
                let _ = writeln!(
                    s,
                    r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{}"><title>{} → {}: {}</title></rect>"#,
                    r.x,
                    r.y,
                    r.size,
                    r.size,
                    ColorScale::hex(rgb),
                    escape(row_name),
                    escape(col_name),
                    if masked {
                        "masked (−∞)".to_string()
                    } else if self.difference.is_some() {
                        signed(format!("{w:+.4e}"))
                    } else {
                        format!("{w:.4}")
                    }
                );
                if self.values {
                    let text = if masked {
                        "−∞".to_string()
                    } else if let Some(range) = self.difference {
                        difference_text(w, range)
                    } else {
                        format!("{w:.2}")
                    };
                    let fill = if ColorScale::wants_light_text(rgb) {
                        "white"
                    } else {
                        "black"
                    };
                    let _ = writeln!(
                        s,
                        r#"<text x="{:.1}" y="{:.1}" font-size="{VALUE_FONT}" text-anchor="middle" fill="{fill}">{text}</text>"#,
                        r.x + r.size / 2.0,
                        r.y + r.size * 0.72
                    );
                }
            }
        }
        let (lx, lh) = (
            gx + cols as f64 * self.cell + LEGEND_GAP,
            rows as f64 * self.cell,
        );
        match self.difference {
            Some(range) => diverging_legend(&mut s, &diverging, range, lx, gy, lh),
            None => legend(&mut s, &scale, lx, gy, lh),
        }
        s.push_str("</svg>\n");
        s
    }
}

/// The colour of a cell holding `w`: on the sequential scale (0 masked), or on the
/// diverging one when `difference` gives its range.
pub(crate) fn cell_rgb(
    scale: &ColorScale,
    diverging: &DivergingScale,
    difference: Option<f32>,
    w: f32,
) -> [u8; 3] {
    match difference {
        Some(range) => diverging.rgb(w / range),
        None if w == 0.0 => MASKED_RGB,
        None => scale.rgb(w),
    }
}

/// A signed number as printed: a true minus sign.
fn signed(s: String) -> String {
    s.replace('-', "−")
}

/// A difference as printed in its cell: two decimals when the range allows, else two
/// significant digits.
fn difference_text(w: f32, range: f32) -> String {
    if w == 0.0 {
        "0".to_string()
    } else if range >= 0.05 {
        signed(format!("{w:+.2}"))
    } else {
        signed(format!("{w:+.1e}"))
    }
}

/// A tick of the diverging legend.
fn tick_text(v: f64, range: f32) -> String {
    if v == 0.0 {
        "0".to_string()
    } else if range >= 0.05 {
        signed(format!("{v:+.3}"))
    } else {
        signed(format!("{v:+.2e}"))
    }
}

/// The widest text beside the legend's bar.
fn legend_text_width(difference: Option<f32>) -> f64 {
    let font = VALUE_FONT + 1.0;
    match difference {
        Some(range) => [
            text_width("A − B", font),
            text_width(&tick_text(-(range as f64), range), font),
        ]
        .into_iter()
        .fold(0.0, f64::max),
        None => text_width("−∞ masked", font),
    }
}

fn legend_height(grid_h: f64) -> f64 {
    grid_h.clamp(120.0, 260.0)
}

/// The bar both legends draw: LEGEND_STEPS cells from the top, each the colour at the
/// fraction of the bar's height its centre lies at (0 at the top, 1 at the bottom), and
/// an outline. Returns the bar's height.
fn legend_bar(
    s: &mut String,
    x: f64,
    y: f64,
    grid_h: f64,
    colour_at: impl Fn(f32) -> [u8; 3],
) -> f64 {
    let h = legend_height(grid_h);
    let step = h / LEGEND_STEPS as f64;
    for n in 0..LEGEND_STEPS {
        let f = (n as f32 + 0.5) / LEGEND_STEPS as f32;
        let _ = writeln!(
            s,
            r#"<rect x="{x:.1}" y="{:.2}" width="{LEGEND_BAR}" height="{:.2}" fill="{}"/>"#,
            y + n as f64 * step,
            step + 0.3,
            ColorScale::hex(colour_at(f))
        );
    }
    let _ = writeln!(
        s,
        r##"<rect x="{x:.1}" y="{y:.1}" width="{LEGEND_BAR}" height="{h:.1}" fill="none" stroke="#888"/>"##
    );
    h
}

/// A vertical colour bar from 1 (top) to 0, ticks at quarters, and the masked swatch.
pub(crate) fn legend(s: &mut String, scale: &ColorScale, x: f64, y: f64, grid_h: f64) {
    let h = legend_bar(s, x, y, grid_h, |f| scale.rgb(1.0 - f));
    for q in 0..=4 {
        let v = 1.0 - q as f64 / 4.0;
        let ty = y + q as f64 / 4.0 * h + VALUE_FONT * 0.35;
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{ty:.1}" font-size="{VALUE_FONT}">{v:.2}</text>"#,
            x + LEGEND_BAR + 5.0
        );
    }
    let my = y + h + 14.0;
    let _ = writeln!(
        s,
        r#"<rect x="{x:.1}" y="{my:.1}" width="{LEGEND_BAR}" height="{LEGEND_BAR}" fill="black"/>"#
    );
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" font-size="{VALUE_FONT}">−∞ masked</text>"#,
        x + LEGEND_BAR + 5.0,
        my + LEGEND_BAR * 0.7
    );
}

/// A vertical colour bar of the diverging scale from +`range` (top) through 0 to
/// −`range`, ticks at quarters, captioned "A − B".
pub(crate) fn diverging_legend(
    s: &mut String,
    scale: &DivergingScale,
    range: f32,
    x: f64,
    y: f64,
    grid_h: f64,
) {
    let h = legend_bar(s, x, y, grid_h, |f| scale.rgb(1.0 - 2.0 * f));
    for q in 0..=4 {
        let v = (1.0 - q as f64 / 2.0) * range as f64;
        let ty = y + q as f64 / 4.0 * h + VALUE_FONT * 0.35;
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{ty:.1}" font-size="{VALUE_FONT}">{}</text>"#,
            x + LEGEND_BAR + 5.0,
            tick_text(v, range)
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{x:.1}" y="{:.1}" font-size="{VALUE_FONT}">A − B</text>"#,
        y + h + 14.0 + LEGEND_BAR * 0.7
    );
}

/// Every how many cells of side `cell` a label needing `room` pixels fits without
/// overlapping the next.
fn label_step(room: f64, cell: f64) -> usize {
    if cell >= room || cell <= 0.0 {
        1
    } else {
        (room / cell).ceil() as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;

    #[test]
    fn the_svg_carries_labels_values_masked_cells_and_escaped_text() {
        let w = array![[1.0f32, 0.0], [0.4, 0.6]];
        let mut h = Heatmap::new(w.view());
        h.row_labels = vec!["I".into(), "<love>".into()];
        h.col_labels = vec!["I".into(), "<love>".into()];
        h.title = "causal & small".into();
        h.values = true;
        let svg = h.svg();
        assert!(svg.contains("&lt;love&gt;") && !svg.contains("<love>"));
        assert!(svg.contains("causal &amp; small"));
        assert!(svg.contains(">0.40<") && svg.contains(">0.60<") && svg.contains(">1.00<"));
        assert!(
            svg.contains(r##"fill="#000000""##),
            "the masked cell is black"
        );
        assert!(svg.contains(">−∞<"));
    }

    #[test]
    fn cells_do_not_overlap_the_labels_and_fit_in_the_figure() {
        let w = ndarray::Array2::<f32>::from_elem((3, 5), 0.2);
        let mut h = Heatmap::new(w.view());
        h.row_labels = vec!["고양이가".into(), "b".into(), "c".into()];
        let (width, height) = h.size();
        let last = h.cell_rect(2, 4);
        assert!(last.x + last.size < width && last.y + last.size < height);
        assert!(h.cell_rect(0, 0).x > super::text_width("고양이가", LABEL_FONT));
    }

    #[test]
    fn small_cells_label_every_nth_row_and_column_without_overlap() {
        let n = 64;
        let w = ndarray::Array2::<f32>::from_elem((n, n), 1.0 / n as f32);
        let mut h = Heatmap::new(w.view());
        h.row_labels = (0..n).map(|i| format!("r{i}")).collect();
        h.col_labels = (0..n).map(|i| format!("c{i}")).collect();
        h.cell = 4.0;
        let svg = h.svg();
        let rows = super::label_step(LABEL_FONT * 1.15, 4.0);
        assert!(rows > 1);
        assert!(svg.contains(">r0<") && svg.contains(&format!(">r{rows}<")));
        assert!(
            !svg.contains(">r1<"),
            "row 1 is not labelled at 4 px a cell"
        );
        // Every cell still names its row and column in its tooltip.
        assert!(svg.contains("<title>r1 → c1:"));
        // Cells as large as a label label every row.
        h.cell = 32.0;
        assert!(h.svg().contains(">r1<"));
    }
}
