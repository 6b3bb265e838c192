//! Attention over the KV cache, computed here instead of by candle's
//! matmuls: [`attend_one`] for a decode step (one new position),
//! [`attend_rows`] for a prompt (several, each reading the positions up to
//! its own).
//!
//! candle 0.11's f32 matmul looks up its thread count on every call, and
//! without `RAYON_NUM_THREADS` in the environment that lookup reads and
//! parses `/proc/cpuinfo` (about 30 µs): 60 lookups per token of the
//! default model, 1.8 ms of a 13 ms token. A prompt's path computed every
//! score of its rows, the masked ones too, then made three more passes
//! over them (scale, mask, softmax): a 32-token turn at 1,200 cached
//! positions spent about 150 ms in it, twice what the products need, so
//! the time to the first token grew with the conversation. Here a query
//! row is a dot product per position it reads, a softmax and a weighted
//! sum of the values, compiled for AVX2 when the CPU has it (pulp's
//! dispatch, safe code), spread over candle's thread pool. A prompt's
//! rows go four at a time, so each cached key and value is read once for
//! four of them; a decode step's keys go eight at a time. The sums of
//! eight products are finished together by shuffles, the softmax's
//! exponential is our own (libm's `expf` cannot be vectorized), and the
//! output stays in registers while the values are weighed: together 1.8×
//! faster for a 33-token turn after 1,208 cached positions. A decode step
//! there is 2.3× faster only while the cache sits in the CPU's caches; in
//! a conversation it reads the whole cache from memory (57 MB a token at
//! 1,241 positions), and that is what it waits on.
//!
//! The arithmetic is fixed: each of the `LANES` partial sums takes its own
//! stride of a head's dimensions with fused multiply-adds (AVX2's, or
//! `f32::mul_add` elsewhere: the same bits), the lanes are added in one
//! order, the exponential is the same IEEE operations in either, the
//! values weighed in position order. So the result does not
//! depend on the CPU (gemm's does: it picks its kernels and blocking by
//! CPU), and a position's output is the same bits whether a decode step
//! evaluates it alone or a prompt with any others: for the attention, the
//! prompt cache's warm turn computes exactly what a cold evaluation of the
//! whole prompt does. It is not candle's bits, only as close (within 1e-5
//! in the tests).

use std::sync::atomic::{AtomicU32, Ordering};

use candle_core::{Device, Storage, Tensor};

/// Partial sums per dot product: one AVX2 vector of f32.
const LANES: usize = 8;

/// The attention of one new position: `q` is `(1, n_head, 1, hd)`, `k` and
/// `v` are `(1, n_kv, positions, hd)` (views of the cache, each position's
/// row contiguous), query head `h` reading K/V head `h / (n_head / n_kv)`.
/// Returns the heads' outputs side by side, `(1, 1, n_head · hd)`.
pub(super) fn attend_one(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f32,
) -> candle_core::Result<Tensor> {
    let what = "one-position attention";
    attention(q, k, v, what, Some(1), |s, q, keys, values, out| {
        let (hd, group) = (s.hd, s.n_head / s.n_kv);
        let lanes = Lanes::detect();
        candle_core::utils::barrier_pool().execute_chunked(s.n_head, |heads| {
            for h in heads {
                let kv = h / group;
                dispatch(Head {
                    q: &q[h * hd..(h + 1) * hd],
                    keys: keys.head(kv),
                    values: values.head(kv),
                    scale,
                    out: &out[h * hd..(h + 1) * hd],
                    lanes,
                });
            }
        });
    })
}

/// Query rows computed together: each key and value read serves this many.
const ROWS: usize = 4;

/// The attention of `len` new positions after `past` cached ones: `q` is
/// `(1, n_head, len, hd)`, `k` and `v` are `(1, n_kv, past + len, hd)`
/// (views of the cache, each position's row contiguous), and the query of
/// new position `r` reads the keys and values of positions `0..=past + r`
/// (causal). Query head `h` reads K/V head `h / (n_head / n_kv)`. Returns
/// `(1, len, n_head · hd)`, each position's heads side by side.
pub(super) fn attend_rows(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f32,
) -> candle_core::Result<Tensor> {
    attention(
        q,
        k,
        v,
        "prompt attention",
        None,
        |s, q, keys, values, out| {
            let Shape {
                n_head,
                len,
                hd,
                n_kv,
                positions,
            } = *s;
            let past = positions - len;
            let group = n_head / n_kv;
            // The rows reading one K/V head, position-major (so a block's rows
            // see nearly the same positions), cut into blocks of `ROWS`.
            let rows_per_kv = group * len;
            let blocks_per_kv = rows_per_kv.div_ceil(ROWS);
            let lanes = Lanes::detect();
            candle_core::utils::barrier_pool().execute_chunked(n_kv * blocks_per_kv, |blocks| {
                for b in blocks {
                    let kv = b / blocks_per_kv;
                    let first = (b % blocks_per_kv) * ROWS;
                    let mut block = Block {
                        rows: [None; ROWS],
                        keys: keys.head(kv),
                        values: values.head(kv),
                        hd,
                        scale,
                        lanes,
                    };
                    for (slot, i) in block.rows.iter_mut().zip(first..rows_per_kv) {
                        let (r, h) = (i / group, kv * group + i % group);
                        *slot = Some(BlockRow {
                            q: &q[(h * len + r) * hd..(h * len + r + 1) * hd],
                            seen: past + r + 1,
                            out: &out[(r * n_head + h) * hd..(r * n_head + h + 1) * hd],
                        });
                    }
                    dispatch(block);
                }
            });
        },
    )
}

/// What both entry points share: the sizes checked, the queries read out,
/// the cached keys and values as slices, and `(1, len, n_head · hd)` made
/// of what `compute` writes (each output value once, from any thread).
fn attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    what: &str,
    rows: Option<usize>,
    compute: impl FnOnce(&Shape, &[f32], &Cached<'_>, &Cached<'_>, &[AtomicU32]),
) -> candle_core::Result<Tensor> {
    let s = Shape::of(q, k, v, what, rows)?;
    let q = q.flatten_all()?.to_vec1::<f32>()?;
    let (k_storage, k_layout) = k.storage_and_layout();
    let (v_storage, v_layout) = v.storage_and_layout();
    let keys = Cached::new(&k_storage, k_layout, s.n_kv, s.positions, s.hd)?;
    let values = Cached::new(&v_storage, v_layout, s.n_kv, s.positions, s.hd)?;
    let width = s.n_head * s.hd;
    let out: Vec<AtomicU32> = (0..s.len * width).map(|_| AtomicU32::new(0)).collect();
    compute(&s, &q, &keys, &values, &out);
    let out = out
        .into_iter()
        .map(|v| f32::from_bits(v.into_inner()))
        .collect();
    Tensor::from_vec(out, (1, s.len, width), &Device::Cpu)
}

/// The sizes of an attention call, checked against each other.
#[derive(Clone, Copy)]
struct Shape {
    n_head: usize,
    /// New positions (query rows per head).
    len: usize,
    hd: usize,
    n_kv: usize,
    /// Cached positions, the new ones included.
    positions: usize,
}

