//! The tuner's candidates: every configuration of the fused, decode and subgroup decode
//! kernels it may pick, in the general order, and the orders CPU adapters prefer, named
//! by value so that reordering a table cannot change what a preference means.

use crate::gpu::device::context::GpuContext;
use crate::gpu::kernels::decode::DecodeCandidate;
use crate::gpu::kernels::decode_subgroup::{DecodeChoice, SubgroupDecodeCandidate};
use crate::gpu::kernels::fused::{FusedConfig, FusedKind};
use crate::gpu::kernels::fused_lanes::LanesShape;
use crate::gpu::kernels::fused_tiled::TiledShape;
use crate::gpu::routing::tune::class::bucket;
// Candidates become routes only to be timed, which the web cannot do.
#[cfg(not(target_arch = "wasm32"))]
use crate::error::Result;
#[cfg(not(target_arch = "wasm32"))]
use crate::gpu::forward::route::Route;
#[cfg(not(target_arch = "wasm32"))]
use crate::gpu::kernels::elem::Elem;
#[cfg(not(target_arch = "wasm32"))]
use crate::gpu::routing::resolve;
#[cfg(not(target_arch = "wasm32"))]
use crate::problem::Problem;

pub(super) const fn fused(wg: u32, rows: u32, keys: u32) -> FusedConfig {
    FusedConfig {
        wg,
        rows,
        keys,
        kind: FusedKind::Rows,
    }
}

/// A fused_tiled.wgsl configuration: key groups, vec4s of D per chunk (0: Q resident),
/// subgroup reductions.
pub(super) const fn tiled(kg: u32, dc4: u32, subgroups: bool, row_fast: bool) -> FusedConfig {
    FusedConfig {
        wg: 16 * kg,
        rows: 4,
        keys: 4 * kg,
        kind: FusedKind::Tiled(TiledShape {
            kg,
            dc4,
            subgroups,
            row_fast,
        }),
    }
}

/// A fused_lanes.wgsl configuration: the subgroup size it is built for (one subgroup per
/// workgroup, keys per block) and query rows per invocation.
pub(super) const fn lanes(sg: u32, rows: u32) -> FusedConfig {
    FusedConfig {
        wg: sg,
        rows,
        keys: sg,
        kind: FusedKind::Lanes(LanesShape { sg, rows }),
    }
}

/// Prefill candidates, most generally good first: the tiled kernel (Q resident where
/// workgroup memory allows, else staged in chunks of D; the last with half the keys per
/// tile for devices with 16 KiB of workgroup memory), then the row kernel. Its later,
/// smaller tiles exist for large head dims on devices with little workgroup memory.
pub(crate) const FUSED_CANDIDATES: &[FusedConfig] = &[
    tiled(8, 0, true, false),
    tiled(8, 0, false, false),
    tiled(8, 8, true, false),
    tiled(8, 4, false, false),
    tiled(4, 4, false, false),
    tiled(8, 8, false, true),
    tiled(8, 4, false, true),
    tiled(4, 4, false, true),
    fused(64, 1, 32),
    fused(32, 2, 32),
    fused(16, 4, 32),
    fused(32, 4, 16),
    fused(64, 1, 16),
    fused(64, 1, 8),
    fused(32, 1, 4),
    lanes(8, 8),
    lanes(8, 4),
    lanes(8, 16),
];

pub(super) const fn decode(
    wg: u32,
    key_groups: u32,
    q_private: bool,
    prefetch_v: bool,
    workgroups: u32,
) -> DecodeCandidate {
    DecodeCandidate {
        wg,
        key_groups,
        q_private,
        prefetch_v,
        workgroups,
    }
}

/// Decode candidates: invocations (and keys per tile), key groups for weights·V, q rows
/// in private memory, V prefetching, and how many workgroups to split the keys for.
pub(crate) const DECODE_CANDIDATES: &[DecodeCandidate] = &[
    decode(64, 4, false, false, 512),
    decode(64, 4, false, true, 512),
    decode(128, 8, false, false, 1024),
    decode(64, 1, false, false, 256),
    decode(64, 1, true, true, 64),
    decode(32, 1, true, true, 64),
    decode(64, 1, true, false, 64),
    decode(32, 2, false, false, 256),
    decode(16, 1, true, true, 64),
];

pub(super) const fn subgroup(wg: u32, d_split: u32, workgroups: u32) -> SubgroupDecodeCandidate {
    SubgroupDecodeCandidate {
        wg,
        d_split,
        workgroups,
    }
}

