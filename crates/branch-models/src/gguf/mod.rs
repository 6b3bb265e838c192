//! The header of a GGUF model file (its metadata and its tensor directory),
//! read from bounded bytes with every count, length and offset checked
//! before anything is allocated from it.
//!
//! A model file is data someone else wrote. The embedded model
//! (`--features embedded`) reads its header only through here, so a file
//! cannot make the loader panic (candle's own reader divides by a zero
//! `general.alignment`), allocate beyond what its own bytes justify, or
//! point a tensor outside the file. Format: ggml's `docs/gguf.md`,
//! versions 1 to 3, with the checks ggml's loader makes beyond a plain
//! reading: unique keys and tensor names, an alignment that is a power of
//! two, tensor offsets on it, rows made of whole blocks, sizes that do
//! not overflow.
//!
//! Strings are read as candle reads them (trailing NULs dropped, bytes
//! that are not UTF-8 replaced), so a file that loaded before still loads
//! with the same vocabulary.

use std::collections::HashSet;
use std::fmt;
use std::io::Read;

use crate::limits::{MAX_GGUF_ARRAY_DEPTH, MAX_GGUF_HEADER_BYTES, MAX_GGUF_VALUES};

/// `GGUF` as a little-endian `u32`.
const MAGIC: u32 = u32::from_le_bytes(*b"GGUF");

/// Alignment of the tensor data when the file does not set one.
pub const DEFAULT_ALIGNMENT: u64 = 32;

/// A tensor has at most this many dimensions (ggml's `GGML_MAX_DIMS`).
pub const MAX_DIMS: u64 = 4;

/// Bytes read first when looking for the end of a header; doubled until it
/// is found (a small model's header, vocabulary included, is about 2 MiB).
const FIRST_READ_BYTES: usize = 1 << 20;

/// A metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum GgufValue {
    /// `uint8`.
    U8(u8),
    /// `int8`.
    I8(i8),
    /// `uint16`.
    U16(u16),
    /// `int16`.
    I16(i16),
    /// `uint32`.
    U32(u32),
    /// `int32`.
    I32(i32),
    /// `uint64`.
    U64(u64),
    /// `int64`.
    I64(i64),
    /// `float32`.
    F32(f32),
    /// `float64`.
    F64(f64),
    /// `bool`.
    Bool(bool),
    /// `string`.
    String(String),
    /// `array` (of one element type).
    Array(Vec<GgufValue>),
}

/// One entry of the tensor directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GgufTensor {
    /// The tensor's name.
    pub name: String,
    /// Its dimensions as the file lists them: the innermost (a row's
    /// length) first.
    pub dims: Vec<u64>,
    /// Its ggml type (`GGML_TYPE_*`), one of [`GgmlType`]'s.
    pub ggml_type: GgmlType,
    /// Where its data starts, from the start of the data section.
    pub offset: u64,
    /// How many bytes its data takes.
    pub byte_len: u64,
}

/// The ggml tensor types a header may name: those candle can read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
    Q8K,
    BF16,
}

impl GgmlType {
    /// The type with ggml's number `id`, when it is one of these.
    pub fn from_id(id: u32) -> Option<Self> {
        Some(match id {
            0 => Self::F32,
            1 => Self::F16,
            2 => Self::Q4_0,
            3 => Self::Q4_1,
            6 => Self::Q5_0,
            7 => Self::Q5_1,
            8 => Self::Q8_0,
            9 => Self::Q8_1,
            10 => Self::Q2K,
            11 => Self::Q3K,
            12 => Self::Q4K,
            13 => Self::Q5K,
            14 => Self::Q6K,
            15 => Self::Q8K,
            30 => Self::BF16,
            _ => return None,
        })
    }

    /// ggml's number of the type.
    pub fn id(self) -> u32 {
        match self {
            Self::F32 => 0,
            Self::F16 => 1,
            Self::Q4_0 => 2,
            Self::Q4_1 => 3,
            Self::Q5_0 => 6,
            Self::Q5_1 => 7,
            Self::Q8_0 => 8,
            Self::Q8_1 => 9,
            Self::Q2K => 10,
            Self::Q3K => 11,
            Self::Q4K => 12,
            Self::Q5K => 13,
            Self::Q6K => 14,
            Self::Q8K => 15,
            Self::BF16 => 30,
        }
    }

    /// Elements in one block.
    pub fn block_elems(self) -> u64 {
        match self {
            Self::F32 | Self::F16 | Self::BF16 => 1,
            Self::Q4_0 | Self::Q4_1 | Self::Q5_0 | Self::Q5_1 | Self::Q8_0 | Self::Q8_1 => 32,
            Self::Q2K | Self::Q3K | Self::Q4K | Self::Q5K | Self::Q6K | Self::Q8K => 256,
        }
    }

