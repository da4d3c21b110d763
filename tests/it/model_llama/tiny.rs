//! The tiny random llama: CPU against GPU, cached against recomputed generation, GGUF
//! round trips and malformed files, bad inputs. No model file needed.

use ndarray::{s, Array1};
use wgpu_attention::model::llama::{gguf, LlamaModel};
use wgpu_attention::model::{GenerateOptions, GenerateStats, ModelError, Sampling};

use super::gguf_writer::{llama_meta, llama_tensors, write, Meta, Tensor};
use super::tiny_model::{tiny_model, tiny_tokenizer_spec, tiny_weights, TINY};
use crate::common::{assert_close, ctx};

fn prompt() -> Vec<u32> {
    // Bytes of "the cat" and a few more ids, the merge token (256) among them.
    vec![84, 71, 256, 67, 64, 83, 12, 200, 5, 99, 31]
}

fn opts(n: usize, use_cache: bool, sampling: Sampling) -> GenerateOptions {
    GenerateOptions {
        max_new_tokens: n,
        sampling,
        use_cache,
        stop_at_eos: false,
    }
}

const SAMPLED: Sampling = Sampling::Sample {
    temperature: 0.8,
    top_k: 20,
    seed: 7,
};

#[test]
fn gpu_forward_matches_cpu_with_tied_and_separate_output() {
    for tied in [true, false] {
        let m = tiny_model(1, tied);
        let ids = prompt();
        let cpu = m.forward_reference(&ids, true).expect("reference");
        let fast = m.forward_cpu(&ids, true).expect("fast cpu");
        assert_close(
            "fast cpu attention",
            fast.attention.as_ref().unwrap().view(),
            cpu.attention.as_ref().unwrap().view(),
            2e-5,
            1e-4,
        );
        assert_close(
            "fast cpu hidden",
            fast.hidden.view(),
            cpu.hidden.view(),
            1e-4,
            1e-4,
        );
        let gpu = m.upload(ctx()).expect("upload");
        let got = pollster::block_on(gpu.forward(ctx(), &ids, true)).expect("gpu");
        let (l, c) = (ids.len(), TINY);
        let (ga, ca) = (
            got.attention.expect("gpu attn"),
            cpu.attention.expect("cpu attn"),
        );
        assert_eq!(ga.shape(), &[c.layers, c.heads, l, l]);
        assert_close("attention", ga.view(), ca.view(), 2e-5, 1e-4);
        for i in 0..l {
            assert!(
                ga.slice(s![.., .., i, i + 1..]).iter().all(|&v| v == 0.0),
                "row {i}"
            );
            let sums = ga.slice(s![.., .., i, ..]).sum_axis(ndarray::Axis(2));
            assert!(
                sums.iter().all(|v| (v - 1.0).abs() < 1e-5),
                "row {i} sums {sums:?}"
            );
        }
        assert_close("hidden", got.hidden.view(), cpu.hidden.view(), 1e-4, 1e-4);
        let (gl, cl): (Array1<f32>, Array1<f32>) = (got.logits.expect("l"), cpu.logits.expect("l"));
        assert_eq!(gl.len(), c.vocab);
        assert_close("logits", gl.view(), cl.view(), 1e-4, 1e-4);
    }
    crate::common::assert_built_kernels_are_listed();
}

#[test]
fn a_long_prompt_matches_cpu() {
    // 110 rows: many tiles of four rows, the last one ragged.
    let m = tiny_model(9, true);
    let ids: Vec<u32> = (0..110).map(|i| (i * 37 % 258) as u32).collect();
    let cpu = m.forward_reference(&ids, false).expect("reference");
    let gpu = m.upload(ctx()).expect("upload");
    let got = pollster::block_on(gpu.forward(ctx(), &ids, false)).expect("gpu");
    let fast = m.forward_cpu(&ids, false).expect("fast cpu");
    for (how, out) in [("gpu", got), ("fast cpu", fast)] {
        assert_close(how, out.hidden.view(), cpu.hidden.view(), 1e-4, 1e-4);
        let (gl, cl) = (out.logits.expect("l"), cpu.logits.clone().expect("l"));
        assert_close(how, gl.view(), cl.view(), 1e-4, 1e-4);
    }
}

type Generate = fn(
    &LlamaModel,
    &[u32],
    &GenerateOptions,
    &mut dyn FnMut(u32),
) -> Result<GenerateStats, ModelError>;

/// Both CPU precisions: the float64 reference and the fast f32 path.
const CPU_GENERATIONS: [(&str, Generate); 2] = [
    ("reference", LlamaModel::generate_reference),
    ("fast cpu", LlamaModel::generate_cpu),
];

