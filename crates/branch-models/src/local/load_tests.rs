//! Loading model files someone else wrote: the checked header is what
//! candle would have read from a good file, and a bad file is refused
//! with an error before the forward pass (or an allocation) trusts it.

use std::io::Cursor;

use candle_core::quantized::{GgmlDType, gguf_file};

use super::engine::Engine;
use super::error::LocalModelError;
use super::header::{content, dtype};
use super::llama::{LlamaConfig, LlamaWeights, WeightFormat};
use crate::gguf::tests::GgufWriter;
use crate::gguf::{GgmlType, GgufValue, parse_header};

const ALL_TYPES: [GgmlType; 15] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q8_1,
    GgmlType::Q2K,
    GgmlType::Q3K,
    GgmlType::Q4K,
    GgmlType::Q5K,
    GgmlType::Q6K,
    GgmlType::Q8K,
];

/// candle's reading of a file holding one 256-element tensor of ggml type
/// `id`, or `None` when candle refuses the type.
fn candles_type(id: u32) -> Option<GgmlDType> {
    let mut w = GgufWriter::new(3, 1, 0);
    w.tensor("t", &[256], id, 0);
    let file = w.finish(32, &[0; 1024]);
    let ct = gguf_file::Content::read(&mut Cursor::new(&file)).ok()?;
    Some(ct.tensor_infos["t"].ggml_dtype)
}

#[test]
fn every_accepted_type_has_candles_number_and_block_size() {
    for t in ALL_TYPES {
        let d = dtype(t);
        assert_eq!(candles_type(t.id()), Some(d), "{t:?}");
        assert_eq!(
            u64::try_from(d.block_size()).unwrap(),
            t.block_elems(),
            "{t:?}"
        );
        assert_eq!(
            u64::try_from(d.type_size()).unwrap(),
            t.block_bytes(),
            "{t:?}"
        );
        assert_eq!(GgmlType::from_id(t.id()), Some(t));
    }
    // Every type candle reads is one of them.
    for id in 0..64 {
        if candles_type(id).is_some() {
            assert!(GgmlType::from_id(id).is_some(), "type {id}");
        }
    }
}

/// The tiny llama of these tests: 8 wide, 2 query heads and 1 key/value
/// head of 4, a feed-forward of 16, a vocabulary of 5, `layers` blocks,
/// every tensor F32.
struct Tiny {
    layers: u64,
    /// Replaces the named tensor's dimensions (file order).
    wrong: Option<(&'static str, Vec<u64>)>,
}

impl Tiny {
    fn tensors(&self) -> Vec<(String, Vec<u64>)> {
        let mut t = vec![
            ("token_embd.weight".to_owned(), vec![8, 5]),
            ("output_norm.weight".to_owned(), vec![8]),
        ];
        for i in 0..self.layers {
            for (name, dims) in [
                ("attn_norm", vec![8]),
                ("ffn_norm", vec![8]),
                ("attn_q", vec![8, 8]),
                ("attn_k", vec![8, 4]),
                ("attn_v", vec![8, 4]),
                ("attn_output", vec![8, 8]),
                ("ffn_gate", vec![8, 16]),
                ("ffn_up", vec![8, 16]),
                ("ffn_down", vec![16, 8]),
            ] {
                t.push((format!("blk.{i}.{name}.weight"), dims));
            }
        }
        if let Some((name, dims)) = &self.wrong {
            for (n, d) in &mut t {
                if n == name {
                    d.clone_from(dims);
                }
            }
        }
        t
    }

    /// The GGUF bytes: the tensors hold small deterministic values.
    fn file(&self) -> Vec<u8> {
        let tensors = self.tensors();
        let mut w = GgufWriter::new(3, u64::try_from(tensors.len()).unwrap(), 0);
        let mut data = Vec::new();
        for (name, dims) in &tensors {
            let offset = u64::try_from(data.len()).unwrap();
            w.tensor(name, dims, 0, offset);
            let n: u64 = dims.iter().product();
            for i in 0..n {
                let v = f32::from(u8::try_from(i % 7).unwrap()) / 10.0 - 0.3;
                data.extend_from_slice(&v.to_le_bytes());
            }
            data.resize(data.len().next_multiple_of(32), 0);
        }
        w.finish(32, &data)
    }