    /// Bytes of one block.
    pub fn block_bytes(self) -> u64 {
        match self {
            Self::F32 => 4,
            Self::F16 | Self::BF16 => 2,
            Self::Q4_0 => 18,
            Self::Q4_1 => 20,
            Self::Q5_0 => 22,
            Self::Q5_1 => 24,
            Self::Q8_0 => 34,
            Self::Q8_1 => 36,
            Self::Q2K => 84,
            Self::Q3K => 110,
            Self::Q4K => 144,
            Self::Q5K => 176,
            Self::Q6K => 210,
            Self::Q8K => 292,
        }
    }
}

/// A checked GGUF header.
#[derive(Debug, Clone, PartialEq)]
pub struct GgufHeader {
    /// The format version (1, 2 or 3).
    pub version: u32,
    /// The metadata, in file order; keys are unique.
    pub metadata: Vec<(String, GgufValue)>,
    /// The tensor directory, in file order; names are unique and every
    /// tensor's data lies inside the file.
    pub tensors: Vec<GgufTensor>,
    /// The alignment of the data section and of every tensor in it.
    pub alignment: u64,
    /// Where the data section starts in the file.
    pub data_offset: u64,
}

impl GgufHeader {
    /// The metadata value of `key`.
    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }
}

/// Why a header was refused.
#[derive(Debug)]
#[non_exhaustive]
pub enum GgufError {
    /// The header ends past the bytes given (or past the file).
    Truncated,
    /// The header is longer than [`MAX_GGUF_HEADER_BYTES`].
    HeaderTooLarge {
        /// The cap.
        limit: usize,
    },
    /// The file does not start with `GGUF`.
    NotGguf,
    /// A version other than 1, 2 or 3.
    UnsupportedVersion(u32),
    /// More of something than the format or a cap allows.
    TooMany {
        /// What is counted.
        what: &'static str,
        /// The count the file declares.
        count: u64,
        /// The most accepted.
        limit: u64,
    },
    /// A metadata value type that is not in the format.
    BadValueType(u32),
    /// A `bool` stored as a byte other than 0 or 1.
    BadBool(u8),
    /// A metadata key or tensor name appears twice.
    Duplicate {
        /// `key` or `tensor`.
        what: &'static str,
        /// The name.
        name: String,
    },
    /// `general.alignment` is not a non-zero power of two stored as a
    /// `uint32`.
    BadAlignment,
    /// A tensor entry cannot be used.
    BadTensor {
        /// The tensor's name.
        name: String,
        /// Why.
        reason: &'static str,
    },
    /// Reading the file failed.
    Io(std::io::Error),
}

impl fmt::Display for GgufError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated => f.write_str("the GGUF header is cut short"),
            Self::HeaderTooLarge { limit } => {
                write!(f, "the GGUF header is larger than {limit} bytes")
            }
            Self::NotGguf => f.write_str("not a GGUF file (no `GGUF` magic)"),
            Self::UnsupportedVersion(v) => write!(f, "GGUF version {v} (1 to 3 are read)"),
            Self::TooMany { what, count, limit } => {
                write!(f, "{count} {what} (at most {limit})")
            }
            Self::BadValueType(t) => write!(f, "unknown metadata value type {t}"),
            Self::BadBool(b) => write!(f, "a bool stored as {b}"),
            Self::Duplicate { what, name } => write!(f, "{what} `{name}` appears twice"),
            Self::BadAlignment => {
                f.write_str("general.alignment is not a non-zero power of two (uint32)")
            }
            Self::BadTensor { name, reason } => write!(f, "tensor `{name}`: {reason}"),
            Self::Io(e) => write!(f, "reading the header: {e}"),
        }
    }
}

impl std::error::Error for GgufError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io(e) => Some(e),
            _ => None,
        }
    }
}

