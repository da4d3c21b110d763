//! The one recipe for a kernel's WGSL, every kernel's (attention, dense layers, models):
//!
//! 1. **Preludes, then the kernel**, concatenated at compile time by [`kernel_wgsl!`] from
//!    files under `shaders/`. A kernel that uses subgroup operations says so first
//!    (`kernel_wgsl!(subgroups; ..)`), which puts `shaders/prelude/subgroups.wgsl` ahead
//!    of every declaration: the one place where the subgroup directive's rule lives (see
//!    [`crate::gpu::kernels::subgroups`]).
//! 2. **Override constants** for every number a variant changes (tile sizes, flags):
//!    one source, many pipelines, chosen when the pipeline is built.
//! 3. **Generated variants**, only where a micro-tile would otherwise sit in a private
//!    array indexed at run time (which drivers spill to memory): the kernel file is a
//!    template whose named holes, each a line of its own, the Rust side fills per variant
//!    with [`fill`], after the same compile-time preludes. `fused_tiled.rs` fills its
//!    subgroup holes and repeats the lines holding `$n` once per output chunk;
//!    `fused_lanes.rs` writes the whole `main` (every loop but the key loop unrolled).
//!
//! Every kernel a recipe makes is listed once, in [`crate::kernel_table`].

/// The text of `shaders/$path`, embedded at compile time.
macro_rules! shader_file {
    ($path:literal) => {
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/shaders/", $path))
    };
}

/// A kernel's whole source: the files under `shaders/` in the order given (preludes, then
/// the kernel), concatenated at compile time. `subgroups;` first marks a kernel that uses
/// subgroup operations: it then starts with `prelude/subgroups.wgsl`.
macro_rules! kernel_wgsl {
    (subgroups; $($path:literal),+ $(,)?) => {
        concat!(
            $crate::gpu::kernels::wgsl::shader_file!("prelude/subgroups.wgsl"),
            $($crate::gpu::kernels::wgsl::shader_file!($path)),+
        )
    };
    ($($path:literal),+ $(,)?) => {
        concat!($($crate::gpu::kernels::wgsl::shader_file!($path)),+)
    };
}

pub(crate) use {kernel_wgsl, shader_file};

/// `template` with each named hole (a line holding only its name, indentation aside)
/// replaced by its text. A hole the template lacks, or holds twice, is a bug in the
/// generator, caught by the reflection tests that generate every variant.
pub(crate) fn fill(template: &str, holes: &[(&str, &str)]) -> String {
    for (name, _) in holes {
        let count = template.lines().filter(|l| l.trim() == *name).count();
        assert_eq!(
            count, 1,
            "hole {name} appears {count} times in the template"
        );
    }
    let mut out = String::with_capacity(template.len() * 2);
    for line in template.lines() {
        match holes.iter().find(|(name, _)| line.trim() == *name) {
            Some((_, text)) => {
                out.push_str(text);
                if !text.is_empty() && !text.ends_with('\n') {
                    out.push('\n');
                }
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::fill;

    #[test]
    fn holes_are_whole_lines_filled_once() {
        let t = "a\n  HOLE\nb\n";
        assert_eq!(fill(t, &[("HOLE", "x\ny")]), "a\nx\ny\nb\n");
        assert_eq!(fill(t, &[("HOLE", "")]), "a\nb\n");
        // A name inside a line is not a hole.
        assert_eq!(fill("HOLE2\nHOLE\n", &[("HOLE", "z")]), "HOLE2\nz\n");
    }

    #[test]
    #[should_panic(expected = "hole MISSING appears 0 times")]
    fn a_missing_hole_is_a_generator_bug() {
        fill("a\n", &[("MISSING", "x")]);
    }
}
