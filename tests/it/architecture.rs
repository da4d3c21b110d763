//! The structure the code promises (docs/DESIGN.md, "Architecture"): each public entry
//! validates its inputs once; inside `src/gpu/` no file imports a file that imports it
//! back (directly or around a longer loop), nor does any folder (counting every import
//! of a file inside it), no file names a crate-root re-export, no two files share a
//! name, and no record
//! function is async (there, nor in the model kernels of `src/model/`, which reach the
//! device layer through `src/model/ops/glue.rs` alone).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use wgpu_attention::*;

use crate::common::{ctx, qkv};

/// `f` run once, and how many times it validated.
fn validations<T>(f: impl FnOnce() -> T) -> (T, u64) {
    let before = validate_calls_for_tests();
    let out = f();
    (out, validate_calls_for_tests() - before)
}

#[test]
fn every_entry_validates_once() {
    let ctx = ctx();
    let (q, k, v) = qkv(7, (1, 2, 1), (9, 40), (16, 16));
    for precision in [Precision::F32, Precision::F16] {
        for path in [KernelPath::Auto, KernelPath::Staged, KernelPath::Fused] {
            let opts = AttentionOptions {
                path,
                precision,
                return_lse: true,
                ..Default::default()
            };
            let what = format!("{precision:?} {path:?}");
            // Rejected or run, each call validates exactly once.
            let (_, n) = validations(|| attention(ctx, q.view(), k.view(), v.view(), &opts));
            assert_eq!(n, 1, "attention, {what}");
            let up = |a: &ndarray::Array4<f32>| GpuTensor::from_array(ctx, a.view().into_dyn());
            let (qt, kt, vt) = (up(&q).unwrap(), up(&k).unwrap(), up(&v).unwrap());
            let run = || pollster::block_on(attention_gpu_async(ctx, &qt, &kt, &vt, &opts));
            let (_, n) = validations(run);
            assert_eq!(n, 1, "attention_gpu_async, {what}");
            let outputs = GpuOutputs::allocate(ctx, q.shape(), k.shape(), v.shape(), &opts);
            let outputs = outputs.unwrap();
            let into = || {
                pollster::block_on(attention_gpu_into_async(
                    ctx, &qt, &kt, &vt, &opts, &outputs,
                ))
            };
            let (_, n) = validations(into);
            assert_eq!(n, 1, "attention_gpu_into_async, {what}");
            let which = || kernel_path(ctx, q.shape(), k.shape(), v.shape(), &opts);
            let (_, n) = validations(which);
            assert_eq!(n, 1, "kernel_path, {what}");
        }
    }
}