#[test]
fn cpu_generation_with_the_cache_equals_recomputation() {
    let m = tiny_model(2, true);
    for (how, generate) in CPU_GENERATIONS {
        for sampling in [Sampling::Greedy, SAMPLED] {
            let mut streamed = Vec::new();
            let cached = generate(&m, &prompt(), &opts(12, true, sampling), &mut |t| {
                streamed.push(t)
            })
            .expect("cached");
            let full =
                generate(&m, &prompt(), &opts(12, false, sampling), &mut |_| {}).expect("full");
            assert_eq!(cached.generated.len(), 12);
            assert_eq!(cached.generated, full.generated, "{how} {sampling:?}");
            assert_eq!(cached.generated, streamed);
            assert_eq!(cached.prompt_tokens, prompt().len());
        }
        // The first greedy token is the argmax of the full pass's last logits.
        let logits = m
            .forward_reference(&prompt(), false)
            .expect("full")
            .logits
            .expect("logits");
        let best = (0..logits.len()).fold(0, |b, i| if logits[i] > logits[b] { i } else { b });
        let one =
            generate(&m, &prompt(), &opts(1, true, Sampling::Greedy), &mut |_| {}).expect("one");
        assert_eq!(one.generated, vec![best as u32], "{how}");
    }
}

#[test]
fn gpu_generation_with_the_cache_equals_recomputation_and_the_cpu() {
    let m = tiny_model(3, false);
    let gpu = m.upload(ctx()).expect("upload");
    for sampling in [Sampling::Greedy, SAMPLED] {
        let mut streamed = Vec::new();
        let o = opts(12, true, sampling);
        let cached =
            pollster::block_on(gpu.generate(ctx(), &prompt(), &o, &mut |t| streamed.push(t)))
                .expect("cached");
        let o = opts(12, false, sampling);
        let full =
            pollster::block_on(gpu.generate(ctx(), &prompt(), &o, &mut |_| {})).expect("full");
        let cpu = m
            .generate_reference(&prompt(), &o, &mut |_| {})
            .expect("cpu");
        assert_eq!(cached.generated.len(), 12);
        assert_eq!(cached.generated, full.generated, "{sampling:?}");
        assert_eq!(cached.generated, streamed);
        assert_eq!(cached.generated, cpu.generated, "{sampling:?}: gpu vs cpu");
    }
}

/// Timing the stages changes no token, and splits each generated token's pass into the
/// seven stages in order, every one timed (with and without the cache); an adapter
/// without timestamp queries refuses it.
#[test]
fn generation_with_stage_times_gives_the_same_tokens_and_every_stage() {
    let m = tiny_model(3, false);
    let gpu = m.upload(ctx()).expect("upload");
    let timestamps = ctx().features().contains(wgpu::Features::TIMESTAMP_QUERY);
    for use_cache in [true, false] {
        let o = opts(6, use_cache, Sampling::Greedy);
        let plain = pollster::block_on(gpu.generate(ctx(), &prompt(), &o, &mut |_| {}));
        let timed = pollster::block_on(gpu.generate_with_stages(ctx(), &prompt(), &o, &mut |_| {}));
        if !timestamps {
            assert!(
                matches!(timed, Err(ModelError::Unsupported(_))),
                "{timed:?}"
            );
            continue;
        }
        let (stats, times) = timed.expect("timed");
        assert_eq!(stats.generated, plain.expect("plain").generated);
        let stages: Vec<&str> = times.entries().iter().map(|(s, _)| *s).collect();
        assert_eq!(
            stages,
            [
                "embedding",
                "q/k/v projection",
                "attention",
                "output projection",
                "gate/up projection",
                "down projection",
                "final norm + logits head",
            ],
            "use_cache {use_cache}"
        );
        for (stage, seconds) in times.entries() {
            assert!(seconds.is_finite() && *seconds >= 0.0, "{stage}: {seconds}");
        }
        // The products do work on every adapter: their clock moved.
        assert!(times.total() > 0.0, "{times:?}");
    }
}

#[test]
fn generation_stops_before_the_end_of_sequence_token() {
    let m = tiny_model(4, true);
    // A hot, unrestricted draw reaches EOS (id 257) sooner or later; it is never emitted.
    let o = GenerateOptions {
        max_new_tokens: 30,
        sampling: Sampling::Sample {
            temperature: 5.0,
            top_k: 0,
            seed: 11,
        },
        use_cache: true,
        stop_at_eos: true,
    };
    let run = m
        .generate_cpu(&prompt(), &o, &mut |_| {})
        .expect("generate");
    assert!(!run.generated.contains(&257));
}

