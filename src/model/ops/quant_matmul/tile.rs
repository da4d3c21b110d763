//! How a product's invocations cover its rows and where they read x from ([`Tile`]),
//! and which of the kernel's entry points runs a tile ([`Entry`]).

use super::super::glue::{KernelSpec, SPLIT_MAX_ROWS};
use super::spec::{SPEC, SPEC_PAGED, SPEC_SPLIT, SPEC_SUBGROUPS, SPLIT_COLS, XU_ELEMS};

/// Columns of y per invocation (`COLS` in the shader).
const TILE_COLS: u64 = 4;

/// How a product's invocations cover its rows, and where they read x from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Tile {
    /// One row (a decoding step), read from the uniform copy.
    One,
    /// Four rows an invocation, all of x read from the uniform copy.
    FourUniform,
    /// Four rows an invocation, read from storage.
    Four,
    /// One row, K split across lanes, read from storage ([`SPEC_SPLIT`]).
    SplitOne,
    /// Four rows a workgroup, K split across lanes, read from storage.
    SplitFour,
    /// One row a workgroup, rows read from the uniform copy as many at a time as it
    /// holds, W from its uniform pages ([`SPEC_PAGED`]).
    Paged,
}

impl Tile {
    /// Rows of y per invocation, or per column group of the split entry (`ROWS`).
    pub(super) fn rows(self) -> u32 {
        match self {
            Tile::One | Tile::SplitOne | Tile::Paged => 1,
            Tile::FourUniform | Tile::Four | Tile::SplitFour => 4,
        }
    }

    /// Whether x (and the norm's weight) come from the uniform copy (`XU`).
    pub(super) fn uniform(self) -> bool {
        matches!(self, Tile::One | Tile::FourUniform | Tile::Paged)
    }

    /// Whether the split entry runs it.
    pub(super) fn split(self) -> bool {
        matches!(self, Tile::SplitOne | Tile::SplitFour)
    }

    /// Workgroups for `rows` rows of x and `cols` columns of y.
    pub(super) fn workgroups(self, rows: usize, cols: usize) -> u64 {
        let per = if self.split() {
            SPLIT_COLS
        } else {
            64 * TILE_COLS
        };
        (cols as u64).div_ceil(per) * (rows as u64).div_ceil(u64::from(self.rows()))
    }
}

/// Every tile, for kernels prepared for products of any number of rows.
pub(super) const ALL_TILES: &[Tile] = &[Tile::One, Tile::FourUniform, Tile::Four];

/// Every tile [`tile_for`] gives with `split`: the split entry's for few rows.
pub(super) const ALL_SPLIT_TILES: &[Tile] = &[
    Tile::SplitOne,
    Tile::SplitFour,
    Tile::FourUniform,
    Tile::Four,
];

/// The tile of a product of `rows` rows of `inner` elements. With `split` (see
/// [`split_products`](super::super::glue::split_products)), at most [`SPLIT_MAX_ROWS`] rows take the split entry. Otherwise
/// x goes through the uniform copy wherever it fits its [`XU_ELEMS`] elements (on
/// lavapipe a storage load is a checked loop over the lanes, a uniform one a gather), a
/// single row by the one-row tile, a few rows (a short prompt) by tiles of four; longer
/// inputs read storage.
pub(super) fn tile_for(rows: usize, inner: usize, split: bool) -> Tile {
    if split && rows == 1 {
        return Tile::SplitOne;
    }
    if split && rows <= SPLIT_MAX_ROWS as usize {
        return Tile::SplitFour;
    }
    match rows.checked_mul(inner) {
        Some(n) if n <= XU_ELEMS && rows == 1 => Tile::One,
        Some(n) if n <= XU_ELEMS => Tile::FourUniform,
        _ => Tile::Four,
    }
}

/// Whether a product [`tile_for`] gave `tile` may take the paged entry instead when its
/// W is in pages: not on the split entry's adapters, and only where one row of x (of
/// `inner` elements) fits the uniform copy; the entry takes as many rows as fit at once.
pub(super) fn fits_paged_entry(tile: Tile, inner: usize) -> bool {
    !tile.split() && inner <= XU_ELEMS
}

/// The entry point of the kernel (and so the spec) a pipeline runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Entry {
    /// quant_matmul_main.wgsl: W and, for long inputs, x from storage ([`SPEC`]).
    Storage,
    /// One row on a CPU driver's 8-lane subgroups, W also bound as four-word elements
    /// ([`SPEC_SUBGROUPS`]).
    Subgroups,
    /// K split across lanes ([`SPEC_SPLIT`]).
    Split,
    /// W from its uniform pages ([`SPEC_PAGED`]).
    Paged,
}

impl Entry {
    /// The entry that runs `tile`; `subgroups` where one-row products take the
    /// subgroup entry.
    pub(super) fn of(tile: Tile, subgroups: bool) -> Self {
        match tile {
            Tile::SplitOne | Tile::SplitFour => Entry::Split,
            Tile::Paged => Entry::Paged,
            Tile::One if subgroups => Entry::Subgroups,
            Tile::One | Tile::FourUniform | Tile::Four => Entry::Storage,
        }
    }

    /// Its kernel spec.
    pub(super) fn spec(self) -> &'static KernelSpec {
        match self {
            Entry::Storage => &SPEC,
            Entry::Subgroups => &SPEC_SUBGROUPS,
            Entry::Split => &SPEC_SPLIT,
            Entry::Paged => &SPEC_PAGED,
        }
    }
}