impl Shape {
    /// `q` is `(1, n_head, len, hd)` and `k`, `v` are `(1, n_kv,
    /// positions, hd)`, with at least one new position, all of them among
    /// the cached ones, heads that group, and `len` rows when `rows` says.
    fn of(
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        what: &str,
        rows: Option<usize>,
    ) -> candle_core::Result<Self> {
        let (_, n_head, len, hd) = q.dims4()?;
        let (_, n_kv, positions, k_hd) = k.dims4()?;
        if len == 0
            || rows.is_some_and(|rows| rows != len)
            || hd == 0
            || k_hd != hd
            || v.dims() != k.dims()
            || n_kv == 0
            || n_head % n_kv != 0
            || positions < len
        {
            candle_core::bail!(
                "{what}: query {:?}, keys {:?}, values {:?}",
                q.dims(),
                k.dims(),
                v.dims()
            );
        }
        Ok(Self {
            n_head,
            len,
            hd,
            n_kv,
            positions,
        })
    }
}

/// One query row of a [`Block`]: its query, how many positions it reads,
/// and where its output goes.
#[derive(Clone, Copy)]
struct BlockRow<'a> {
    q: &'a [f32],
    seen: usize,
    out: &'a [AtomicU32],
}

/// Up to `ROWS` query rows over one K/V head's rows.
struct Block<'a> {
    rows: [Option<BlockRow<'a>>; ROWS],
    keys: &'a [f32],
    values: &'a [f32],
    hd: usize,
    scale: f32,
    lanes: Lanes,
}

/// The widest head a [`Block`] takes (SmolLM2's heads are 64 wide,
/// Llama's 128); wider ones, or widths that are not whole lane groups,
/// are computed a row at a time.
const MAX_BLOCK_HD: usize = 256;

/// Whether heads of `hd` take the kernels of whole lane groups: a
/// [`Block`]'s, a [`Head`]'s `run_in_lanes`.
fn in_lanes(hd: usize) -> bool {
    hd != 0 && hd <= MAX_BLOCK_HD && hd % LANES == 0
}

/// Chunks of `LANES` values in a head of [`MAX_BLOCK_HD`].
const MAX_CHUNKS: usize = MAX_BLOCK_HD / LANES;

type Chunk = [f32; LANES];

impl Kernel for Block<'_> {
    /// For each row, what a [`Head`] computes for it alone, in the same
    /// order: the positions every row reads are taken for all rows at
    /// once, the few a later row reads beyond them one row at a time.
    #[inline(always)]
    fn run(self) {
        let hd = self.hd;
        let rows: [BlockRow<'_>; ROWS] = match self.rows {
            // A head's last block may hold fewer rows: its last row is
            // computed again in the empty places (the same bits, stored
            // again), which costs less than computing the rows alone.
            [Some(a), b, c, d] if in_lanes(hd) => {
                let b = b.unwrap_or(a);
                let c = c.unwrap_or(b);
                [a, b, c, d.unwrap_or(c)]
            }
            // A head this does not take: each row alone.
            other => {
                for row in other.into_iter().flatten() {
                    Head {
                        q: row.q,
                        keys: &self.keys[..row.seen * hd],
                        values: &self.values[..row.seen * hd],
                        scale: self.scale,
                        out: row.out,
                        lanes: self.lanes,
                    }
                    .run();
                }
                return;
            }
        };
        let chunks = hd / LANES;
        let common = rows.iter().map(|r| r.seen).min().unwrap_or(0);
        let (keys, _) = self.keys.as_chunks::<LANES>();
        let (values, _) = self.values.as_chunks::<LANES>();
        let queries = [
            &rows[0].q.as_chunks::<LANES>().0[..chunks],
            &rows[1].q.as_chunks::<LANES>().0[..chunks],
            &rows[2].q.as_chunks::<LANES>().0[..chunks],
            &rows[3].q.as_chunks::<LANES>().0[..chunks],
        ];
        // Each row's scores written in place: `push`, its length checked
        // and stored each time, took about 6 % of the kernel's time.
        let mut weights = rows.map(|row| vec![0.0f32; row.seen]);
        // Two keys at a time: eight independent sums keep the vector unit
        // busy where four would wait on their own additions.
        let pairs = keys[..common * chunks].chunks_exact(2 * chunks);
        let last = pairs.remainder();
        for (j, pair) in pairs.enumerate() {
            let (a, b) = pair.split_at(chunks);
            let [a, b] = self.lanes.dot_rows([a, b], queries);
            for r in 0..ROWS {
                weights[r][2 * j] = a[r] * self.scale;
                weights[r][2 * j + 1] = b[r] * self.scale;
            }
        }
        if !last.is_empty() {
            let [a, _] = self.lanes.dot_rows([last, last], queries);
            for r in 0..ROWS {
                weights[r][common - 1] = a[r] * self.scale;
            }
        }
        for r in 0..ROWS {
            let keys = self.keys[common * hd..rows[r].seen * hd].chunks_exact(hd);
            for (w, key) in weights[r][common..].iter_mut().zip(keys) {
                *w = dot(rows[r].q, key) * self.scale;
            }
        }
        for w in &mut weights {
            softmax(w, self.lanes);
        }
        let mut y = [[[0.0f32; LANES]; MAX_CHUNKS]; ROWS];
        let common_values = &values[..common * chunks];
        self.lanes
            .weigh_rows(&mut y, &weights, common_values, chunks);
        for r in 0..ROWS {
            let tail = values[common * chunks..rows[r].seen * chunks].chunks_exact(chunks);
            for (&w, value) in weights[r][common..].iter().zip(tail) {
                for (y, x) in y[r][..chunks].iter_mut().zip(value) {
                    for l in 0..LANES {
                        y[l] = w.mul_add(x[l], y[l]);
                    }
                }
            }
            for (out, y) in rows[r].out.iter().zip(y[r][..chunks].as_flattened()) {
                out.store(y.to_bits(), Ordering::Relaxed);
            }
        }
    }
}

/// How a [`Block`] computes its lanes: portable code, or AVX2 intrinsics
/// doing the same operations on each lane in the same order (one fused
/// multiply-add per term), so the same bits on every CPU.
#[derive(Clone, Copy)]
enum Lanes {
    Portable,
    #[cfg(target_arch = "x86_64")]
    Avx2(pulp::x86::V3),
}