#[test]
fn bad_inputs_are_typed_errors_naming_the_argument() {
    let m = tiny_model(5, true);
    let arg = |e: ModelError| match e {
        ModelError::Input { arg, .. } => arg,
        other => panic!("expected an input error, got {other:?}"),
    };
    assert_eq!(arg(m.forward_cpu(&[], false).unwrap_err()), "--text");
    assert_eq!(arg(m.forward_cpu(&[1; 129], false).unwrap_err()), "--text");
    assert_eq!(arg(m.forward_cpu(&[1, 258], false).unwrap_err()), "ids");
    assert_eq!(arg(m.tokenize("").unwrap_err()), "--text");
    assert_eq!(arg(m.decode(&[9999]).unwrap_err()), "ids");
    let long = opts(120, true, Sampling::Greedy);
    assert_eq!(
        arg(m.generate_cpu(&prompt(), &long, &mut |_| {}).unwrap_err()),
        "--max-new-tokens"
    );
    for temperature in [0.0, -1.0, f32::NAN, f32::INFINITY] {
        let o = opts(
            2,
            true,
            Sampling::Sample {
                temperature,
                top_k: 0,
                seed: 0,
            },
        );
        assert_eq!(
            arg(m.generate_cpu(&prompt(), &o, &mut |_| {}).unwrap_err()),
            "--temperature"
        );
    }
    let gpu = m.upload(ctx()).expect("upload");
    let e = pollster::block_on(gpu.forward(ctx(), &[], false)).unwrap_err();
    assert_eq!(arg(e), "--text");
    let o = opts(
        2,
        true,
        Sampling::Sample {
            temperature: 0.0,
            top_k: 0,
            seed: 0,
        },
    );
    let e = pollster::block_on(gpu.generate(ctx(), &prompt(), &o, &mut |_| {})).unwrap_err();
    assert_eq!(arg(e), "--temperature");
}

#[test]
fn tokenizer_round_trips_and_matches_special_tokens() {
    let m = tiny_model(6, true);
    let toks = m.tokenize("a the 42<|endoftext|>").expect("tokenize");
    let ids: Vec<u32> = toks.iter().map(|t| t.id).collect();
    // "a", " t" merged, "h", "e", " ", "4" and "2" split as digits, then EOS whole.
    let bytes = super::tiny_model::byte_chars();
    let id_of = |c: char| bytes.iter().position(|b| b == &c.to_string()).unwrap() as u32;
    let space_id = bytes.iter().position(|b| b == "Ġ").unwrap() as u32;
    assert_eq!(
        ids,
        vec![
            id_of('a'),
            256,
            id_of('h'),
            id_of('e'),
            space_id,
            id_of('4'),
            id_of('2'),
            257
        ]
    );
    assert_eq!(toks[1].raw, "Ġt");
    assert_eq!(m.decode(&ids).expect("decode"), "a the 42<|endoftext|>");
}

/// The tiny model as a GGUF file's bytes (`tied`: the output head shares the embedding).
pub fn tiny_gguf(tied: bool) -> Vec<u8> {
    write(
        &llama_meta(&TINY, &tiny_tokenizer_spec()),
        &llama_tensors(&TINY, &tiny_weights(8, tied)),
    )
}

#[test]
fn a_gguf_file_of_the_tiny_model_loads_to_the_same_model() {
    for tied in [true, false] {
        let from_file = LlamaModel::from_gguf_bytes(&tiny_gguf(tied)).expect("parse");
        assert_eq!(from_file.config(), &TINY);
        assert_eq!(from_file.weights(), &tiny_weights(8, tied));
        let info = from_file.info();
        assert_eq!(
            (info.layers, info.heads, info.kv_heads, info.vocab),
            (2, 4, 2, 258)
        );
        assert_eq!(info.files.len(), 1);
        assert_eq!(info.files[0].1.len(), 64, "sha256 in hex");
    }
}

fn format_error(bytes: &[u8]) -> String {
    match gguf::parse(bytes)
        .map(|_| ())
        .and_then(|()| LlamaModel::from_gguf_bytes(bytes).map(|_| ()))
    {
        Err(ModelError::Format { detail, .. }) => detail,
        other => panic!("expected a format error, got {other:?}"),
    }
}

#[test]
fn every_truncation_of_a_gguf_file_is_a_format_error() {
    let bytes = tiny_gguf(true);
    // Every prefix through the header and tensor infos, then a stride through the data.
    let data_start = bytes.len()
        - llama_tensors(&TINY, &tiny_weights(8, true))
            .iter()
            .map(|t| t.data.len().next_multiple_of(32))
            .sum::<usize>();
    let cuts = (0..data_start.min(40_000))
        .step_by(7)
        .chain((data_start..bytes.len()).step_by(4099));
    for n in cuts {
        let _ = format_error(&bytes[..n]);
    }
}

fn header(tensors: u64, kvs: u64) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend(tensors.to_le_bytes());
    b.extend(kvs.to_le_bytes());
    b
}