/// Reads and checks the header of a GGUF file of `file_len` bytes from
/// `reader` (positioned at the file's start), reading no more of it than
/// the header needs (rounded up to a power of two) and never more than
/// [`MAX_GGUF_HEADER_BYTES`].
pub fn read_header(mut reader: impl Read, file_len: u64) -> Result<GgufHeader, GgufError> {
    let limit = usize::try_from(file_len)
        .unwrap_or(usize::MAX)
        .min(MAX_GGUF_HEADER_BYTES);
    let mut buf = Vec::new();
    let mut want = FIRST_READ_BYTES.min(limit);
    loop {
        let missing = u64::try_from(want.saturating_sub(buf.len())).unwrap_or(u64::MAX);
        (&mut reader)
            .take(missing)
            .read_to_end(&mut buf)
            .map_err(GgufError::Io)?;
        // Fewer bytes than asked for: the file ends there.
        let ended = buf.len() < want;
        match parse_header(&buf, file_len) {
            Err(GgufError::Truncated) if !ended && want < limit => {
                want = want.saturating_mul(2).min(limit);
            }
            Err(GgufError::Truncated)
                if !ended && u64::try_from(buf.len()).is_ok_and(|n| n < file_len) =>
            {
                return Err(GgufError::HeaderTooLarge {
                    limit: MAX_GGUF_HEADER_BYTES,
                });
            }
            other => return other,
        }
    }
}

/// Checks the header at the start of `bytes`, the first bytes of a file of
/// `file_len` bytes. [`GgufError::Truncated`] when the header goes on past
/// `bytes`.
pub fn parse_header(bytes: &[u8], file_len: u64) -> Result<GgufHeader, GgufError> {
    let mut r = Reader { bytes, at: 0 };
    if r.u32()? != MAGIC {
        return Err(GgufError::NotGguf);
    }
    let version = r.u32()?;
    if !(1..=3).contains(&version) {
        return Err(GgufError::UnsupportedVersion(version));
    }
    let wide = version >= 2;
    let tensor_count = r.len(wide)?;
    let kv_count = r.len(wide)?;
    let mut values = Budget(MAX_GGUF_VALUES);

    // Each entry takes some bytes, so a count the bytes cannot hold is
    // refused before anything is allocated for it.
    let mut metadata = Vec::with_capacity(r.capacity_for(kv_count, 4 + 4 + 1)?);
    let mut keys = HashSet::new();
    for _ in 0..kv_count {
        let key = r.string(wide)?;
        if !keys.insert(key.clone()) {
            return Err(GgufError::Duplicate {
                what: "key",
                name: key,
            });
        }
        let ty = r.u32()?;
        values.take(1)?;
        let value = r.value(ty, wide, 0, &mut values)?;
        metadata.push((key, value));
    }

    let alignment = match metadata.iter().find(|(k, _)| k == "general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some((_, GgufValue::U32(a))) if a.is_power_of_two() => u64::from(*a),
        Some(_) => return Err(GgufError::BadAlignment),
    };

    let mut entries = Vec::with_capacity(r.capacity_for(tensor_count, 4 + 4 + 4 + 8)?);
    let mut names = HashSet::new();
    for _ in 0..tensor_count {
        let name = r.string(wide)?;
        if !names.insert(name.clone()) {
            return Err(GgufError::Duplicate {
                what: "tensor",
                name,
            });
        }
        let n_dims = r.u32()?;
        if u64::from(n_dims) > MAX_DIMS {
            return Err(GgufError::TooMany {
                what: "tensor dimensions",
                count: u64::from(n_dims),
                limit: MAX_DIMS,
            });
        }
        let mut dims = Vec::with_capacity(4);
        for _ in 0..n_dims {
            dims.push(r.len(wide)?);
        }
        let type_id = r.u32()?;
        let offset = r.u64()?;
        entries.push((name, dims, type_id, offset));
    }

    let header_end = u64::try_from(r.at).map_err(|_| GgufError::Truncated)?;
    let data_offset = header_end
        .checked_next_multiple_of(alignment)
        .ok_or(GgufError::Truncated)?;
    let mut tensors = Vec::with_capacity(entries.len());
    for (name, dims, type_id, offset) in entries {
        let bad = |reason| GgufError::BadTensor {
            name: name.clone(),
            reason,
        };
        let ggml_type =
            GgmlType::from_id(type_id).ok_or_else(|| bad("a tensor type candle cannot read"))?;
        let elems = dims
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(d))
            .ok_or_else(|| bad("its element count overflows"))?;
        if dims
            .first()
            .is_some_and(|&row| row % ggml_type.block_elems() != 0)
        {
            return Err(bad("its rows are not whole blocks of its type"));
        }
        if elems % ggml_type.block_elems() != 0 {
            return Err(bad("its elements are not whole blocks of its type"));
        }
        let byte_len = (elems / ggml_type.block_elems())
            .checked_mul(ggml_type.block_bytes())
            .ok_or_else(|| bad("its byte size overflows"))?;
        if offset % alignment != 0 {
            return Err(bad("its offset is not on the file's alignment"));
        }
        let end = data_offset
            .checked_add(offset)
            .and_then(|start| start.checked_add(byte_len))
            .ok_or_else(|| bad("its data ends past any file"))?;
        if end > file_len {
            return Err(bad("its data ends past the end of the file"));
        }
        tensors.push(GgufTensor {
            name,
            dims,
            ggml_type,
            offset,
            byte_len,
        });
    }
    Ok(GgufHeader {
        version,
        metadata,
        tensors,
        alignment,
        data_offset,
    })
}