impl Lanes {
    /// AVX2's when the CPU has it.
    fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        if let Some(simd) = pulp::x86::V3::try_new() {
            return Lanes::Avx2(simd);
        }
        Lanes::Portable
    }

    /// Each query's product with each of two keys, as [`dot`] computes it.
    #[inline(always)]
    fn dot_rows(self, keys: [&[Chunk]; 2], queries: [&[Chunk]; ROWS]) -> [[f32; ROWS]; 2] {
        match self {
            #[cfg(target_arch = "x86_64")]
            Lanes::Avx2(simd) => avx2::dot_rows(simd, keys, queries),
            Lanes::Portable => keys.map(|key| {
                let mut acc = [[0.0f32; LANES]; ROWS];
                for (j, k) in key.iter().enumerate() {
                    for r in 0..ROWS {
                        for l in 0..LANES {
                            acc[r][l] = queries[r][j][l].mul_add(k[l], acc[r][l]);
                        }
                    }
                }
                acc.map(|acc| finish(acc, &[], &[]))
            }),
        }
    }

    /// `q`'s product with each of the eight keys of `keys` (rows of
    /// `q.len()` chunks), as [`dot`] computes it.
    #[inline(always)]
    fn dot_keys(self, q: &[Chunk], keys: &[Chunk]) -> [f32; 8] {
        match self {
            #[cfg(target_arch = "x86_64")]
            Lanes::Avx2(simd) => avx2::dot_keys(simd, q, keys),
            Lanes::Portable => {
                let mut sums = [0.0f32; 8];
                for (sum, key) in sums.iter_mut().zip(keys.chunks_exact(q.len())) {
                    *sum = dot(q.as_flattened(), key.as_flattened());
                }
                sums
            }
        }
    }

    /// `y += weights[j] · values[j]` for each position `j` of `values`
    /// (rows of `y.len()` chunks), in position order.
    #[inline(always)]
    fn weigh_row(self, y: &mut [Chunk], weights: &[f32], values: &[Chunk]) {
        match self {
            #[cfg(target_arch = "x86_64")]
            Lanes::Avx2(simd) => avx2::weigh_row(simd, y, weights, values),
            Lanes::Portable => {
                for (&w, value) in weights.iter().zip(values.chunks_exact(y.len())) {
                    for (y, x) in y.iter_mut().zip(value) {
                        for l in 0..LANES {
                            y[l] = w.mul_add(x[l], y[l]);
                        }
                    }
                }
            }
        }
    }

    /// Each value `w` of `chunks` replaced by [`exp_nonpositive`]`(w -
    /// max)`; returns their sums by lane, each in position order.
    #[inline(always)]
    fn exp_less(self, chunks: &mut [Chunk], max: f32) -> Chunk {
        match self {
            #[cfg(target_arch = "x86_64")]
            Lanes::Avx2(simd) => avx2::exp_less(simd, chunks, max),
            Lanes::Portable => {
                let mut sums = [0.0f32; LANES];
                for chunk in chunks {
                    for l in 0..LANES {
                        chunk[l] = exp_nonpositive(chunk[l] - max);
                        sums[l] += chunk[l];
                    }
                }
                sums
            }
        }
    }

    /// `y[r] += weights[r][j] · values[j]` for each row and each position
    /// `j` of `values` (rows of `chunks` chunks), in position order.
    #[inline(always)]
    fn weigh_rows(
        self,
        y: &mut [[Chunk; MAX_CHUNKS]; ROWS],
        weights: &[Vec<f32>; ROWS],
        values: &[Chunk],
        chunks: usize,
    ) {
        match self {
            #[cfg(target_arch = "x86_64")]
            Lanes::Avx2(simd) => avx2::weigh_rows(simd, y, weights, values, chunks),
            Lanes::Portable => {
                for (j, value) in values.chunks_exact(chunks).enumerate() {
                    for r in 0..ROWS {
                        let w = weights[r][j];
                        for (y, x) in y[r][..chunks].iter_mut().zip(value) {
                            for l in 0..LANES {
                                y[l] = w.mul_add(x[l], y[l]);
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use pulp::bytemuck::cast;
    use pulp::x86::V3;
    use std::arch::x86_64::__m256;

    use std::arch::x86_64::_CMP_LT_OQ;
    use std::f32::consts::LOG2_E;

    use super::{Chunk, EXP_POLY, LN2_HIGH, LN2_LOW, LOWEST, MAX_CHUNKS, ROUND, ROUND_BITS, ROWS};

    #[inline(always)]
    pub(super) fn dot_rows(
        simd: V3,
        keys: [&[Chunk]; 2],
        queries: [&[Chunk]; ROWS],
    ) -> [[f32; ROWS]; 2] {
        let avx = simd.avx;
        let [a, b] = keys;
        let b = &b[..a.len()];
        let mut acc = [[avx._mm256_setzero_ps(); ROWS]; 2];
        for (j, (ka, kb)) in a.iter().zip(b).enumerate() {
            let (ka, kb): (__m256, __m256) = (cast(*ka), cast(*kb));
            for r in 0..ROWS {
                let q: __m256 = cast(queries[r][j]);
                acc[0][r] = simd.fma._mm256_fmadd_ps(q, ka, acc[0][r]);
                acc[1][r] = simd.fma._mm256_fmadd_ps(q, kb, acc[1][r]);
            }
        }
        let [a, b] = acc;
        let sums: [f32; 8] = cast(finish8(
            simd,
            [a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]],
        ));
        [
            [sums[0], sums[1], sums[2], sums[3]],
            [sums[4], sums[5], sums[6], sums[7]],
        ]
    }

    /// [`super::Lanes::dot_keys`]: eight sums, one per key, finished
    /// together by [`finish8`].
    #[inline(always)]
    pub(super) fn dot_keys(simd: V3, q: &[Chunk], keys: &[Chunk]) -> [f32; 8] {
        let avx = simd.avx;
        let chunks = q.len();
        let keys = &keys[..8 * chunks];
        let mut acc = [avx._mm256_setzero_ps(); 8];
        for (j, q) in q.iter().enumerate() {
            let q: __m256 = cast(*q);
            for (k, acc) in acc.iter_mut().enumerate() {
                *acc = simd
                    .fma
                    ._mm256_fmadd_ps(q, cast(keys[k * chunks + j]), *acc);
            }
        }
        cast(finish8(simd, acc))
    }

    /// [`super::Lanes::weigh_row`]: eight chunks of the output at a time
    /// stay in registers over all positions (one at a time for the rest of
    /// a head that is not a multiple of eight chunks).
    #[inline(always)]
    pub(super) fn weigh_row(simd: V3, y: &mut [Chunk], weights: &[f32], values: &[Chunk]) {
        let chunks = y.len();
        let mut c = 0;
        while c + 8 <= chunks {
            weigh_part::<8>(simd, y, weights, values, c);
            c += 8;
        }
        while c < chunks {
            weigh_part::<1>(simd, y, weights, values, c);
            c += 1;
        }
    }

    /// Chunks `c..c + N` of [`weigh_row`].
    #[inline(always)]
    fn weigh_part<const N: usize>(
        simd: V3,
        y: &mut [Chunk],
        weights: &[f32],
        values: &[Chunk],
        c: usize,
    ) {
        let avx = simd.avx;
        let chunks = y.len();
        let mut acc = [avx._mm256_setzero_ps(); N];
        for (acc, y) in acc.iter_mut().zip(&y[c..c + N]) {
            *acc = cast(*y);
        }
        for (&w, value) in weights.iter().zip(values.chunks_exact(chunks)) {
            let w = avx._mm256_set1_ps(w);
            let part = &value[c..c + N];
            for (acc, x) in acc.iter_mut().zip(part) {
                *acc = simd.fma._mm256_fmadd_ps(w, cast(*x), *acc);
            }
        }
        for (y, acc) in y[c..c + N].iter_mut().zip(acc) {
            *y = cast(acc);
        }
    }

    /// [`super::Lanes::exp_less`]: each operation of
    /// [`super::exp_nonpositive`] on eight lanes, in the same order.
    #[inline(always)]
    pub(super) fn exp_less(simd: V3, chunks: &mut [Chunk], max: f32) -> Chunk {
        let (avx, fma, avx2) = (simd.avx, simd.fma, simd.avx2);
        let splat = |x: f32| avx._mm256_set1_ps(x);
        let zero = avx._mm256_setzero_ps();
        let max = splat(max);
        let mut sums = zero;
        for chunk in chunks {
            let x = avx._mm256_sub_ps(cast(*chunk), max);
            // `0 < x ? 0 : x`: NaN stays.
            let x = avx._mm256_min_ps(zero, x);
            let shifted = fma._mm256_fmadd_ps(x, splat(LOG2_E), splat(ROUND));
            let n = avx._mm256_sub_ps(shifted, splat(ROUND));
            let r = fma._mm256_fnmadd_ps(n, splat(LN2_HIGH), x);
            let r = fma._mm256_fnmadd_ps(n, splat(LN2_LOW), r);
            let mut p = splat(EXP_POLY[0]);
            for c in &EXP_POLY[1..] {
                p = fma._mm256_fmadd_ps(p, r, splat(*c));
            }
            let e_r = fma._mm256_fmadd_ps(p, avx._mm256_mul_ps(r, r), r);
            let e_r = avx._mm256_add_ps(e_r, splat(1.0));
            let bits = avx._mm256_castps_si256(shifted);
            let biased = avx2._mm256_add_epi32(
                avx2._mm256_sub_epi32(bits, avx._mm256_set1_epi32(ROUND_BITS)),
                avx._mm256_set1_epi32(127),
            );
            let two_n = avx._mm256_castsi256_ps(avx2._mm256_slli_epi32::<23>(biased));
            let y = avx._mm256_mul_ps(e_r, two_n);
            let under = avx._mm256_cmp_ps::<_CMP_LT_OQ>(x, splat(LOWEST));
            let y = avx._mm256_andnot_ps(under, y);
            sums = avx._mm256_add_ps(sums, y);
            *chunk = cast(y);
        }
        cast(sums)
    }

    /// Each vector's lanes summed as [`super::finish`] sums them (lane `i`
    /// and `i + 4`, then `i` and `i + 2`, then the two left), eight
    /// vectors at once: the same additions of the same pairs, so the same
    /// bits, by shuffles instead of one lane at a time. Lane `i` of the
    /// result is the sum of `v[i]`.
    #[inline(always)]
    pub(super) fn finish8(simd: V3, v: [__m256; 8]) -> __m256 {
        let avx = simd.avx;
        // Halves: lanes 0..4 of `v[i]` and of `v[i + 4]` side by side.
        let halves = |i: usize| {
            let low = avx._mm256_permute2f128_ps::<0x20>(v[i], v[i + 4]);
            let high = avx._mm256_permute2f128_ps::<0x31>(v[i], v[i + 4]);
            avx._mm256_add_ps(low, high)
        };
        let (s0, s1, s2, s3) = (halves(0), halves(1), halves(2), halves(3));
        // Quarters: in each 128-bit half, lanes 0 + 2 and 1 + 3.
        let quarters = |a: __m256, b: __m256| {
            let low = avx._mm256_shuffle_ps::<0b01_00_01_00>(a, b);
            let high = avx._mm256_shuffle_ps::<0b11_10_11_10>(a, b);
            avx._mm256_add_ps(low, high)
        };
        let (t01, t23) = (quarters(s0, s1), quarters(s2, s3));
        let even = avx._mm256_shuffle_ps::<0b10_00_10_00>(t01, t23);
        let odd = avx._mm256_shuffle_ps::<0b11_01_11_01>(t01, t23);
        avx._mm256_add_ps(even, odd)
    }

    #[inline(always)]
    pub(super) fn weigh_rows(
        simd: V3,
        y: &mut [[Chunk; MAX_CHUNKS]; ROWS],
        weights: &[Vec<f32>; ROWS],
        values: &[Chunk],
        chunks: usize,
    ) {
        let avx = simd.avx;
        let positions = values.len() / chunks.max(1);
        let weights = [
            &weights[0][..positions],
            &weights[1][..positions],
            &weights[2][..positions],
            &weights[3][..positions],
        ];
        // Two chunks of every row at a time stay in registers over all
        // positions; each element still adds its terms in position order.
        let mut c = 0;
        while c + 2 <= chunks {
            let mut acc = [[avx._mm256_setzero_ps(); 2]; ROWS];
            for r in 0..ROWS {
                acc[r] = [cast(y[r][c]), cast(y[r][c + 1])];
            }
            for (j, row) in values.chunks_exact(chunks).enumerate() {
                let (x0, x1): (__m256, __m256) = (cast(row[c]), cast(row[c + 1]));
                for r in 0..ROWS {
                    let w = avx._mm256_set1_ps(weights[r][j]);
                    acc[r][0] = simd.fma._mm256_fmadd_ps(w, x0, acc[r][0]);
                    acc[r][1] = simd.fma._mm256_fmadd_ps(w, x1, acc[r][1]);
                }
            }
            for r in 0..ROWS {
                y[r][c] = cast(acc[r][0]);
                y[r][c + 1] = cast(acc[r][1]);
            }
            c += 2;
        }
        if c < chunks {
            let mut acc = [avx._mm256_setzero_ps(); ROWS];
            for r in 0..ROWS {
                acc[r] = cast(y[r][c]);
            }
            for (j, row) in values.chunks_exact(chunks).enumerate() {
                let x: __m256 = cast(row[c]);
                for r in 0..ROWS {
                    let w = avx._mm256_set1_ps(weights[r][j]);
                    acc[r] = simd.fma._mm256_fmadd_ps(w, x, acc[r]);
                }
            }
            for r in 0..ROWS {
                y[r][c] = cast(acc[r]);
            }
        }
    }
}

/// The first `positions` rows of every head of a cache tensor, as a slice
/// of its storage checked once to hold them all.
struct Cached<'a> {
    data: &'a [f32],
    start: usize,
    head_stride: usize,
    positions: usize,
    hd: usize,
}

impl<'a> Cached<'a> {
    fn new(
        storage: &'a Storage,
        layout: &candle_core::Layout,
        heads: usize,
        positions: usize,
        hd: usize,
    ) -> candle_core::Result<Self> {
        let Storage::Cpu(cpu) = storage else {
            candle_core::bail!("one-position attention runs on the CPU");
        };
        let data = cpu.as_slice::<f32>()?;
        let (start, stride) = (layout.start_offset(), layout.stride());
        let &[_, head_stride, row_stride, 1] = stride else {
            candle_core::bail!("one-position attention: cache strides {stride:?}");
        };
        // The last row of the last head ends inside the storage, so every
        // row `head` hands out does.
        let end = || {
            let last_head = heads.checked_sub(1)?.checked_mul(head_stride)?;
            let last_row = positions.checked_sub(1)?.checked_mul(hd)?;
            start
                .checked_add(last_head)?
                .checked_add(last_row)?
                .checked_add(hd)
        };
        let end = end();
        if row_stride != hd || end.is_none_or(|end| end > data.len()) {
            candle_core::bail!(
                "one-position attention: a cache of {} values, strides {stride:?}",
                data.len()
            );
        }
        Ok(Self {
            data,
            start,
            head_stride,
            positions,
            hd,
        })
    }

    /// Head `h`'s rows, one after another.
    fn head(&self, h: usize) -> &'a [f32] {
        let at = self.start + h * self.head_stride;
        &self.data[at..at + self.positions * self.hd]
    }
}

/// One query head's attention over its K/V head's rows.
struct Head<'a> {
    q: &'a [f32],
    keys: &'a [f32],
    values: &'a [f32],
    scale: f32,
    out: &'a [AtomicU32],
    lanes: Lanes,
}

impl Kernel for Head<'_> {
    /// [`softmax`] of the scaled scores, then the values they weigh.
    #[inline(always)]
    fn run(self) {
        let hd = self.q.len();
        if in_lanes(hd) {
            return self.run_in_lanes();
        }
        let mut weights = Vec::with_capacity(self.keys.len() / hd);
        let quads = self.keys.chunks_exact(4 * hd);
        let rest = quads.remainder();
        // Loops, not closures: a closure might not be compiled for AVX2.
        for keys in quads {
            for d in dot4(self.q, keys) {
                weights.push(d * self.scale);
            }
        }
        for key in rest.chunks_exact(hd) {
            weights.push(dot(self.q, key) * self.scale);
        }
        softmax(&mut weights, self.lanes);
        let mut y = vec![0.0f32; hd];
        for (&w, value) in weights.iter().zip(self.values.chunks_exact(hd)) {
            for (y, &x) in y.iter_mut().zip(value) {
                *y = w.mul_add(x, *y);
            }
        }
        for (out, y) in self.out.iter().zip(y) {
            out.store(y.to_bits(), Ordering::Relaxed);
        }
    }
}

impl Head<'_> {
    /// What `run` computes, for a head of whole lane groups no wider than
    /// [`MAX_BLOCK_HD`]: eight keys at a time, their sums finished
    /// together, and the output's chunks kept in registers while the
    /// values are weighed (as a [`Block`] computes a row).
    #[inline(always)]
    fn run_in_lanes(self) {
        let hd = self.q.len();
        let chunks = hd / LANES;
        let q = &self.q.as_chunks::<LANES>().0[..chunks];
        let (keys, _) = self.keys.as_chunks::<LANES>();
        let (values, _) = self.values.as_chunks::<LANES>();
        let mut weights = vec![0.0f32; keys.len() / chunks];
        let octets = keys.chunks_exact(8 * chunks);
        let rest = octets.remainder();
        for (w, keys) in weights.chunks_exact_mut(8).zip(octets) {
            let sums = self.lanes.dot_keys(q, keys);
            for (w, sum) in w.iter_mut().zip(sums) {
                *w = sum * self.scale;
            }
        }
        let done = (keys.len() - rest.len()) / chunks;
        for (w, key) in weights[done..].iter_mut().zip(rest.chunks_exact(chunks)) {
            *w = dot(self.q, key.as_flattened()) * self.scale;
        }
        softmax(&mut weights, self.lanes);
        let mut y = [[0.0f32; LANES]; MAX_CHUNKS];
        self.lanes.weigh_row(&mut y[..chunks], &weights, values);
        for (out, y) in self.out.iter().zip(y[..chunks].as_flattened()) {
            out.store(y.to_bits(), Ordering::Relaxed);
        }
    }
}

