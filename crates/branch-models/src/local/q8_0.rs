//! Products of Q8_0 matrices with activations, computing what candle's
//! portable Q8_0 kernel computes, on every CPU.
//!
//! The default GGUF keeps its output matrix (the embeddings, tied) in
//! Q8_0: 49,152 × 576, the largest matrix a token reads. candle picks its
//! Q8_0 kernel by CPU (portable; AVX2 with fused multiply-adds; AVX-512
//! VNNI over repacked tiles, the input quantized its own way), and each
//! rounds differently: the same model gave another greedy reply on an AVX2
//! machine than on an AVX-512 one. Here the arithmetic is candle's
//! portable one everywhere (the input quantized to Q8_0 per block of 32,
//! an integer dot product per block, `(sumi · d_w) · d_x` added in block
//! order), compiled for AVX2 when the CPU has it, four rows at a time.

use std::ops::Range;
use std::sync::atomic::AtomicU32;

use half::f16;

use super::block_matmul::{BLOCK, BlockMatrix, quantize_block, store};

/// Bytes per stored block: the scale (f16), 32 signed bytes.
const BLOCK_BYTES: usize = 34;

/// A Q8_0 matrix of `rows × cols`, its blocks' scales widened to f32 once
/// (exact), the rows in groups of four as in `q4_1.rs`: a group's values
/// and scales for one block sit together (`[g · nb + b]`).
pub struct Q8_0Matrix {
    rows: usize,
    cols: usize,
    qs4: Vec<[[i8; BLOCK]; 4]>,
    d4: Vec<[f32; 4]>,
    /// The blocks of the rows after the last group, row by row.
    qs_tail: Vec<[i8; BLOCK]>,
    d_tail: Vec<f32>,
}

impl std::fmt::Debug for Q8_0Matrix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Q8_0Matrix")
            .field("rows", &self.rows)
            .field("cols", &self.cols)
            .finish_non_exhaustive()
    }
}

/// One input row quantized to Q8_0 (candle's `BlockQ8_0::from_float`).
/// No value is -128, which the AVX2 kernel's sign trick needs.
pub(super) struct Q8_0Row {
    d: Vec<f32>,
    qs: Vec<[i8; BLOCK]>,
}

impl Q8_0Row {
    fn quantize(x: &[f32]) -> Self {
        let blocks = x.len() / BLOCK;
        let mut row = Self {
            d: Vec::with_capacity(blocks),
            qs: Vec::with_capacity(blocks),
        };
        for xs in x.as_chunks::<BLOCK>().0 {
            let (d, qs) = quantize_block(xs);
            row.d.push(d.to_f32());
            row.qs.push(qs);
        }
        row
    }
}

impl Q8_0Matrix {
    /// Reads the GGUF's bytes of a `rows × cols` Q8_0 matrix; `None` when
    /// the sizes do not fit.
    pub fn from_bytes(bytes: &[u8], rows: usize, cols: usize) -> Option<Self> {
        if cols == 0 || cols % BLOCK != 0 {
            return None;
        }
        let blocks = rows.checked_mul(cols / BLOCK)?;
        if bytes.len() != blocks.checked_mul(BLOCK_BYTES)? {
            return None;
        }
        let nb = cols / BLOCK;
        let grouped = rows - rows % 4;
        let mut matrix = Self {
            rows,
            cols,
            qs4: vec![[[0; BLOCK]; 4]; grouped / 4 * nb],
            d4: vec![[0.0; 4]; grouped / 4 * nb],
            qs_tail: Vec::with_capacity((rows - grouped) * nb),
            d_tail: Vec::with_capacity((rows - grouped) * nb),
        };
        for (i, block) in bytes.chunks_exact(BLOCK_BYTES).enumerate() {
            let (head, values) = block.split_at(2);
            let mut qs = [0i8; BLOCK];
            for (q, &b) in qs.iter_mut().zip(values) {
                *q = i8::from_le_bytes([b]);
            }
            let d = f16::from_le_bytes([head[0], head[1]]).to_f32();
            let (row, b) = (i / nb, i % nb);
            if row < grouped {
                let at = row / 4 * nb + b;
                matrix.qs4[at][row % 4] = qs;
                matrix.d4[at][row % 4] = d;
            } else {
                matrix.qs_tail.push(qs);
                matrix.d_tail.push(d);
            }
        }
        Some(matrix)
    }
}

