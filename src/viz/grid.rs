//! Many attention matrices as small multiples: every head of a layer, or every layer ×
//! head of a model (the "model view").
//!
//! [`Grid::fit`] sizes the thumbnails to fill a page: it tries every number of columns
//! (a multiple of the grouped-query group, so a group's box never wraps), and keeps the
//! one whose thumbnails come out largest within the page's width and height; the figure's
//! height is then exactly what its rows need, so no band of it stays empty.

use std::fmt::Write;

use ndarray::ArrayView2;

use super::colormap::{ColorScale, DivergingScale};
use super::heads::HeadStats;
use super::heatmap::{cell_rgb, diverging_legend, legend, CellRect};
use super::svg::{escape, text_width, FONT_FAMILY};

const PAD: f64 = 12.0;
const TITLE_FONT: f64 = 16.0;
const THUMB_FONT: f64 = 11.0;
const GAP: f64 = 10.0;
/// Room on the right for the colour legend.
const LEGEND_W: f64 = 110.0;
/// The largest font of the token labels along the first column and the last row.
const LABEL_FONT: f64 = 11.0;
/// Token labels are drawn only when a cell can hold a label this tall.
const MIN_LABEL_FONT: f64 = 6.0;
/// The font of the notes under each thumbnail, and the height of one line of them.
const NOTE_FONT: f64 = 9.0;
const NOTE_LINE: f64 = NOTE_FONT * 1.3;

/// Thumbnails laid out in rows of `columns`, each with a caption.
#[derive(Debug, Clone)]
pub struct Grid<'a> {
    pub title: String,
    /// (caption, matrix) in reading order.
    pub panels: Vec<(String, ArrayView2<'a, f32>)>,
    /// Panels per row (for the model view: heads per layer); see [`Grid::fit`].
    pub columns: usize,
    /// Heads that share one key/value head (grouped-query attention) are boxed together in
    /// runs of this many along a row; 1 draws no boxes.
    pub group: usize,
    /// Side of one cell of a thumbnail in pixels.
    pub cell: f64,
    /// The queries' labels, drawn left of the first column's thumbnails when the cells are
    /// large enough (empty: none).
    pub row_labels: Vec<String>,
    /// The keys' labels, drawn under the lowest thumbnail of each column when the cells
    /// are large enough (empty: none).
    pub col_labels: Vec<String>,
    /// Draw signed differences instead of weights, on the diverging scale of ± this range
    /// (see [`super::Heatmap::difference`]); `None` draws probabilities.
    pub difference: Option<f32>,
    /// Lines of text printed under each panel's thumbnail, in the order of `panels`
    /// (e.g. a head's entropy); empty, or a panel without an entry, prints none. Every
    /// row of the grid leaves room for the most lines any panel has.
    pub notes: Vec<Vec<String>>,
}

