//! Tiny llamas whose matrices are GGUF blocks of each quantized type (random blocks, as
//! a file would hold them): the GPU pass, which decodes the blocks in its kernels, against
//! the float64 CPU pass on the same blocks dequantized on the host.

use ndarray::Array1;
use wgpu_attention::model::llama::quant::GgmlType;
use wgpu_attention::model::llama::{LlamaConfig, LlamaModel};
use wgpu_attention::model::{
    force_pages_for_tests, force_split_products_for_tests, GenerateOptions, Sampling,
};
use wgpu_attention::GpuContext;

use super::gguf_writer::{llama_meta, write, Tensor};
use super::quant_gpu::random_tensor;
use super::tiny_model::tiny_tokenizer_spec;
use crate::common::{assert_close, ctx, Rng};

/// Wide enough for K-quant superblocks (256) in every matrix.
const WIDE: LlamaConfig = LlamaConfig {
    layers: 2,
    hidden: 256,
    heads: 4,
    kv_heads: 2,
    head_dim: 64,
    intermediate: 512,
    vocab: 258,
    context: 64,
    rms_eps: 1.0 / 65536.0,
    rope_theta: 10_000.0,
};

/// A GGUF file of `c`'s model: the embedding table of type `embed`, attn_v and ffn_up of
/// type `odd` (files in the wild mix types so; the GPU pass then splits its fused
/// products), every other matrix of type `matrices`, norms F32 near 1.
fn quantized_gguf(
    c: &LlamaConfig,
    (embed, matrices, odd): (GgmlType, GgmlType, GgmlType),
    seed: u64,
) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let (h, q, kv, f) = (
        c.hidden,
        c.heads * c.head_dim,
        c.kv_heads * c.head_dim,
        c.intermediate,
    );
    let mut mat = |name: String, ty: GgmlType, (cols, rows): (usize, usize)| Tensor {
        name,
        dims: vec![cols as u64, rows as u64],
        ty: ty.0,
        data: random_tensor(&mut rng, ty, rows, cols),
    };
    let mut tensors = vec![mat("token_embd.weight".into(), embed, (h, c.vocab))];
    for i in 0..c.layers {
        let n = |s: &str| format!("blk.{i}.{s}");
        tensors.push(mat(n("attn_q.weight"), matrices, (h, q)));
        tensors.push(mat(n("attn_k.weight"), matrices, (h, kv)));
        tensors.push(mat(n("attn_v.weight"), odd, (h, kv)));
        tensors.push(mat(n("attn_output.weight"), matrices, (q, h)));
        tensors.push(mat(n("ffn_gate.weight"), matrices, (h, f)));
        tensors.push(mat(n("ffn_up.weight"), odd, (h, f)));
        tensors.push(mat(n("ffn_down.weight"), matrices, (f, h)));
    }
    let mut rng = Rng::new(seed + 1);
    let mut norm = |name: String| Tensor {
        name,
        dims: vec![h as u64],
        ty: 0,
        data: (0..h)
            .flat_map(|_| (1.0 + 0.1 * rng.normal()).to_le_bytes())
            .collect(),
    };
    for i in 0..c.layers {
        tensors.push(norm(format!("blk.{i}.attn_norm.weight")));
        tensors.push(norm(format!("blk.{i}.ffn_norm.weight")));
    }
    tensors.push(norm("output_norm.weight".into()));
    write(&llama_meta(c, &tiny_tokenizer_spec()), &tensors)
}

#[test]
fn quantized_models_on_the_gpu_match_the_cpu_pass() {
    check_mixes(ctx(), "");
}

/// The same with every product of at most 16 rows on the entry that splits K across
/// lanes (GPUs take it), whose sums, norms and epilogues go through a reduction.
#[test]
fn quantized_models_with_k_split_across_lanes_match_the_cpu_pass() {
    let split = GpuContext::new().expect("no GPU adapter");
    force_split_products_for_tests(&split);
    check_mixes(&split, " (K split across lanes)");
}

