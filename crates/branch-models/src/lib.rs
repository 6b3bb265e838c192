//! `iModel`: provider clients over HTTP.
//!
//! Charter: the implementation of `branch-core`'s chat-model seam for real
//! providers (OpenAI chat completions and the OpenAI-compatible family,
//! Anthropic Messages, Gemini, Ollama, any OpenAI-compatible `base_url`):
//! request bodies, reply mapping, SSE streaming, retries with backoff, rate
//! limiting, the network guard and API-key handling. Usable alone as a
//! provider client. It must not know branches' histories or the verbs.
//!
//! The code arrives with the model-layer issue; until then this crate holds
//! only its charter. The plain-data model configuration (what `to_dict`
//! writes) already lives in `branch_core::model`.
