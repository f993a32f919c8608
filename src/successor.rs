//! A successor instrument in the service: how its state rides with a model's versions, how a
//! batch of its readings is stored and learnt, and how its readings are answered.
//!
//! A model declares a successor (`POST /v1/models/{name}/successor`, the spec's `successor`):
//! another spectrophotometer, with its own grid and scale, that is to replace the model's. The
//! estimator's [`Succession`] holds what the service learns of it (the map to the old
//! instrument's bands, the successor's own model, the record of both paths, retirement).
//!
//! * **Versions.** A version of a model with a successor stores the envelope of
//!   [`encode_version`]: the model state's own encoding, then the succession's. A model without
//!   one stores exactly the model state's encoding, as before, so its digests, and the thin
//!   versions replayed from them, are unchanged. A version that carries a succession is always
//!   kept in full ([`crate::store::ModelLock::write_version`]): a replay learns the model's
//!   batches only.
//! * **Batches.** A batch with successor readings keeps its rows as sent (the old instrument's
//!   inputs where it read them, and the outputs) and, where a plain batch keeps its statistics,
//!   the blob of [`SuccessorBatch`]: every reading the fold needs, on the successor's grid and
//!   the model's scale. The folder learns it with [`learn`].
//! * **Answers.** Predict with `"instrument": "successor"` reads the spectra on the successor's
//!   grid and answers through [`Succession::predict`], with the map formed once per version
//!   ([`crate::cache::Serving`]).

use faer::MatRef;

use crate::estimator::succession::{Succession, SuccessorRows, own_config};
use crate::estimator::transfer::TransferStatistics;
use crate::estimator::{
    BatchStatistics, DecodeError, EstimatorError, ModelConfig, ModelState, codec, grid::Grid,
};

/// Magic of a version state that carries a succession.
const VERSION_MAGIC: &[u8; 4] = b"MRSV";
/// Magic of a stored batch of successor readings (retention empties such a blob with the raw
/// rows: nothing reads it after its fold, since a version carrying a succession is never
/// replayed).
pub const BATCH_MAGIC: &[u8; 4] = b"MRSB";
const FORMAT: u16 = 1;

/// A version's state as stored: `model`'s encoding alone without a succession; with one,
///
/// ```text
/// "MRSV" · format u16 = 1 · model length u64 · model state ([`codec::encode`])
/// · succession ([`codec::encode_succession`], which carries its own checksum)
/// ```
pub fn encode_version(model: &ModelState, succession: Option<&Succession>) -> Vec<u8> {
    let own = codec::encode(model);
    let Some(succession) = succession else {
        return own;
    };
    let tail = codec::encode_succession(succession);
    let mut bytes = Vec::with_capacity(14 + own.len() + tail.len());
    bytes.extend_from_slice(VERSION_MAGIC);
    bytes.extend_from_slice(&FORMAT.to_le_bytes());
    bytes.extend_from_slice(&(own.len() as u64).to_le_bytes());
    bytes.extend_from_slice(&own);
    bytes.extend_from_slice(&tail);
    bytes
}

/// Reads what [`encode_version`] wrote (a plain model state, or the envelope).
pub fn decode_version(bytes: &[u8]) -> Result<(ModelState, Option<Succession>), EstimatorError> {
    let Some(rest) = bytes.strip_prefix(VERSION_MAGIC) else {
        return Ok((codec::decode(bytes)?, None));
    };
    let format = u16::from_le_bytes(take(rest, 0)?);
    if format != FORMAT {
        return Err(DecodeError::UnsupportedVersion {
            found: format,
            newest: FORMAT,
        }
        .into());
    }
    let len =
        usize::try_from(u64::from_le_bytes(take(rest, 2)?)).map_err(|_| DecodeError::Truncated)?;
    let model = rest
        .get(10..10usize.saturating_add(len))
        .ok_or(DecodeError::Truncated)?;
    let succession = rest.get(10 + len..).ok_or(DecodeError::Truncated)?;
    Ok((
        codec::decode(model)?,
        Some(codec::decode_succession(succession)?),
    ))
}