fn gpu_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/gpu")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The file that defines the module `crate::gpu::<segments>`, or the deepest file on the
/// way (the rest of the path names items inside it).
fn module_file(segments: &[&str]) -> PathBuf {
    let mut dir = gpu_dir();
    let mut file = dir.join("mod.rs");
    for seg in segments {
        if dir.join(seg).join("mod.rs").is_file() {
            dir = dir.join(seg);
            file = dir.join("mod.rs");
        } else if dir.join(format!("{seg}.rs")).is_file() {
            file = dir.join(format!("{seg}.rs"));
            break;
        } else {
            break;
        }
    }
    file
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Every file a source file reaches through a `crate::gpu::` path (in `use` lines and in
/// code), with `{a, b::c}` groups one level deep.
fn imports(source: &str) -> BTreeSet<PathBuf> {
    let mut found = BTreeSet::new();
    for (at, _) in source.match_indices("crate::gpu::") {
        let rest = &source[at + "crate::gpu::".len()..];
        let end = rest
            .find(|c: char| !(is_ident(c) || c == ':'))
            .unwrap_or(rest.len());
        let path = rest[..end].trim_end_matches(':');
        let prefix: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
        let group = rest[end..].starts_with('{') && rest[..end].ends_with("::");
        if !group {
            found.insert(module_file(&prefix));
            continue;
        }
        let close = rest[end..].find('}').map_or(rest.len(), |i| end + i);
        for item in rest[end + 1..close].split(',') {
            let item = item.trim();
            let mut segments = prefix.clone();
            segments.extend(
                item.split("::")
                    .map(|s| s.split_whitespace().next().unwrap_or(""))
                    .filter(|s| !s.is_empty() && *s != "self" && *s != "{"),
            );
            found.insert(module_file(&segments));
        }
    }
    found
}

/// Strips `//` comments, so that prose naming a path is not an import.
fn code_only(source: &str) -> String {
    source
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// One import loop, as the files around it, if any.
fn find_loop(graph: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Option<Vec<PathBuf>> {
    // Depth-first search; a back edge closes a loop.
    fn visit(
        node: &PathBuf,
        graph: &BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        stack: &mut Vec<PathBuf>,
        done: &mut BTreeSet<PathBuf>,
    ) -> Option<Vec<PathBuf>> {
        if let Some(at) = stack.iter().position(|n| n == node) {
            let mut cycle = stack[at..].to_vec();
            cycle.push(node.clone());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        stack.push(node.clone());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, graph, stack, done) {
                return Some(c);
            }
        }
        stack.pop();
        done.insert(node.clone());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|n| visit(n, graph, &mut Vec::new(), &mut done))
}

fn import_graph() -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    let mut files = Vec::new();
    rust_files(&gpu_dir(), &mut files);
    files
        .iter()
        .map(|f| {
            let source = std::fs::read_to_string(f).expect("source file");
            let mut targets = imports(&code_only(&source));
            targets.remove(f);
            (f.clone(), targets)
        })
        .collect()
}

#[test]
fn gpu_files_import_without_loops() {
    let graph = import_graph();
    assert!(graph.len() > 20, "expected the gpu/ tree, found {graph:?}");
    let edges: usize = graph.values().map(BTreeSet::len).sum();
    assert!(edges > 40, "the import parser found only {edges} imports");
    if let Some(cycle) = find_loop(&graph) {
        let names: Vec<String> = cycle
            .iter()
            .map(|p| p.strip_prefix(gpu_dir()).unwrap_or(p).display().to_string())
            .collect();
        panic!("import loop in src/gpu: {}", names.join(" -> "));
    }
}

/// The import graph between sibling folders and files: an import from `a/x/f.rs` of
/// `a/y.rs` is an edge from `a/x` to `a/y.rs`, the two children of their deepest common
/// folder that hold them. One graph per folder, keyed by that folder.
fn folder_graphs(
    graph: &BTreeMap<PathBuf, BTreeSet<PathBuf>>,
) -> BTreeMap<PathBuf, BTreeMap<PathBuf, BTreeSet<PathBuf>>> {
    let mut folders: BTreeMap<PathBuf, BTreeMap<PathBuf, BTreeSet<PathBuf>>> = BTreeMap::new();
    for (from, targets) in graph {
        for to in targets {
            let (a, b) = (
                from.components().collect::<Vec<_>>(),
                to.components().collect::<Vec<_>>(),
            );
            let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
            if common >= a.len().min(b.len()) {
                continue;
            }
            let unit = |c: &[std::path::Component<'_>]| c[..=common].iter().collect::<PathBuf>();
            let (ua, ub) = (unit(&a), unit(&b));
            let parent = a[..common].iter().collect::<PathBuf>();
            let nodes = folders.entry(parent).or_default();
            nodes.entry(ub.clone()).or_default();
            nodes.entry(ua).or_default().insert(ub);
        }
    }
    folders
}

#[test]
fn gpu_folders_import_without_loops() {
    let folders = folder_graphs(&import_graph());
    assert!(
        folders.contains_key(&gpu_dir()),
        "expected edges between the folders of src/gpu, found {folders:?}"
    );
    for (folder, graph) in &folders {
        if let Some(cycle) = find_loop(graph) {
            let names: Vec<String> = cycle
                .iter()
                .map(|p| p.strip_prefix(gpu_dir()).unwrap_or(p).display().to_string())
                .collect();
            panic!(
                "folder-level import loop in {}: {}",
                folder.display(),
                names.join(" -> ")
            );
        }
    }
}

#[test]
fn the_folder_graph_sees_a_loop_between_folders() {
    // Files that never import each other, but whose folders do both ways.
    let dir = gpu_dir();
    let graph = BTreeMap::from([
        (dir.join("a/one.rs"), BTreeSet::from([dir.join("b/two.rs")])),
        (
            dir.join("b/three.rs"),
            BTreeSet::from([dir.join("a/four.rs")]),
        ),
        (
            dir.join("a/x/five.rs"),
            BTreeSet::from([dir.join("a/six.rs")]),
        ),
    ]);
    assert_eq!(find_loop(&graph), None, "no file-level loop");
    let folders = folder_graphs(&graph);
    let top = &folders[&dir];
    assert!(find_loop(top).is_some(), "{top:?}");
    assert_eq!(
        folders[&dir.join("a")],
        BTreeMap::from([
            (dir.join("a/x"), BTreeSet::from([dir.join("a/six.rs")])),
            (dir.join("a/six.rs"), BTreeSet::new()),
        ])
    );
}

/// `src/gpu` reaches the crate's types through their modules, not the crate root's
/// re-exports (which belong to the public API above it).
#[test]
fn gpu_files_name_no_crate_root_reexport() {
    let mut files = Vec::new();
    rust_files(&gpu_dir(), &mut files);
    for f in files {
        let source = code_only(&std::fs::read_to_string(&f).expect("source file"));
        for (at, _) in source.match_indices("crate::") {
            let next = source[at + "crate::".len()..].chars().next();
            assert!(
                !next.is_some_and(|c| c.is_ascii_uppercase()),
                "{} names a crate-root item: {}",
                f.display(),
                source[at..].lines().next().unwrap_or("")
            );
        }
    }
}

#[test]
fn the_loop_finder_finds_a_loop() {
    let (a, b, c) = (PathBuf::from("a"), PathBuf::from("b"), PathBuf::from("c"));
    let mut graph = BTreeMap::new();
    graph.insert(a.clone(), BTreeSet::from([b.clone()]));
    graph.insert(b.clone(), BTreeSet::from([c.clone()]));
    graph.insert(c.clone(), BTreeSet::new());
    assert_eq!(find_loop(&graph), None);
    graph.insert(c.clone(), BTreeSet::from([a.clone()]));
    assert_eq!(find_loop(&graph), Some(vec![a.clone(), b, c, a]));
}

#[test]
fn the_import_parser_reads_groups_and_paths() {
    let source = "use crate::gpu::forward::paths::{one_pass::OnePass, split_kv};\n\
                  let x = crate::gpu::kernels::fused::vec4s(3);";
    let found = imports(source);
    let dir = gpu_dir();
    let want = BTreeSet::from([
        dir.join("forward/paths/one_pass.rs"),
        dir.join("forward/paths/split_kv.rs"),
        dir.join("kernels/fused.rs"),
    ]);
    assert_eq!(found, want);
}

#[test]
fn gpu_and_shader_file_names_are_unique() {
    let mut files = Vec::new();
    rust_files(&gpu_dir(), &mut files);
    let shaders = Path::new(env!("CARGO_MANIFEST_DIR")).join("shaders");
    for dir in ["kernels", "prelude"] {
        for e in std::fs::read_dir(shaders.join(dir)).expect("shaders folder") {
            files.push(e.expect("entry").path());
        }
    }
    let mut seen: BTreeMap<String, PathBuf> = BTreeMap::new();
    for f in files {
        let name = f
            .file_name()
            .expect("file name")
            .to_string_lossy()
            .to_string();
        // Every folder has its mod.rs; that is how Rust names a folder's module.
        if name == "mod.rs" {
            continue;
        }
        if let Some(other) = seen.insert(name.clone(), f.clone()) {
            panic!("{} and {} share a name", other.display(), f.display());
        }
    }
}

fn model_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/model")
}

#[test]
fn no_record_function_is_async() {
    let mut files = Vec::new();
    rust_files(&gpu_dir(), &mut files);
    rust_files(&model_dir(), &mut files);
    let mut records = 0;
    for f in files {
        let source = code_only(&std::fs::read_to_string(&f).expect("source file"));
        records += source.matches("fn record").count();
        assert!(
            !source.contains("async fn record"),
            "{}: a record function is async; deciding belongs in prepare",
            f.display()
        );
    }
    assert!(records >= 8, "found only {records} record functions");
}

#[test]
fn model_code_reaches_the_device_layer_through_one_bridge() {
    let mut files = Vec::new();
    rust_files(&model_dir(), &mut files);
    // Every family's kernels live in ops/ and reach the device layer through glue.rs.
    let bridges = [model_dir().join("ops/glue.rs")];
    for bridge in &bridges {
        assert!(files.contains(bridge), "expected {}", bridge.display());
    }
    for f in files {
        let source = code_only(&std::fs::read_to_string(&f).expect("source file"));
        let reaches = source.contains("crate::gpu::") || source.contains("crate::gpu;");
        assert_eq!(
            reaches,
            bridges.contains(&f),
            "{}: only ops/glue.rs imports from crate::gpu",
            f.display()
        );
    }
}
