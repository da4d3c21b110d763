//! Chat: the GGUF `tokenizer.chat_template` rendered for a conversation, the end-of-turn
//! token and the stop there, on the tiny model written as a GGUF file with a template
//! (CPU and GPU), and on SmolLM2-135M-Instruct (`real_*`, ignored: needs the fetched
//! models; `cargo test --release --test it -- --ignored model_llama::chat::`).

use wgpu_attention::model::llama::{ChatMessage, LlamaModel};
use wgpu_attention::model::{GenerateOptions, ModelError, Sampling};

use super::gguf_writer::{llama_meta, llama_tensors, write, Meta};
use super::tiny_model::{tiny_tokenizer_spec, tiny_weights, TINY};
use crate::common::ctx;

/// A template of the tiny model's own tokens: each turn ends with its only control
/// token, `<|endoftext|>` (257).
const TEMPLATE: &str = "{% for message in messages %}\n{{ message['role'] }}: {{ message['content'] }}<|endoftext|>\n{% endfor %}\n{% if add_generation_prompt %}assistant:{% endif %}";

fn tiny_chat_gguf(extra: Vec<(String, Meta)>) -> Vec<u8> {
    let mut meta = llama_meta(&TINY, &tiny_tokenizer_spec());
    meta.push(("tokenizer.chat_template".into(), Meta::Str(TEMPLATE.into())));
    meta.extend(extra);
    write(&meta, &llama_tensors(&TINY, &tiny_weights(8, true)))
}

fn greedy(n: usize) -> GenerateOptions {
    GenerateOptions {
        max_new_tokens: n,
        sampling: Sampling::Greedy,
        use_cache: true,
        stop_at_eos: true,
    }
}

#[test]
fn the_template_in_the_file_makes_the_prompt() {
    let m = LlamaModel::from_gguf_bytes(&tiny_chat_gguf(Vec::new())).expect("parse");
    assert_eq!(m.chat_template().map(|t| t.source()), Some(TEMPLATE));
    // trim_blocks: the newline after each block tag is dropped, as transformers renders.
    let messages = [
        ChatMessage::new("system", "be brief"),
        ChatMessage::new("user", "the cat"),
    ];
    let want = "system: be brief<|endoftext|>\nuser: the cat<|endoftext|>\nassistant:";
    let ids = m.chat_prompt(&messages).expect("chat prompt");
    let direct: Vec<u32> = m
        .tokenize(want)
        .expect("ids")
        .iter()
        .map(|t| t.id)
        .collect();
    assert_eq!(ids, direct);
    assert_eq!(m.decode(&ids).expect("decode"), want);
    assert_eq!(
        ids.iter().filter(|&&t| t == 257).count(),
        2,
        "control tokens matched whole"
    );
    assert_eq!(m.end_of_turn(), Some(257));
    assert!(
        m.info().tokenizer.contains("chat template"),
        "{}",
        m.info().tokenizer
    );
    // A model without a template says so, naming --chat.
    let plain = LlamaModel::from_gguf_bytes(&write(
        &llama_meta(&TINY, &tiny_tokenizer_spec()),
        &llama_tensors(&TINY, &tiny_weights(8, true)),
    ))
    .expect("parse");
    assert!(matches!(
        plain.chat_prompt(&messages),
        Err(ModelError::Input { arg: "--chat", .. })
    ));
}

#[test]
fn a_broken_template_is_refused_when_the_model_loads() {
    let mut meta = llama_meta(&TINY, &tiny_tokenizer_spec());
    meta.push((
        "tokenizer.chat_template".into(),
        Meta::Str("{% for m in messages %}{{ m".into()),
    ));
    let bytes = write(&meta, &llama_tensors(&TINY, &tiny_weights(8, true)));
    assert!(matches!(
        LlamaModel::from_gguf_bytes(&bytes),
        Err(ModelError::Unsupported(_))
    ));
}

#[test]
fn generation_stops_at_the_end_of_turn_on_cpu_and_gpu() {
    let base = LlamaModel::from_gguf_bytes(&tiny_chat_gguf(Vec::new())).expect("parse");
    let prompt = base
        .chat_prompt(&[ChatMessage::new("user", "the cat")])
        .expect("prompt");
    let all = base
        .generate_cpu(
            &prompt,
            &GenerateOptions {
                stop_at_eos: false,
                ..greedy(12)
            },
            &mut |_| {},
        )
        .expect("generate")
        .generated;
    // Name the fourth token the end of a turn: generation must stop right before its
    // first occurrence, on both paths.
    let eot = all[3];
    let cut = all.iter().position(|&t| t == eot).unwrap_or(all.len());
    let file = tiny_chat_gguf(vec![("tokenizer.ggml.eot_token_id".into(), Meta::U32(eot))]);
    let mut m = LlamaModel::from_gguf_bytes(&file).expect("parse");
    assert_eq!(m.end_of_turn(), Some(eot));
    m.stop_at_end_of_turn();
    let mut seen = Vec::new();
    let cpu = m
        .generate_cpu(&prompt, &greedy(12), &mut |t| seen.push(t))
        .expect("cpu generate");
    assert_eq!(cpu.generated, all[..cut].to_vec());
    assert_eq!(
        seen, cpu.generated,
        "the end-of-turn token is not passed on"
    );
    let weights = m.upload(ctx()).expect("upload");
    let gpu = pollster::block_on(weights.generate(ctx(), &prompt, &greedy(12), &mut |_| {}))
        .expect("gpu generate");
    assert_eq!(gpu.generated, cpu.generated);
}

mod real {
    use super::*;
    use wgpu_attention::model::resolve_model_path;

    /// SmolLM2-135M-Instruct's template rendered for one user message, as transformers'
    /// `apply_chat_template(..., add_generation_prompt=True)` renders it.
    const FRANCE: &str = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n";

    #[test]
    #[ignore = "needs the fetched models: scripts/fetch-models.sh"]
    fn smollm2_answers_in_one_turn() {
        let path = resolve_model_path("smollm2").expect("run scripts/fetch-models.sh first");
        let mut m = LlamaModel::load(&path).expect("load SmolLM2");
        let template = m.chat_template().expect("SmolLM2 carries a chat template");
        let user = [ChatMessage::new("user", "What is the capital of France?")];
        assert_eq!(template.render(&user, true).expect("render"), FRANCE);
        let ids = m.chat_prompt(&user).expect("prompt");
        assert_eq!(m.decode(&ids).expect("decode"), FRANCE);
        assert_eq!(ids[0], 1, "<|im_start|> as one token");
        assert_eq!(m.end_of_turn(), Some(2), "<|im_end|>");
        m.stop_at_end_of_turn();
        let weights = m.upload(ctx()).expect("upload");
        let stats = pollster::block_on(weights.generate(ctx(), &ids, &greedy(48), &mut |_| {}))
            .expect("generate");
        let reply = m.decode(&stats.generated).expect("decode");
        assert!(
            stats.generated.len() < 48 && !stats.generated.contains(&2),
            "the turn did not end: {reply:?}"
        );
        assert!(reply.contains("Paris"), "{reply:?}");
    }
}
