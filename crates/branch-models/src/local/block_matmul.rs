//! What our quantized matrix products share, whatever the block format
//! (`q4_1.rs`, `q8_0.rs`): the input quantized row by row, the output rows
//! split over candle's thread pool, each unit of work reading its rows of
//! the matrix once for all inputs.

use std::ops::Range;
use std::sync::atomic::{AtomicU32, Ordering};

use candle_core::{Device, Tensor};
use half::f16;

/// Output rows per unit of work handed to the thread pool (a multiple of
/// four: the kernels take rows four at a time).
pub(super) const ROWS_PER_UNIT: usize = 16;

/// A quantized matrix whose rows a kernel multiplies with quantized inputs.
pub(super) trait BlockMatrix: Sync {
    /// One input row, quantized as the format's dot product takes it.
    type Input: Sync;
    /// The format's name, for errors.
    const FORMAT: &'static str;

    fn rows(&self) -> usize;
    fn cols(&self) -> usize;
    /// Quantizes one input row of `cols` values.
    fn quantize(x: &[f32]) -> Self::Input;
    /// Output rows `rows` for input `x`, into `out` (one slot per matrix
    /// row, as f32 bits). `rows.start` is a multiple of four.
    fn run(&self, x: &Self::Input, rows: Range<usize>, out: &[AtomicU32]);

    /// `x (…, cols)` times the matrix transposed: `(…, rows)`.
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor>
    where
        Self: Sized,
    {
        forward(self, x)
    }
}

/// `x (…, cols)` times `matrix` transposed: `(…, rows)`.
fn forward<M: BlockMatrix>(matrix: &M, x: &Tensor) -> candle_core::Result<Tensor> {
    let dims = x.dims().to_vec();
    let Some((&k, batch)) = dims.split_last() else {
        candle_core::bail!("{} matmul of a scalar", M::FORMAT);
    };
    if k != matrix.cols() {
        candle_core::bail!(
            "{} matmul: input of {k} columns, matrix of {}",
            M::FORMAT,
            matrix.cols()
        );
    }
    let inputs = x.flatten_all()?.to_vec1::<f32>()?;
    let xs: Vec<M::Input> = inputs.chunks_exact(k).map(M::quantize).collect();
    let n = matrix.rows();
    let out: Vec<AtomicU32> = (0..xs.len() * n).map(|_| AtomicU32::new(0)).collect();
    candle_core::utils::barrier_pool().execute_chunked(n.div_ceil(ROWS_PER_UNIT), |units| {
        let rows = units.start * ROWS_PER_UNIT..(units.end * ROWS_PER_UNIT).min(n);
        for (i, x) in xs.iter().enumerate() {
            matrix.run(x, rows.clone(), &out[i * n..(i + 1) * n]);
        }
    });
    let out = out
        .into_iter()
        .map(|v| f32::from_bits(v.into_inner()))
        .collect();
    let mut shape = batch.to_vec();
    shape.push(n);
    Tensor::from_vec(out, shape, &Device::Cpu)
}

/// Inputs per quantized block.
pub(super) const BLOCK: usize = 32;

/// One block of inputs quantized to 8 bits as candle's Q8_0 and Q8_1 do:
/// the scale `amax / 127` (kept as f16), each value rounded after a
/// multiplication by the unrounded scale's reciprocal. No value is -128
/// (|x| ≤ amax), which the Q8_0 kernel's sign trick relies on.
pub(super) fn quantize_block(xs: &[f32; BLOCK]) -> (f16, [i8; BLOCK]) {
    let amax = xs.iter().fold(0f32, |a, x| a.max(x.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut qs = [0i8; BLOCK];
    for (q, x) in qs.iter_mut().zip(xs) {
        // `as` saturates; |x * id| <= 127 by construction.
        *q = (x * id).round() as i8;
    }
    (f16::from_f32(d), qs)
}

/// Stores a row's sum in its output slot.
#[inline(always)]
pub(super) fn store(slot: &AtomicU32, sum: f32) {
    slot.store(sum.to_bits(), Ordering::Relaxed);
}

/// Reductions the AVX2 kernels share.
#[cfg(target_arch = "x86_64")]
pub(super) mod avx2 {
    use core::arch::x86_64::{__m128, __m128i, __m256i};

    use pulp::x86::V3;

    /// The 8 integers of each of four rows' blocks summed, row by row
    /// (integer sums are exact in any order).
    #[inline(always)]
    pub(in crate::local) fn sum4(simd: V3, [a, b, c, d]: [__m256i; 4]) -> __m128i {
        // Per 128-bit half: [a01, a23, b01, b23], then [a, b, c, d].
        let ab = simd.avx2._mm256_hadd_epi32(a, b);
        let cd = simd.avx2._mm256_hadd_epi32(c, d);
        let abcd = simd.avx2._mm256_hadd_epi32(ab, cd);
        simd.sse2._mm_add_epi32(
            simd.avx._mm256_castsi256_si128(abcd),
            simd.avx2._mm256_extracti128_si256::<1>(abcd),
        )
    }

    /// The 8 integers of one block summed.
    #[inline(always)]
    pub(in crate::local) fn sum1(simd: V3, eights: __m256i) -> i32 {
        let s = simd.sse2._mm_add_epi32(
            simd.avx._mm256_castsi256_si128(eights),
            simd.avx2._mm256_extracti128_si256::<1>(eights),
        );
        let s = simd
            .sse2
            ._mm_add_epi32(s, simd.sse2._mm_shuffle_epi32::<0b01_00_11_10>(s));
        let s = simd
            .sse2
            ._mm_add_epi32(s, simd.sse2._mm_shuffle_epi32::<0b10_11_00_01>(s));
        simd.sse2._mm_cvtsi128_si32(s)
    }

    /// Four rows' block terms `(sumi · d_w) · d_x`, one per lane: the same
    /// multiplications, in the same order, as the scalar term (no fused
    /// multiply-add), so the same bits.
    #[inline(always)]
    pub(in crate::local) fn scaled4(simd: V3, sums: __m128i, d: &[f32; 4], dx: f32) -> __m128 {
        simd.sse._mm_mul_ps(
            simd.sse
                ._mm_mul_ps(simd.sse2._mm_cvtepi32_ps(sums), pulp::bytemuck::cast(*d)),
            simd.sse._mm_set1_ps(dx),
        )
    }
}