/// `a · b`.
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let (a_lanes, a_tail) = a.as_chunks::<LANES>();
    let (b_lanes, b_tail) = b.as_chunks::<LANES>();
    let mut acc = [0.0f32; LANES];
    for (x, y) in a_lanes.iter().zip(b_lanes) {
        for i in 0..LANES {
            acc[i] = x[i].mul_add(y[i], acc[i]);
        }
    }
    finish(acc, a_tail, b_tail)
}

/// `q` times each of the four rows of `keys`, each summed exactly as
/// [`dot`] sums it; four independent sums keep the vector unit busy where
/// one waits on its own additions.
#[inline(always)]
fn dot4(q: &[f32], keys: &[f32]) -> [f32; 4] {
    let hd = q.len();
    let (q_lanes, q_tail) = q.as_chunks::<LANES>();
    let (k0, rest) = keys.split_at(hd);
    let (k1, rest) = rest.split_at(hd);
    let (k2, k3) = rest.split_at(hd);
    let lanes = [
        k0.as_chunks::<LANES>().0,
        k1.as_chunks::<LANES>().0,
        k2.as_chunks::<LANES>().0,
        k3.as_chunks::<LANES>().0,
    ];
    let mut acc = [[0.0f32; LANES]; 4];
    for (j, x) in q_lanes.iter().enumerate() {
        for r in 0..4 {
            for i in 0..LANES {
                acc[r][i] = x[i].mul_add(lanes[r][j][i], acc[r][i]);
            }
        }
    }
    let tail = hd - q_tail.len();
    [
        finish(acc[0], q_tail, &k0[tail..]),
        finish(acc[1], q_tail, &k1[tail..]),
        finish(acc[2], q_tail, &k2[tail..]),
        finish(acc[3], q_tail, &k3[tail..]),
    ]
}

