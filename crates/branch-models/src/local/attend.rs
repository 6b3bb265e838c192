//! The attention of a decode step: one new position's query heads over
//! every cached position, computed here instead of by two candle matmuls.
//!
//! candle 0.11's f32 matmul looks up its thread count on every call, and
//! without `RAYON_NUM_THREADS` in the environment that lookup reads and
//! parses `/proc/cpuinfo` (about 30 µs). A decode step made two such
//! products per layer: 60 lookups per token of the default model, 1.8 ms
//! of a 13 ms token. With one query row a product is only a dot product per
//! cached position, a softmax, and a weighted sum of the values; here they
//! run per query head, compiled for AVX2 when the CPU has it (pulp's
//! dispatch, safe code), the heads spread over candle's thread pool.
//!
//! Each of the `LANES` partial sums takes its own stride of a head's
//! dimensions and they are added in one fixed order, with no fused
//! multiply-add: the result does not depend on the CPU that computed it
//! (gemm's order does: it picks its kernels by CPU). It is not candle's
//! bits, only as close. A prompt's attention stays candle's (`llama.rs`).

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
    let (_, n_head, rows, hd) = q.dims4()?;
    let (_, n_kv, positions, k_hd) = k.dims4()?;
    if rows != 1
        || hd == 0
        || k_hd != hd
        || v.dims() != k.dims()
        || n_kv == 0
        || n_head % n_kv != 0
        || positions == 0
    {
        candle_core::bail!(
            "one-position attention: query {:?}, keys {:?}, values {:?}",
            q.dims(),
            k.dims(),
            v.dims()
        );
    }
    let q = q.flatten_all()?.to_vec1::<f32>()?;
    let (k_storage, k_layout) = k.storage_and_layout();
    let (v_storage, v_layout) = v.storage_and_layout();
    let keys = Cached::new(&k_storage, k_layout, n_kv, positions, hd)?;
    let values = Cached::new(&v_storage, v_layout, n_kv, positions, hd)?;
    let group = n_head / n_kv;
    let out: Vec<AtomicU32> = (0..n_head * hd).map(|_| AtomicU32::new(0)).collect();
    candle_core::utils::barrier_pool().execute_chunked(n_head, |heads| {
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
    let out = out
        .into_iter()
        .map(|v| f32::from_bits(v.into_inner()))
        .collect();
    Tensor::from_vec(out, (1, 1, n_head * hd), &Device::Cpu)
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

impl Head<'_> {
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
                *y += w * x;
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
            acc[i] += x[i] * y[i];
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
                acc[r][i] += x[i] * lanes[r][j][i];
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
        sum += x * y;
    }
    sum
}

/// Runs `head` compiled for AVX2 when the CPU has it; the same code,
/// so the same bits, otherwise.
fn dispatch(head: Head<'_>) {
    #[cfg(target_arch = "x86_64")]
    if let Some(simd) = pulp::x86::V3::try_new() {
        return simd.vectorize(Avx2Head(head));
    }
    head.run();
}

/// A unit of work for [`pulp::x86::V3::vectorize`]: its `call` and
/// everything below it are `#[inline(always)]`, so they are compiled into
/// pulp's AVX2 function (a closure might not be; see `q4_1.rs`).
#[cfg(target_arch = "x86_64")]
struct Avx2Head<'a>(Head<'a>);

#[cfg(target_arch = "x86_64")]
impl pulp::NullaryFnOnce for Avx2Head<'_> {
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

    #[test]
    fn equals_candles_attention_within_rounding() {
        // Heads and sizes of the default model (9 query heads over 3 K/V
        // heads of 64) and head widths that are not a multiple of the lanes;
        // the cache is a buffer of more positions, narrowed.
        for (n_head, n_kv, hd) in [(9, 3, 64), (4, 4, 12), (6, 2, 5)] {
            for positions in [1, 2, 7, 300] {
                let capacity = positions + 5;
                let cache = |seed| {
                    Tensor::from_vec(
                        values(n_kv * capacity * hd, seed),
                        (1, n_kv, capacity, hd),
                        &Device::Cpu,
                    )
                    .unwrap()
                    .narrow(2, 0, positions)
                    .unwrap()
                };
                let (k, v) = (cache(1), cache(2));
                let q = Tensor::from_vec(values(n_head * hd, 3), (1, n_head, 1, hd), &Device::Cpu)
                    .unwrap();
                let scale = 1.0 / (hd as f64).sqrt();
                let ours = attend_one(&q, &k, &v, scale as f32).unwrap();
                let theirs = by_candle(&q, &k, &v, scale);
                assert_eq!(ours.dims(), theirs.dims());
                let diff = (ours - theirs)
                    .unwrap()
                    .abs()
                    .unwrap()
                    .flatten_all()
                    .unwrap()
                    .max(D::Minus1)
                    .unwrap()
                    .to_scalar::<f32>()
                    .unwrap();
                assert!(
                    diff < 1e-5,
                    "{n_head}/{n_kv} heads of {hd}, {positions} positions: {diff}"
                );
            }
        }
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