/// `N` bytes of `bytes` from `at`.
fn take<const N: usize>(bytes: &[u8], at: usize) -> Result<[u8; N], DecodeError> {
    bytes
        .get(at..at + N)
        .and_then(|b| b.try_into().ok())
        .ok_or(DecodeError::Truncated)
}

/// A batch's successor readings as the folder reads them, row-major: `rows` samples, each read
/// by the successor on its grid (`new`, on the model's scale), with the model's named
/// `features`, the old instrument's bands where it read them too (`old`, the overlap), and the
/// `outputs`.
#[derive(Clone, Debug, PartialEq)]
pub struct SuccessorBatch {
    pub rows: usize,
    pub new: Vec<f64>,
    pub features: Vec<f64>,
    pub old: Option<Vec<f64>>,
    pub outputs: Vec<f64>,
}

impl SuccessorBatch {
    /// Whether `blob` (what a batch keeps in place of statistics) is a successor batch's.
    pub fn is_one(blob: &[u8]) -> bool {
        blob.starts_with(BATCH_MAGIC)
    }

    /// The blob:
    ///
    /// ```text
    /// "MRSB" · format u16 = 1 · rows n u32 · successor bands q u32 · named features f u32
    /// · old bands p u32 (0: not read) · outputs m u32
    /// · new n·q · features n·f · old n·p · outputs n·m, little-endian f64, row-major
    /// ```
    pub fn encode(&self) -> Vec<u8> {
        let n = self.rows.max(1);
        let widths = [
            self.new.len() / n,
            self.features.len() / n,
            self.old.as_ref().map_or(0, |o| o.len() / n),
            self.outputs.len() / n,
        ];
        let values = self.new.len()
            + self.features.len()
            + self.old.as_ref().map_or(0, Vec::len)
            + self.outputs.len();
        let mut bytes = Vec::with_capacity(26 + 8 * values);
        bytes.extend_from_slice(BATCH_MAGIC);
        bytes.extend_from_slice(&FORMAT.to_le_bytes());
        for v in std::iter::once(self.rows).chain(widths) {
            bytes.extend_from_slice(&(v as u32).to_le_bytes());
        }
        let old = self.old.as_deref().unwrap_or(&[]);
        for v in [&self.new[..], &self.features, old, &self.outputs]
            .into_iter()
            .flatten()
        {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        bytes
    }

    /// Reads what [`Self::encode`] wrote, checking that its length is exactly its shape's.
    pub fn decode(blob: &[u8]) -> Result<Self, String> {
        let rest = blob
            .strip_prefix(BATCH_MAGIC)
            .ok_or("not a batch of successor readings")?;
        let truncated = || "stored successor readings are truncated".to_owned();
        let format = u16::from_le_bytes(take(rest, 0).map_err(|_| truncated())?);
        if format != FORMAT {
            return Err(format!(
                "stored successor readings of format {format}: this build reads {FORMAT}"
            ));
        }
        let mut dims = [0usize; 5];
        for (i, d) in dims.iter_mut().enumerate() {
            *d = u32::from_le_bytes(take(rest, 2 + 4 * i).map_err(|_| truncated())?) as usize;
        }
        let [n, q, f, p, m] = dims;
        let values: Vec<f64> = rest[22..]
            .chunks_exact(8)
            .map(|b| f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
            .collect();
        let widths = [q, f, p, m];
        let total = widths.iter().try_fold(0usize, |acc, w| {
            n.checked_mul(*w).and_then(|v| acc.checked_add(v))
        });
        if total != Some(values.len()) || !(rest.len() - 22).is_multiple_of(8) {
            return Err("stored successor readings do not match their shape".to_owned());
        }
        let mut at = 0;
        let mut next = |w: usize| {
            let part = values[at..at + n * w].to_vec();
            at += n * w;
            part
        };
        let (new, features, old, outputs) = (next(q), next(f), next(p), next(m));
        Ok(Self {
            rows: n,
            new,
            features,
            old: (p > 0).then_some(old),
            outputs,
        })
    }

    /// The statistics the model learns from the old instrument's readings with the named
    /// features (`[old, features]` per row), `None` when the old instrument read nothing.
    pub fn model_statistics(
        &self,
        config: &ModelConfig,
    ) -> Result<Option<BatchStatistics>, String> {
        self.old_statistics(config)
            .map_err(|e| format!("stored successor readings: {e}"))
    }

    /// The statistics the successor's own model learns from these rows (`[new, features]` per
    /// row, on [`own_config`] of `config`).
    pub fn own_statistics(&self, config: &ModelConfig) -> Result<BatchStatistics, String> {
        self.new_statistics(config)
            .map_err(|e| format!("stored successor readings: {e}"))
    }

    /// Checks that a fold can learn these rows: that the statistics the model learns of the old
    /// instrument's readings, those of the successor's own model and those of the transfer's
    /// pairs are finite. Ingest asks before it stores the batch, so that a batch whose squares
    /// overflow is refused at once, as a batch of the model's readings alone is, rather than
    /// rejected by the folder (or, for the pairs, stored where no version could read them).
    pub fn learnable(&self, config: &ModelConfig) -> Result<(), EstimatorError> {
        self.old_statistics(config)?;
        self.new_statistics(config)?;
        let rows = self.as_rows();
        if let Some(old) = rows.old {
            TransferStatistics::from_rows(rows.new, old)?;
        }
        Ok(())
    }

    fn old_statistics(
        &self,
        config: &ModelConfig,
    ) -> Result<Option<BatchStatistics>, EstimatorError> {
        let Some(old) = &self.old else {
            return Ok(None);
        };
        let x = self.beside_features(old);
        BatchStatistics::from_row_major(&config.basis, self.rows, &x, &self.outputs).map(Some)
    }

    fn new_statistics(&self, config: &ModelConfig) -> Result<BatchStatistics, EstimatorError> {
        let q = self.new.len() / self.rows.max(1);
        let x = self.beside_features(&self.new);
        BatchStatistics::from_row_major(&own_config(config, q).basis, self.rows, &x, &self.outputs)
    }

    /// Rows of `readings` (row-major, `rows` of them) each followed by the row's named features.
    fn beside_features(&self, readings: &[f64]) -> Vec<f64> {
        let n = self.rows.max(1);
        let (w, f) = (readings.len() / n, self.features.len() / n);
        let mut x = Vec::with_capacity(readings.len() + self.features.len());
        for i in 0..self.rows {
            x.extend_from_slice(&readings[i * w..(i + 1) * w]);
            x.extend_from_slice(&self.features[i * f..(i + 1) * f]);
        }
        x
    }

    /// The rows as the succession learns them.
    fn as_rows(&self) -> SuccessorRows<'_> {
        let n = self.rows;
        SuccessorRows {
            new: view(&self.new, n),
            old: self.old.as_deref().map(|o| view(o, n)),
            features: view(&self.features, n),
            outputs: view(&self.outputs, n),
        }
    }
}

/// `values` as `rows` rows, row-major.
fn view(values: &[f64], rows: usize) -> MatRef<'_, f64> {
    let width = values.len().checked_div(rows).unwrap_or(0);
    MatRef::from_row_major_slice(values, rows, width)
}