/// Softmax of one row's scaled scores, in place, as candle's: each score's
/// exponential of its difference from the row's maximum, divided by their
/// sum. The maximum and the sum go by lanes, the sum's lanes added as
/// [`finish`] adds them, so a row's weights are the same bits in a decode
/// step and in a prompt.
#[inline(always)]
fn softmax(w: &mut [f32], lanes: Lanes) {
    let (chunks, tail) = w.as_chunks_mut::<LANES>();
    let mut maxima = [f32::NEG_INFINITY; LANES];
    for chunk in chunks.iter() {
        for l in 0..LANES {
            maxima[l] = maxima[l].max(chunk[l]);
        }
    }
    let max = maxima
        .into_iter()
        .chain(tail.iter().copied())
        .fold(f32::NEG_INFINITY, f32::max);
    let mut sum = finish(lanes.exp_less(chunks, max), &[], &[]);
    for w in tail.iter_mut() {
        *w = exp_nonpositive(*w - max);
        sum += *w;
    }
    for w in w.iter_mut() {
        *w /= sum;
    }
}

/// `e^x` for a softmax's `x ≤ 0` (a score less the row's maximum; larger
/// `x` is taken as 0): within an ulp of the correctly rounded value where
/// that is a normal number, 0 below, NaN for NaN.
///
/// libm's `expf` is a call per score that the compiler cannot vectorize:
/// at 1,200 cached positions a 32-token turn of the default model took
/// 10.7 M of them, about 37 ms of CPU, a third of its attention. This is
/// plain arithmetic, written again in AVX2 for eight lanes at a time (the
/// compiler took four), and each step is one IEEE operation, so the same
/// bits on every CPU. It writes `x` as `n · ln 2 + r`: `n` rounded to the
/// nearest integer by the 1.5·2²³ trick (the addition's own rounding),
/// `ln 2` in two parts (Cody and Waite), `e^r` by a degree-6 minimax
/// polynomial on `|r| ≤ ln 2 / 2` (Cephes' `expf` coefficients), and `2^n`
/// written into an exponent field.
#[inline(always)]
fn exp_nonpositive(x: f32) -> f32 {
    let x = if x > 0.0 { 0.0 } else { x };
    let shifted = x.mul_add(std::f32::consts::LOG2_E, ROUND);
    let n = shifted - ROUND;
    let r = (-n).mul_add(LN2_HIGH, x);
    let r = (-n).mul_add(LN2_LOW, r);
    let mut p = EXP_POLY[0];
    for c in &EXP_POLY[1..] {
        p = p.mul_add(r, *c);
    }
    let e_r = p.mul_add(r * r, r) + 1.0;
    // The low bits of `shifted` hold `n` (two's complement); `n + 127` is
    // the biased exponent of `2^n`. Wrapping: NaN's garbage is multiplied
    // by a NaN `e_r`.
    let biased = shifted
        .to_bits()
        .wrapping_sub(ROUND_BITS.cast_unsigned())
        .wrapping_add(127);
    let y = e_r * f32::from_bits(biased << 23);
    if x < LOWEST { 0.0 } else { y }
}