/// How many more metadata values may be read (every value counts, the
/// items of arrays included).
struct Budget(u64);

impl Budget {
    fn take(&mut self, n: u64) -> Result<(), GgufError> {
        self.0 = self.0.checked_sub(n).ok_or(GgufError::TooMany {
            what: "metadata values",
            count: n,
            limit: MAX_GGUF_VALUES,
        })?;
        Ok(())
    }
}

/// A cursor over the header's bytes; running off the end is
/// [`GgufError::Truncated`].
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], GgufError> {
        let end = self.at.checked_add(n).ok_or(GgufError::Truncated)?;
        let out = self.bytes.get(self.at..end).ok_or(GgufError::Truncated)?;
        self.at = end;
        Ok(out)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], GgufError> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn u32(&mut self) -> Result<u32, GgufError> {
        self.array().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Result<u64, GgufError> {
        self.array().map(u64::from_le_bytes)
    }

    /// A count or length: 32 bits in version 1, 64 after.
    fn len(&mut self, wide: bool) -> Result<u64, GgufError> {
        if wide {
            self.u64()
        } else {
            self.u32().map(u64::from)
        }
    }

    /// A capacity for `count` entries of at least `min_bytes` each, or
    /// [`GgufError::Truncated`] when the bytes left cannot hold them.
    fn capacity_for(&self, count: u64, min_bytes: u64) -> Result<usize, GgufError> {
        let left = u64::try_from(self.bytes.len().saturating_sub(self.at)).unwrap_or(u64::MAX);
        if count.saturating_mul(min_bytes) > left {
            return Err(GgufError::Truncated);
        }
        usize::try_from(count).map_err(|_| GgufError::Truncated)
    }

    fn string(&mut self, wide: bool) -> Result<String, GgufError> {
        let len = self.len(wide)?;
        let len = usize::try_from(len).map_err(|_| GgufError::Truncated)?;
        let mut bytes = self.take(len)?;
        while let [rest @ .., 0] = bytes {
            bytes = rest;
        }
        Ok(String::from_utf8_lossy(bytes).into_owned())
    }

    fn value(
        &mut self,
        ty: u32,
        wide: bool,
        depth: u64,
        budget: &mut Budget,
    ) -> Result<GgufValue, GgufError> {
        Ok(match ty {
            0 => GgufValue::U8(u8::from_le_bytes(self.array()?)),
            1 => GgufValue::I8(i8::from_le_bytes(self.array()?)),
            2 => GgufValue::U16(u16::from_le_bytes(self.array()?)),
            3 => GgufValue::I16(i16::from_le_bytes(self.array()?)),
            4 => GgufValue::U32(self.u32()?),
            5 => GgufValue::I32(i32::from_le_bytes(self.array()?)),
            6 => GgufValue::F32(f32::from_le_bytes(self.array()?)),
            7 => match self.array::<1>()? {
                [0] => GgufValue::Bool(false),
                [1] => GgufValue::Bool(true),
                [b] => return Err(GgufError::BadBool(b)),
            },
            8 => GgufValue::String(self.string(wide)?),
            9 => {
                if depth >= MAX_GGUF_ARRAY_DEPTH {
                    return Err(GgufError::TooMany {
                        what: "nested arrays",
                        count: depth + 1,
                        limit: MAX_GGUF_ARRAY_DEPTH,
                    });
                }
                let item_ty = self.u32()?;
                let count = self.len(wide)?;
                budget.take(count)?;
                let min_bytes = match item_ty {
                    0 | 1 | 7 => 1,
                    2 | 3 => 2,
                    4..=6 => 4,
                    10..=12 => 8,
                    8 | 9 if wide => 8,
                    8 | 9 => 4,
                    _ => return Err(GgufError::BadValueType(item_ty)),
                };
                let mut items = Vec::with_capacity(self.capacity_for(count, min_bytes)?);
                for _ in 0..count {
                    items.push(self.value(item_ty, wide, depth + 1, budget)?);
                }
                GgufValue::Array(items)
            }
            10 => GgufValue::U64(self.u64()?),
            11 => GgufValue::I64(i64::from_le_bytes(self.array()?)),
            12 => GgufValue::F64(f64::from_le_bytes(self.array()?)),
            _ => return Err(GgufError::BadValueType(ty)),
        })
    }
}

#[cfg(test)]
pub(crate) mod tests;
