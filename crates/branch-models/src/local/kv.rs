//! One layer's key/value cache: a buffer of positions written in place,
//! grown in steps up to the context window, and cut back by moving the
//! length (so a cached conversation can be truncated to the prefix the next
//! prompt shares with it, which candle-nn's `KvCache` cannot do).

use candle_core::{DType, Device, Tensor};

/// Positions allocated at first use; the buffer doubles from there. A
/// short call then holds a few MB instead of the whole window.
const FIRST_CAPACITY: usize = 256;

/// Keys and values of one layer, `(1, heads, capacity, head_dim)` each.
#[derive(Debug, Default)]
pub struct LayerCache {
    k: Option<Tensor>,
    v: Option<Tensor>,
}

impl LayerCache {
    /// Writes `k`, `v` (`(1, heads, len, head_dim)`) at positions
    /// `pos..pos + len` and returns the keys and values of `0..pos + len`.
    /// Whatever lay at or after `pos` is overwritten or ignored: the caller's
    /// position is the length.
    pub fn write(
        &mut self,
        pos: usize,
        k: &Tensor,
        v: &Tensor,
        max: usize,
    ) -> candle_core::Result<(Tensor, Tensor)> {
        let len = k.dim(2)?;
        let end = pos + len;
        if end > max {
            candle_core::bail!("KV cache of {max} positions cannot hold {end}");
        }
        let capacity = self.k.as_ref().map_or(Ok(0), |t| t.dim(2))?;
        if end > capacity {
            let grown = end
                .next_power_of_two()
                .max(FIRST_CAPACITY)
                .max(capacity * 2)
                .min(max);
            self.k = Some(grow(self.k.as_ref(), k, pos, grown)?);
            self.v = Some(grow(self.v.as_ref(), v, pos, grown)?);
        }
        let (Some(kc), Some(vc)) = (&self.k, &self.v) else {
            candle_core::bail!("KV cache not allocated");
        };
        kc.slice_set(k, 2, pos)?;
        vc.slice_set(v, 2, pos)?;
        Ok((kc.narrow(2, 0, end)?, vc.narrow(2, 0, end)?))
    }
}

/// A zeroed buffer of `capacity` positions shaped like `like`, holding the
/// first `keep` positions of `old`.
fn grow(
    old: Option<&Tensor>,
    like: &Tensor,
    keep: usize,
    capacity: usize,
) -> candle_core::Result<Tensor> {
    let (b, h, _, d) = like.dims4()?;
    let buf = Tensor::zeros((b, h, capacity, d), DType::F32, &Device::Cpu)?;
    if let Some(old) = old
        && keep > 0
    {
        buf.slice_set(&old.narrow(2, 0, keep)?.contiguous()?, 2, 0)?;
    }
    Ok(buf)
}
