//! Products of Q4_1 matrices (the default GGUF's format) with activations,
//! computing exactly what candle's Q4_1 kernel computes, only faster.
//!
//! candle 0.11's Q4_1 × Q8_1 dot product is scalar (its Q8_0 one is AVX2),
//! so the GGUF's own format, half the bytes of Q8_0, ran slower than the
//! Q8_0 conversion. Here the same arithmetic (the input quantized to Q8_1
//! per row as candle does, an integer dot product per block of 32, the
//! scales applied in candle's order) is compiled for AVX2 at run time
//! through pulp's dispatch (safe code: the workspace denies `unsafe`), and
//! the rows are split over candle's thread pool. The outputs are equal to
//! candle's bit for bit (tested), so the model is the same.

use std::ops::Range;
use std::sync::atomic::AtomicU32;

use half::f16;

use super::block_matmul::{BLOCK, BlockMatrix, quantize_block, store};

/// Bytes per stored block: scale and minimum (f16 each), 16 bytes of nibbles.
const BLOCK_BYTES: usize = 20;

/// A Q4_1 matrix of `rows × cols`, its blocks' scales and minimums widened
/// to f32 once (exact) so the inner loop reads no f16.
///
/// The rows go in groups of four (the last `rows % 4` alone): a group's
/// nibbles, scales and minimums for one block sit together
/// (`[g · nb + b]`), so the kernel reads the group as one stream, and the
/// scales and minimums as one vector each, applied to four rows at once,
/// each lane one row's own arithmetic.
pub struct Q4_1Matrix {
    rows: usize,
    cols: usize,
    /// The groups' blocks, four rows together.
    qs4: Vec<[[u8; 16]; 4]>,
    d4: Vec<[f32; 4]>,
    m4: Vec<[f32; 4]>,
    /// The blocks of the rows after the last group, row by row.
    qs_tail: Vec<[u8; 16]>,
    d_tail: Vec<f32>,
    m_tail: Vec<f32>,
}

impl std::fmt::Debug for Q4_1Matrix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Q4_1Matrix")
            .field("rows", &self.rows)
            .field("cols", &self.cols)
            .finish_non_exhaustive()
    }
}

/// One input row quantized to Q8_1 (candle's `BlockQ8_1::from_float`).
pub(super) struct Q8_1Row {
    d: Vec<f32>,
    s: Vec<f32>,
    qs: Vec<[i8; BLOCK]>,
}

impl Q8_1Row {
    fn quantize(x: &[f32]) -> Self {
        let blocks = x.len() / BLOCK;
        let mut row = Self {
            d: Vec::with_capacity(blocks),
            s: Vec::with_capacity(blocks),
            qs: Vec::with_capacity(blocks),
        };
        for xs in x.as_chunks::<BLOCK>().0 {
            let (d, qs) = quantize_block(xs);
            let sum: i32 = qs.iter().map(|&q| i32::from(q)).sum();
            row.d.push(d.to_f32());
            row.s.push((f16::from_f32(sum as f32) * d).to_f32());
            row.qs.push(qs);
        }
        row
    }
}

impl Q4_1Matrix {
    /// Reads the GGUF's bytes of a `rows × cols` Q4_1 matrix; `None` when
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
            qs4: vec![[[0; 16]; 4]; grouped / 4 * nb],
            d4: vec![[0.0; 4]; grouped / 4 * nb],
            m4: vec![[0.0; 4]; grouped / 4 * nb],
            qs_tail: Vec::with_capacity((rows - grouped) * nb),
            d_tail: Vec::with_capacity((rows - grouped) * nb),
            m_tail: Vec::with_capacity((rows - grouped) * nb),
        };
        for (i, block) in bytes.chunks_exact(BLOCK_BYTES).enumerate() {
            let (head, qs) = block.split_at(4);
            let qs: [u8; 16] = qs.try_into().ok()?;
            let d = f16::from_le_bytes([head[0], head[1]]).to_f32();
            let m = f16::from_le_bytes([head[2], head[3]]).to_f32();
            let (row, b) = (i / nb, i % nb);
            if row < grouped {
                let at = row / 4 * nb + b;
                matrix.qs4[at][row % 4] = qs;
                matrix.d4[at][row % 4] = d;
                matrix.m4[at][row % 4] = m;
            } else {
                matrix.qs_tail.push(qs);
                matrix.d_tail.push(d);
                matrix.m_tail.push(m);
            }
        }
        Some(matrix)
    }
}

