//! The chat template a GGUF file carries in `tokenizer.chat_template` (a Jinja template,
//! as Hugging Face's `apply_chat_template` renders it), and the token that ends a turn.
//!
//! Rendered with `minijinja`, a maintained Jinja implementation, configured as
//! `transformers` configures Jinja for chat templates: `trim_blocks` and `lstrip_blocks`
//! on, `messages` (role, content), `add_generation_prompt`, `bos_token`, `eos_token`, and
//! a `raise_exception(message)` function. A template runs on a bounded amount of fuel, so
//! a hostile one ends in an error instead of running for ever.
//!
//! The end-of-turn token is `tokenizer.ggml.eot_token_id` where the file names one;
//! otherwise the control token the template writes right after a message's content
//! (`<|im_end|>` for SmolLM2), found by rendering a message whose content is a marker;
//! otherwise end-of-sequence.

use minijinja::{Environment, Error, ErrorKind, Value};
use serde::Serialize;

use crate::model::llama::gguf::{Gguf, Value as GgufValue};
use crate::model::ModelError;

/// Far above any real template (SmolLM2's is 420 bytes, the largest in the wild a few
/// tens of kilobytes).
const TEMPLATE_LIMIT: usize = 1 << 20;

/// Template instructions one render may execute; real chat templates use a few hundred
/// per message.
const FUEL: u64 = 5_000_000;

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChatMessage {
    /// `system`, `user` or `assistant`.
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: &str, content: &str) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// A chat template and the special tokens it may print.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatTemplate {
    source: String,
    bos_token: String,
    eos_token: String,
}

fn template_error(e: &Error) -> ModelError {
    ModelError::Unsupported(format!("the chat template: {e}"))
}

fn raise_exception(message: String) -> Result<String, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

impl ChatTemplate {
    /// A template with the texts of its `bos_token` and `eos_token`.
    ///
    /// # Errors
    /// [`ModelError::Format`] for a template over 1 MiB; [`ModelError::Unsupported`] for
    /// one `minijinja` cannot parse.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<Self, ModelError> {
        if source.len() > TEMPLATE_LIMIT {
            return Err(ModelError::format(
                "tokenizer.chat_template",
                format!("{} bytes; at most {TEMPLATE_LIMIT}", source.len()),
            ));
        }
        let t = Self {
            source: source.into(),
            bos_token: bos_token.into(),
            eos_token: eos_token.into(),
        };
        // Parsed once here, so a broken template is refused when the model loads.
        t.environment()
            .template_from_str(&t.source)
            .map_err(|e| template_error(&e))?;
        Ok(t)
    }

    /// `tokenizer.chat_template` of `g`, with the BOS and EOS token texts from
    /// `tokens`; `None` when the file has no template.
    ///
    /// # Errors
    /// [`ModelError::Format`] when the key is not a string; as [`ChatTemplate::new`].
    pub(crate) fn from_gguf(
        g: &Gguf<'_>,
        tokens: &[String],
        bos: Option<u32>,
        eos: Option<u32>,
    ) -> Result<Option<Self>, ModelError> {
        let Some(value) = g.get("tokenizer.chat_template") else {
            return Ok(None);
        };
        let source = value
            .as_str()
            .ok_or_else(|| ModelError::format("tokenizer.chat_template", "is not a string"))?;
        let text = |id: Option<u32>| {
            id.and_then(|i| tokens.get(i as usize))
                .cloned()
                .unwrap_or_default()
        };
        Self::new(source, &text(bos), &text(eos)).map(Some)
    }

    /// The template's source text.
    pub fn source(&self) -> &str {
        &self.source
    }

    fn environment(&self) -> Environment<'_> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_fuel(Some(FUEL));
        env.add_function("raise_exception", raise_exception);
        env
    }

    /// The prompt text of `messages`, ending with the assistant's turn opened when
    /// `add_generation_prompt`.
    ///
    /// # Errors
    /// [`ModelError::Input`] naming `--text` when the template refuses the conversation
    /// (`raise_exception`) or runs out of fuel; [`ModelError::Unsupported`] when it uses
    /// something `minijinja` lacks.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, ModelError> {
        let env = self.environment();
        let template = env
            .template_from_str(&self.source)
            .map_err(|e| template_error(&e))?;
        let ctx = Value::from_serialize(serde_json::json!({
            "messages": messages,
            "add_generation_prompt": add_generation_prompt,
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
        }));
        template.render(ctx).map_err(|e| match e.kind() {
            ErrorKind::InvalidOperation | ErrorKind::OutOfFuel => {
                ModelError::input("--text", format!("the chat template refuses it: {e}"))
            }
            _ => template_error(&e),
        })
    }

    /// The control token (one of `control`, as (id, text)) the template writes right after
    /// a message's content, if it writes one.
    pub(crate) fn turn_end(&self, control: &[(u32, &str)]) -> Option<u32> {
        const MARK: &str = "\u{1}wgpu-attention-turn\u{1}";
        let rendered = self.render(&[ChatMessage::new("user", MARK)], false).ok()?;
        let after = &rendered[rendered.find(MARK)? + MARK.len()..];
        control
            .iter()
            .filter(|(_, text)| !text.is_empty() && after.starts_with(text))
            .max_by_key(|(_, text)| text.len())
            .map(|&(id, _)| id)
    }
}

/// `tokenizer.ggml.eot_token_id`, when the file has it.
pub(crate) fn eot_id(g: &Gguf<'_>) -> Option<u32> {
    g.get("tokenizer.ggml.eot_token_id")
        .and_then(GgufValue::as_u64)
        .and_then(|v| u32::try_from(v).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SmolLM2-135M-Instruct's `tokenizer.chat_template`, verbatim.
    pub(crate) const SMOLLM2: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    #[test]
    fn smollm2_renders_as_transformers_does() {
        let t = ChatTemplate::new(SMOLLM2, "<|im_start|>", "<|im_end|>").unwrap();
        let got = t
            .render(&[ChatMessage::new("user", "What is 2+2?")], true)
            .unwrap();
        assert_eq!(
            got,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
        );
        let with_system = t
            .render(
                &[
                    ChatMessage::new("system", "Be brief."),
                    ChatMessage::new("user", "Hi"),
                ],
                false,
            )
            .unwrap();
        assert_eq!(
            with_system,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        );
        let control = [(0, "<|endoftext|>"), (1, "<|im_start|>"), (2, "<|im_end|>")];
        assert_eq!(t.turn_end(&control), Some(2));
    }

    #[test]
    fn broken_hostile_and_refusing_templates_are_errors() {
        assert!(ChatTemplate::new("{% for m in messages %}", "", "").is_err());
        let spin = ChatTemplate::new(
            "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
            "",
            "",
        )
        .unwrap();
        assert!(spin.render(&[], true).is_err());
        let refuse = ChatTemplate::new(
            "{% if messages[0]['role'] == 'user' %}{{ raise_exception('system first') }}{% endif %}",
            "",
            "",
        )
        .unwrap();
        let e = refuse
            .render(&[ChatMessage::new("user", "hi")], true)
            .unwrap_err();
        assert!(
            matches!(&e, ModelError::Input { arg: "--text", detail } if detail.contains("system first")),
            "{e:?}"
        );
    }
}