/// The same with the Q4_1 matrices in uniform pages of at most three rows (what the
/// real model's Q4_1 projections take on lavapipe, where its decoding steps read them
/// through the paged entry): several dispatches a product, with every norm and
/// epilogue. Pages so small take more memory than the rows, which this run does not
/// bound.
#[test]
fn quantized_models_with_paged_weights_match_the_cpu_pass() {
    let paged = GpuContext::new().expect("no GPU adapter");
    force_pages_for_tests(&paged, 3);
    // Where the paged entry serves (a CPU adapter of 8-lane subgroups), the Q4_1
    // matrices are in pages, which at three rows a page take far more memory than rows.
    let mix = (GgmlType::Q8_0, GgmlType::Q4_1, GgmlType::Q4_1);
    let m = LlamaModel::from_gguf_bytes(&quantized_gguf(&WIDE, mix, 0)).expect("model");
    let in_pages = m.upload(&paged).expect("upload").weight_bytes();
    let in_rows = m.upload(ctx()).expect("upload").weight_bytes();
    let info = paged.adapter_info();
    let lanes = info.device_type == wgpu::DeviceType::Cpu
        && paged.features().contains(wgpu::Features::SUBGROUP)
        && (info.subgroup_min_size, info.subgroup_max_size) == (8, 8);
    assert_eq!(
        in_pages > in_rows,
        lanes,
        "{in_pages} bytes in pages, {in_rows} in rows, on {info:?}"
    );
    check_mixes(&paged, " (paged)");
}

/// Every mix of types: a 19-token forward pass and a 7-token one (at most 16 rows: the
/// few-row tiles) against the float64 CPU pass, and six greedy tokens with the cache.
fn check_mixes(ctx: &GpuContext, entry: &str) {
    let mixes = [
        (GgmlType::Q8_0, GgmlType::Q4_1, GgmlType::Q4_1),
        (GgmlType::Q4_0, GgmlType::Q4_0, GgmlType::Q4_0),
        (GgmlType::Q6_K, GgmlType::Q4_K, GgmlType::Q6_K),
        (GgmlType::F16, GgmlType::Q6_K, GgmlType::Q6_K),
        (GgmlType::Q4_K, GgmlType::Q8_0, GgmlType::Q4_0),
    ];
    let ids: Vec<u32> = (0..19).map(|i| (i * 41 % 258) as u32).collect();
    for (seed, mix) in mixes.into_iter().enumerate() {
        let what = format!(
            "{} embedding, {} matrices, {} v and up{entry}",
            mix.0.name(),
            mix.1.name(),
            mix.2.name()
        );
        let m = LlamaModel::from_gguf_bytes(&quantized_gguf(&WIDE, mix, seed as u64))
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let gpu = m.upload(ctx).expect("upload");
        assert!(
            entry == " (paged)" || gpu.weight_bytes() as f64 <= 1.25 * m.tensors().bytes() as f64,
            "{what}: {} device bytes for {} file bytes",
            gpu.weight_bytes(),
            m.tensors().bytes()
        );
        for ids in [&ids[..], &ids[..7]] {
            let what = format!("{what}, {} tokens", ids.len());
            let cpu = m.forward_reference(ids, false).expect("reference");
            let got = pollster::block_on(gpu.forward(ctx, ids, false)).expect("gpu");
            assert_close(
                &format!("{what}: hidden"),
                got.hidden.view(),
                cpu.hidden.view(),
                2e-4,
                2e-4,
            );
            let (gl, cl): (Array1<f32>, Array1<f32>) =
                (got.logits.expect("l"), cpu.logits.expect("l"));
            assert_close(&format!("{what}: logits"), gl.view(), cl.view(), 2e-4, 2e-4);
        }
        let opts = GenerateOptions {
            max_new_tokens: 6,
            use_cache: true,
            stop_at_eos: false,
            sampling: Sampling::Greedy,
        };
        let g =
            pollster::block_on(gpu.generate(ctx, &ids[..5], &opts, &mut |_| {})).expect("gpu gen");
        let c = m
            .generate_reference(&ids[..5], &opts, &mut |_| {})
            .expect("cpu gen");
        assert_eq!(g.generated, c.generated, "{what}: greedy tokens");
    }
}
