mod common;
use common::*;
use wgpu_attention::*;

#[test]
fn causal_matches_reference() {
    let mut rng = Rng::new(1);
    let q = rng.array4((2, 4, 33, 16));
    let k = rng.array4((2, 2, 40, 16));
    let v = rng.array4((2, 2, 40, 24));
    let opts = AttentionOptions {
        causal: true,
        return_weights: true,
        return_lse: true,
        ..Default::default()
    };
    let gpu = attention(ctx(), q.view(), k.view(), v.view(), &opts).unwrap();
    let cpu = attention_cpu(q.view(), k.view(), v.view(), &opts).unwrap();
    assert_close("out", gpu.out.view(), cpu.out.view(), ATOL, RTOL);
    assert_close(
        "weights",
        gpu.weights.unwrap().view(),
        cpu.weights.unwrap().view(),
        ATOL,
        RTOL,
    );
    assert_close(
        "lse",
        gpu.lse.unwrap().view(),
        cpu.lse.unwrap().view(),
        ATOL,
        RTOL,
    );
}
