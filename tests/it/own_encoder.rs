//! Attention recorded into the application's own encoder, from and into its own buffers
//! (`PreparedAttention`): the same result as `attention()`, alongside the application's
//! own commands, and every wrong buffer a typed error naming it before wgpu sees it.

use crate::common::*;
use ndarray::{Array4, ArrayD};
use wgpu::util::DeviceExt;
use wgpu_attention::{
    attention, attention_reference, AttentionBuffers, AttentionError, AttentionOptions, GpuContext,
    KernelPath, Mask, PreparedAttention,
};

const IO: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
    .union(wgpu::BufferUsages::COPY_SRC)
    .union(wgpu::BufferUsages::COPY_DST);

fn buffer_of(ctx: &GpuContext, a: &[f32], usage: wgpu::BufferUsages) -> wgpu::Buffer {
    ctx.device()
        .create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("test app buffer"),
            contents: bytemuck::cast_slice(a),
            usage,
        })
}

/// NaN-filled, so an element the recording never writes fails the comparison.
fn nan_buffer(ctx: &GpuContext, elements: usize) -> wgpu::Buffer {
    buffer_of(ctx, &vec![f32::NAN; elements], IO)
}

fn read(ctx: &GpuContext, b: &wgpu::Buffer, shape: &[usize]) -> ArrayD<f32> {
    let t = wgpu_attention::GpuTensor::from_buffer(b.clone(), shape).unwrap();
    t.read(ctx).unwrap()
}

fn prepare(
    ctx: &GpuContext,
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    opts: &AttentionOptions<'_>,
) -> PreparedAttention {
    pollster::block_on(PreparedAttention::new(
        ctx,
        q.shape(),
        k.shape(),
        v.shape(),
        opts,
    ))
    .unwrap()
}

#[test]
fn recorded_into_an_own_encoder_equals_attention() {
    let (device, queue) = app_device(|l| l);
    let ctx = GpuContext::from_device(device, queue);
    let mut rng = Rng::new(91);
    let (q, k, v) = rng.qkv((2, 4, 2), (9, 13), (16, 8));
    let mask = Array4::from_shape_fn((1, 1, 9, 13), |(_, _, i, j)| (i + j) % 5 != 0).into_dyn();
    for (name, opts) in [
        (
            "fused",
            AttentionOptions {
                causal: true,
                return_lse: true,
                ..Default::default()
            },
        ),
        (
            "staged with mask and weights",
            AttentionOptions {
                mask: Some(Mask::Bool(mask.view())),
                return_weights: true,
                ..Default::default()
            },
        ),
        (
            "decode",
            AttentionOptions {
                path: KernelPath::Decode,
                kv_lens: Some(&[11, 13]),
                ..Default::default()
            },
        ),
    ] {
        let prepared = prepare(&ctx, &q, &k, &v, &opts);
        let want = attention(&ctx, q.view(), k.view(), v.view(), &opts).unwrap();
        let (qb, kb, vb) = (
            buffer_of(&ctx, q.as_slice().unwrap(), IO),
            buffer_of(&ctx, k.as_slice().unwrap(), IO),
            buffer_of(&ctx, v.as_slice().unwrap(), IO),
        );
        let out = nan_buffer(&ctx, 2 * 4 * 9 * 8);
        let weights = opts
            .return_weights
            .then(|| nan_buffer(&ctx, 2 * 4 * 9 * 13));
        let lse = opts.return_lse.then(|| nan_buffer(&ctx, 2 * 4 * 9));
        // The application's own commands around the attention: a copy out of its result.
        let copy = nan_buffer(&ctx, 2 * 4 * 9 * 8);
        let mut encoder = ctx.device().create_command_encoder(&Default::default());
        let buffers = AttentionBuffers {
            q: &qb,
            k: &kb,
            v: &vb,
            out: &out,
            weights: weights.as_ref(),
            lse: lse.as_ref(),
        };
        prepared.record(&ctx, &mut encoder, &buffers).unwrap();
        encoder.copy_buffer_to_buffer(&out, 0, &copy, 0, out.size());
        ctx.queue().submit([encoder.finish()]);

        let got = read(&ctx, &copy, &[2, 4, 9, 8]);
        assert_eq!(
            got.as_slice().unwrap(),
            want.out.as_slice().unwrap(),
            "{name}: recorded out differs from attention()"
        );
        let cpu = attention_reference(q.view(), k.view(), v.view(), &opts).unwrap();
        assert_close(name, got.view(), cpu.out.view().into_dyn(), ATOL, RTOL);
        if let Some(w) = &weights {
            let got = read(&ctx, w, &[2, 4, 9, 13]);
            let want = cpu.weights.as_ref().unwrap().view().into_dyn();
            assert_close(&format!("{name} weights"), got.view(), want, ATOL, RTOL);
        }
        if let Some(l) = &lse {
            let got = read(&ctx, l, &[2, 4, 9]);
            let want = cpu.lse.as_ref().unwrap().view().into_dyn();
            assert_close(&format!("{name} lse"), got.view(), want, ATOL, RTOL);
        }
    }
}