/// Subgroup decode candidates (adapters with subgroups): invocations, lanes per key, and
/// how many workgroups to split the keys for. Each fits only where `d_split` divides the
/// smallest subgroup size and the workgroup is a multiple of the largest; the later ones
/// serve adapters whose subgroups are 4 wide, or up to 128.
pub(crate) const SUBGROUP_DECODE_CANDIDATES: &[SubgroupDecodeCandidate] = &[
    subgroup(128, 8, 1024),
    subgroup(64, 4, 512),
    subgroup(256, 16, 1024),
    subgroup(64, 8, 64),
    subgroup(64, 4, 64),
    subgroup(128, 4, 512),
    subgroup(256, 4, 1024),
];

/// The candidates CPU adapters (software rasterisers) do best with, measured on
/// lavapipe, where every lane's load from memory is its own scalar load and a subgroup
/// broadcast is a register shuffle, named by value so that reordering the candidate
/// tables cannot change what they mean (`cpu_preferences_name_candidates` checks that
/// each is in its table). Untuned: the tiled kernel with row groups on neighbouring
/// invocations, then the row kernel with many rows per invocation. For decoding: q rows in private memory, V prefetched, and few key
/// ranges (few cores to fill). The tuner times the first four that fit; untuned calls
/// take the first. The tiled shapes come first: as fast as the row kernel's best on
/// lavapipe and a quarter of its compile time (measured with an empty shader cache, the
/// demo's first call: 2.3 s of CPU against 5.9 s).
pub(super) const FUSED_CPU_FIRST: &[FusedConfig] = &[
    tiled(8, 8, false, true),
    tiled(8, 4, false, true),
    tiled(4, 4, false, true),
    fused(16, 4, 32),
    fused(32, 4, 16),
    lanes(8, 4),
    lanes(8, 8),
];

/// [`FUSED_CPU_FIRST`] for tiny problems (queries and keys in the class of at most
/// [`TINY_KEYS`]), the row kernel first: the tiled kernel's workgroups of 128
/// invocations, with a barrier per tile, cost lavapipe about as much for 8 rows as for 64.
/// Measured with `bench --path fused` on the Xeon host (Mesa 22.3.6), the tiled shape
/// against these: (32, 12, 8, 8, 32) 33 ms against 7.5 (64 rows of one query a
/// workgroup, 16 keys a tile) and 13.5 (16 invocations of four rows, 32 keys); (1, 9, 12,
/// 12, 64) causal over 3 K/V heads 0.61 against 0.34 and 0.34.
pub(super) const FUSED_CPU_TINY_FIRST: &[FusedConfig] = &[
    fused(64, 1, 16),
    fused(16, 4, 32),
    tiled(8, 8, false, true),
    tiled(8, 4, false, true),
    tiled(4, 4, false, true),
    fused(32, 4, 16),
    lanes(8, 4),
    lanes(8, 8),
];

/// As [`FUSED_CPU_TINY_FIRST`], for the next length class (up to [`SHORT_KEYS`]): 16
/// invocations of four rows first, which the same bench times at (32, 12, 32, 32, 32)
/// 19.6 ms against the tiled shape's 32.3, (16, 12, 64, 64, 32) 18.8 against 27.2,
/// (1, 12, 128, 128, 32) 4.6 against 6.4 and (1, 8, 200, 200, 64) 20.6 against 22.2.
/// It compiles slower (MiniLM's first `model attention` with an empty shader cache 4.0 s
/// against 2.05), so longer problems, whose times the two shapes share, keep the tiled
/// one.
pub(super) const FUSED_CPU_SHORT_FIRST: &[FusedConfig] = &[
    fused(16, 4, 32),
    tiled(8, 8, false, true),
    tiled(8, 4, false, true),
    tiled(4, 4, false, true),
    fused(32, 4, 16),
    lanes(8, 4),
    lanes(8, 8),
];

/// The untuned CPU order for a problem of `len_q` queries and `len_k` keys, by the
/// longer's length class, so that every problem of a tuning class takes the same order.
pub(super) fn fused_cpu_first(len_q: usize, len_k: usize) -> &'static [FusedConfig] {
    let class = bucket(len_q).max(bucket(len_k));
    if class <= bucket(TINY_KEYS) {
        FUSED_CPU_TINY_FIRST
    } else if class <= bucket(SHORT_KEYS) {
        FUSED_CPU_SHORT_FIRST
    } else {
        FUSED_CPU_FIRST
    }
}

/// The top of the shortest length class.
const TINY_KEYS: usize = 16;