impl BlockMatrix for Q4_1Matrix {
    type Input = Q8_1Row;
    const FORMAT: &'static str = "Q4_1";

    fn rows(&self) -> usize {
        self.rows
    }

    fn cols(&self) -> usize {
        self.cols
    }

    fn quantize(x: &[f32]) -> Q8_1Row {
        Q8_1Row::quantize(x)
    }

    fn run(&self, x: &Q8_1Row, rows: Range<usize>, out: &[AtomicU32]) {
        dispatch(Rows {
            matrix: self,
            x,
            nb: self.cols / BLOCK,
            rows,
            out,
        });
    }
}

/// Runs `rows` with the AVX2 block kernel when the CPU has AVX2 (pulp's
/// `V3` token proves it, and its intrinsics are safe to call with it).
fn dispatch(rows: Rows<'_>) {
    #[cfg(target_arch = "x86_64")]
    if let Some(simd) = pulp::x86::V3::try_new() {
        return simd.vectorize(avx2::Avx2Rows(rows, simd));
    }
    rows.run(Portable);
}

/// One unit of work: rows `rows` of the output.
struct Rows<'a> {
    matrix: &'a Q4_1Matrix,
    x: &'a Q8_1Row,
    nb: usize,
    rows: Range<usize>,
    out: &'a [AtomicU32],
}

/// The integer dot product of one block, per instruction set.
trait BlockDot: Copy {
    fn dot(self, w: &[u8; 16], x: &[i8; BLOCK]) -> i32;

    /// Adds one block of four rows to their sums: each row's
    /// `(sumi · d_w) · d_x + m_w · s_x`, candle's per-block term.
    #[inline(always)]
    fn add4(
        self,
        sums: &mut [f32; 4],
        w: &[[u8; 16]; 4],
        x: &Q8_1Block<'_>,
        d: &[f32; 4],
        m: &[f32; 4],
    ) {
        for i in 0..4 {
            sums[i] += self.dot(&w[i], x.qs) as f32 * d[i] * x.d + m[i] * x.s;
        }
    }
}

/// One block of an input row.
struct Q8_1Block<'a> {
    qs: &'a [i8; BLOCK],
    d: f32,
    s: f32,
}

#[derive(Clone, Copy)]
struct Portable;

impl BlockDot for Portable {
    #[inline(always)]
    fn dot(self, w: &[u8; 16], x: &[i8; BLOCK]) -> i32 {
        block_dot(w, x)
    }
}

impl Rows<'_> {
    /// Four rows at a time, one group: their sums are independent chains,
    /// computed side by side (each row's own order is kept: candle's
    /// `(sumi · d_w) · d_x + m_w · s_x` per block, in block order); the
    /// rows after the last group one by one.
    #[inline(always)]
    fn run<K: BlockDot>(self, k: K) {
        let Self {
            matrix,
            x,
            nb,
            rows,
            out,
        } = self;
        let grouped = matrix.rows - matrix.rows % 4;
        let mut r = rows.start;
        // Units start at multiples of 4, so `r` walks the groups.
        while r + 4 <= rows.end {
            let mut sums = [0f32; 4];
            for b in 0..nb {
                let xb = Q8_1Block {
                    qs: &x.qs[b],
                    d: x.d[b],
                    s: x.s[b],
                };
                let at = r / 4 * nb + b;
                k.add4(
                    &mut sums,
                    &matrix.qs4[at],
                    &xb,
                    &matrix.d4[at],
                    &matrix.m4[at],
                );
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
                    * x.d[b]
                    + matrix.m_tail[tail + b] * x.s[b];
            }
            store(slot, sum);
        }
    }
}