#[test]
fn one_preparation_records_twice_into_one_encoder() {
    // Two layers of self-attention in one submission: the second reads the first's out.
    let ctx = ctx();
    let x = Rng::new(92).array4((1, 2, 10, 8));
    let opts = AttentionOptions::default();
    let prepared = prepare(ctx, &x, &x, &x, &opts);
    let xb = buffer_of(ctx, x.as_slice().unwrap(), IO);
    let (h1, h2) = (nan_buffer(ctx, x.len()), nan_buffer(ctx, x.len()));
    let mut encoder = ctx.device().create_command_encoder(&Default::default());
    for (input, out) in [(&xb, &h1), (&h1, &h2)] {
        let b = AttentionBuffers {
            q: input,
            k: input,
            v: input,
            out,
            weights: None,
            lse: None,
        };
        prepared.record(ctx, &mut encoder, &b).unwrap();
    }
    ctx.queue().submit([encoder.finish()]);
    let first = attention_reference(x.view(), x.view(), x.view(), &opts)
        .unwrap()
        .out;
    let second = attention_reference(first.view(), first.view(), first.view(), &opts)
        .unwrap()
        .out;
    let got = read(ctx, &h2, x.shape());
    assert_close(
        "two layers",
        got.view(),
        second.view().into_dyn(),
        ATOL,
        RTOL,
    );
}

fn expect_err(
    prepared: &PreparedAttention,
    ctx: &GpuContext,
    b: &AttentionBuffers<'_>,
) -> AttentionError {
    let mut encoder = ctx.device().create_command_encoder(&Default::default());
    let e = prepared
        .record(ctx, &mut encoder, b)
        .expect_err("a wrong buffer must be refused");
    // Nothing was recorded: the encoder still finishes and submits cleanly.
    ctx.queue().submit([encoder.finish()]);
    e
}

fn arg_of(e: &AttentionError) -> &'static str {
    match e {
        AttentionError::Shape { arg, .. } | AttentionError::InvalidOption { arg, .. } => arg,
        other => panic!("not an input error: {other}"),
    }
}

