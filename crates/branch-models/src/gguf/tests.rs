use super::*;

/// Writes GGUF files for the tests: the header field by field, then the
/// data section.
pub(crate) struct GgufWriter {
    version: u32,
    out: Vec<u8>,
}

impl GgufWriter {
    pub(crate) fn new(version: u32, tensors: u64, kvs: u64) -> Self {
        let mut w = Self {
            version,
            out: Vec::new(),
        };
        w.out.extend_from_slice(b"GGUF");
        w.u32(version);
        w.len(tensors);
        w.len(kvs);
        w
    }

    pub(crate) fn u32(&mut self, v: u32) -> &mut Self {
        self.out.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub(crate) fn u64(&mut self, v: u64) -> &mut Self {
        self.out.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub(crate) fn len(&mut self, n: u64) -> &mut Self {
        if self.version == 1 {
            self.u32(u32::try_from(n).unwrap())
        } else {
            self.u64(n)
        }
    }

    pub(crate) fn string(&mut self, s: &str) -> &mut Self {
        self.len(u64::try_from(s.len()).unwrap());
        self.out.extend_from_slice(s.as_bytes());
        self
    }

    pub(crate) fn value(&mut self, v: &GgufValue) -> &mut Self {
        match v {
            GgufValue::U8(x) => self.out.push(*x),
            GgufValue::I8(x) => self.out.extend_from_slice(&x.to_le_bytes()),
            GgufValue::U16(x) => self.out.extend_from_slice(&x.to_le_bytes()),
            GgufValue::I16(x) => self.out.extend_from_slice(&x.to_le_bytes()),
            GgufValue::U32(x) => self.out.extend_from_slice(&x.to_le_bytes()),
            GgufValue::I32(x) => self.out.extend_from_slice(&x.to_le_bytes()),
            GgufValue::U64(x) => self.out.extend_from_slice(&x.to_le_bytes()),
            GgufValue::I64(x) => self.out.extend_from_slice(&x.to_le_bytes()),
            GgufValue::F32(x) => self.out.extend_from_slice(&x.to_le_bytes()),
            GgufValue::F64(x) => self.out.extend_from_slice(&x.to_le_bytes()),
            GgufValue::Bool(x) => self.out.push(u8::from(*x)),
            GgufValue::String(s) => {
                self.string(s);
            }
            GgufValue::Array(items) => {
                let item_type = items.first().map_or(0, type_id);
                self.u32(item_type);
                self.len(u64::try_from(items.len()).unwrap());
                for item in items {
                    self.value(item);
                }
            }
        }
        self
    }

    pub(crate) fn kv(&mut self, key: &str, v: &GgufValue) -> &mut Self {
        self.string(key);
        self.u32(type_id(v));
        self.value(v)
    }

    pub(crate) fn tensor(&mut self, name: &str, dims: &[u64], ty: u32, offset: u64) -> &mut Self {
        self.string(name);
        self.u32(u32::try_from(dims.len()).unwrap());
        for &d in dims {
            self.len(d);
        }
        self.u32(ty);
        self.u64(offset)
    }

    /// The header padded to `alignment`, then `data`.
    pub(crate) fn finish(&mut self, alignment: usize, data: &[u8]) -> Vec<u8> {
        let mut out = std::mem::take(&mut self.out);
        out.resize(out.len().next_multiple_of(alignment), 0);
        out.extend_from_slice(data);
        out
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.out
    }
}

pub(crate) fn type_id(v: &GgufValue) -> u32 {
    match v {
        GgufValue::U8(_) => 0,
        GgufValue::I8(_) => 1,
        GgufValue::U16(_) => 2,
        GgufValue::I16(_) => 3,
        GgufValue::U32(_) => 4,
        GgufValue::I32(_) => 5,
        GgufValue::F32(_) => 6,
        GgufValue::Bool(_) => 7,
        GgufValue::String(_) => 8,
        GgufValue::Array(_) => 9,
        GgufValue::U64(_) => 10,
        GgufValue::I64(_) => 11,
        GgufValue::F64(_) => 12,
    }
}

fn every_kind() -> Vec<(&'static str, GgufValue)> {
    vec![
        ("general.architecture", GgufValue::String("llama".into())),
        ("u8", GgufValue::U8(7)),
        ("i8", GgufValue::I8(-7)),
        ("u16", GgufValue::U16(700)),
        ("i16", GgufValue::I16(-700)),
        ("u32", GgufValue::U32(70_000)),
        ("i32", GgufValue::I32(-70_000)),
        ("u64", GgufValue::U64(1 << 40)),
        ("i64", GgufValue::I64(-(1 << 40))),
        ("f32", GgufValue::F32(0.5)),
        ("f64", GgufValue::F64(-0.25)),
        ("bool", GgufValue::Bool(true)),
        (
            "tokens",
            GgufValue::Array(vec![
                GgufValue::String("a".into()),
                GgufValue::String("ĠThe".into()),
            ]),
        ),
        (
            "nested",
            GgufValue::Array(vec![GgufValue::Array(vec![GgufValue::I32(1)])]),
        ),
    ]
}

/// A version-`version` file with every kind of value and two tensors: an
/// F32 2×4 at 0 and a Q4_1 2×32 (two blocks of 20 bytes) at 32.
fn sample(version: u32) -> (Vec<u8>, usize) {
    let kvs = every_kind();
    let mut w = GgufWriter::new(version, 2, u64::try_from(kvs.len()).unwrap());
    for (k, v) in &kvs {
        w.kv(k, v);
    }
    w.tensor("a", &[4, 2], 0, 0).tensor("b", &[32, 2], 3, 32);
    let header_len = w.bytes().len();
    (w.finish(32, &[0; 72]), header_len)
}

fn file_len(bytes: &[u8]) -> u64 {
    u64::try_from(bytes.len()).unwrap()
}

#[test]
fn reads_every_value_kind_and_the_tensor_directory_in_each_version() {
    let mut seen = Vec::new();
    for version in 1..=3 {
        let (file, header_len) = sample(version);
        let h = parse_header(&file, file_len(&file)).unwrap();
        assert_eq!(h.version, version);
        let expected: Vec<(String, GgufValue)> = every_kind()
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        assert_eq!(h.metadata, expected);
        assert_eq!(h.get("u32"), Some(&GgufValue::U32(70_000)));
        assert_eq!(h.alignment, DEFAULT_ALIGNMENT);
        assert_eq!(
            h.data_offset,
            u64::try_from(header_len.next_multiple_of(32)).unwrap()
        );
        assert_eq!(
            h.tensors,
            vec![
                GgufTensor {
                    name: "a".into(),
                    dims: vec![4, 2],
                    ggml_type: GgmlType::F32,
                    offset: 0,
                    byte_len: 32,
                },
                GgufTensor {
                    name: "b".into(),
                    dims: vec![32, 2],
                    ggml_type: GgmlType::Q4_1,
                    offset: 32,
                    byte_len: 40,
                },
            ]
        );
        seen.push((h.metadata, h.tensors));
    }
    assert!(seen.windows(2).all(|w| w[0] == w[1]));
}

#[test]
fn a_header_cut_anywhere_is_truncated_never_misread() {
    let (file, header_len) = sample(3);
    let len = file_len(&file);
    for cut in 0..header_len {
        let got = parse_header(&file[..cut], len);
        assert!(
            matches!(got, Err(GgufError::Truncated)),
            "cut at {cut}: {got:?}"
        );
    }
    let whole = parse_header(&file, len).unwrap();
    assert_eq!(parse_header(&file[..header_len], len).unwrap(), whole);
}

#[test]
fn alignment_must_be_a_non_zero_power_of_two_uint32() {
    for bad in [
        GgufValue::U32(0),
        GgufValue::U32(48),
        GgufValue::U64(64),
        GgufValue::String("32".into()),
    ] {
        let mut w = GgufWriter::new(3, 0, 1);
        w.kv("general.alignment", &bad);
        let file = w.finish(1, &[]);
        let got = parse_header(&file, file_len(&file));
        assert!(
            matches!(got, Err(GgufError::BadAlignment)),
            "{bad:?}: {got:?}"
        );
    }
    let mut w = GgufWriter::new(3, 1, 1);
    w.kv("general.alignment", &GgufValue::U32(64));
    w.tensor("t", &[16], 0, 64);
    let file = w.finish(64, &[0; 128]);
    let h = parse_header(&file, file_len(&file)).unwrap();
    assert_eq!((h.alignment, h.data_offset % 64), (64, 0));
}

/// A file with one tensor entry and room for `data` bytes after it.
fn one_tensor(dims: &[u64], ty: u32, offset: u64, data: usize) -> Result<GgufHeader, GgufError> {
    let mut w = GgufWriter::new(3, 1, 0);
    w.tensor("t", dims, ty, offset);
    let file = w.finish(32, &vec![0; data]);
    parse_header(&file, file_len(&file))
}

fn tensor_refusal(got: Result<GgufHeader, GgufError>) -> &'static str {
    match got {
        Err(GgufError::BadTensor { name, reason }) => {
            assert_eq!(name, "t");
            reason
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn tensor_entries_are_checked_against_their_type_and_the_file() {
    assert!(one_tensor(&[32, 2], 3, 0, 40).is_ok());
    assert!(tensor_refusal(one_tensor(&[u64::MAX, 2], 0, 0, 0)).contains("overflows"));
    assert!(tensor_refusal(one_tensor(&[1 << 62], 0, 0, 0)).contains("overflows"));
    assert!(tensor_refusal(one_tensor(&[31, 2], 3, 0, 40)).contains("rows"));
    assert!(tensor_refusal(one_tensor(&[32, 2], 3, 8, 80)).contains("alignment"));
    assert!(tensor_refusal(one_tensor(&[32, 2], 3, 0, 39)).contains("end of the file"));
    assert!(tensor_refusal(one_tensor(&[32, 2], 3, u64::MAX - 31, 40)).contains("past any"));
    // Type 4 was Q4_2, removed from ggml; 39 is past the known types.
    assert!(tensor_refusal(one_tensor(&[32], 4, 0, 64)).contains("type"));
    assert!(tensor_refusal(one_tensor(&[32], 39, 0, 64)).contains("type"));
    let got = one_tensor(&[1, 1, 1, 1, 1], 0, 0, 4);
    assert!(matches!(
        got,
        Err(GgufError::TooMany {
            what: "tensor dimensions",
            ..
        })
    ));
}

#[test]
fn keys_and_tensor_names_are_unique() {
    let mut w = GgufWriter::new(3, 0, 2);
    w.kv("k", &GgufValue::U8(1)).kv("k", &GgufValue::U8(2));
    let file = w.finish(1, &[]);
    let got = parse_header(&file, file_len(&file));
    assert!(
        matches!(got, Err(GgufError::Duplicate { what: "key", .. })),
        "{got:?}"
    );

    let mut w = GgufWriter::new(3, 2, 0);
    w.tensor("t", &[1], 0, 0).tensor("t", &[1], 0, 32);
    let file = w.finish(32, &[0; 64]);
    let got = parse_header(&file, file_len(&file));
    assert!(
        matches!(got, Err(GgufError::Duplicate { what: "tensor", .. })),
        "{got:?}"
    );
}

#[test]
fn declared_counts_the_bytes_cannot_hold_allocate_nothing() {
    // A billion entries in a 24-byte header.
    let file = GgufWriter::new(3, 1 << 30, 1 << 30).finish(1, &[]);
    let got = parse_header(&file, u64::MAX);
    assert!(matches!(got, Err(GgufError::Truncated)), "{got:?}");

    // An array of a million u32 in a few bytes.
    let mut w = GgufWriter::new(3, 0, 1);
    w.string("a").u32(9).u32(4).u64(1 << 20).u32(1);
    let got = parse_header(w.bytes(), u64::MAX);
    assert!(matches!(got, Err(GgufError::Truncated)), "{got:?}");

    // More values than the cap, whatever the bytes.
    let mut w = GgufWriter::new(3, 0, 1);
    w.string("a").u32(9).u32(0).u64(MAX_GGUF_VALUES + 1);
    let got = parse_header(w.bytes(), u64::MAX);
    assert!(
        matches!(
            got,
            Err(GgufError::TooMany {
                what: "metadata values",
                ..
            })
        ),
        "{got:?}"
    );

    // A string longer than the file.
    let mut w = GgufWriter::new(3, 0, 1);
    w.string("a").u32(8).u64(u64::MAX).u32(0);
    let got = parse_header(w.bytes(), u64::MAX);
    assert!(matches!(got, Err(GgufError::Truncated)), "{got:?}");
}

#[test]
fn arrays_nest_at_most_the_cap_deep() {
    let nest = |depth: u64| {
        let mut v = GgufValue::U8(1);
        for _ in 0..depth {
            v = GgufValue::Array(vec![v]);
        }
        let mut w = GgufWriter::new(3, 0, 1);
        w.kv("deep", &v);
        let file = w.finish(1, &[]);
        parse_header(&file, file_len(&file))
    };
    assert!(nest(MAX_GGUF_ARRAY_DEPTH).is_ok());
    let got = nest(MAX_GGUF_ARRAY_DEPTH + 1);
    assert!(
        matches!(
            got,
            Err(GgufError::TooMany {
                what: "nested arrays",
                ..
            })
        ),
        "{got:?}"
    );
}

#[test]
fn other_files_and_versions_are_refused() {
    let got = parse_header(b"GGML\x03\0\0\0", 8);
    assert!(matches!(got, Err(GgufError::NotGguf)), "{got:?}");
    let got = parse_header(b"GGUF\x04\0\0\0", 8);
    assert!(
        matches!(got, Err(GgufError::UnsupportedVersion(4))),
        "{got:?}"
    );
    let mut w = GgufWriter::new(3, 0, 1);
    w.string("b").u32(7).out.push(2);
    let got = parse_header(w.bytes(), u64::MAX);
    assert!(matches!(got, Err(GgufError::BadBool(2))), "{got:?}");
    let mut w = GgufWriter::new(3, 0, 1);
    w.string("x").u32(13);
    let got = parse_header(w.bytes(), u64::MAX);
    assert!(matches!(got, Err(GgufError::BadValueType(13))), "{got:?}");
}

#[test]
fn strings_read_as_candle_reads_them() {
    let mut w = GgufWriter::new(3, 0, 1);
    w.string("s").u32(8).u64(5);
    w.out.extend_from_slice(b"a\xffb\0\0");
    let file = w.finish(1, &[]);
    let h = parse_header(&file, file_len(&file)).unwrap();
    assert_eq!(h.get("s"), Some(&GgufValue::String("a\u{fffd}b".into())));
}

/// A reader that counts what is read from it.
struct Counting<R>(R, usize);

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.0.read(buf)?;
        self.1 += n;
        Ok(n)
    }
}

#[test]
fn a_reader_reads_the_header_and_not_the_weights() {
    // A vocabulary of 3 MiB: past the first read, so the buffer grows.
    let tokens: Vec<GgufValue> = (0..300_000)
        .map(|i| GgufValue::String(format!("tok{i:06}")))
        .collect();
    let mut w = GgufWriter::new(3, 1, 1);
    w.kv("tokenizer.ggml.tokens", &GgufValue::Array(tokens));
    w.tensor("t", &[1 << 22], 0, 0);
    let header_len = w.bytes().len();
    assert!(header_len > FIRST_READ_BYTES * 2);
    let file = w.finish(32, &vec![0; 16 << 20]);
    let mut reader = Counting(std::io::Cursor::new(&file), 0);
    let h = read_header(&mut reader, file_len(&file)).unwrap();
    assert_eq!(h, parse_header(&file, file_len(&file)).unwrap());
    assert!(reader.1 < header_len * 2, "read {} bytes", reader.1);

    // A file shorter than it claims: the header is cut short.
    let got = read_header(&file[..header_len / 2], file_len(&file));
    assert!(matches!(got, Err(GgufError::Truncated)), "{got:?}");
}

#[test]
fn a_header_past_the_cap_is_refused_after_reading_the_cap() {
    let mut w = GgufWriter::new(3, 0, 1);
    let huge = u64::try_from(MAX_GGUF_HEADER_BYTES).unwrap();
    w.string("s").u32(8).u64(huge);
    let head = w.bytes().to_vec();
    let file_len = huge * 2;
    let mut reader = Counting(
        std::io::Read::chain(&head[..], std::io::repeat(b'x').take(file_len)),
        0,
    );
    let got = read_header(&mut reader, file_len);
    assert!(
        matches!(got, Err(GgufError::HeaderTooLarge { limit }) if limit == MAX_GGUF_HEADER_BYTES),
        "{got:?}"
    );
    assert_eq!(reader.1, MAX_GGUF_HEADER_BYTES);
}

#[test]
fn io_failures_are_reported() {
    struct Failing;
    impl Read for Failing {
        fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
            Err(std::io::Error::other("disk gone"))
        }
    }
    let got = read_header(Failing, 1 << 20);
    assert!(
        matches!(&got, Err(GgufError::Io(e)) if e.to_string() == "disk gone"),
        "{got:?}"
    );
    assert!(got.unwrap_err().to_string().contains("disk gone"));
}
