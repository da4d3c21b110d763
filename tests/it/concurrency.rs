//! One context shared by many threads: every call's result is bitwise the same as the
//! result of the same call made alone.

use std::sync::Arc;

use crate::common::*;
use ndarray::{Array2, Array4};
use wgpu_attention::*;

#[test]
fn context_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync + 'static>() {}
    assert_send_sync::<GpuContext>();
    assert_send_sync::<GpuTensor>();
    assert_send_sync::<GpuOutputs>();
    assert_send_sync::<AttentionError>();
}

/// One call's inputs and options, owned so that threads can share it.
struct Case {
    q: Array4<f32>,
    k: Array4<f32>,
    v: Array4<f32>,
    mask: Option<Array2<bool>>,
    causal: bool,
    kv_lens: Option<Vec<u32>>,
    weights: bool,
}

impl Case {
    fn run(&self, ctx: &GpuContext) -> AttentionOutput {
        let opts = AttentionOptions {
            causal: self.causal,
            mask: self.mask.as_ref().map(|m| Mask::Bool(m.view().into_dyn())),
            kv_lens: self.kv_lens.as_deref(),
            return_weights: self.weights,
            return_lse: true,
            ..Default::default()
        };
        attention(ctx, self.q.view(), self.k.view(), self.v.view(), &opts).expect("call failed")
    }
}

fn cases() -> Vec<Case> {
    let mut rng = Rng::new(31);
    let mut case = |b, hq, hkv, lq, lk, d, dv| Case {
        q: rng.array4((b, hq, lq, d)),
        k: rng.array4((b, hkv, lk, d)),
        v: rng.array4((b, hkv, lk, dv)),
        mask: None,
        causal: false,
        kv_lens: None,
        weights: false,
    };
    let mut cases = vec![
        case(1, 2, 1, 5, 7, 8, 8),
        case(2, 4, 2, 9, 9, 16, 4),
        case(1, 1, 1, 33, 17, 4, 12),
        case(2, 2, 2, 1, 40, 8, 8),
        case(1, 3, 1, 16, 16, 32, 16),
        case(3, 2, 1, 6, 11, 8, 8),
    ];
    cases[1].causal = true;
    cases[2].weights = true;
    cases[3].kv_lens = Some(vec![13, 40]);
    cases[4].mask = Some(Array2::from_shape_fn((16, 16), |(i, j)| (i + j) % 3 != 0));
    cases[5].causal = true;
    cases[5].weights = true;
    cases
}

#[test]
fn eight_threads_share_one_context_and_get_single_thread_results() {
    const THREADS: usize = 8;
    const CALLS: usize = 200;
    let ctx = Arc::new(GpuContext::new().expect("no GPU adapter"));
    let cases = Arc::new(cases());
    let alone: Arc<Vec<Vec<u32>>> =
        Arc::new(cases.iter().map(|c| output_bits(&c.run(&ctx))).collect());
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (ctx, cases, alone) = (ctx.clone(), cases.clone(), alone.clone());
            std::thread::spawn(move || {
                for call in 0..CALLS {
                    let n = (t * 7 + call) % cases.len();
                    let got = output_bits(&cases[n].run(&ctx));
                    assert!(
                        got == alone[n],
                        "thread {t}, call {call}: case {n} differs from its single-thread result"
                    );
                }
            })
        })
        .collect();
    for (t, w) in workers.into_iter().enumerate() {
        if let Err(panic) = w.join() {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            panic!("thread {t} failed: {message}");
        }
    }
}