/// Below this `e^x` is under the smallest normal f32 (2⁻¹²⁶) and is taken
/// as 0; `2^n` stays a normal number down to it.
const LOWEST: f32 = -87.336_55;
/// 1.5·2²³: adding it leaves an integer in the mantissa's low bits.
const ROUND: f32 = 12_582_912.0;
/// [`ROUND`]'s bits, as AVX2's integer lanes take them.
const ROUND_BITS: i32 = 0x4B40_0000;
const _: () = assert!(ROUND.to_bits() == ROUND_BITS.cast_unsigned());
/// `ln 2` in two parts: `n · LN2_HIGH` is exact for the `n` here.
const LN2_HIGH: f32 = 355.0 / 512.0;
const LN2_LOW: f32 = -2.121_944_4e-4;
/// `(e^r - 1 - r) / r²` on `|r| ≤ ln 2 / 2`, highest power first.
const EXP_POLY: [f32; 6] = [
    1.987_569_1e-4,
    1.398_2e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    1.666_666_5e-1,
    0.5,
];

/// The lanes summed pairwise in a fixed order, then the tail's products.
#[inline(always)]
fn finish(mut acc: [f32; LANES], a_tail: &[f32], b_tail: &[f32]) -> f32 {
    let mut width = LANES;
    while width > 1 {
        width /= 2;
        for i in 0..width {
            acc[i] += acc[i + width];
        }
    }
    let mut sum = acc[0];
    for (x, y) in a_tail.iter().zip(b_tail) {
        sum = x.mul_add(*y, sum);
    }
    sum
}

/// Work on one part of the attention, run by [`dispatch`].
trait Kernel {
    fn run(self);
}

/// Runs `kernel` compiled for AVX2 when the CPU has it; the same code,
/// so the same bits, otherwise.
fn dispatch<K: Kernel>(kernel: K) {
    #[cfg(target_arch = "x86_64")]
    if let Some(simd) = pulp::x86::V3::try_new() {
        return simd.vectorize(Avx2(kernel));
    }
    kernel.run();
}

/// A unit of work for [`pulp::x86::V3::vectorize`]: its `call` and
/// everything below it are `#[inline(always)]`, so they are compiled into
/// pulp's AVX2 function (a closure might not be; see `q4_1.rs`).
#[cfg(target_arch = "x86_64")]
struct Avx2<K>(K);

#[cfg(target_arch = "x86_64")]
impl<K: Kernel> pulp::NullaryFnOnce for Avx2<K> {
    type Output = ();

    #[inline(always)]
    fn call(self) {
        self.0.run();
    }
}

#[cfg(test)]
mod tests {
    use candle_core::{D, Device, Tensor};

    use super::attend_one;

    /// The candle path `attend_one` replaced, on the cache's layout.
    fn by_candle(q: &Tensor, k: &Tensor, v: &Tensor, scale: f64) -> Tensor {
        let (_, n_head, _, hd) = q.dims4().unwrap();
        let n_kv = k.dim(1).unwrap();
        let q = q.reshape((1, n_kv, n_head / n_kv, hd)).unwrap();
        let att = (q.matmul(&k.t().unwrap()).unwrap() * scale).unwrap();
        let att = candle_nn::ops::softmax_last_dim(&att).unwrap();
        att.matmul(&v.contiguous().unwrap())
            .unwrap()
            .reshape((1, 1, n_head * hd))
            .unwrap()
    }

    fn values(n: usize, seed: u32) -> Vec<f32> {
        // A fixed sequence spread over [-2, 2): no two runs differ.
        (0..n)
            .map(|i| {
                let x = (u32::try_from(i).unwrap() ^ seed).wrapping_mul(2_654_435_761);
                f32::from(u16::try_from(x >> 16).unwrap()) / 16_384.0 - 2.0
            })
            .collect()
    }

    /// The largest difference between two tensors of the same shape.
    fn max_difference(a: Tensor, b: Tensor) -> f32 {
        assert_eq!(a.dims(), b.dims());
        (a - b)
            .unwrap()
            .abs()
            .unwrap()
            .flatten_all()
            .unwrap()
            .max(D::Minus1)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
    }

    /// `positions` cached positions of `n_kv` heads, narrowed from a larger
    /// buffer as the cache hands them out.
    fn cache(n_kv: usize, positions: usize, hd: usize, seed: u32) -> Tensor {
        let capacity = positions + 5;
        Tensor::from_vec(
            values(n_kv * capacity * hd, seed),
            (1, n_kv, capacity, hd),
            &Device::Cpu,
        )
        .unwrap()
        .narrow(2, 0, positions)
        .unwrap()
    }

    #[test]
    fn equals_candles_attention_within_rounding() {
        // Heads and sizes of the default model (9 query heads over 3 K/V
        // heads of 64) and head widths that are not a multiple of the lanes;
        // the cache is a buffer of more positions, narrowed.
        for (n_head, n_kv, hd) in [(9, 3, 64), (4, 4, 12), (6, 2, 5)] {
            for positions in [1, 2, 7, 300] {
                let (k, v) = (cache(n_kv, positions, hd, 1), cache(n_kv, positions, hd, 2));
                let q = Tensor::from_vec(values(n_head * hd, 3), (1, n_head, 1, hd), &Device::Cpu)
                    .unwrap();
                let scale = 1.0 / (hd as f64).sqrt();
                let ours = attend_one(&q, &k, &v, scale as f32).unwrap();
                let diff = max_difference(ours, by_candle(&q, &k, &v, scale));
                assert!(
                    diff < 1e-5,
                    "{n_head}/{n_kv} heads of {hd}, {positions} positions: {diff}"
                );
            }
        }
    }

