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
//! four of them.
//!
//! The arithmetic is fixed: each of the `LANES` partial sums takes its own
//! stride of a head's dimensions with fused multiply-adds (AVX2's, or
//! `f32::mul_add` elsewhere: the same bits), the lanes are added in one
//! order, the values weighed in position order. So the result does not
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
        candle_core::utils::barrier_pool().execute_chunked(s.n_head, |heads| {
            for h in heads {
                let kv = h / group;
                dispatch(Head {
                    q: &q[h * hd..(h + 1) * hd],
                    keys: keys.head(kv),
                    values: values.head(kv),
                    scale,
                    out: &out[h * hd..(h + 1) * hd],
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
            [Some(a), Some(b), Some(c), Some(d)] if hd <= MAX_BLOCK_HD && hd % LANES == 0 => {
                [a, b, c, d]
            }
            // The last block of a head, or a head this does not take: each
            // row alone.
            partial => {
                for row in partial.into_iter().flatten() {
                    Head {
                        q: row.q,
                        keys: &self.keys[..row.seen * hd],
                        values: &self.values[..row.seen * hd],
                        scale: self.scale,
                        out: row.out,
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
        let mut weights = [
            Vec::with_capacity(rows[0].seen),
            Vec::with_capacity(rows[1].seen),
            Vec::with_capacity(rows[2].seen),
            Vec::with_capacity(rows[3].seen),
        ];
        // Two keys at a time: eight independent sums keep the vector unit
        // busy where four would wait on their own additions.
        let pairs = keys[..common * chunks].chunks_exact(2 * chunks);
        let last = pairs.remainder();
        for pair in pairs {
            let (a, b) = pair.split_at(chunks);
            let [a, b] = self.lanes.dot_rows([a, b], queries);
            for r in 0..ROWS {
                weights[r].push(finish(a[r], &[], &[]) * self.scale);
                weights[r].push(finish(b[r], &[], &[]) * self.scale);
            }
        }
        if !last.is_empty() {
            let [a, _] = self.lanes.dot_rows([last, last], queries);
            for r in 0..ROWS {
                weights[r].push(finish(a[r], &[], &[]) * self.scale);
            }
        }
        for r in 0..ROWS {
            for key in self.keys[common * hd..rows[r].seen * hd].chunks_exact(hd) {
                weights[r].push(dot(rows[r].q, key) * self.scale);
            }
        }
        for w in &mut weights {
            let max = w.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0.0;
            for w in w.iter_mut() {
                *w = (*w - max).exp();
                sum += *w;
            }
            for w in w.iter_mut() {
                *w /= sum;
            }
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

    /// Each query's lane sums against each of two keys, as [`dot`]
    /// accumulates them.
    #[inline(always)]
    fn dot_rows(self, keys: [&[Chunk]; 2], queries: [&[Chunk]; ROWS]) -> [[Chunk; ROWS]; 2] {
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
                acc
            }),
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

    use super::{Chunk, MAX_CHUNKS, ROWS};

    #[inline(always)]
    pub(super) fn dot_rows(
        simd: V3,
        keys: [&[Chunk]; 2],
        queries: [&[Chunk]; ROWS],
    ) -> [[Chunk; ROWS]; 2] {
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
        let out = |a: [__m256; ROWS]| [cast(a[0]), cast(a[1]), cast(a[2]), cast(a[3])];
        [out(acc[0]), out(acc[1])]
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
}

impl Kernel for Head<'_> {
    /// Softmax of the scaled scores (as candle's: the maximum subtracted,
    /// each exponential divided by their sum), then the values they weigh.
    #[inline(always)]
    fn run(self) {
        let hd = self.q.len();
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
        let max = weights.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0.0;
        for w in &mut weights {
            *w = (*w - max).exp();
            sum += *w;
        }
        let mut y = vec![0.0f32; hd];
        for (&w, value) in weights.iter().zip(self.values.chunks_exact(hd)) {
            let w = w / sum;
            for (y, &x) in y.iter_mut().zip(value) {
                *y = w.mul_add(x, *y);
            }
        }
        for (out, y) in self.out.iter().zip(y) {
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
        for (n_head, n_kv, hd) in PROMPT_SHAPES {
            let (past, len) = (30, 9);
            let positions = past + len;
            let (q, k, v) = prompt((n_head, n_kv, hd), past, len, 4);
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
            let diff = max_difference(ours, theirs);
            assert!(diff < 1e-5, "{n_head}/{n_kv} heads of {hd}: {diff}");
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
