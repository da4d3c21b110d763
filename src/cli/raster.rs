//! SVG to PNG through resvg, with the system's fonts (DejaVu for Latin; a Hangul or CJK
//! font such as Noto Sans CJK or Nanum where installed).

use std::sync::Arc;

/// Rasterises an SVG document at its own size.
pub fn svg_to_png(svg: &str) -> Result<Vec<u8>, String> {
    let mut fonts = resvg::usvg::fontdb::Database::new();
    fonts.load_system_fonts();
    let options = resvg::usvg::Options {
        fontdb: Arc::new(fonts),
        ..Default::default()
    };
    let tree = resvg::usvg::Tree::from_str(svg, &options)
        .map_err(|e| format!("cannot lay out the figure: {e}"))?;
    let size = tree.size().to_int_size();
    let mut pixmap =
        resvg::tiny_skia::Pixmap::new(size.width(), size.height()).ok_or_else(|| {
            format!(
                "a {}×{} figure is too large to rasterise",
                size.width(),
                size.height()
            )
        })?;
    resvg::render(
        &tree,
        resvg::tiny_skia::Transform::default(),
        &mut pixmap.as_mut(),
    );
    pixmap
        .encode_png()
        .map_err(|e| format!("cannot encode the PNG: {e}"))
}