/// The integer dot product of one block: low nibbles with the first 16
/// values, high nibbles with the last 16.
#[inline(always)]
fn block_dot(w: &[u8; 16], x: &[i8; BLOCK]) -> i32 {
    let mut sum = 0i32;
    for j in 0..16 {
        let lo = i16::from(w[j] & 0x0F) * i16::from(x[j]);
        let hi = i16::from(w[j] >> 4) * i16::from(x[j + 16]);
        sum += i32::from(lo) + i32::from(hi);
    }
    sum
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use core::arch::x86_64::{__m128i, __m256i};

    use pulp::x86::V3;

    use super::BlockDot;
    use crate::local::block_matmul::avx2::{scaled4, sum1, sum4};

    /// The AVX2 kernel, available because the `V3` token exists.
    #[derive(Clone, Copy)]
    pub(super) struct Avx2(pub(super) V3);

    /// A unit of work for [`V3::vectorize`], which runs `call` in a
    /// function compiled for AVX2. Everything below it is
    /// `#[inline(always)]`, so the intrinsics are compiled into that
    /// function. A closure is not enough: when LLVM chose not to inline it
    /// (the release build did), its body, and every intrinsic in it, was
    /// compiled without AVX2, each intrinsic an out-of-line call, and
    /// decoding ran at 15 tokens/s against the Q8_0 conversion's 53.
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
        fn dot(self, w: &[u8; 16], x: &[i8; super::BLOCK]) -> i32 {
            block_dot(self.0, w, x)
        }

        /// The four rows' integer sums reduced together, then their
        /// terms computed in the lanes of one vector: per lane the same
        /// multiplications and additions, in the same order, as the
        /// scalar term (no fused multiply-add), so the same bits.
        #[inline(always)]
        fn add4(
            self,
            sums: &mut [f32; 4],
            w: &[[u8; 16]; 4],
            x: &super::Q8_1Block<'_>,
            d: &[f32; 4],
            m: &[f32; 4],
        ) {
            let simd = self.0;
            let scaled = scaled4(simd, sum4(simd, eights4(simd, w, x.qs)), d, x.d);
            let mins = simd
                .sse
                ._mm_mul_ps(pulp::bytemuck::cast(*m), simd.sse._mm_set1_ps(x.s));
            let term = simd.sse._mm_add_ps(scaled, mins);
            *sums = pulp::bytemuck::cast(simd.sse._mm_add_ps(pulp::bytemuck::cast(*sums), term));
        }
    }

    /// A block's products summed to 8 integers: the nibbles widened to 32
    /// bytes (low ones beside the first 16 values, high ones beside the
    /// last 16), multiplied and summed in pairs (at most 2 · 15 · 128, no
    /// saturation), then in pairs again.
    #[inline(always)]
    fn eights(simd: V3, w: &[u8; 16], x: __m256i) -> __m256i {
        let w: __m128i = pulp::bytemuck::cast(*w);
        let hi = simd.sse2._mm_srli_epi16::<4>(w);
        let both = simd.avx._mm256_set_m128i(hi, w);
        let nibbles = simd
            .avx2
            ._mm256_and_si256(both, simd.avx._mm256_set1_epi8(0x0F));
        let pairs = simd.avx2._mm256_maddubs_epi16(nibbles, x);
        simd.avx2
            ._mm256_madd_epi16(pairs, simd.avx._mm256_set1_epi16(1))
    }

    /// The 8-integer sums of four rows' blocks.
    #[inline(always)]
    fn eights4(simd: V3, w: &[[u8; 16]; 4], x: &[i8; super::BLOCK]) -> [__m256i; 4] {
        // No closure (`map`) here: one might not be compiled for AVX2.
        let x: __m256i = pulp::bytemuck::cast(*x);
        [
            eights(simd, &w[0], x),
            eights(simd, &w[1], x),
            eights(simd, &w[2], x),
            eights(simd, &w[3], x),
        ]
    }

    /// [`super::block_dot`] of four rows' blocks, their 8-integer sums
    /// reduced together.
    #[cfg(test)]
    #[inline(always)]
    pub(super) fn block_dot4(simd: V3, w: &[[u8; 16]; 4], x: &[i8; super::BLOCK]) -> [i32; 4] {
        pulp::bytemuck::cast(sum4(simd, eights4(simd, w, x)))
    }

    /// [`super::block_dot`] in AVX2: the same exact sum.
    #[inline(always)]
    pub(super) fn block_dot(simd: V3, w: &[u8; 16], x: &[i8; super::BLOCK]) -> i32 {
        sum1(simd, eights(simd, w, pulp::bytemuck::cast(*x)))
    }
}