#[test]
fn wrong_buffers_are_typed_errors_naming_the_argument() {
    let ctx = ctx();
    let (q, k, v) = Rng::new(93).qkv((1, 2, 1), (6, 7), (8, 4));
    let opts = AttentionOptions {
        return_weights: true,
        ..Default::default()
    };
    let prepared = prepare(ctx, &q, &k, &v, &opts);
    let sized = |n: usize, usage| buffer_of(ctx, &vec![0.0; n], usage);
    let (qb, kb, vb) = (
        buffer_of(ctx, q.as_slice().unwrap(), IO),
        buffer_of(ctx, k.as_slice().unwrap(), IO),
        buffer_of(ctx, v.as_slice().unwrap(), IO),
    );
    let (out, w) = (sized(2 * 6 * 4, IO), sized(2 * 6 * 7, IO));
    let good = AttentionBuffers {
        q: &qb,
        k: &kb,
        v: &vb,
        out: &out,
        weights: Some(&w),
        lse: None,
    };

    let small_k = sized(k.len() - 1, IO);
    let e = expect_err(
        &prepared,
        ctx,
        &AttentionBuffers {
            k: &small_k,
            ..good
        },
    );
    assert!(matches!(e, AttentionError::Shape { arg: "k", .. }), "{e}");
    assert!(e.to_string().contains("[1, 1, 7, 8]"), "{e}");

    let small_out = sized(2 * 6 * 4 - 1, IO);
    let e = expect_err(
        &prepared,
        ctx,
        &AttentionBuffers {
            out: &small_out,
            ..good
        },
    );
    assert_eq!(arg_of(&e), "out", "{e}");

    let not_storage = sized(v.len(), wgpu::BufferUsages::COPY_SRC);
    let e = expect_err(
        &prepared,
        ctx,
        &AttentionBuffers {
            v: &not_storage,
            ..good
        },
    );
    assert!(matches!(e, AttentionError::Shape { arg: "v", .. }), "{e}");
    assert!(e.to_string().contains("STORAGE"), "{e}");

    let storage_only = sized(2 * 6 * 7, wgpu::BufferUsages::STORAGE);
    let e = expect_err(
        &prepared,
        ctx,
        &AttentionBuffers {
            weights: Some(&storage_only),
            ..good
        },
    );
    assert_eq!(arg_of(&e), "weights", "{e}");

    let e = expect_err(
        &prepared,
        ctx,
        &AttentionBuffers {
            weights: None,
            ..good
        },
    );
    assert!(
        matches!(e, AttentionError::InvalidOption { arg: "weights", .. }),
        "{e}"
    );

    let lse = sized(2 * 6, IO);
    let e = expect_err(
        &prepared,
        ctx,
        &AttentionBuffers {
            lse: Some(&lse),
            ..good
        },
    );
    assert_eq!(arg_of(&e), "lse", "{e}");

    let e = expect_err(&prepared, ctx, &AttentionBuffers { out: &qb, ..good });
    assert!(
        matches!(e, AttentionError::InvalidOption { arg: "out", .. }),
        "{e}"
    );
    assert!(e.to_string().contains("q"), "{e}");

    let e = expect_err(
        &prepared,
        ctx,
        &AttentionBuffers {
            out: &w,
            weights: Some(&w),
            ..good
        },
    );
    assert!(
        matches!(e, AttentionError::InvalidOption { arg: "out", .. }),
        "{e}"
    );
    assert!(e.to_string().contains("weights"), "{e}");

    // A context on another device cannot record what this one prepared.
    let (device, queue) = app_device(|l| l);
    let other = GpuContext::from_device(device, queue);
    let mut encoder = other.device().create_command_encoder(&Default::default());
    let e = prepared.record(&other, &mut encoder, &good).unwrap_err();
    assert_eq!(arg_of(&e), "ctx", "{e}");

    // The good buffers still record and give the reference's weights.
    let mut encoder = ctx.device().create_command_encoder(&Default::default());
    prepared.record(ctx, &mut encoder, &good).unwrap();
    ctx.queue().submit([encoder.finish()]);
    let want = attention_reference(q.view(), k.view(), v.view(), &opts).unwrap();
    let got = read(ctx, &w, &[1, 2, 6, 7]);
    let want_w = want.weights.unwrap().into_dyn();
    assert_close(
        "weights after refusals",
        got.view(),
        want_w.view(),
        ATOL,
        RTOL,
    );
}

