// Shared by fused.wgsl and decode.wgsl (after masking.wgsl and launch.wgsl): the
// bindings they declare alike, and which K/V head, rows and keys a workgroup of a launch
// serves.

@group(0) @binding(1) var<storage, read> q: array<elem>;
@group(0) @binding(4) var<storage, read> mask: array<u32>;
@group(0) @binding(5) var<storage, read> kv_lens: array<u32>;
@group(0) @binding(8) var<uniform> split: Split;

// A workgroup's share of a launch: K/V heads x row tiles x key ranges, flattened.
struct Tile {
    // False past the launch's last K/V head, or past this head's rows (the grid is
    // flattened and sized for whole groups); the workgroup then has nothing to do.
    valid: bool,
    // Key range (split) index.
    sidx: u32,
    // Flattened K/V head and its batch.
    kv: u32,
    b: u32,
    // The chunk's query heads that read this K/V head: heads_lo .. heads_lo + nh, with
    // nrows rows in all (see row_of); this workgroup's rows start at virtual row t0.
    heads_lo: u32,
    nh: u32,
    nrows: u32,
    t0: u32,
}

// The tile of workgroup `linear` for workgroups of `tile_rows` rows. Uniform across the
// workgroup: it depends on the workgroup id and uniforms only.
fn tile_of(linear: u32, tile_rows: u32) -> Tile {
    var tile: Tile;
    tile.sidx = linear % split.splits;
    let rt = (linear / split.splits) % split.row_tiles;
    let kvl = linear / (split.splits * split.row_tiles);
    tile.kv = split.kv_first + kvl;
    tile.b = tile.kv / params.heads_kv;
    let group_lo = tile.b * params.heads_q + (tile.kv % params.heads_kv) * params.group;
    tile.heads_lo = max(group_lo, params.bh_start);
    let heads_hi = min(group_lo + params.group, params.bh_start + params.bh_count);
    // Heads past the launch's last K/V head read as none.
    tile.nh = select(0u, heads_hi - tile.heads_lo, kvl < split.kv_count && heads_hi > tile.heads_lo);
    tile.nrows = tile.nh * params.row_count;
    tile.t0 = rt * tile_rows;
    tile.valid = tile.t0 < tile.nrows;
    return tile;
}

// Keys of batch b that exist: Lk, or the batch's key length.
fn batch_len_k(b: u32) -> u32 {
    var n = params.len_k;
    if (params.flags & FLAG_KV_LENS) != 0u {
        n = min(n, kv_lens[b]);
    }
    return n;
}

// The keys a tile may see in its key range, as positions (which stay inside i32, see
// MAX_SEQ_LEN and the window clamp in params.rs).
struct KeyRange {
    // The range's keys below the batch's length end at kend.
    kend: i32,
    // Keys some row of the tile may attend: [lo, hi).
    lo: i32,
    hi: i32,
    // Keys every row of the tile may attend, before the explicit mask: [full_lo, full_hi).
    full_lo: i32,
    full_hi: i32,
}

// The key range of `tile` (rows t0 .. t0 + tile_rows) given its batch's key length.
fn key_range(tile: Tile, tile_rows: u32, kv_len: u32) -> KeyRange {
    var r: KeyRange;
    let ks = split.key_lo + tile.sidx * split.split_len;
    r.kend = i32(min(min(ks + split.split_len, split.key_hi), kv_len));
    let t_last = min(tile.t0 + tile_rows, tile.nrows) - 1u;
    let p_first = i32(params.row_start + tile.t0 / tile.nh) + params.pos_offset;
    let p_last = i32(params.row_start + t_last / tile.nh) + params.pos_offset;
    r.hi = min(r.kend, p_last + params.win_right + 1);
    r.full_hi = min(r.kend, p_first + params.win_right + 1);
    if (params.flags & FLAG_CAUSAL) != 0u {
        r.hi = min(r.hi, p_last + 1);
        r.full_hi = min(r.full_hi, p_first + 1);
    }
    r.lo = max(i32(ks), p_first - params.win_left);
    r.full_lo = max(0, p_last - params.win_left);
    return r;
}