    /// Shapes of the default model (9 query heads over 3 K/V heads of 64),
    /// without grouping, with widths that are not whole lane groups, and
    /// row counts that leave a partial block.
    const PROMPT_SHAPES: [(usize, usize, usize); 4] =
        [(9, 3, 64), (4, 4, 16), (4, 4, 12), (6, 2, 5)];

    /// The queries of `len` new positions after `past` cached ones, and the
    /// keys and values of all of them (`n_head` query heads over `n_kv`
    /// K/V heads of `hd`).
    fn prompt(
        (n_head, n_kv, hd): (usize, usize, usize),
        past: usize,
        len: usize,
        seed: u32,
    ) -> (Tensor, Tensor, Tensor) {
        let positions = past + len;
        let q = Tensor::from_vec(
            values(n_head * len * hd, seed),
            (1, n_head, len, hd),
            &Device::Cpu,
        )
        .unwrap();
        let k = cache(n_kv, positions, hd, seed + 1);
        let v = cache(n_kv, positions, hd, seed + 2);
        (q, k, v)
    }

    /// What the prompt cache rests on: a position's output does not depend
    /// on which other positions the call evaluates with it, nor on whether
    /// a prompt or a decode step evaluates it (a warm turn evaluates the
    /// new positions after the reply decoded, a cold one the whole prompt).
    #[test]
    fn a_prompt_row_is_its_decode_step_bit_for_bit() {
        for (n_head, n_kv, hd) in PROMPT_SHAPES {
            for (past, len) in [(0, 2), (0, 7), (3, 5), (40, 32)] {
                let (q, k, v) = prompt((n_head, n_kv, hd), past, len, 1);
                let rows = super::attend_rows(&q, &k, &v, 0.3).unwrap();
                assert_eq!(rows.dims(), [1, len, n_head * hd]);
                for r in 0..len {
                    let seen = past + r + 1;
                    let one = attend_one(
                        &q.narrow(2, r, 1).unwrap().contiguous().unwrap(),
                        &k.narrow(2, 0, seen).unwrap(),
                        &v.narrow(2, 0, seen).unwrap(),
                        0.3,
                    )
                    .unwrap();
                    let row = rows.narrow(1, r, 1).unwrap();
                    let bits = |t: &Tensor| -> Vec<u32> {
                        t.flatten_all()
                            .unwrap()
                            .to_vec1::<f32>()
                            .unwrap()
                            .into_iter()
                            .map(f32::to_bits)
                            .collect()
                    };
                    assert_eq!(
                        bits(&row),
                        bits(&one),
                        "{n_head}/{n_kv} heads of {hd}, {past} + {len} positions, row {r}"
                    );
                }
            }
        }
    }

    #[test]
    fn equals_candles_prompt_attention_within_rounding() {
        // Queries as they come, and 30 times larger: scores in the
        // hundreds, most of a row's exponentials below f32's normal range.
        for ((n_head, n_kv, hd), larger) in PROMPT_SHAPES
            .into_iter()
            .flat_map(|s| [(s, 1.0), (s, 30.0)])
        {
            let (past, len) = (30, 9);
            let positions = past + len;
            let (q, k, v) = prompt((n_head, n_kv, hd), past, len, 4);
            let q = (q * larger).unwrap();
            let scale = 1.0 / (hd as f64).sqrt();
            let ours = super::attend_rows(&q, &k, &v, scale as f32).unwrap();
            // candle's path, as `llama.rs` ran it: grouped query rows, a
            // causal mask, softmax, the values.
            let group = n_head / n_kv;
            let mask: Vec<f32> = (0..group * len)
                .flat_map(|i| {
                    let row = i % len;
                    (0..positions).map(move |c| {
                        if c > past + row {
                            f32::NEG_INFINITY
                        } else {
                            0.0
                        }
                    })
                })
                .collect();
            let mask = Tensor::from_vec(mask, (group * len, positions), &Device::Cpu).unwrap();
            let qg = q.reshape((1, n_kv, group * len, hd)).unwrap();
            let att = (qg.matmul(&k.t().unwrap()).unwrap() * scale).unwrap();
            let att = att.broadcast_add(&mask).unwrap();
            let att = candle_nn::ops::softmax_last_dim(&att).unwrap();
            let theirs = att
                .matmul(&v.contiguous().unwrap())
                .unwrap()
                .reshape((1, n_head, len, hd))
                .unwrap()
                .transpose(1, 2)
                .unwrap()
                .reshape((1, len, n_head * hd))
                .unwrap();
            // Scores `larger` times larger carry that much more rounding
            // into their exponentials (3.3e-5 at ×30).
            let diff = max_difference(ours, theirs);
            let within = 1e-5 * larger as f32;
            assert!(
                diff < within,
                "{n_head}/{n_kv} heads of {hd}, queries ×{larger}: {diff}"
            );
        }
    }

    #[test]
    fn prompt_attention_refuses_shapes_it_does_not_compute() {
        let t = |dims: (usize, usize, usize, usize)| {
            Tensor::zeros(dims, candle_core::DType::F32, &Device::Cpu).unwrap()
        };
        // More new rows than positions; no rows; heads that do not group.
        assert!(
            super::attend_rows(&t((1, 2, 4, 4)), &t((1, 2, 3, 4)), &t((1, 2, 3, 4)), 1.0).is_err()
        );
        assert!(
            super::attend_rows(&t((1, 2, 0, 4)), &t((1, 2, 3, 4)), &t((1, 2, 3, 4)), 1.0).is_err()
        );
        assert!(
            super::attend_rows(&t((1, 3, 2, 4)), &t((1, 2, 3, 4)), &t((1, 2, 3, 4)), 1.0).is_err()
        );
    }

    #[test]
    fn four_keys_at_once_sum_as_one_key_does() {
        for hd in [5, 8, 12, 64] {
            let q = values(hd, 7);
            let keys = values(4 * hd, 8);
            let four = super::dot4(&q, &keys);
            for (r, got) in four.iter().enumerate() {
                let one = super::dot(&q, &keys[r * hd..(r + 1) * hd]);
                assert_eq!(got.to_bits(), one.to_bits(), "head width {hd}, row {r}");
            }
        }
    }