#[test]
fn bad_shapes_fail_at_preparation() {
    let ctx = ctx();
    let e = pollster::block_on(PreparedAttention::new(
        ctx,
        &[1, 3, 4, 8],
        &[1, 2, 4, 8],
        &[1, 2, 4, 8],
        &AttentionOptions::default(),
    ))
    .unwrap_err();
    assert!(e.is_input_error(), "{e}");
}

#[test]
fn one_preparation_serves_a_growing_cache_through_set_kv_lens() {
    // A decoding loop: q of one row against a store of 40 keys, of which the first n
    // are filled; the same preparation with its key lengths rewritten before each step,
    // two batches with lengths of their own, on every path that takes key lengths.
    let ctx = ctx();
    let (q, k, v) = Rng::new(94).qkv((2, 6, 3), (1, 40), (16, 16));
    for path in [KernelPath::Auto, KernelPath::Decode, KernelPath::Fused] {
        let first = [1, 1];
        let opts = AttentionOptions {
            kv_lens: Some(&first),
            path,
            ..Default::default()
        };
        let prepared = prepare(ctx, &q, &k, &v, &opts);
        let (qb, kb, vb) = (
            buffer_of(ctx, q.as_slice().unwrap(), IO),
            buffer_of(ctx, k.as_slice().unwrap(), IO),
            buffer_of(ctx, v.as_slice().unwrap(), IO),
        );
        for lens in [[1, 1], [2, 7], [17, 3], [40, 40], [5, 39]] {
            prepared.set_kv_lens(ctx, &lens).unwrap();
            let out = nan_buffer(ctx, q.len());
            let b = AttentionBuffers {
                q: &qb,
                k: &kb,
                v: &vb,
                out: &out,
                weights: None,
                lse: None,
            };
            let mut encoder = ctx.device().create_command_encoder(&Default::default());
            prepared.record(ctx, &mut encoder, &b).unwrap();
            ctx.queue().submit([encoder.finish()]);
            let want_opts = AttentionOptions {
                kv_lens: Some(&lens),
                ..Default::default()
            };
            let want = attention_reference(q.view(), k.view(), v.view(), &want_opts)
                .unwrap()
                .out;
            let got = read(ctx, &out, q.shape());
            assert_close(
                &format!("{path:?} at key lengths {lens:?}"),
                got.view(),
                want.view().into_dyn(),
                ATOL,
                RTOL,
            );
        }
    }
}

#[test]
fn set_kv_lens_refuses_what_the_preparation_cannot_take() {
    let ctx = ctx();
    let (q, k, v) = Rng::new(95).qkv((2, 2, 2), (1, 9), (8, 8));
    let lens = [3, 4];
    let with = prepare(
        ctx,
        &q,
        &k,
        &v,
        &AttentionOptions {
            kv_lens: Some(&lens),
            ..Default::default()
        },
    );
    let e = with.set_kv_lens(ctx, &[3]).unwrap_err();
    assert!(
        matches!(e, AttentionError::Shape { arg: "kv_lens", .. }),
        "{e}"
    );
    let e = with.set_kv_lens(ctx, &[3, 10]).unwrap_err();
    assert!(
        matches!(e, AttentionError::InvalidOption { arg: "kv_lens", .. }),
        "{e}"
    );
    assert!(e.to_string().contains("kv_lens[1] = 10"), "{e}");
    let without = prepare(ctx, &q, &k, &v, &AttentionOptions::default());
    let e = without.set_kv_lens(ctx, &lens).unwrap_err();
    assert!(
        matches!(e, AttentionError::InvalidOption { arg: "kv_lens", .. }),
        "{e}"
    );
    // Another context's device cannot write this preparation's buffer.
    let (device, queue) = app_device(|l| l);
    let other = GpuContext::from_device(device, queue);
    let e = with.set_kv_lens(&other, &lens).unwrap_err();
    assert!(
        matches!(e, AttentionError::InvalidOption { arg: "ctx", .. }),
        "{e}"
    );
}