    fn config(&self, context_length: usize) -> LlamaConfig {
        LlamaConfig {
            n_layer: usize::try_from(self.layers).unwrap(),
            n_embd: 8,
            n_head: 2,
            n_head_kv: 1,
            context_length,
            rms_eps: 1e-5,
            rope_base: 10_000.0,
        }
    }
}

fn load(tiny: &Tiny, config: LlamaConfig) -> Result<LlamaWeights, LocalModelError> {
    let file = tiny.file();
    let len = u64::try_from(file.len()).unwrap();
    let ct = content(parse_header(&file, len).unwrap()).unwrap();
    LlamaWeights::load(
        &ct,
        &mut Cursor::new(&file),
        config,
        16,
        WeightFormat::AsStored,
    )
}

#[test]
fn the_checked_header_is_what_candle_reads_from_a_good_file() {
    let tiny = Tiny {
        layers: 2,
        wrong: None,
    };
    let mut w = GgufWriter::new(3, 0, 4);
    w.kv("general.architecture", &GgufValue::String("llama".into()))
        .kv("llama.block_count", &GgufValue::U32(2))
        .kv("general.alignment", &GgufValue::U32(64))
        .kv(
            "tokenizer.ggml.tokens",
            &GgufValue::Array(vec![GgufValue::String("a".into()); 3]),
        );
    let mut files = vec![w.finish(64, &[]), tiny.file()];
    for version in [1, 2] {
        let mut w = GgufWriter::new(version, 1, 1);
        w.kv("k", &GgufValue::I64(-1)).tensor("t", &[32, 3], 8, 0);
        files.push(w.finish(32, &[7; 102]));
    }
    for file in files {
        let len = u64::try_from(file.len()).unwrap();
        let ours = content(parse_header(&file, len).unwrap()).unwrap();
        let theirs = gguf_file::Content::read(&mut Cursor::new(&file)).unwrap();
        assert_eq!(ours.magic, theirs.magic);
        assert_eq!(ours.tensor_data_offset, theirs.tensor_data_offset);
        let mut keys: Vec<&String> = theirs.metadata.keys().collect();
        keys.sort();
        assert_eq!(ours.metadata.len(), keys.len());
        for k in keys {
            assert_eq!(
                format!("{:?}", ours.metadata[k]),
                format!("{:?}", theirs.metadata[k]),
                "{k}"
            );
        }
        assert_eq!(ours.tensor_infos.len(), theirs.tensor_infos.len());
        for (name, t) in &theirs.tensor_infos {
            let o = &ours.tensor_infos[name];
            assert_eq!(
                (o.ggml_dtype, o.shape.dims(), o.offset),
                (t.ggml_dtype, t.shape.dims(), t.offset),
                "{name}"
            );
            let device = candle_core::Device::Cpu;
            let a = ours.tensor(&mut Cursor::new(&file), name, &device).unwrap();
            let b = theirs
                .tensor(&mut Cursor::new(&file), name, &device)
                .unwrap();
            assert_eq!(a.data().unwrap(), b.data().unwrap(), "{name}");
        }
    }
}

#[test]
fn weights_whose_shapes_match_the_metadata_load_and_run() {
    let tiny = Tiny {
        layers: 2,
        wrong: None,
    };
    // The model claims a context the size of the address space; the tables
    // cover the 16 positions asked for.
    let weights = load(&tiny, tiny.config(usize::MAX)).unwrap();
    assert_eq!(weights.vocab(), 5);
    let mut state = weights.state(1 << 30);
    let logits = weights.forward(&mut state, &[1, 2, 3]).unwrap();
    assert_eq!(logits.len(), 5);
    assert!(logits.iter().all(|l| l.is_finite()));
    // Past the 16 positions: an error, not a panic.
    assert!(weights.forward(&mut state, &[0; 14]).is_err());
}

fn refusal(got: Result<LlamaWeights, LocalModelError>) -> String {
    match got {
        Err(e @ LocalModelError::BadGguf { .. }) => e.to_string(),
        Err(other) => panic!("{other:?}"),
        Ok(_) => panic!("loaded"),
    }
}

#[test]
fn a_tensor_whose_shape_disagrees_with_the_metadata_is_refused_by_name() {
    for (name, dims) in [
        ("blk.1.attn_k.weight", vec![8, 8]),
        ("blk.0.ffn_down.weight", vec![8, 16]),
        ("blk.0.attn_norm.weight", vec![4]),
        ("token_embd.weight", vec![4, 5]),
        ("output_norm.weight", vec![8, 1]),
        ("blk.1.ffn_gate.weight", vec![4, 16]),
    ] {
        let tiny = Tiny {
            layers: 2,
            wrong: Some((name, dims)),
        };
        let e = refusal(load(&tiny, tiny.config(64)));
        assert!(e.contains(name), "{e}");
        assert!(e.contains("shape"), "{e}");
    }
}

#[test]
fn a_block_count_the_tensors_do_not_back_is_refused_before_allocating() {
    let tiny = Tiny {
        layers: 2,
        wrong: None,
    };
    let mut config = tiny.config(64);
    config.n_layer = usize::MAX;
    let e = refusal(load(&tiny, config));
    assert!(
        e.contains("blk.2.ffn_gate.weight") && e.contains("missing"),
        "{e}"
    );
}

/// A file in the temporary directory, removed when dropped.
struct TempFile(std::path::PathBuf);

impl TempFile {
    fn new(name: &str, bytes: &[u8]) -> Self {
        let path = std::env::temp_dir().join(format!("lionagi-{}-{name}", std::process::id()));
        std::fs::write(&path, bytes).unwrap();
        Self(path)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn a_hostile_header_is_an_error_from_the_loader() {
    // A zero alignment: candle's own reader divides by it.
    let mut w = GgufWriter::new(3, 1, 1);
    w.kv("general.alignment", &GgufValue::U32(0))
        .tensor("t", &[1], 0, 0);
    let zero_alignment = TempFile::new("zero-alignment.gguf", &w.finish(1, &[0; 64]));
    // A tensor whose size overflows.
    let mut w = GgufWriter::new(3, 1, 0);
    w.tensor("t", &[u64::MAX, 2], 0, 0);
    let overflowing = TempFile::new("overflowing.gguf", &w.finish(32, &[0; 64]));
    for file in [&zero_alignment, &overflowing] {
        for e in [
            Engine::load(&file.0, None, WeightFormat::AsStored).map(|_| ()),
            super::engine::tokenizer_from_file(&file.0).map(|_| ()),
        ] {
            match e {
                Err(LocalModelError::BadGguf { what, reason }) => {
                    assert_eq!(what, "header");
                    assert!(
                        reason.contains("alignment") || reason.contains("overflows"),
                        "{reason}"
                    );
                }
                other => panic!("{other:?}"),
            }
        }
    }
}