#[test]
fn malformed_headers_and_counts_are_format_errors() {
    let mut bad_magic = tiny_gguf(true);
    bad_magic[0] = b'X';
    assert!(format_error(&bad_magic).contains("magic"));
    let mut v1 = header(0, 0);
    v1[4] = 1;
    assert!(format_error(&v1).contains("version"));
    assert!(format_error(&header(0, u64::MAX)).contains("count"));
    assert!(format_error(&header(1 << 60, 0)).contains("count"));
    // A string whose length exceeds the file.
    let mut long_key = header(0, 1);
    long_key.extend(u64::MAX.to_le_bytes());
    long_key.extend([0; 8]);
    assert!(format_error(&long_key).contains("truncated"));
    // An array claiming 2^62 u32s.
    let mut huge_array = header(0, 1);
    huge_array.extend(1u64.to_le_bytes());
    huge_array.push(b'a');
    huge_array.extend(9u32.to_le_bytes());
    huge_array.extend(4u32.to_le_bytes());
    huge_array.extend((1u64 << 62).to_le_bytes());
    assert!(format_error(&huge_array).contains("count"));
    // Dimensions whose product overflows.
    let t = Tensor {
        name: "x".into(),
        dims: vec![1 << 40, 1 << 40],
        ty: 0,
        data: vec![],
    };
    assert!(format_error(&write(&[], &[t])).contains("overflow"));
    // A tensor past the end of the file.
    let t = Tensor {
        name: "x".into(),
        dims: vec![1024],
        ty: 0,
        data: vec![0; 16],
    };
    assert!(format_error(&write(&[], &[t])).contains("past the end"));
    // An alignment that is not a power of two.
    let bad_align = write(&[("general.alignment".into(), Meta::U32(3))], &[]);
    assert!(format_error(&bad_align).contains("alignment"));
}

#[test]
fn an_unsupported_tensor_type_names_the_tensor_and_type() {
    let mut tensors = llama_tensors(&TINY, &tiny_weights(8, true));
    let t = tensors
        .iter_mut()
        .find(|t| t.name == "blk.1.ffn_up.weight")
        .expect("tensor");
    t.ty = 13; // Q5_K
    let bytes = write(&llama_meta(&TINY, &tiny_tokenizer_spec()), &tensors);
    match LlamaModel::from_gguf_bytes(&bytes) {
        Err(ModelError::Unsupported(msg)) => {
            assert!(
                msg.contains("blk.1.ffn_up.weight") && msg.contains("Q5_K"),
                "{msg}"
            );
        }
        other => panic!("expected Unsupported, got {:?}", other.map(|_| ())),
    }
    let mut meta = llama_meta(&TINY, &tiny_tokenizer_spec());
    meta[0].1 = Meta::Str("mamba".into());
    let bytes = write(&meta, &llama_tensors(&TINY, &tiny_weights(8, true)));
    assert!(matches!(
        LlamaModel::from_gguf_bytes(&bytes),
        Err(ModelError::Unsupported(_))
    ));
}

/// A seed file and the values of its tensors (empty: only the count is checked).
type Seed = (&'static str, &'static [(&'static str, &'static [f32])]);

/// The fuzz target's seeds (fuzz/make_gguf_seeds.py) must be valid files, or the fuzzer
/// starts from the first rejection instead of the reader's inner paths.
#[test]
fn the_gguf_fuzz_seeds_parse_and_dequantize() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/gguf");
    let want: [Seed; 3] = [
        ("metadata.gguf", &[]),
        (
            "f32_f16.gguf",
            &[
                ("a.weight", &[-1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0, 2.5]),
                ("b.weight", &[0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75]),
            ],
        ),
        ("quant_v2.gguf", &[("q.weight", &[]), ("r.weight", &[])]),
    ];
    for (file, tensors) in want {
        let bytes = std::fs::read(dir.join(file)).expect("seed file");
        let g = gguf::parse(&bytes).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(g.tensors.len(), tensors.len(), "{file}");
        for (name, values) in tensors {
            let t = g.tensor(name).unwrap_or_else(|| panic!("{file}: {name}"));
            let got = g
                .dequantize(t)
                .unwrap_or_else(|e| panic!("{file}: {name}: {e}"));
            assert_eq!(got.len() as u64, t.elements(), "{file}: {name}");
            if !values.is_empty() {
                assert_eq!(&got[..], *values, "{file}: {name}");
            }
        }
    }
    // Q8_0's first block: scale 0.05 (as f16) times -16..16.
    let bytes = std::fs::read(dir.join("quant_v2.gguf")).expect("seed file");
    let g = gguf::parse(&bytes).expect("quant seed");
    assert_eq!(g.alignment, 64);
    let r = g
        .dequantize(g.tensor("r.weight").expect("r"))
        .expect("Q8_0");
    let scale = half::f16::from_f32(0.05).to_f32();
    assert_eq!(r[0], -16.0 * scale);
    assert_eq!(r[31], 15.0 * scale);
}