impl BlockMatrix for Q8_0Matrix {
    type Input = Q8_0Row;
    const FORMAT: &'static str = "Q8_0";

    fn rows(&self) -> usize {
        self.rows
    }

    fn cols(&self) -> usize {
        self.cols
    }

    fn quantize(x: &[f32]) -> Q8_0Row {
        Q8_0Row::quantize(x)
    }

    fn run(&self, x: &Q8_0Row, rows: Range<usize>, out: &[AtomicU32]) {
        let rows = Rows {
            matrix: self,
            x,
            rows,
            out,
        };
        #[cfg(target_arch = "x86_64")]
        if let Some(simd) = pulp::x86::V3::try_new() {
            return simd.vectorize(avx2::Avx2Rows(rows, simd));
        }
        rows.run(Portable);
    }
}

/// One unit of work: rows `rows` of the output.
struct Rows<'a> {
    matrix: &'a Q8_0Matrix,
    x: &'a Q8_0Row,
    rows: Range<usize>,
    out: &'a [AtomicU32],
}

/// The block products of one instruction set.
trait BlockDot: Copy {
    /// The integer dot product of one block.
    fn dot(self, w: &[i8; BLOCK], x: &[i8; BLOCK]) -> i32;

    /// Adds one block of four rows to their sums: each row's
    /// `(sumi · d_w) · d_x`, candle's per-block term.
    #[inline(always)]
    fn add4(
        self,
        sums: &mut [f32; 4],
        w: &[[i8; BLOCK]; 4],
        x: &[i8; BLOCK],
        d: &[f32; 4],
        dx: f32,
    ) {
        for i in 0..4 {
            sums[i] += self.dot(&w[i], x) as f32 * d[i] * dx;
        }
    }
}

#[derive(Clone, Copy)]
struct Portable;

impl BlockDot for Portable {
    #[inline(always)]
    fn dot(self, w: &[i8; BLOCK], x: &[i8; BLOCK]) -> i32 {
        block_dot(w, x)
    }
}

impl Rows<'_> {
    /// Four rows at a time, each row's sum its own chain in block order;
    /// the rows after the last group one by one.
    #[inline(always)]
    fn run<K: BlockDot>(self, k: K) {
        let Self {
            matrix,
            x,
            rows,
            out,
        } = self;
        let nb = matrix.cols / BLOCK;
        let grouped = matrix.rows - matrix.rows % 4;
        let mut r = rows.start;
        // Units start at multiples of 4, so `r` walks the groups.
        while r + 4 <= rows.end {
            let mut sums = [0f32; 4];
            for b in 0..nb {
                let at = r / 4 * nb + b;
                k.add4(&mut sums, &matrix.qs4[at], &x.qs[b], &matrix.d4[at], x.d[b]);
            }
            for (i, sum) in sums.into_iter().enumerate() {
                store(&out[r + i], sum);
            }
            r += 4;
        }
        for (r, slot) in out.iter().enumerate().take(rows.end).skip(r) {
            let tail = (r - grouped) * nb;
            let mut sum = 0f32;
            for b in 0..nb {
                sum += k.dot(&matrix.qs_tail[tail + b], &x.qs[b]) as f32
                    * matrix.d_tail[tail + b]
                    * x.d[b];
            }
            store(slot, sum);
        }
    }
}

