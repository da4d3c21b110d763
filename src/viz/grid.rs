//! Many attention matrices as small multiples: every head of a layer, or every layer ×
//! head of a model (the "model view").

use std::fmt::Write;

use ndarray::ArrayView2;

use super::colormap::{ColorScale, MASKED_RGB};
use super::heatmap::{legend, CellRect};
use super::svg::{escape, FONT_FAMILY};

const PAD: f64 = 12.0;
const TITLE_FONT: f64 = 16.0;
const THUMB_FONT: f64 = 11.0;
const GAP: f64 = 10.0;

/// Thumbnails laid out in rows of `columns`, each with a short caption.
#[derive(Debug, Clone)]
pub struct Grid<'a> {
    pub title: String,
    /// (caption, matrix) in reading order.
    pub panels: Vec<(String, ArrayView2<'a, f32>)>,
    /// Panels per row (for the model view: heads per layer).
    pub columns: usize,
    /// Heads that share one key/value head (grouped-query attention) are boxed together in
    /// runs of this many along a row; 1 draws no boxes.
    pub group: usize,
    /// Side of one cell of a thumbnail in pixels.
    pub cell: f64,
}

impl<'a> Grid<'a> {
    fn thumb_size(&self) -> (f64, f64) {
        let rows = self
            .panels
            .iter()
            .map(|(_, m)| m.nrows())
            .max()
            .unwrap_or(0);
        let cols = self
            .panels
            .iter()
            .map(|(_, m)| m.ncols())
            .max()
            .unwrap_or(0);
        (cols as f64 * self.cell, rows as f64 * self.cell)
    }

    fn origin(&self, panel: usize) -> (f64, f64) {
        let (tw, th) = self.thumb_size();
        let columns = self.columns.max(1);
        let (r, c) = (panel / columns, panel % columns);
        let group = self.group.max(1);
        // Extra space between groups so the boxes do not touch.
        let x = PAD + c as f64 * (tw + GAP) + (c / group) as f64 * GAP;
        let y =
            PAD + TITLE_FONT * 1.8 + r as f64 * (th + GAP + THUMB_FONT * 1.6) + THUMB_FONT * 1.4;
        (x, y)
    }

    /// The rectangle of cell (`row`, `col`) of panel `panel`.
    pub fn cell_rect(&self, panel: usize, row: usize, col: usize) -> CellRect {
        let (x, y) = self.origin(panel);
        CellRect {
            x: x + col as f64 * self.cell,
            y: y + row as f64 * self.cell,
            size: self.cell,
        }
    }

    /// Width and height of the whole figure.
    pub fn size(&self) -> (f64, f64) {
        let (tw, th) = self.thumb_size();
        let columns = self.columns.max(1).min(self.panels.len().max(1));
        let groups = columns.div_ceil(self.group.max(1));
        let rows = self.panels.len().div_ceil(self.columns.max(1));
        let width = PAD * 2.0 + columns as f64 * (tw + GAP) + groups as f64 * GAP + 110.0;
        let height =
            PAD * 2.0 + TITLE_FONT * 1.8 + (rows as f64 * (th + GAP + THUMB_FONT * 1.6)).max(200.0);
        (width.ceil(), height.ceil())
    }

    /// The figure as a standalone SVG document.
    pub fn svg(&self) -> String {
        let scale = ColorScale::new();
        let (width, height) = self.size();
        let (tw, th) = self.thumb_size();
        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="{FONT_FAMILY}">"#
        );
        let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
        let _ = writeln!(
            s,
            r#"<text x="{PAD}" y="{:.1}" font-size="{TITLE_FONT}" font-weight="bold">{}</text>"#,
            PAD + TITLE_FONT,
            escape(&self.title)
        );
        let group = self.group.max(1);
        for (p, (caption, m)) in self.panels.iter().enumerate() {
            let (x, y) = self.origin(p);
            if group > 1 && (p % self.columns.max(1)).is_multiple_of(group) {
                let run = group.min(self.columns.max(1) - p % self.columns.max(1));
                let w = run as f64 * (tw + GAP) - GAP;
                let _ = writeln!(
                    s,
                    r##"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="none" stroke="#c66" stroke-dasharray="3,2"/>"##,
                    x - 4.0,
                    y - THUMB_FONT * 1.4 - 2.0,
                    w + 8.0,
                    th + THUMB_FONT * 1.4 + 6.0
                );
            }
            let _ = writeln!(
                s,
                r#"<text x="{x:.1}" y="{:.1}" font-size="{THUMB_FONT}">{}</text>"#,
                y - 4.0,
                escape(caption)
            );
            for ((i, j), &w) in m.indexed_iter() {
                let rgb = if w == 0.0 { MASKED_RGB } else { scale.rgb(w) };
                let r = self.cell_rect(p, i, j);
                let _ = writeln!(
                    s,
                    r#"<rect x="{:.2}" y="{:.2}" width="{:.2}" height="{:.2}" fill="{}"/>"#,
                    r.x,
                    r.y,
                    r.size,
                    r.size,
                    ColorScale::hex(rgb)
                );
            }
        }
        legend(
            &mut s,
            &scale,
            width - 100.0,
            PAD + TITLE_FONT * 1.8 + THUMB_FONT * 1.4,
            160.0,
        );
        s.push_str("</svg>\n");
        s
    }
}
