//! A model file's header, read by the checked reader ([`crate::gguf`]) and
//! handed to candle as its `gguf_file::Content`: candle then reads only
//! tensors whose type, size and place in the file were checked.

use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use candle_core::quantized::{GgmlDType, gguf_file};

use super::error::LocalModelError;
use crate::gguf::{GgmlType, GgufHeader, GgufValue, read_header};

/// Opens `path` and reads its header: the content and the file, to read
/// the tensors from.
pub(crate) fn open(path: &Path) -> Result<(gguf_file::Content, BufReader<File>), LocalModelError> {
    let io = |source| LocalModelError::Io {
        path: path.to_owned(),
        source,
    };
    let file = File::open(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    let mut reader = BufReader::new(file);
    let header = read_header(&mut reader, len).map_err(|e| LocalModelError::BadGguf {
        what: "header".into(),
        reason: e.to_string(),
    })?;
    Ok((content(header)?, reader))
}

/// The header as candle's `Content`.
pub(crate) fn content(header: GgufHeader) -> Result<gguf_file::Content, LocalModelError> {
    let magic = match header.version {
        1 => gguf_file::VersionedMagic::GgufV1,
        2 => gguf_file::VersionedMagic::GgufV2,
        _ => gguf_file::VersionedMagic::GgufV3,
    };
    let metadata = header
        .metadata
        .into_iter()
        .map(|(k, v)| (k, value(v)))
        .collect();
    let mut tensor_infos = HashMap::with_capacity(header.tensors.len());
    for t in header.tensors {
        // Dimensions go outermost first in candle, as in ggml's row-major
        // reading; each fits a `usize` (its bytes are in the file).
        let shape = t
            .dims
            .iter()
            .rev()
            .map(|&d| usize::try_from(d))
            .collect::<Result<Vec<usize>, _>>()
            .map_err(|_| LocalModelError::BadGguf {
                what: t.name.clone(),
                reason: "a dimension does not fit this machine's address space".into(),
            })?;
        let info = gguf_file::TensorInfo {
            ggml_dtype: dtype(t.ggml_type),
            shape: shape.into(),
            offset: t.offset,
        };
        tensor_infos.insert(t.name, info);
    }
    Ok(gguf_file::Content {
        magic,
        metadata,
        tensor_infos,
        tensor_data_offset: header.data_offset,
    })
}

fn value(v: GgufValue) -> gguf_file::Value {
    use gguf_file::Value as V;
    match v {
        GgufValue::U8(x) => V::U8(x),
        GgufValue::I8(x) => V::I8(x),
        GgufValue::U16(x) => V::U16(x),
        GgufValue::I16(x) => V::I16(x),
        GgufValue::U32(x) => V::U32(x),
        GgufValue::I32(x) => V::I32(x),
        GgufValue::U64(x) => V::U64(x),
        GgufValue::I64(x) => V::I64(x),
        GgufValue::F32(x) => V::F32(x),
        GgufValue::F64(x) => V::F64(x),
        GgufValue::Bool(x) => V::Bool(x),
        GgufValue::String(s) => V::String(s),
        GgufValue::Array(items) => V::Array(items.into_iter().map(value).collect()),
    }
}

/// candle's name of a type the checked reader accepts.
pub(crate) fn dtype(t: GgmlType) -> GgmlDType {
    match t {
        GgmlType::F32 => GgmlDType::F32,
        GgmlType::F16 => GgmlDType::F16,
        GgmlType::BF16 => GgmlDType::BF16,
        GgmlType::Q4_0 => GgmlDType::Q4_0,
        GgmlType::Q4_1 => GgmlDType::Q4_1,
        GgmlType::Q5_0 => GgmlDType::Q5_0,
        GgmlType::Q5_1 => GgmlDType::Q5_1,
        GgmlType::Q8_0 => GgmlDType::Q8_0,
        GgmlType::Q8_1 => GgmlDType::Q8_1,
        GgmlType::Q2K => GgmlDType::Q2K,
        GgmlType::Q3K => GgmlDType::Q3K,
        GgmlType::Q4K => GgmlDType::Q4K,
        GgmlType::Q5K => GgmlDType::Q5K,
        GgmlType::Q6K => GgmlDType::Q6K,
        GgmlType::Q8K => GgmlDType::Q8K,
    }
}