/// The integer dot product of one block.
#[inline(always)]
fn block_dot(w: &[i8; BLOCK], x: &[i8; BLOCK]) -> i32 {
    let mut sum = 0i32;
    for j in 0..BLOCK {
        sum += i32::from(w[j]) * i32::from(x[j]);
    }
    sum
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use core::arch::x86_64::__m256i;

    use pulp::x86::V3;

    use super::{BLOCK, BlockDot};
    use crate::local::block_matmul::avx2::{scaled4, sum1, sum4};

    /// The AVX2 kernel, available because the `V3` token exists.
    #[derive(Clone, Copy)]
    struct Avx2(V3);

    /// A unit of work for [`V3::vectorize`]: `call` and everything below
    /// it are `#[inline(always)]`, so compiled for AVX2 (see `q4_1.rs`).
    pub(super) struct Avx2Rows<'a>(pub(super) super::Rows<'a>, pub(super) V3);

    impl pulp::NullaryFnOnce for Avx2Rows<'_> {
        type Output = ();

        #[inline(always)]
        fn call(self) {
            let Self(rows, simd) = self;
            rows.run(Avx2(simd));
        }
    }

    impl BlockDot for Avx2 {
        #[inline(always)]
        fn dot(self, w: &[i8; BLOCK], x: &[i8; BLOCK]) -> i32 {
            block_dot(self.0, w, x)
        }

        #[inline(always)]
        fn add4(
            self,
            sums: &mut [f32; 4],
            w: &[[i8; BLOCK]; 4],
            x: &[i8; BLOCK],
            d: &[f32; 4],
            dx: f32,
        ) {
            let simd = self.0;
            let term = scaled4(simd, sum4(simd, eights4(simd, w, x)), d, dx);
            *sums = pulp::bytemuck::cast(simd.sse._mm_add_ps(pulp::bytemuck::cast(*sums), term));
        }
    }

    /// A block's 32 products summed to 8 integers. `maddubs` multiplies
    /// unsigned by signed bytes, so the weights' signs move onto the input
    /// (`|w| · (x · sign w)`): |w| ≤ 128 fits an unsigned byte, and the
    /// input holds no -128 to overflow when negated; a pair's sum is then at
    /// most 2 · 128 · 127, no saturation.
    #[inline(always)]
    fn eights(simd: V3, w: &[i8; BLOCK], x: __m256i) -> __m256i {
        let w: __m256i = pulp::bytemuck::cast(*w);
        let pairs = simd.avx2._mm256_maddubs_epi16(
            simd.avx2._mm256_abs_epi8(w),
            simd.avx2._mm256_sign_epi8(x, w),
        );
        simd.avx2
            ._mm256_madd_epi16(pairs, simd.avx._mm256_set1_epi16(1))
    }

    /// The 8-integer sums of four rows' blocks (no closure: one might not
    /// be compiled for AVX2).
    #[inline(always)]
    fn eights4(simd: V3, w: &[[i8; BLOCK]; 4], x: &[i8; BLOCK]) -> [__m256i; 4] {
        let x: __m256i = pulp::bytemuck::cast(*x);
        [
            eights(simd, &w[0], x),
            eights(simd, &w[1], x),
            eights(simd, &w[2], x),
            eights(simd, &w[3], x),
        ]
    }

    /// [`super::block_dot`] in AVX2: the same exact sum.
    #[inline(always)]
    pub(super) fn block_dot(simd: V3, w: &[i8; BLOCK], x: &[i8; BLOCK]) -> i32 {
        sum1(simd, eights(simd, w, pulp::bytemuck::cast(*x)))
    }

    /// [`super::block_dot`] of four rows' blocks.
    #[cfg(test)]
    #[inline(always)]
    pub(super) fn block_dot4(simd: V3, w: &[[i8; BLOCK]; 4], x: &[i8; BLOCK]) -> [i32; 4] {
        pulp::bytemuck::cast(sum4(simd, eights4(simd, w, x)))
    }
}