    /// A softmax's exponentials: within one ulp of the correctly rounded
    /// `e^x` wherever that is a normal number, 0 below, NaN for NaN, and 1
    /// for `x ≥ 0` (a softmax's largest score).
    #[test]
    fn the_exponential_is_within_an_ulp_of_the_true_one() {
        for i in 0..=92_000u32 {
            let x = -(i as f32) / 1024.0;
            let ours = super::exp_nonpositive(x);
            let truth = f64::from(x).exp();
            if x < super::LOWEST {
                assert_eq!(ours.to_bits(), 0, "e^{x}");
                assert!(truth < f64::from(f32::MIN_POSITIVE), "e^{x}");
                continue;
            }
            let rounded = truth as f32;
            let ulps = ours.to_bits().abs_diff(rounded.to_bits());
            assert!(ulps <= 1, "e^{x}: {ours} against {rounded} ({ulps} ulps)");
        }
        assert_eq!(super::exp_nonpositive(0.0), 1.0);
        assert_eq!(super::exp_nonpositive(-0.0), 1.0);
        assert_eq!(super::exp_nonpositive(3.5), 1.0);
        assert_eq!(super::exp_nonpositive(f32::NEG_INFINITY), 0.0);
        assert!(super::exp_nonpositive(f32::NAN).is_nan());
    }

    /// The AVX2 lanes compute what the portable code computes, bit for bit
    /// (a NaN for a NaN), including infinities, the cut below `LOWEST` and
    /// results that are not normal numbers.
    #[test]
    fn the_lanes_exponentials_are_the_portable_ones() {
        struct Exp<'a> {
            chunks: &'a mut [super::Chunk],
            max: f32,
            sums: &'a mut super::Chunk,
        }
        impl super::Kernel for Exp<'_> {
            #[inline(always)]
            fn run(self) {
                *self.sums = super::Lanes::detect().exp_less(self.chunks, self.max);
            }
        }
        let mut inputs: Vec<f32> = values(4096, 9).iter().map(|v| v * 30.0 - 40.0).collect();
        inputs.extend([
            f32::NAN,
            f32::NEG_INFINITY,
            f32::INFINITY,
            0.0,
            -0.0,
            super::LOWEST,
            super::LOWEST - 1e-5,
            -87.0,
            -87.3,
            -103.0,
            f32::MIN,
            1e-30,
            -1e-30,
            88.0,
        ]);
        inputs.resize(inputs.len().next_multiple_of(super::LANES), -1.0);
        for max in [0.0, 2.5, -3.0, f32::NEG_INFINITY, f32::NAN] {
            let mut lanes = inputs.as_chunks::<{ super::LANES }>().0.to_vec();
            let mut portable = lanes.clone();
            let mut lane_sums = [0.0; super::LANES];
            super::dispatch(Exp {
                chunks: &mut lanes,
                max,
                sums: &mut lane_sums,
            });
            let portable_sums = super::Lanes::Portable.exp_less(&mut portable, max);
            // A NaN's sign and payload are not specified (Rust's, nor the
            // CPUs'): any NaN stands for all.
            let bits = |c: &[super::Chunk]| -> Vec<u32> {
                let nan = f32::NAN.to_bits();
                let bits = |v: &f32| if v.is_nan() { nan } else { v.to_bits() };
                c.as_flattened().iter().map(bits).collect()
            };
            assert_eq!(bits(&lanes), bits(&portable), "max {max}");
            assert_eq!(bits(&[lane_sums]), bits(&[portable_sums]), "max {max}");
        }
    }

    /// A block of `filled` query rows of `q` over `keys` and `values`, the
    /// rows seeing up to three positions fewer than `positions`.
    fn block_of<'a>(
        filled: usize,
        positions: usize,
        hd: usize,
        (q, keys, values): (&'a [f32], &'a [f32], &'a [f32]),
        out: &'a [std::sync::atomic::AtomicU32],
        lanes: super::Lanes,
    ) -> super::Block<'a> {
        let mut rows = [None; super::ROWS];
        for (r, row) in rows.iter_mut().enumerate().take(filled) {
            *row = Some(super::BlockRow {
                q: &q[r * hd..(r + 1) * hd],
                seen: positions.saturating_sub(3 - r).max(1),
                out: &out[r * hd..(r + 1) * hd],
            });
        }
        super::Block {
            rows,
            keys,
            values,
            hd,
            scale: 0.3,
            lanes,
        }
    }

    /// The kernels' AVX2 code computes the bits of their portable code, for
    /// heads of one, two, eight and nine lane groups (a part of eight
    /// chunks and a part of one), single positions and blocks of rows,
    /// whole and partial.
    #[test]
    fn the_portable_kernels_compute_the_lanes_bits() {
        use super::{Head, Kernel, Lanes, dispatch};
        use std::sync::atomic::{AtomicU32, Ordering};
        let outputs = |n: usize| -> Vec<AtomicU32> { (0..n).map(|_| AtomicU32::new(0)).collect() };
        let bits = |out: &[AtomicU32]| -> Vec<u32> {
            out.iter().map(|v| v.load(Ordering::Relaxed)).collect()
        };
        for hd in [8, 16, 64, 72] {
            for positions in [1, 7, 8, 9, 300] {
                let keys = values(positions * hd, 21);
                let vals = values(positions * hd, 22);
                let q = values(4 * hd, 23);
                let head = |lanes, out| Head {
                    q: &q[..hd],
                    keys: &keys,
                    values: &vals,
                    scale: 0.3,
                    out,
                    lanes,
                };
                let (fast, portable) = (outputs(hd), outputs(hd));
                dispatch(head(Lanes::detect(), &fast));
                head(Lanes::Portable, &portable).run();
                assert_eq!(
                    bits(&fast),
                    bits(&portable),
                    "a head of {hd}, {positions} positions"
                );
                for filled in [4, 3, 1] {
                    let (fast, portable) = (outputs(4 * hd), outputs(4 * hd));
                    let block = |lanes, out| {
                        block_of(filled, positions, hd, (&q, &keys, &vals), out, lanes)
                    };
                    dispatch(block(Lanes::detect(), &fast));
                    block(Lanes::Portable, &portable).run();
                    assert_eq!(
                        bits(&fast),
                        bits(&portable),
                        "a block of {filled} rows of {hd}, {positions} positions"
                    );
                }
            }
        }
    }

    #[test]
    fn refuses_shapes_it_does_not_compute() {
        let t = |dims: (usize, usize, usize, usize)| {
            Tensor::zeros(dims, candle_core::DType::F32, &Device::Cpu).unwrap()
        };
        // Two query rows; heads that do not group; K and V that differ.
        assert!(attend_one(&t((1, 2, 2, 4)), &t((1, 2, 3, 4)), &t((1, 2, 3, 4)), 1.0).is_err());
        assert!(attend_one(&t((1, 3, 1, 4)), &t((1, 2, 3, 4)), &t((1, 2, 3, 4)), 1.0).is_err());
        assert!(attend_one(&t((1, 2, 1, 4)), &t((1, 2, 3, 4)), &t((1, 2, 4, 4)), 1.0).is_err());
        // Heads of width 0 (a model file's metadata may say so).
        assert!(attend_one(&t((1, 2, 1, 0)), &t((1, 2, 3, 0)), &t((1, 2, 3, 0)), 1.0).is_err());
        // Rows that are not contiguous (a transposed cache).
        let k = t((1, 2, 4, 3)).transpose(2, 3).unwrap();
        assert!(attend_one(&t((1, 2, 1, 4)), &k, &k, 1.0).is_err());
    }
}