#[cfg(test)]
mod tests {
    use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
    use candle_core::{Device, Module, Tensor};

    use super::Q4_1Matrix;
    use crate::local::block_matmul::BlockMatrix;

    /// Same outputs as candle's own Q4_1 matmul, bit for bit, for one row
    /// (decode) and several (prompt), on values with a wide range.
    #[test]
    fn equals_candles_q4_1_matmul_bit_for_bit() {
        // 75 rows: a unit of 16 ends with 3 rows outside the groups of 4.
        let (rows, cols) = (75, 576);
        let w: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 7919 % 1013) as f32 / 1013.0 - 0.45) * (1.0 + (i % 5) as f32))
            .collect();
        let w = Tensor::from_vec(w, (rows, cols), &Device::Cpu).unwrap();
        let q = QTensor::quantize(&w, GgmlDType::Q4_1).unwrap();
        let ours = Q4_1Matrix::from_bytes(&q.data().unwrap(), rows, cols).unwrap();
        let theirs = QMatMul::from_qtensor(q).unwrap();
        for len in [1, 5] {
            let x: Vec<f32> = (0..len * cols)
                .map(|i| ((i * 104_729 % 997) as f32 / 997.0 - 0.5) * 3.0)
                .collect();
            let x = Tensor::from_vec(x, (1, len, cols), &Device::Cpu).unwrap();
            let a = ours.forward(&x).unwrap().flatten_all().unwrap();
            let b = theirs.forward(&x).unwrap().flatten_all().unwrap();
            let (a, b) = (a.to_vec1::<f32>().unwrap(), b.to_vec1::<f32>().unwrap());
            assert_eq!(a.len(), len * rows);
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&a), bits(&b), "{len} rows");
        }
        // The block kernels agree on extreme values too.
        let w = [0xFFu8; 16];
        let x = [-128i8; 32];
        #[cfg(target_arch = "x86_64")]
        if let Some(simd) = pulp::x86::V3::try_new() {
            assert_eq!(
                super::avx2::block_dot(simd, &w, &x),
                super::block_dot(&w, &x)
            );
            let w: [u8; 16] = std::array::from_fn(|i| (i * 37) as u8);
            let x: [i8; 32] = std::array::from_fn(|i| (i as i8).wrapping_mul(29));
            assert_eq!(
                super::avx2::block_dot(simd, &w, &x),
                super::block_dot(&w, &x)
            );
            // Four rows reduced together: each row's own sum, in its place.
            let rows: [[u8; 16]; 4] =
                std::array::from_fn(|r| std::array::from_fn(|i| (i * 37 + r * 101) as u8));
            let four = super::avx2::block_dot4(simd, &rows, &x);
            let one_by_one: [i32; 4] = std::array::from_fn(|r| super::block_dot(&rows[r], &x));
            assert_eq!(four, one_by_one);
            let extreme = [[0xFFu8; 16], [0; 16], [0x0F; 16], [0xF0; 16]];
            let four = super::avx2::block_dot4(simd, &extreme, &[-128; 32]);
            let one_by_one: [i32; 4] =
                std::array::from_fn(|r| super::block_dot(&extreme[r], &[-128; 32]));
            assert_eq!(four, one_by_one);
        }
        assert!(Q4_1Matrix::from_bytes(&[0; 19], 1, 32).is_none());
        assert!(Q4_1Matrix::from_bytes(&[0; 20], 1, 31).is_none());
    }
}