#[cfg(test)]
mod tests {
    use candle_core::quantized::k_quants::{BlockQ8_0, GgmlType};
    use candle_core::quantized::{GgmlDType, QTensor};
    use candle_core::{Device, Tensor};

    use super::{BLOCK, Q8_0Matrix};
    use crate::local::block_matmul::BlockMatrix;

    /// Rows of `cols` values with a wide range.
    fn values(n: usize, step: usize, modulus: usize) -> Vec<f32> {
        (0..n)
            .map(|i| {
                let v = f32::from(u16::try_from(i * step % modulus).unwrap());
                (v / 1000.0 - 0.45) * f32::from(u8::try_from(1 + i % 5).unwrap())
            })
            .collect()
    }

    /// Same outputs as candle's portable Q8_0 dot product (what every CPU
    /// now computes), bit for bit, for one input row (decode) and several
    /// (prompt).
    #[test]
    fn equals_candles_portable_q8_0_bit_for_bit() {
        // 75 rows: a unit of 16 ends with 3 rows outside the groups of 4.
        let (rows, cols) = (75, 576);
        let nb = cols / BLOCK;
        let w = values(rows * cols, 7919, 1013);
        let q = QTensor::quantize(
            &Tensor::from_vec(w.clone(), (rows, cols), &Device::Cpu).unwrap(),
            GgmlDType::Q8_0,
        )
        .unwrap();
        let ours = Q8_0Matrix::from_bytes(&q.data().unwrap(), rows, cols).unwrap();
        let quantized = |xs: &[f32]| {
            let mut blocks = vec![BlockQ8_0::zeros(); xs.len() / BLOCK];
            BlockQ8_0::from_float(xs, &mut blocks);
            blocks
        };
        let w_blocks = quantized(&w);
        for len in [1, 5] {
            let x = values(len * cols, 104_729, 997);
            let got = ours
                .forward(&Tensor::from_vec(x.clone(), (1, len, cols), &Device::Cpu).unwrap())
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap();
            let x_blocks = quantized(&x);
            let want: Vec<f32> = (0..len)
                .flat_map(|i| {
                    let x = &x_blocks[i * nb..(i + 1) * nb];
                    (0..rows)
                        .map(|r| BlockQ8_0::vec_dot_unopt(cols, &w_blocks[r * nb..(r + 1) * nb], x))
                        .collect::<Vec<_>>()
                })
                .collect();
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "{len} rows");
        }
        assert!(Q8_0Matrix::from_bytes(&[0; 33], 1, 32).is_none());
        assert!(Q8_0Matrix::from_bytes(&[0; 34], 1, 31).is_none());
    }

    /// The AVX2 block products equal the portable ones at the extremes:
    /// weights of -128 (a file may hold them) against inputs of ±127.
    #[test]
    fn block_kernels_agree_at_the_extremes() {
        #[cfg(target_arch = "x86_64")]
        if let Some(simd) = pulp::x86::V3::try_new() {
            let rows: [[i8; BLOCK]; 4] = [
                [-128; BLOCK],
                [127; BLOCK],
                std::array::from_fn(|i| if i % 2 == 0 { -128 } else { 127 }),
                std::array::from_fn(|i| i8::try_from(i).unwrap() * 3 - 50),
            ];
            for x in [
                [-127i8; BLOCK],
                [127; BLOCK],
                std::array::from_fn(|i| if i % 3 == 0 { -127 } else { 127 }),
                [0; BLOCK],
            ] {
                let one_by_one: [i32; 4] = std::array::from_fn(|r| super::block_dot(&rows[r], &x));
                assert_eq!(super::avx2::block_dot4(simd, &rows, &x), one_by_one);
                for (w, want) in rows.iter().zip(one_by_one) {
                    assert_eq!(super::avx2::block_dot(simd, w, &x), want);
                }
            }
        }
    }
}