/// When tuning: the lanes kernel first (4 rows per invocation, the quicker to compile,
/// then 8 and 16), then [`FUSED_CPU_FIRST`]. It is several times the others' speed on
/// lavapipe, but its unrolled source takes the driver about 11 s (4 rows per invocation)
/// or 38 s (8 rows) to compile per head-dim class at D = 64 the first time (1 and 2.5 s
/// once in Mesa's disk cache), against a second for the row kernel, and its 16-row shape
/// minutes (timed only for long problems, `LanesShape::worth_timing`). Tuning pays that
/// once per class by choice; an untuned call never does, so a first call stays quick.
/// (More rows per invocation share each K and V load among more rows, and loads are what
/// lavapipe is slowest at.) Only the lanes shapes built for the adapter's subgroup size
/// fit, and only where its subgroups are fixed (not on the web, nor the GL backend).
pub(super) const FUSED_CPU_TUNING_FIRST: &[FusedConfig] = &[
    lanes(8, 4),
    lanes(8, 8),
    lanes(8, 16),
    fused(16, 4, 32),
    fused(32, 4, 16),
    tiled(8, 8, false, true),
    tiled(8, 4, false, true),
    tiled(4, 4, false, true),
];
pub(super) const DECODE_CPU_FIRST: &[DecodeCandidate] = &[
    decode(64, 1, true, true, 64),
    decode(32, 1, true, true, 64),
    decode(64, 1, true, false, 64),
];

/// [`DECODE_CPU_FIRST`] for short caches (at most [`SHORT_KEYS`] keys): workgroups
/// of 16 invocations, then 32 (16 fit where D is at most 64). Such a cache is one key
/// range a row, which one workgroup walks tile by tile; lavapipe runs a workgroup's
/// invocations eight at a time and switches between those groups at every barrier, so
/// fewer invocations cost less for the same keys. SmolLM2's decoding steps (108 keys, 9
/// query heads on 3 key/value heads) spent 7.4 to 7.5 ms a step in attention with 64
/// invocations, 6.2 to 6.5 with 32 and 5.3 to 5.4 with 16; standalone decode calls of
/// up to 256 keys (1 to 8 batches, 9 to 16 heads) timed alike within the noise.
pub(super) const DECODE_CPU_SHORT_FIRST: &[DecodeCandidate] = &[
    decode(16, 1, true, true, 64),
    decode(32, 1, true, true, 64),
    decode(64, 1, true, true, 64),
    decode(64, 1, true, false, 64),
];

/// The longest keys [`DECODE_CPU_SHORT_FIRST`] and [`FUSED_CPU_SHORT_FIRST`] are for:
/// the top of a length class, so that every problem of a tuning class prefers the same
/// list.
pub(super) const SHORT_KEYS: usize = 256;

/// The decode candidates a CPU adapter prefers for `len_k` keys.
pub(super) fn decode_cpu_first(len_k: usize) -> &'static [DecodeCandidate] {
    if bucket(len_k) <= bucket(SHORT_KEYS) {
        DECODE_CPU_SHORT_FIRST
    } else {
        DECODE_CPU_FIRST
    }
}

/// CPU adapters have few cores to fill: few key ranges.
pub(super) const SUBGROUP_DECODE_CPU_FIRST: &[SubgroupDecodeCandidate] =
    &[subgroup(64, 8, 64), subgroup(64, 4, 64)];

/// `list` in this adapter's preferred order: on CPU adapters the members of `cpu_first`
/// first, in its order, then the rest in `list`'s.
pub(super) fn ordered<T: Copy + PartialEq>(
    ctx: &GpuContext,
    list: &[T],
    cpu_first: &[T],
) -> Vec<T> {
    if ctx.adapter_info().device_type != wgpu::DeviceType::Cpu {
        return list.to_vec();
    }
    let first = cpu_first.iter().filter(|c| list.contains(c)).copied();
    let rest = list.iter().filter(|c| !cpu_first.contains(c)).copied();
    first.chain(rest).collect()
}

/// Candidates timed per class, at most.
pub(super) const TIMED: usize = 4;
/// Decode candidates of the kernel an adapter type does not prefer, timed besides.
pub(super) const OTHER_DECODE_TIMED: usize = 2;

/// One configuration to time.
#[derive(Debug, Clone, Copy)]
// The web has no timing (see `timing.rs`), so nothing reads the configurations there.
#[cfg_attr(target_arch = "wasm32", allow(dead_code))]
pub(super) enum Candidate {
    Fused(FusedConfig),
    Decode(DecodeChoice),
}

#[cfg(not(target_arch = "wasm32"))]
impl Candidate {
    /// This configuration made into a route for `p` (see `routing/resolve.rs`).
    pub(super) async fn prepare(self, ctx: &GpuContext, p: &Problem, elem: Elem) -> Result<Route> {
        match self {
            Candidate::Decode(d) => resolve::decode(ctx, p, elem, d).await,
            Candidate::Fused(f) => resolve::fused(ctx, p, elem, f).await,
        }
    }
}