/// The succession after `batch`, learnt beside `model` (the model's state before the batch,
/// which scores the map path) of configuration `config`, its instrument reading `old_grid`.
/// The succession is `start`, or a new one on `grid` (a model restored to a version from before
/// its successor was declared starts afresh).
pub fn learn(
    start: Option<&Succession>,
    grid: Grid,
    model: &ModelState,
    config: &ModelConfig,
    old_grid: &Grid,
    batch: &SuccessorBatch,
) -> Result<Succession, String> {
    let fresh;
    let start = match start {
        Some(s) => s,
        None => {
            fresh = Succession::new(grid, old_grid.count());
            &fresh
        }
    };
    let next = start
        .learn(model, config, old_grid, batch.as_rows())
        .map_err(|e| format!("learning the successor's readings failed: {e}"))?;
    if next.own().is_some_and(|own| !own.is_finite()) {
        return Err("the successor's own model would be non-finite".to_owned());
    }
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(old: bool) -> SuccessorBatch {
        SuccessorBatch {
            rows: 2,
            new: vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
            features: vec![0.5, -0.5],
            old: old.then(|| vec![7.0, 8.0, 9.0, 10.0]),
            outputs: vec![0.1, 0.2, 0.3, 0.4],
        }
    }

    /// A small trained model on a 4-band spectrum, and a succession of a 5-band successor
    /// that has learnt one batch beside it.
    fn trained() -> (ModelState, Succession) {
        let spec = crate::domain::ModelSpec::parse(&serde_json::json!({
            "name": "lab", "outputs": ["red"], "transform": "none",
            "spectrum": {"start_nm": 400, "interval_nm": 100, "count": 4, "scale": "fraction"},
        }))
        .expect("a valid specification");
        let config = spec.config();
        let n = 12;
        let x: Vec<f64> = (0..n * 4)
            .map(|i| 0.2 + 0.6 * ((i * 7919) % 97) as f64 / 97.0)
            .collect();
        let y: Vec<f64> = x.chunks(4).map(|r| r[0] - 0.5 * r[2] + 0.1).collect();
        let stats = BatchStatistics::from_row_major(&config.basis, n, &x, &y).expect("rows");
        let model = ModelState::fit(&config, stats).expect("first fit");
        let grid = Grid::new(400.0, 75.0, 5).expect("grid");
        let new: Vec<f64> = x
            .chunks(4)
            .flat_map(|r| [r[0], r[1], r[1], r[2], r[3]])
            .collect();
        let batch = SuccessorBatch {
            rows: n,
            new,
            features: Vec::new(),
            old: Some(x),
            outputs: y,
        };
        let old_grid = Grid::new(400.0, 100.0, 4).expect("grid");
        let succession =
            learn(None, grid, &model, &config, &old_grid, &batch).expect("learns the batch");
        (model, succession)
    }

    #[test]
    fn a_version_without_a_succession_is_the_model_state_alone_and_one_with_it_reads_back() {
        let (model, succession) = trained();
        let plain = encode_version(&model, None);
        assert_eq!(
            plain,
            codec::encode(&model),
            "digests of plain models unchanged"
        );
        let (back, none) = decode_version(&plain).expect("decodes");
        assert!(none.is_none());
        assert_eq!(back, model);

        let carried = encode_version(&model, Some(&succession));
        assert!(carried.starts_with(VERSION_MAGIC));
        let (back, some) = decode_version(&carried).expect("decodes");
        assert_eq!(back, model);
        let some = some.expect("the succession comes back");
        assert_eq!(some.status().own_rows, 12.0);
        assert_eq!(
            codec::encode_succession(&some),
            codec::encode_succession(&succession)
        );
        for cut in [10, 20, carried.len() - 1] {
            assert!(decode_version(&carried[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn a_successor_batch_reads_back_as_written_and_a_cut_one_is_refused() {
        for old in [true, false] {
            let blob = batch(old).encode();
            assert!(SuccessorBatch::is_one(&blob));
            assert_eq!(SuccessorBatch::decode(&blob), Ok(batch(old)));
            let cut = &blob[..blob.len() - 8];
            assert!(SuccessorBatch::decode(cut).is_err());
        }
        assert!(!SuccessorBatch::is_one(b"MRDS...."));
    }
}