impl<'a> Grid<'a> {
    /// A grid of `panels`, `columns` to a row, with no labels and no group boxes.
    pub fn new(title: String, panels: Vec<(String, ArrayView2<'a, f32>)>, columns: usize) -> Self {
        Self {
            title,
            panels,
            columns,
            group: 1,
            cell: 6.0,
            row_labels: Vec::new(),
            col_labels: Vec::new(),
            difference: None,
            notes: Vec::new(),
        }
    }

    /// Picks the columns and the cell size whose thumbnails are largest within a page of
    /// `width` × `height` pixels (cells of at most `max_cell`). Columns are multiples of
    /// `group` when the group divides the panels' count.
    pub fn fit(&mut self, width: f64, height: f64, max_cell: f64) {
        let n = self.panels.len().max(1);
        let group = self.group.max(1);
        let step = if n.is_multiple_of(group) { group } else { 1 };
        let (lq, lk) = self.thumb_cells();
        let mut best: Option<(f64, f64, usize, usize)> = None;
        for columns in (step..=n).step_by(step) {
            let cell = self.cell_for(columns, width, height).min(max_cell);
            let rows = n.div_ceil(columns);
            let empty = columns * rows - n;
            // How far the grid's shape is from the page's (when several sizes tie, e.g.
            // at `max_cell`).
            let w = columns as f64 * (lk as f64 * cell + GAP);
            let h = rows as f64 * (lq as f64 * cell + GAP + THUMB_FONT * 1.6 + self.note_h());
            let off = ((w / h) / (width / height)).ln().abs();
            // Larger thumbnails first; then fewer empty places; then the page's shape.
            let better = best.is_none_or(|(c, o, _, e)| {
                cell > c + 1e-9
                    || (cell > c - 1e-9 && (empty < e || (empty == e && off < o - 1e-9)))
            });
            if better {
                best = Some((cell, off, columns, empty));
            }
        }
        if let Some((cell, _, columns, _)) = best {
            self.columns = columns;
            self.cell = cell.max(1.0);
        }
    }

    /// The largest cell with which `columns` columns fit the page.
    fn cell_for(&self, columns: usize, width: f64, height: f64) -> f64 {
        let rows = self.panels.len().div_ceil(columns.max(1));
        let (lq, lk) = self.thumb_cells();
        let groups = columns.div_ceil(self.group.max(1));
        let fit = |labels: bool| {
            let (lw, lh) = if labels {
                self.label_room(LABEL_FONT)
            } else {
                (0.0, 0.0)
            };
            let free_w =
                width - 2.0 * PAD - LEGEND_W - lw - columns as f64 * GAP - groups as f64 * GAP;
            let free_h = height
                - 2.0 * PAD
                - TITLE_FONT * 1.8
                - rows as f64 * (GAP + THUMB_FONT * 1.6 + self.note_h())
                - lh;
            (free_w / (columns * lk.max(1)) as f64).min(free_h / (rows * lq.max(1)) as f64)
        };
        let with = fit(true);
        if self.has_labels() && with >= MIN_LABEL_FONT / 0.85 {
            with
        } else {
            fit(false)
        }
    }

    /// The room the notes take under each row of thumbnails (0 without notes).
    fn note_h(&self) -> f64 {
        let lines = self.notes.iter().map(Vec::len).max().unwrap_or(0);
        lines as f64 * NOTE_LINE
    }

    fn has_labels(&self) -> bool {
        !self.row_labels.is_empty() || !self.col_labels.is_empty()
    }

    /// The largest thumbnail's rows and columns.
    fn thumb_cells(&self) -> (usize, usize) {
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
        (rows, cols)
    }

    /// The token labels' font at the current cell size, or `None` when they are not drawn.
    fn label_font(&self) -> Option<f64> {
        let font = (self.cell * 0.85).min(LABEL_FONT);
        (self.has_labels() && font >= MIN_LABEL_FONT).then_some(font)
    }

    /// Room for the labels: left of the first column, under the last row.
    fn label_room(&self, font: f64) -> (f64, f64) {
        let widest = |ls: &[String]| ls.iter().map(|l| text_width(l, font)).fold(0.0, f64::max);
        let w = if self.row_labels.is_empty() {
            0.0
        } else {
            widest(&self.row_labels) + 6.0
        };
        let h = if self.col_labels.is_empty() {
            0.0
        } else {
            widest(&self.col_labels) * std::f64::consts::FRAC_1_SQRT_2 + font + 6.0
        };
        (w, h)
    }

    fn room(&self) -> (f64, f64) {
        self.label_font().map_or((0.0, 0.0), |f| self.label_room(f))
    }

    fn thumb_size(&self) -> (f64, f64) {
        let (rows, cols) = self.thumb_cells();
        (cols as f64 * self.cell, rows as f64 * self.cell)
    }

    fn rows(&self) -> usize {
        self.panels.len().div_ceil(self.columns.max(1))
    }

    fn origin(&self, panel: usize) -> (f64, f64) {
        let (tw, th) = self.thumb_size();
        let (lw, _) = self.room();
        let columns = self.columns.max(1);
        let (r, c) = (panel / columns, panel % columns);
        let group = self.group.max(1);
        // Extra space between groups so the boxes do not touch.
        let x = PAD + lw + c as f64 * (tw + GAP) + (c / group) as f64 * GAP;
        let y = PAD
            + TITLE_FONT * 1.8
            + r as f64 * (th + GAP + THUMB_FONT * 1.6 + self.note_h())
            + THUMB_FONT * 1.4;
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

    /// Width of the thumbnails, their labels and the legend.
    fn content_width(&self) -> f64 {
        let (tw, _) = self.thumb_size();
        let (lw, _) = self.room();
        let columns = self.columns.max(1).min(self.panels.len().max(1));
        let groups = columns.div_ceil(self.group.max(1));
        PAD * 2.0 + lw + columns as f64 * (tw + GAP) + groups as f64 * GAP + LEGEND_W
    }

    /// Width and height of the whole figure.
    pub fn size(&self) -> (f64, f64) {
        let (_, th) = self.thumb_size();
        let (_, lh) = self.room();
        let content_w = self.content_width();
        let title_w = PAD * 2.0 + text_width(&self.title, TITLE_FONT);
        let grid_h = self.rows() as f64 * (th + GAP + THUMB_FONT * 1.6 + self.note_h()) + lh;
        let height = PAD * 2.0 + TITLE_FONT * 1.8 + grid_h.max(legend_height() + 30.0);
        (content_w.max(title_w).ceil(), height.ceil())
    }

    /// The figure as a standalone SVG document.
    pub fn svg(&self) -> String {
        let scale = ColorScale::new();
        let diverging = DivergingScale::new();
        let (width, height) = self.size();
        let (tw, th) = self.thumb_size();
        let columns = self.columns.max(1);
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
            if group > 1 && (p % columns).is_multiple_of(group) {
                let run = group.min(columns - p % columns).min(self.panels.len() - p);
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
                let rgb = cell_rgb(&scale, &diverging, self.difference, w);
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
            for (i, line) in self.notes.get(p).into_iter().flatten().enumerate() {
                let _ = writeln!(
                    s,
                    r##"<text x="{x:.1}" y="{:.1}" font-size="{NOTE_FONT}" fill="#333">{}</text>"##,
                    y + th + NOTE_FONT * 1.1 + i as f64 * NOTE_LINE,
                    escape(line)
                );
            }
            self.labels(&mut s, p, m.dim());
        }
        // Beside the thumbnails, also when a long title makes the figure wider.
        let (lx, ly) = (
            self.content_width() - PAD - LEGEND_W + 10.0,
            PAD + TITLE_FONT * 1.8 + THUMB_FONT * 1.4,
        );
        match self.difference {
            Some(range) => diverging_legend(&mut s, &diverging, range, lx, ly, legend_height()),
            None => legend(&mut s, &scale, lx, ly, legend_height()),
        }
        s.push_str("</svg>\n");
        s
    }

    /// The token labels of panel `p`: the queries left of it in the first column, the keys
    /// under it when it is the lowest of its column.
    fn labels(&self, s: &mut String, p: usize, (rows, cols): (usize, usize)) {
        let Some(font) = self.label_font() else {
            return;
        };
        let columns = self.columns.max(1);
        let (x, y) = self.origin(p);
        if p.is_multiple_of(columns) && self.row_labels.len() == rows {
            for (i, label) in self.row_labels.iter().enumerate() {
                let _ = writeln!(
                    s,
                    r#"<text x="{:.1}" y="{:.1}" font-size="{font:.1}" text-anchor="end">{}</text>"#,
                    x - 4.0,
                    y + (i as f64 + 0.5) * self.cell + font * 0.35,
                    escape(label)
                );
            }
        }
        if p + columns >= self.panels.len() && self.col_labels.len() == cols {
            let bottom = y + rows as f64 * self.cell + 4.0 + self.note_h();
            for (j, label) in self.col_labels.iter().enumerate() {
                let _ = writeln!(
                    s,
                    r#"<text transform="translate({:.1},{:.1}) rotate(45)" font-size="{font:.1}">{}</text>"#,
                    x + (j as f64 + 0.3) * self.cell,
                    bottom + font * 0.5,
                    escape(label)
                );
            }
        }
    }
}

/// The order in which [`grid_order`] lays out the heads of a grid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GridOrder {
    /// Layer by layer, head by head: `(0, 0), (0, 1), …`.
    #[default]
    Layer,
    /// By increasing mean entropy ([`super::HeadStat::entropy`]), across layers; ties
    /// keep layer order.
    Entropy,
    /// Similar heads side by side: the head of lowest entropy first, then repeatedly the
    /// not-yet-placed head nearest to the last one placed, by [`HeadStats::distance`]
    /// (ties go to the first in layer order).
    Similarity,
}

/// The `(layer, head)` of every head of `stats` in the order `order` lays them out: each
/// head exactly once, `stats.layers · stats.heads` in all.
pub fn grid_order(stats: &HeadStats, order: GridOrder) -> Vec<(usize, usize)> {
    let mut all: Vec<(usize, usize)> = stats.stats.iter().map(|h| (h.layer, h.head)).collect();
    let entropy = |(l, h): (usize, usize)| stats.get(l, h).map_or(0.0, |s| s.entropy);
    match order {
        GridOrder::Layer => all,
        GridOrder::Entropy => {
            // A stable sort: ties keep layer order.
            all.sort_by(|&a, &b| entropy(a).total_cmp(&entropy(b)));
            all
        }
        GridOrder::Similarity => {
            let Some(start) = all
                .iter()
                .copied()
                .enumerate()
                .min_by(|(_, a), (_, b)| entropy(*a).total_cmp(&entropy(*b)))
                .map(|(i, _)| i)
            else {
                return all;
            };
            let mut placed = vec![all.remove(start)];
            while !all.is_empty() {
                let last = placed[placed.len() - 1];
                let distance = |x: (usize, usize)| stats.distance(last, x).unwrap_or(f64::INFINITY);
                let next = all
                    .iter()
                    .copied()
                    .enumerate()
                    .min_by(|(_, a), (_, b)| distance(*a).total_cmp(&distance(*b)))
                    .map_or(0, |(i, _)| i);
                placed.push(all.remove(next));
            }
            placed
        }
    }
}

fn legend_height() -> f64 {
    160.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::Array2;

    fn panels(m: &Array2<f32>, n: usize) -> Vec<(String, ArrayView2<'_, f32>)> {
        (0..n).map(|h| (format!("L1 H{h}"), m.view())).collect()
    }

    /// The lowest edge of any thumbnail.
    fn bottom(g: &Grid) -> f64 {
        let (lq, lk) = g.thumb_cells();
        (0..g.panels.len())
            .map(|p| {
                let r = g.cell_rect(p, lq - 1, lk - 1);
                r.y + r.size
            })
            .fold(0.0, f64::max)
    }

    #[test]
    fn twelve_heads_fill_a_landscape_page_without_an_empty_band() {
        for (tokens, heads, group) in [(15, 12, 1), (47, 9, 3), (5, 12, 1), (3, 1, 1), (8, 7, 1)] {
            let m = Array2::<f32>::from_elem((tokens, tokens), 1.0 / tokens as f32);
            let mut g = Grid::new("t".into(), panels(&m, heads), heads);
            g.group = group;
            g.fit(1400.0, 900.0, 24.0);
            let (w, h) = g.size();
            let thumb = tokens as f64 * g.cell;
            assert!(
                w <= 1400.0 + 1.0 && h <= 900.0 + 1.0,
                "{tokens}/{heads}: {w} × {h}"
            );
            assert!(
                h - bottom(&g) <= thumb.max(legend_height()),
                "{tokens}/{heads}: {h} tall, thumbnails end at {}",
                bottom(&g)
            );
            assert!(g.columns.is_multiple_of(group), "groups do not wrap");
            if heads == 12 {
                assert!(g.columns < 12 && g.columns > 1, "{} columns", g.columns);
            }
        }
    }

    #[test]
    fn labels_are_drawn_only_when_the_cells_hold_them() {
        let m = Array2::<f32>::from_elem((4, 4), 0.25);
        let mut g = Grid::new("t".into(), panels(&m, 6), 3);
        g.row_labels = ["a", "b", "c", "d"].map(String::from).to_vec();
        g.col_labels = g.row_labels.clone();
        g.cell = 20.0;
        let svg = g.svg();
        // Two rows of three: queries beside the 2 thumbnails of the first column, keys
        // under the 3 of the last row.
        assert_eq!(svg.matches(r#"text-anchor="end""#).count(), 8);
        assert_eq!(svg.matches("rotate(45)").count(), 12);
        g.cell = 3.0;
        let svg = g.svg();
        assert_eq!(svg.matches("rotate(45)").count(), 0);
    }

    /// Stats of a (layers, heads, 4, 4) tensor whose head `l · heads + h` is `rows[k]`
    /// given by `pick(l, h)`.
    fn stats_of(
        layers: usize,
        heads: usize,
        pick: impl Fn(usize, usize) -> Array2<f32>,
    ) -> HeadStats {
        let mut a = ndarray::Array4::<f32>::zeros((layers, heads, 4, 4));
        for l in 0..layers {
            for h in 0..heads {
                a.slice_mut(ndarray::s![l, h, .., ..]).assign(&pick(l, h));
            }
        }
        super::super::head_stats(a.view().into_dyn()).unwrap()
    }

    /// Rows that put `1 − 3e` on key `k` and `e` on each other key.
    fn peaked(k: usize, e: f32) -> Array2<f32> {
        Array2::from_shape_fn((4, 4), |(_, j)| if j == k { 1.0 - 3.0 * e } else { e })
    }

    #[test]
    fn layer_order_is_the_identity() {
        let st = stats_of(2, 3, |l, h| peaked(h, 0.01 * (l + 1) as f32));
        let want: Vec<_> = (0..2).flat_map(|l| (0..3).map(move |h| (l, h))).collect();
        assert_eq!(grid_order(&st, GridOrder::Layer), want);
        assert_eq!(GridOrder::default(), GridOrder::Layer);
    }

    #[test]
    fn entropy_order_is_sorted_and_holds_every_head_once() {
        // Entropy grows with e; heads in a scrambled order of e.
        let es = [0.2f32, 0.01, 0.15, 0.05, 0.24, 0.1];
        let st = stats_of(2, 3, |l, h| peaked(h % 4, es[l * 3 + h]));
        let order = grid_order(&st, GridOrder::Entropy);
        let ent: Vec<f64> = order
            .iter()
            .map(|&(l, h)| st.get(l, h).unwrap().entropy)
            .collect();
        assert!(ent.windows(2).all(|w| w[0] <= w[1]), "{ent:?}");
        assert_eq!(order[0], (0, 1));
        assert_eq!(order[5], (1, 1));
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(sorted, grid_order(&st, GridOrder::Layer));
    }

    #[test]
    fn similarity_order_puts_identical_heads_next_to_each_other() {
        // Layer 0 head 0 and layer 1 head 2 are identical, far from the lowest-entropy
        // head (0, 1); everything else is on other keys.
        let st = stats_of(2, 3, |l, h| match (l, h) {
            (0, 0) | (1, 2) => peaked(3, 0.2),
            (0, 1) => peaked(0, 0.001),
            (0, 2) => peaked(1, 0.05),
            (1, 0) => peaked(2, 0.1),
            _ => peaked(0, 0.24),
        });
        assert_eq!(st.distance((0, 0), (1, 2)), Some(0.0));
        assert_eq!(st.distance((0, 1), (0, 1)), Some(0.0));
        assert_eq!(st.distance((0, 0), (2, 0)), None);
        let d = st.distance((0, 1), (1, 0)).unwrap();
        assert_eq!(st.distance((1, 0), (0, 1)), Some(d));
        let order = grid_order(&st, GridOrder::Similarity);
        assert_eq!(order[0], (0, 1), "the lowest entropy starts");
        let at = |x| order.iter().position(|&o| o == x).unwrap();
        assert_eq!(at((0, 0)).abs_diff(at((1, 2))), 1, "{order:?}");
        // Each next head is the nearest of those left.
        for i in 1..order.len() {
            let d = st.distance(order[i - 1], order[i]).unwrap();
            for &rest in &order[i..] {
                assert!(d <= st.distance(order[i - 1], rest).unwrap(), "{order:?}");
            }
        }
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(sorted, grid_order(&st, GridOrder::Layer));
    }

    #[test]
    fn a_single_head_orders_to_itself() {
        let st = stats_of(1, 1, |_, _| peaked(0, 0.1));
        for order in [GridOrder::Layer, GridOrder::Entropy, GridOrder::Similarity] {
            assert_eq!(grid_order(&st, order), vec![(0, 0)]);
        }
    }

    #[test]
    fn notes_print_under_each_thumbnail_and_make_room() {
        let m = Array2::<f32>::from_elem((4, 4), 0.25);
        let mut plain = Grid::new("t".into(), panels(&m, 4), 2);
        plain.cell = 40.0;
        let mut noted = plain.clone();
        noted.notes = (0..4)
            .map(|p| vec![format!("note {p}"), "x".into()])
            .collect();
        let svg = noted.svg();
        for p in 0..4 {
            assert!(svg.contains(&format!(">note {p}</text>")));
        }
        assert!(
            noted.size().1 >= plain.size().1 + 2.0 * 2.0 * NOTE_LINE - 1.0,
            "{:?} vs {:?}",
            noted.size(),
            plain.size()
        );
        // Under the thumbnail, above the next row's.
        let below = noted.cell_rect(0, 3, 0);
        let next = noted.cell_rect(2, 0, 0);
        assert!(next.y - (below.y + below.size) > 2.0 * NOTE_LINE);
    }
}
