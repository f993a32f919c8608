//! A compact, versioned binary encoding of a [`ModelState`].
//!
//! Format version 6, written for every state since the statistics keep the rows in which each
//! basis function is 0 (little-endian):
//!
//! ```text
//! magic "MRDT" · version u16 = 6 · features u32 · intercept u8
//!         · transform u8 (0 identity, 1 Kubelka–Munk, 2 Saunderson: then k₁ f64 · k₂ f64)
//!         · declared u8
//!         · spectral bands u32 · reflectance scale u8 · outputs m u32
//!         · predictive u8 (0 plug-in, 1 Student-t, 2 Student-t on the noise's part only)
//!         · YᵀY kept u8 · zero rows kept u8
//! totals as below, with YᵀY when kept, then when kept the zero rows: z p f64 · Z p·m f64
//!         (column-major)
//! per output: tag u8 (0 untrained, 1 trained); trained: family u8 (0 ARD, 1 ridge, 2 smooth)
//!         · s f64 · v p f64 (+∞ for a flat intercept) · smooth bands u32 (0: none)
//!         · [smooth length f64 when bands > 0]
//!         · A lower triangle |J|(|J|+1)/2 f64 · c |J| f64        (J = {j : v_j > 0})
//!         · the informative rows its hyperparameters were fitted on f64
//! crc32 (IEEE) of everything before it, u32
//! ```
//!
//! Version 7 is version 6 followed, after the zero rows, by the build-up statistics
//! ([`crate::statistics::BuildUp`]): curves u32 · their saturations f64 (∞ first) · `ΨᵀΨ` lower
//! triangle · `ΦᵀΨ` p·(curves·m) f64 (column-major). It is written only for states that keep
//! them (models that can match recipes, folded since), so every other state is version 6 and
//! readable by the releases before. Statistics blobs likewise: version 4 is version 3 followed by
//! the same fields.
//!
//! Version 8 is version 7 followed, after `ΦᵀΨ`, by their copy weighted by each row's relative
//! precision ([`crate::statistics::Relative`]): `ΨᵀWΨ` lower triangle · `ΦᵀWΨ` p·(curves·m)
//! f64 · rows f u32 (the basis functions after the bands) · `Φ_fᵀWΦ` f·p f64 · `Σ w φ_λ²`
//! (p − f) f64 · `Σ w` f64, all column-major. Written for the states that keep it (models that
//! can match recipes, folded since); statistics blobs: version 5 is version 4 followed by the
//! same fields.
//!
//! Version 9 is written for states whose outputs keep alternates (the other prior shapes of
//! their model average, [`crate::mixture`]), whatever statistics they keep: after the zero-rows
//! flag, build-up kept u8 · weighted build-up kept u8 (which the version says up to 8); after the
//! outputs, per output: alternates u8, each a prior as an output's (family u8 · s f64 · v p f64
//! · smooth bands u32 · [length f64]). Every other state keeps its version, readable by the
//! releases before; a state read from a version before 9 has no alternates.
//!
//! Version 10 is version 9 followed, after the alternates, by each output's noise shape
//! ([`crate::noise_shape`]): tag u8 (0 none, 1 a shape: then power θ f64 · offset c f64 · level m
//! f64). It is written only for states with a shape on some output, so every other state keeps
//! its version, readable by the releases before; a state read from a version before 10 has none.
//!
//! Version 11 is version 10 followed by the predictive's tail ([`crate::tail`]): its degrees of
//! freedom ν f64. It is written only for states with a tail, so every other state keeps its
//! version; a state read from a version before 11 has none (a Gaussian).
//!
//! The Saunderson transform (tag 2) came within version 6: only such states carry `k₁, k₂`, so
//! every other state stays readable by the releases before it, which refuse a tag-2 state as an
//! invalid transform rather than misread it.
//!
//! The predictive's value 2 (the Student-t on the noise's part only,
//! [`crate::model::Predictive::StudentNoise`]) came within version 6 too, and every state fitted
//! since carries it: the releases before refuse such a state as an invalid predictive. States
//! with 0 or 1 keep their value through folds and stay readable by them.
//!
//! Version 5 is version 6 without the zero-rows flag and the zero rows: a state read from it
//! keeps none, and predicts as it did (see [`super::Predictor`]). Version 4, written since the
//! prior families, is version 5 without the fitted rows: an output read from it counts its
//! hyperparameters as fitted on every row so far.
//!
//! Versions 1 to 3, written by earlier releases, are still read: their outputs are ARD
//! posteriors with the intercept shrunk like any coefficient and σ² plugged in, and they
//! predict exactly as they did. Layout of version 3 (version 2 has no `YᵀY`):
//!
//! ```text
//! magic "MRDT" · version u16 · features u32 · intercept u8 · transform u8
//!         · spectral bands u32 · reflectance scale u8 (0 fraction, 1 percent) · outputs m u32
//! totals: N f64 · G lower triangle, column by column, p(p+1)/2 f64 · B p·m f64 (column-major)
//!         · q m f64 · nonzero m f64
//! version 3 only: YᵀY lower triangle, m(m+1)/2 f64
//! per output: tag u8 (0 untrained, 1 trained); trained: s f64 · v p f64
//!         · A lower triangle |J|(|J|+1)/2 f64 · c |J| f64        (J = {j : v_j > 0})
//! crc32 (IEEE) of everything before it, u32
//! ```
//!
//! Version 1, written for every basis without a declared spectrum (so replicas of the previous
//! release still read those states), has no spectral fields: a Kubelka–Munk basis reads all its
//! inputs as fractions, an identity basis has none. Every version 2 state has a declared
//! spectrum. Version 3 is version 2 with the outputs' cross products `YᵀY` in the totals (what
//! recipe matching needs); it is written for every declared spectrum whose totals keep them.
//!
//! Only the primary quantities are stored; the Cholesky factor and the mean are recomputed on
//! decoding by the same code that computed them, so a round trip reproduces the state exactly.

use faer::Mat;
use rayon::prelude::*;

use super::basis::Saunderson;
use super::evidence::Alternate;
use super::model::{ModelState, OutputState, Predictive};
use super::noise_shape::NoiseShape;
use super::posterior::{OutputPosterior, active_set};
use super::prior::{FittedFamily, Prior, Smooth, shared_kernel_factor};
use super::statistics::{BatchStatistics, BuildUp, Relative, ZeroRows};
use super::succession::Succession;
use super::tail::Tail;
use super::transfer::{PathRecord, TransferStatistics};
use super::{Basis, EstimatorError, ReflectanceScale, Transform};
pub use crate::error::DecodeError;
use crate::grid::Grid;

const MAGIC: &[u8; 4] = b"MRDT";
const STATISTICS_MAGIC: &[u8; 4] = b"MRDS";
const SUCCESSION_MAGIC: &[u8; 4] = b"MRDU";
const SUCCESSION_VERSION: u16 = 1;
/// The format version [`encode`] writes (and [`decode`] reads, beside versions 1 to 5).
pub const FORMAT_VERSION: u16 = 6;
/// The fitted rows' format, without the zero rows.
const FORMAT_VERSION_5: u16 = 5;
/// The prior families' format, without the fitted rows.
const FORMAT_VERSION_4: u16 = 4;
/// Model states with a declared spectrum and `YᵀY`, before the prior families.
const FORMAT_VERSION_3: u16 = 3;
/// Model states with a declared spectrum and no `YᵀY`.
const FORMAT_VERSION_2: u16 = 2;
/// The version of model states without a declared spectrum, and of statistics blobs without
/// `YᵀY`.
const FORMAT_VERSION_1: u16 = 1;
/// Statistics blobs with `YᵀY`.
const STATISTICS_VERSION_2: u16 = 2;
/// Statistics blobs with flags for `YᵀY` and the zero rows.
const STATISTICS_VERSION_3: u16 = 3;
/// Statistics blobs of version 3 followed by the build-up statistics.
const STATISTICS_VERSION_4: u16 = 4;
/// Model states of format 6 whose statistics keep the build-up statistics, which follow the
/// zero rows. Written only for those, so every other state stays readable by the releases
/// before it.
const FORMAT_VERSION_BUILD_UP: u16 = 7;
/// Model states of format 7 whose build-up statistics keep their weighted copy
/// ([`crate::statistics::Relative`]), which follows them. Written only for those.
const FORMAT_VERSION_RELATIVE: u16 = 8;
/// Written for states whose outputs keep alternates (see the module's doc).
const FORMAT_VERSION_ALTERNATES: u16 = 9;
/// Written for states whose outputs keep noise shapes (see the module's doc).
const FORMAT_VERSION_NOISE_SHAPES: u16 = 10;
/// Written for states with a tail (see the module's doc).
const FORMAT_VERSION_TAIL: u16 = 11;
/// Statistics blobs of version 4 followed by the weighted build-up statistics.
const STATISTICS_VERSION_5: u16 = 5;
/// Most build-up curves a blob may declare.
const MAX_CURVES: usize = 64;
/// Bound on `p` and `m` accepted from a blob, so a corrupt header cannot ask for terabytes.
const MAX_DIM: usize = 1 << 16;

/// Encodes a model state: format 11 when it has a tail, 10 when an output keeps a noise shape,
/// else 9 when an output keeps alternates, else 8 when its statistics keep the weighted build-up
/// statistics, 7 when they keep the build-up statistics alone, 6 otherwise.
pub fn encode(state: &ModelState) -> Vec<u8> {
    if state.tail().is_some() {
        return encode_as(state, FORMAT_VERSION_TAIL);
    }
    if (0..state.outputs().len()).any(|k| state.noise_shape(k).is_some()) {
        return encode_as(state, FORMAT_VERSION_NOISE_SHAPES);
    }
    if (0..state.outputs().len()).any(|k| !state.alternates(k).is_empty()) {
        return encode_as(state, FORMAT_VERSION_ALTERNATES);
    }
    match state.totals().build_up() {
        Some(build_up) if build_up.relative().is_some() => {
            encode_as(state, FORMAT_VERSION_RELATIVE)
        }
        Some(_) => encode_as(state, FORMAT_VERSION_BUILD_UP),
        None => encode_as(state, FORMAT_VERSION),
    }
}

/// The format-5 encoding of `state`, as the release before format 6 wrote it (without zero
/// rows). A version kept thin by that release is checked against the digest of this encoding.
pub fn encode_previous(state: &ModelState) -> Vec<u8> {
    encode_as(state, FORMAT_VERSION_5)
}

/// Encodes in format `version`: 8, 7 or 6 as [`encode`] picks them, or 5 or 4 for the tests of
/// their reading.
fn encode_as(state: &ModelState, version: u16) -> Vec<u8> {
    let basis = state.basis();
    let totals = state.totals();
    let (p, m) = (totals.dim(), totals.outputs());
    let mut w = Writer(Vec::with_capacity(
        64 + 8 * (p * (p + 1) / 2 + p * m + 2 * m),
    ));
    let products = totals.output_products().is_some();
    let zeros = version >= FORMAT_VERSION && totals.zero_rows().is_some();
    w.bytes(MAGIC);
    w.u16(version);
    w.u32(basis.features as u32);
    w.u8(u8::from(basis.intercept));
    match basis.transform {
        Transform::Identity => w.u8(0),
        Transform::KubelkaMunk => w.u8(1),
        Transform::Saunderson(surface) => {
            w.u8(2);
            w.f64(surface.k1);
            w.f64(surface.k2);
        }
    }
    w.u8(u8::from(basis.declared));
    w.u32(basis.spectral as u32);
    w.u8(match basis.scale {
        ReflectanceScale::Fraction => 0,
        ReflectanceScale::Percent => 1,
    });
    w.u32(m as u32);
    w.u8(match state.predictive() {
        Predictive::Plugin => 0,
        Predictive::Student => 1,
        Predictive::StudentNoise => 2,
    });
    w.u8(u8::from(products));
    if version >= FORMAT_VERSION {
        w.u8(u8::from(zeros));
    }
    // Up to version 8 the version says which build-up statistics follow; from 9 two flags do.
    let (build_up, relative) = if version >= FORMAT_VERSION_ALTERNATES {
        let build_up = totals.build_up();
        let relative = build_up.and_then(|b| b.relative()).is_some();
        w.u8(u8::from(build_up.is_some()));
        w.u8(u8::from(relative));
        (build_up.is_some(), relative)
    } else {
        (
            version >= FORMAT_VERSION_BUILD_UP,
            version >= FORMAT_VERSION_RELATIVE,
        )
    };
    w.statistics(totals, products, zeros, build_up, relative);
    for (output, fitted_rows) in state.outputs().iter().zip(state.fitted_rows()) {
        match output {
            OutputState::Untrained => w.u8(0),
            OutputState::Trained(post) => {
                w.u8(1);
                w.prior(post.prior(), post.noise_variance());
                w.lower(post.precision_data());
                post.natural_mean().iter().for_each(|v| w.f64(*v));
                if version >= FORMAT_VERSION_5 {
                    w.f64(*fitted_rows);
                }
            }
        }
    }
    if version >= FORMAT_VERSION_ALTERNATES {
        for k in 0..m {
            let alternates = state.alternates(k);
            w.u8(alternates.len() as u8);
            for alternate in alternates {
                w.prior(&alternate.prior, alternate.noise_variance);
            }
        }
    }
    if version >= FORMAT_VERSION_NOISE_SHAPES {
        for k in 0..m {
            match state.noise_shape(k) {
                None => w.u8(0),
                Some(shape) => {
                    w.u8(1);
                    w.f64(shape.power());
                    w.f64(shape.offset());
                    w.f64(shape.level());
                }
            }
        }
    }
    if version >= FORMAT_VERSION_TAIL {
        w.f64(state.tail().unwrap_or(f64::INFINITY));
    }
    w.finish()
}

/// Decodes a blob written by [`encode`] or by an earlier release, checking magic, version,
/// checksum and consistency.
pub fn decode(bytes: &[u8]) -> Result<ModelState, EstimatorError> {
    let mut r = Reader::open(
        bytes,
        MAGIC,
        &[
            FORMAT_VERSION_1,
            FORMAT_VERSION_2,
            FORMAT_VERSION_3,
            FORMAT_VERSION_4,
            FORMAT_VERSION_5,
            FORMAT_VERSION,
            FORMAT_VERSION_BUILD_UP,
            FORMAT_VERSION_RELATIVE,
            FORMAT_VERSION_ALTERNATES,
            FORMAT_VERSION_NOISE_SHAPES,
            FORMAT_VERSION_TAIL,
        ],
    )?;
    let current = r.version >= FORMAT_VERSION_4;
    let features = r.u32()? as usize;
    let intercept = match r.u8()? {
        0 => false,
        1 => true,
        _ => return Err(DecodeError::Invalid("intercept flag").into()),
    };
    let transform = match r.u8()? {
        0 => Transform::Identity,
        1 => Transform::KubelkaMunk,
        2 if current => {
            let surface = Saunderson {
                k1: r.f64()?,
                k2: r.f64()?,
            };
            if !surface.is_valid() {
                return Err(DecodeError::Invalid("Saunderson coefficients").into());
            }
            Transform::Saunderson(surface)
        }
        _ => return Err(DecodeError::Invalid("transform").into()),
    };
    let mut basis = Basis::new(features, intercept, transform);
    let spectral_fields = if current {
        basis.declared = match r.u8()? {
            0 => false,
            1 => true,
            _ => return Err(DecodeError::Invalid("declared flag").into()),
        };
        true
    } else {
        basis.declared = r.version >= FORMAT_VERSION_2;
        basis.declared
    };
    if spectral_fields {
        basis.spectral = r.u32()? as usize;
        basis.scale = match r.u8()? {
            0 => ReflectanceScale::Fraction,
            1 => ReflectanceScale::Percent,
            _ => return Err(DecodeError::Invalid("reflectance scale").into()),
        };
        if basis.spectral > features {
            return Err(DecodeError::Invalid("spectral bands").into());
        }
    }
    let m = r.u32()? as usize;
    if features >= MAX_DIM || m >= MAX_DIM {
        return Err(DecodeError::Invalid("dimensions").into());
    }
    let (predictive, products) = if current {
        let predictive = match r.u8()? {
            0 => Predictive::Plugin,
            1 => Predictive::Student,
            2 => Predictive::StudentNoise,
            _ => return Err(DecodeError::Invalid("predictive").into()),
        };
        (predictive, r.flag("products flag")?)
    } else {
        (Predictive::Plugin, r.version >= FORMAT_VERSION_3)
    };
    let zeros = r.version >= FORMAT_VERSION && r.flag("zero rows flag")?;
    let p = basis.dim();
    let (build_up, relative) = if r.version >= FORMAT_VERSION_ALTERNATES {
        let build_up = r.flag("build-up flag")?;
        let relative = r.flag("relative flag")?;
        if relative && !build_up {
            return Err(DecodeError::Invalid("relative flag").into());
        }
        (build_up, relative)
    } else {
        (
            r.version >= FORMAT_VERSION_BUILD_UP,
            r.version >= FORMAT_VERSION_RELATIVE,
        )
    };
    let totals = r.statistics(p, m, products, zeros, build_up, relative)?;
    if let Some(weighted) = totals.build_up().and_then(|b| b.relative())
        && !weighted.fits(p, basis.spectral)
    {
        return Err(DecodeError::Invalid("weighted build-up statistics").into());
    }
    // A trained output's prior, noise variance and natural parameters `A`, `c`, read; its
    // posterior is formed once all are read, the outputs in parallel on a wide basis.
    type Natural = (Prior, f64, Mat<f64>, Vec<f64>);
    let mut natural: Vec<Option<Natural>> = Vec::with_capacity(m);
    let mut fitted_rows = Vec::with_capacity(m);
    // The smooth priors' (bands, length scale): outputs of one model share their kernel.
    let mut lengths = std::collections::BTreeSet::new();
    for k in 0..m {
        match r.u8()? {
            0 => {
                natural.push(None);
                fitted_rows.push(0.0);
            }
            1 => {
                let (prior, s) = r.prior(p, current)?;
                let active = active_set(&prior.variance).len();
                let a = r.lower(active)?;
                let c = r.vec(active)?;
                if let Some(smooth) = prior.smooth {
                    lengths.insert((smooth.bands, smooth.length.to_bits()));
                }
                let rows = if r.version >= FORMAT_VERSION_5 {
                    r.f64()?
                } else {
                    totals.informative_rows(k)
                };
                // Checked for the older formats too: what decodes must encode to what decodes.
                if !(rows.is_finite() && rows >= 0.0) {
                    return Err(DecodeError::Invalid("fitted rows").into());
                }
                natural.push(Some((prior, s, a, c)));
                fitted_rows.push(rows);
            }
            _ => return Err(DecodeError::Invalid("output tag").into()),
        }
    }
    let mut alternates = vec![Vec::new(); m];
    if r.version >= FORMAT_VERSION_ALTERNATES {
        for (k, alternates) in alternates.iter_mut().enumerate() {
            let count = r.u8()? as usize;
            if count > 0 && natural[k].is_none() {
                return Err(DecodeError::Invalid("alternates of an untrained output").into());
            }
            for _ in 0..count {
                let (prior, noise_variance) = r.prior(p, true)?;
                alternates.push(Alternate {
                    prior,
                    noise_variance,
                });
            }
        }
    }
    let mut noise_shapes = vec![None; m];
    if r.version >= FORMAT_VERSION_NOISE_SHAPES {
        for shape in noise_shapes.iter_mut() {
            *shape = match r.u8()? {
                0 => None,
                1 => Some(
                    NoiseShape::new(r.f64()?, r.f64()?, r.f64()?)
                        .map_err(|_| DecodeError::Invalid("noise shape"))?,
                ),
                _ => return Err(DecodeError::Invalid("noise shape tag").into()),
            };
        }
    }
    // ∞ (never written by `encode`, which writes 11 only for a tail) reads as none.
    let tail = if r.version >= FORMAT_VERSION_TAIL {
        Some(r.f64()?)
            .filter(|nu| *nu != f64::INFINITY)
            .map(Tail::new)
            .transpose()
            .map_err(|_| DecodeError::Invalid("the tail's degrees of freedom"))?
    } else {
        None
    };
    r.finish()?;
    // Each kernel's square root is an eigendecomposition: once per length scale (unless another
    // model holds it), in parallel.
    let kernels = lengths
        .into_par_iter()
        .map(|(bands, length)| {
            shared_kernel_factor(bands, f64::from_bits(length))
                .map(|kernel| ((bands, length), kernel))
                .map_err(|_| DecodeError::Invalid("smooth prior"))
        })
        .collect::<Result<std::collections::HashMap<_, _>, DecodeError>>()?;
    let form = |read: Option<Natural>| {
        let Some((prior, s, a, c)) = read else {
            return Ok(OutputState::Untrained);
        };
        let kernel = prior
            .smooth
            .and_then(|smooth| kernels.get(&(smooth.bands, smooth.length.to_bits())));
        let post = prior
            .factor_with_kernel(kernel)
            .and_then(|factor| OutputPosterior::with_factor(prior, factor, s, a, c))
            .map_err(|_| DecodeError::Invalid("posterior"))?;
        Ok(OutputState::Trained(Box::new(post)))
    };
    let outputs = if p >= super::PARALLEL_FROM {
        natural.into_par_iter().map(form).collect()
    } else {
        natural
            .into_iter()
            .map(form)
            .collect::<Result<Vec<_>, DecodeError>>()
    }?;
    ModelState::from_parts(basis, totals, outputs, predictive, fitted_rows, alternates)?
        .with_noise_shapes(noise_shapes)
        .map(|state| state.with_tail(tail))
        .map_err(|_| DecodeError::Invalid("a noise shape on an untrained output").into())
}

/// Encodes the statistics of one batch (what the service stores beside a batch's raw rows).
///
/// Layout (version 3): magic "MRDS" · version u16 · p u32 · m u32 · YᵀY kept u8
/// · zero rows kept u8 · the statistics as in a model state · crc32 u32. Versions 1 and 2,
/// written by earlier releases, have no flags and no zero rows; version 2 carries `YᵀY`.
pub fn encode_statistics(stats: &BatchStatistics) -> Vec<u8> {
    let (p, m) = (stats.dim(), stats.outputs());
    let products = stats.output_products().is_some();
    let zeros = stats.zero_rows().is_some();
    let mut w = Writer(Vec::with_capacity(
        32 + 8 * (p * (p + 1) / 2 + 2 * p * m + p + 2 * m + m * (m + 1) / 2),
    ));
    let build_up = stats.build_up().is_some();
    let relative = stats.build_up().is_some_and(|b| b.relative().is_some());
    w.bytes(STATISTICS_MAGIC);
    w.u16(if relative {
        STATISTICS_VERSION_5
    } else if build_up {
        STATISTICS_VERSION_4
    } else {
        STATISTICS_VERSION_3
    });
    w.u32(p as u32);
    w.u32(m as u32);
    w.u8(u8::from(products));
    w.u8(u8::from(zeros));
    w.statistics(stats, products, zeros, build_up, relative);
    w.finish()
}

/// Decodes a blob written by [`encode_statistics`].
pub fn decode_statistics(bytes: &[u8]) -> Result<BatchStatistics, EstimatorError> {
    let mut r = Reader::open(
        bytes,
        STATISTICS_MAGIC,
        &[
            FORMAT_VERSION_1,
            STATISTICS_VERSION_2,
            STATISTICS_VERSION_3,
            STATISTICS_VERSION_4,
            STATISTICS_VERSION_5,
        ],
    )?;
    let p = r.u32()? as usize;
    let m = r.u32()? as usize;
    if p == 0 || p >= MAX_DIM || m >= MAX_DIM {
        return Err(DecodeError::Invalid("dimensions").into());
    }
    let (products, zeros) = if r.version >= STATISTICS_VERSION_3 {
        (r.flag("products flag")?, r.flag("zero rows flag")?)
    } else {
        (r.version >= STATISTICS_VERSION_2, false)
    };
    let build_up = r.version >= STATISTICS_VERSION_4;
    let relative = r.version >= STATISTICS_VERSION_5;
    let stats = r.statistics(p, m, products, zeros, build_up, relative)?;
    r.finish()?;
    Ok(stats)
}

/// Encodes a successor instrument's state ([`Succession`]), stored apart from the model's own
/// state so that a model without one is written and read exactly as before.
///
/// Layout (version 1): magic "MRDU" · version u16 = 1 · grid start f64 · interval f64
/// · bands q u32 · old bands p u32 · retired u8 · record: rows f64 · map f64 · own f64
/// · pairs: rows f64 · new means q f64 · old means p f64 · `ZᵀZ` lower triangle
/// · `ZᵀX` q·p f64 (column-major) · `XᵀX` lower triangle (centred co-moments)
/// · own model kept u8 · [its length u32 · the own model's state as [`encode`] writes it]
/// · crc32 (IEEE) of everything before it, u32.
pub fn encode_succession(succession: &Succession) -> Vec<u8> {
    let pairs = succession.pairs();
    let (new_mean, old_mean, [zz, zx, xx]) = pairs.parts();
    let own = succession.own().map(encode);
    let (q, p) = (new_mean.len(), old_mean.len());
    let mut w = Writer(Vec::with_capacity(
        64 + 8 * (q * (q + 1) / 2 + q * p + p * (p + 1) / 2 + q + p)
            + own.as_ref().map_or(0, Vec::len),
    ));
    w.bytes(SUCCESSION_MAGIC);
    w.u16(SUCCESSION_VERSION);
    let grid = succession.grid();
    w.f64(grid.start_nm);
    w.f64(grid.interval_nm);
    w.u32(q as u32);
    w.u32(p as u32);
    w.u8(u8::from(succession.retired()));
    let record = succession.record();
    for v in [record.rows, record.map, record.own, pairs.rows()] {
        w.f64(v);
    }
    new_mean.iter().chain(old_mean).for_each(|v| w.f64(*v));
    w.lower(zz);
    w.columns(zx);
    w.lower(xx);
    match own {
        Some(bytes) => {
            w.u8(1);
            // A state of 4 GiB or more gets a wrong length, and decoding refuses the blob.
            w.u32(u32::try_from(bytes.len()).unwrap_or(u32::MAX));
            w.bytes(&bytes);
        }
        None => w.u8(0),
    }
    w.finish()
}

/// Decodes a blob written by [`encode_succession`], checking magic, version, checksum and
/// consistency (the own model's blob is checked as [`decode`] checks any).
pub fn decode_succession(bytes: &[u8]) -> Result<Succession, EstimatorError> {
    let mut r = Reader::open(bytes, SUCCESSION_MAGIC, &[SUCCESSION_VERSION])?;
    let (start, interval) = (r.f64()?, r.f64()?);
    let q = r.u32()? as usize;
    let p = r.u32()? as usize;
    if q == 0 || q >= MAX_DIM || p == 0 || p >= MAX_DIM {
        return Err(DecodeError::Invalid("dimensions").into());
    }
    let grid = Grid::new(start, interval, q).map_err(|_| DecodeError::Invalid("successor grid"))?;
    let retired = r.flag("retired flag")?;
    let record = PathRecord {
        rows: r.f64()?,
        map: r.f64()?,
        own: r.f64()?,
    };
    let rows = r.f64()?;
    let (new_mean, old_mean) = (r.vec(q)?, r.vec(p)?);
    let zz = r.lower(q)?;
    let zx = r.columns(q, p)?;
    let xx = r.lower(p)?;
    let pairs = TransferStatistics::from_parts(rows, new_mean, old_mean, [zz, zx, xx])?;
    let own = if r.flag("own model flag")? {
        let len = r.u32()? as usize;
        let end = r.at.checked_add(len).ok_or(DecodeError::Truncated)?;
        let blob = r.bytes.get(r.at..end).ok_or(DecodeError::Truncated)?;
        r.at = end;
        Some(decode(blob)?)
    } else {
        None
    };
    r.finish()?;
    Succession::from_parts(grid, pairs, own, record, retired)
}

struct Writer(Vec<u8>);

impl Writer {
    fn bytes(&mut self, b: &[u8]) {
        self.0.extend_from_slice(b);
    }
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u16(&mut self, v: u16) {
        self.bytes(&v.to_le_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.bytes(&v.to_le_bytes());
    }
    fn f64(&mut self, v: f64) {
        self.bytes(&v.to_le_bytes());
    }
    /// The statistics, with `YᵀY` when `products`, the zero rows when `zeros` and the build-up
    /// statistics when `build_up`, with their weighted copy when `relative` (each when the
    /// statistics keep it).
    fn statistics(
        &mut self,
        stats: &BatchStatistics,
        products: bool,
        zeros: bool,
        build_up: bool,
        relative: bool,
    ) {
        let (p, m) = (stats.dim(), stats.outputs());
        self.f64(stats.rows());
        self.lower(stats.g());
        for k in 0..m {
            for j in 0..p {
                self.f64(stats.b()[(j, k)]);
            }
        }
        stats.q().iter().for_each(|v| self.f64(*v));
        stats.nonzero().iter().for_each(|v| self.f64(*v));
        if let Some(yy) = stats.output_products().filter(|_| products) {
            self.lower(yy);
        }
        if let Some(zero_rows) = stats.zero_rows().filter(|_| zeros) {
            zero_rows.count().iter().for_each(|v| self.f64(*v));
            let square = zero_rows.square();
            for k in 0..square.ncols() {
                for j in 0..square.nrows() {
                    self.f64(square[(j, k)]);
                }
            }
        }
        if let Some(curves) = stats.build_up().filter(|_| build_up) {
            self.u32(curves.saturations().len() as u32);
            curves.saturations().iter().for_each(|v| self.f64(*v));
            self.lower(curves.gram());
            self.columns(curves.design());
            if let Some(weighted) = curves.relative().filter(|_| relative) {
                self.lower(weighted.gram());
                self.columns(weighted.design());
                self.u32(weighted.fabric().nrows() as u32);
                self.columns(weighted.fabric());
                weighted.squares().iter().for_each(|v| self.f64(*v));
                self.f64(weighted.weight());
            }
        }
    }
    /// A prior and its noise variance: family u8 (0 ARD, 1 ridge, 2 smooth) · s f64 · v p f64
    /// · smooth bands u32 (0: none) · [smooth length f64 when bands > 0].
    fn prior(&mut self, prior: &Prior, noise_variance: f64) {
        self.u8(match prior.family {
            FittedFamily::Ard => 0,
            FittedFamily::Ridge => 1,
            FittedFamily::Smooth => 2,
        });
        self.f64(noise_variance);
        prior.variance.iter().for_each(|v| self.f64(*v));
        match prior.smooth {
            None => self.u32(0),
            Some(smooth) => {
                self.u32(smooth.bands as u32);
                self.f64(smooth.length);
            }
        }
    }
    /// Every entry of `a`, column by column.
    fn columns(&mut self, a: faer::MatRef<'_, f64>) {
        for k in 0..a.ncols() {
            for j in 0..a.nrows() {
                self.f64(a[(j, k)]);
            }
        }
    }
    /// Appends the checksum of everything written so far.
    fn finish(mut self) -> Vec<u8> {
        let crc = crc32fast::hash(&self.0);
        self.u32(crc);
        self.0
    }
    fn lower(&mut self, a: faer::MatRef<'_, f64>) {
        for j in 0..a.ncols() {
            for i in j..a.nrows() {
                self.f64(a[(i, j)]);
            }
        }
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    version: u16,
}

impl<'a> Reader<'a> {
    /// Checks magic, format version and checksum; the reader starts after the version.
    fn open(bytes: &'a [u8], magic: &[u8; 4], versions: &[u16]) -> Result<Self, EstimatorError> {
        if bytes.len() < 4 || &bytes[..4] != magic {
            return Err(DecodeError::BadMagic.into());
        }
        if bytes.len() < 6 {
            return Err(DecodeError::Truncated.into());
        }
        let version = u16::from_le_bytes([bytes[4], bytes[5]]);
        if !versions.contains(&version) {
            return Err(DecodeError::UnsupportedVersion {
                found: version,
                newest: versions.iter().copied().max().unwrap_or(version),
            }
            .into());
        }
        if bytes.len() < 10 {
            return Err(DecodeError::Truncated.into());
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        let crc = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
        if crc32fast::hash(body) != crc {
            return Err(DecodeError::Checksum.into());
        }
        Ok(Self {
            bytes: body,
            at: 6,
            version,
        })
    }

    fn statistics(
        &mut self,
        p: usize,
        m: usize,
        products: bool,
        zeros: bool,
        build_up: bool,
        relative: bool,
    ) -> Result<BatchStatistics, EstimatorError> {
        let n = self.f64()?;
        let g = self.lower(p)?;
        self.ensure(p * m + 2 * m)?;
        let mut b = Mat::zeros(p, m);
        for k in 0..m {
            for j in 0..p {
                b[(j, k)] = self.f64()?;
            }
        }
        let q = self.vec(m)?;
        let nonzero = self.vec(m)?;
        let mut stats = BatchStatistics::from_parts(g, b, q, nonzero, n);
        if products {
            stats.set_output_products(self.lower(m)?);
        }
        if zeros {
            let count = self.vec(p)?;
            self.ensure(p * m)?;
            let mut square = Mat::zeros(p, m);
            for k in 0..m {
                for j in 0..p {
                    square[(j, k)] = self.f64()?;
                }
            }
            let zero_rows = ZeroRows::from_parts(count, square);
            if !zero_rows.consistent_with(n) {
                return Err(DecodeError::Invalid("zero rows").into());
            }
            stats.set_zero_rows(zero_rows);
        }
        if build_up {
            if !products {
                return Err(DecodeError::Invalid("build-up without YᵀY").into());
            }
            let curves = self.u32()? as usize;
            if curves == 0 || curves > MAX_CURVES {
                return Err(DecodeError::Invalid("build-up curves").into());
            }
            let saturations = self.vec(curves)?;
            if !BuildUp::is_ladder(&saturations) {
                return Err(DecodeError::Invalid("build-up saturations").into());
            }
            let width = curves * m;
            let gram = self.lower(width)?;
            let design = self.columns(p, width)?;
            let relative = if relative {
                let gram = self.lower(width)?;
                let design = self.columns(p, width)?;
                let rows = self.u32()? as usize;
                if rows == 0 || rows >= p {
                    return Err(DecodeError::Invalid("weighted build-up rows").into());
                }
                let fabric = self.columns(rows, p)?;
                let squares = self.vec(p - rows)?;
                let weight = self.f64()?;
                let relative = Relative::from_parts(gram, design, fabric, squares, weight);
                if !relative.fits(p, p - rows) || (n > 0.0 && weight <= 0.0) {
                    return Err(DecodeError::Invalid("weighted build-up statistics").into());
                }
                Some(relative)
            } else {
                None
            };
            stats.set_build_up(BuildUp::from_parts(saturations, gram, design, relative));
        }
        if !stats.is_finite() || n < 0.0 {
            return Err(DecodeError::Invalid("non-finite statistics").into());
        }
        Ok(stats)
    }

    /// A `rows × cols` matrix written column by column.
    fn columns(&mut self, rows: usize, cols: usize) -> Result<Mat<f64>, EstimatorError> {
        self.ensure(rows * cols)?;
        let mut a = Mat::zeros(rows, cols);
        for k in 0..cols {
            for j in 0..rows {
                a[(j, k)] = self.f64()?;
            }
        }
        Ok(a)
    }

    /// A prior and its noise variance as [`Writer::prior`] writes them; before the prior
    /// families (`current` false), an ARD prior's noise and finite variances alone.
    fn prior(&mut self, p: usize, current: bool) -> Result<(Prior, f64), EstimatorError> {
        let family = if current {
            match self.u8()? {
                0 => FittedFamily::Ard,
                1 => FittedFamily::Ridge,
                2 => FittedFamily::Smooth,
                _ => return Err(DecodeError::Invalid("prior family").into()),
            }
        } else {
            FittedFamily::Ard
        };
        let s = self.f64()?;
        let variance = self.vec(p)?;
        let infinite_ok = |x: &f64| current && *x == f64::INFINITY;
        if variance
            .iter()
            .any(|x| !((x.is_finite() || infinite_ok(x)) && *x >= 0.0))
        {
            return Err(DecodeError::Invalid("prior variances").into());
        }
        let smooth = if current {
            match self.u32()? as usize {
                0 => None,
                bands => Some(Smooth {
                    bands,
                    length: self.f64()?,
                }),
            }
        } else {
            None
        };
        let prior = Prior {
            family,
            variance,
            smooth,
        };
        prior
            .validate()
            .map_err(|_| DecodeError::Invalid("prior"))?;
        Ok((prior, s))
    }

    /// A boolean byte (0 or 1).
    fn flag(&mut self, what: &'static str) -> Result<bool, EstimatorError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(DecodeError::Invalid(what).into()),
        }
    }

    fn finish(&self) -> Result<(), EstimatorError> {
        if self.at != self.bytes.len() {
            return Err(DecodeError::Invalid("trailing bytes").into());
        }
        Ok(())
    }
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let end = self.at.checked_add(N).ok_or(DecodeError::Truncated)?;
        let slice = self.bytes.get(self.at..end).ok_or(DecodeError::Truncated)?;
        self.at = end;
        let mut out = [0u8; N];
        out.copy_from_slice(slice);
        Ok(out)
    }
    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take::<1>()?[0])
    }
    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.take()?))
    }
    fn f64(&mut self) -> Result<f64, DecodeError> {
        Ok(f64::from_le_bytes(self.take()?))
    }
    fn vec(&mut self, len: usize) -> Result<Vec<f64>, DecodeError> {
        self.ensure(len)?;
        (0..len).map(|_| self.f64()).collect()
    }
    /// A symmetric matrix from its lower triangle.
    fn lower(&mut self, n: usize) -> Result<Mat<f64>, DecodeError> {
        self.ensure(n * (n + 1) / 2)?;
        let mut a = Mat::zeros(n, n);
        for j in 0..n {
            for i in j..n {
                let v = self.f64()?;
                a[(i, j)] = v;
                a[(j, i)] = v;
            }
        }
        Ok(a)
    }
    /// Fails early when fewer than `count` f64 remain, before anything is allocated.
    fn ensure(&self, count: usize) -> Result<(), DecodeError> {
        let needed = count.checked_mul(8).ok_or(DecodeError::Truncated)?;
        if self.bytes.len().saturating_sub(self.at) < needed {
            return Err(DecodeError::Truncated);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ModelConfig, Transform};

    fn small_state() -> ModelState {
        let basis = Basis::new(2, true, Transform::Identity);
        let x = faer::mat![[1.0, 0.5], [0.2, 1.5], [2.0, -1.0], [0.3, 0.3], [1.1, 0.9]];
        let y = faer::mat![[1.0, 0.0], [2.0, 0.0], [0.5, 0.0], [0.7, 0.0], [1.4, 0.0]];
        let phi = basis.design(x.as_ref()).unwrap();
        let stats = BatchStatistics::from_design(phi.as_ref(), y.as_ref()).unwrap();
        ModelState::fit(&ModelConfig::new(basis, 2), stats).unwrap()
    }

    /// `bytes` with its trailing crc recomputed: a blob forged on purpose, so that the decoder
    /// reaches the field a test altered.
    fn reseal(mut bytes: Vec<u8>) -> Vec<u8> {
        bytes.truncate(bytes.len() - 4);
        let crc = crc32fast::hash(&bytes);
        bytes.extend_from_slice(&crc.to_le_bytes());
        bytes
    }

    #[test]
    fn round_trip_is_exact() {
        let state = small_state();
        assert_eq!(decode(&encode(&state)).unwrap(), state);
    }

    /// A state whose output keeps alternates is written as version 9 and read back with them,
    /// predicting as before; with its alternates corrupted into an untrained output's, refused.
    #[test]
    fn alternates_round_trip() {
        let state = crate::mixture::tests::averaged_state(5);
        let blob = encode(&state);
        assert_eq!(
            u16::from_le_bytes([blob[4], blob[5]]),
            FORMAT_VERSION_ALTERNATES
        );
        let decoded = decode(&blob).unwrap();
        assert_eq!(decoded, state);
        assert!(!decoded.alternates(0).is_empty());
        let without = ModelState::from_parts(
            *state.basis(),
            state.totals().clone(),
            state.outputs().to_vec(),
            state.predictive(),
            state.fitted_rows().to_vec(),
            vec![Vec::new()],
        )
        .unwrap();
        assert_ne!(encode(&without)[4], blob[4]);
        assert!(decode(&encode(&without)).unwrap().alternates(0).is_empty());
    }

    /// The predictive byte (after magic, version, features, intercept, transform, declared,
    /// bands, scale and outputs): 2 for a state fitted now, 1 read back as the old rule, and a
    /// value no release wrote refused.
    #[test]
    fn the_predictive_byte_keeps_the_rule_a_state_was_fitted_under() {
        let state = small_state();
        assert_eq!(state.predictive(), Predictive::StudentNoise);
        let bytes = encode(&state);
        const AT: usize = 4 + 2 + 4 + 1 + 1 + 1 + 4 + 1 + 4;
        assert_eq!(bytes[AT], 2);
        let mut old = bytes.clone();
        old[AT] = 1;
        let old = decode(&reseal(old)).unwrap();
        assert_eq!(old.predictive(), Predictive::Student);
        assert_eq!(old.outputs(), state.outputs());
        let mut unknown = bytes;
        unknown[AT] = 3;
        assert_eq!(
            decode(&reseal(unknown)).unwrap_err(),
            EstimatorError::Decode(DecodeError::Invalid("predictive"))
        );
    }

    /// A format-1 state whose totals give an output a negative count of informative rows (found
    /// by the fuzzer) is refused: it would encode to a state that does not decode.
    #[test]
    fn a_legacy_state_with_a_negative_informative_count_is_refused() {
        let body: &[u8] = &[
            77, 82, 68, 84, 1, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 128, 0, 0, 0, 0, 0,
            0, 0, 48, 0, 63, 240, 145, 145, 145, 145, 145, 8, 64, 0, 0, 164, 164, 164, 164, 164,
            164, 164, 164, 164, 164, 164, 164, 164, 164, 1, 0, 0, 0, 0, 0, 8, 0, 0, 0, 240, 63, 0,
            0, 0, 32, 0, 0, 5, 64, 77, 82, 68, 84, 1, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        let mut sealed = body.to_vec();
        sealed.extend_from_slice(&crc32fast::hash(body).to_le_bytes());
        let refused = decode(&sealed).expect_err("refused");
        assert!(refused.to_string().contains("fitted rows"), "{refused}");
    }

    /// A state whose hyperparameters were fitted on fewer rows than it has seen keeps that
    /// count through a round trip; one read from format 4 counts every row so far.
    #[test]
    fn fitted_rows_round_trip_and_format_4_counts_every_row() {
        let state = small_state();
        let basis = *state.basis();
        // One row on five: fewer than a quarter more, one step.
        let x = faer::mat![[0.4, 0.1]];
        let y = faer::mat![[0.9, 0.0]];
        let phi = basis.design(x.as_ref()).unwrap();
        let batch = BatchStatistics::from_design(phi.as_ref(), y.as_ref()).unwrap();
        let updated = state.update(&ModelConfig::new(basis, 2), &batch).unwrap();
        assert_eq!(updated.fitted_rows()[0], 5.0);
        assert_eq!(updated.totals().informative_rows(0), 6.0);
        assert_eq!(decode(&encode(&updated)).unwrap(), updated);

        let blob = encode_as(&updated, FORMAT_VERSION_4);
        assert_eq!(blob[4] as u16, FORMAT_VERSION_4);
        let old = decode(&blob).unwrap();
        assert_eq!(old.fitted_rows()[0], 6.0);
        assert_eq!(old.outputs(), updated.outputs());
        assert_same_totals_but_zero_rows(old.totals(), updated.totals());
    }

    fn assert_same_totals_but_zero_rows(old: &BatchStatistics, new: &BatchStatistics) {
        assert!(new.zero_rows().is_some());
        assert!(
            old.zero_rows().is_none(),
            "an older format keeps no zero rows"
        );
        assert_eq!(old.g(), new.g());
        assert_eq!(old.b(), new.b());
        assert_eq!(old.q(), new.q());
        assert_eq!(old.nonzero(), new.nonzero());
        assert_eq!(old.rows(), new.rows());
    }

    /// A dye whose intercept is pruned, 0 wherever its dose is 0: format 6 keeps the zero rows
    /// and answers a structural zero with their variance; the same state read from format 5
    /// answers the noise variance there, as the release that wrote it did.
    #[test]
    fn zero_rows_round_trip_and_format_5_predicts_as_before() {
        let basis = Basis::new(2, true, Transform::Identity);
        let x = Mat::from_fn(40, 2, |i, j| match j {
            0 if i % 8 == 0 => 1.0 + 0.1 * i as f64,
            0 => 0.0,
            _ => (i as f64 * 0.37).sin(),
        });
        let y = Mat::from_fn(40, 1, |i, _| {
            0.5 * x[(i, 0)] * (1.0 + 0.01 * (i as f64).cos())
        });
        let stats = BatchStatistics::from_rows(&basis, x.as_ref(), y.as_ref()).unwrap();
        let state = ModelState::fit(&ModelConfig::new(basis, 1), stats).unwrap();
        let post = state.outputs()[0].posterior().unwrap();
        assert!(
            post.flat().is_none() && post.mean()[2] == 0.0,
            "intercept pruned"
        );
        assert_eq!(decode(&encode(&state)).unwrap(), state);

        let old = decode(&encode_as(&state, FORMAT_VERSION_5)).unwrap();
        assert_same_totals_but_zero_rows(old.totals(), state.totals());
        let undosed = faer::mat![[0.0, 0.0]];
        let (now, before) = (
            state.predict(undosed.as_ref()).unwrap(),
            old.predict(undosed.as_ref()).unwrap(),
        );
        assert_eq!((now.mean[(0, 0)], before.mean[(0, 0)]), (0.0, 0.0));
        assert!(before.variance[(0, 0)] >= post.noise_variance());
        // 35 undosed rows, every one exactly 0: one pseudo-row at s among 36.
        let expected = post.noise_variance() / 36.0;
        assert!(
            (now.variance[(0, 0)] - expected).abs() <= 1e-12 * expected,
            "{} against {expected}",
            now.variance[(0, 0)]
        );
    }

    /// A zero-rows flag other than 0 or 1, a count above the rows or a negative sum of squares
    /// is refused; a format-6 state without zero rows (one read from format 5 and written back)
    /// round-trips.
    #[test]
    fn inconsistent_zero_rows_are_refused() {
        let state = small_state();
        let mut w = Writer(Vec::new());
        let blob = encode(&state);
        let flag_at = 4 + 2 + 4 + 1 + 1 + 1 + 4 + 1 + 4 + 1 + 1;
        assert_eq!(blob[flag_at], 1, "the zero-rows flag");
        let mut bad = blob.clone();
        bad[flag_at] = 2;
        assert_eq!(
            decode(&reseal(bad)),
            Err(EstimatorError::Decode(DecodeError::Invalid(
                "zero rows flag"
            )))
        );

        let stats = state.totals();
        let zero_rows = stats.zero_rows().unwrap();
        for (count, square) in [(stats.rows() + 1.0, 0.0), (0.0, -1.0)] {
            let mut forged = stats.clone();
            let mut counts = zero_rows.count().to_vec();
            counts[0] = count;
            let mut squares = zero_rows.square().to_owned();
            squares[(0, 0)] = square;
            forged.set_zero_rows(ZeroRows::from_parts(counts, squares));
            w.0.clear();
            w.bytes(STATISTICS_MAGIC);
            w.u16(STATISTICS_VERSION_3);
            w.u32(stats.dim() as u32);
            w.u32(stats.outputs() as u32);
            w.u8(0);
            w.u8(1);
            w.statistics(&forged, false, true, false, false);
            let sealed = Writer(std::mem::take(&mut w.0)).finish();
            assert_eq!(
                decode_statistics(&sealed),
                Err(EstimatorError::Decode(DecodeError::Invalid("zero rows"))),
                "count {count}, square {square}"
            );
        }

        let old = decode(&encode_as(&state, FORMAT_VERSION_5)).unwrap();
        let written = encode(&old);
        assert_eq!(written[flag_at], 0);
        assert_eq!(decode(&written).unwrap(), old);
    }

    /// Statistics blobs of the releases before the zero rows (versions 1 and 2) still decode,
    /// without them; version 3 keeps them.
    #[test]
    fn statistics_blobs_of_earlier_releases_decode_without_zero_rows() {
        let basis = Basis::new(2, true, Transform::Identity);
        let x = faer::mat![[1.0, 0.0], [0.0, 2.0], [3.0, 1.0]];
        let y = faer::mat![[1.0, 2.0], [0.0, 4.0], [3.0, 1.0]];
        let stats = BatchStatistics::from_rows(&basis, x.as_ref(), y.as_ref()).unwrap();
        let blob = encode_statistics(&stats);
        assert_eq!(blob[4] as u16, STATISTICS_VERSION_3);
        assert_eq!(decode_statistics(&blob).unwrap(), stats);
        let with_products = stats.clone().with_output_products(y.as_ref()).unwrap();
        assert_eq!(
            decode_statistics(&encode_statistics(&with_products)).unwrap(),
            with_products
        );
        for (version, products) in [(FORMAT_VERSION_1, false), (STATISTICS_VERSION_2, true)] {
            let source = if products { &with_products } else { &stats };
            let mut w = Writer(Vec::new());
            w.bytes(STATISTICS_MAGIC);
            w.u16(version);
            w.u32(3);
            w.u32(2);
            w.statistics(source, products, false, false, false);
            let old = decode_statistics(&w.finish()).unwrap();
            assert_same_totals_but_zero_rows(&old, source);
            assert_eq!(old.output_products(), source.output_products());
        }
    }

    #[test]
    fn every_state_is_written_in_the_current_format_and_round_trips() {
        let plain = small_state();
        assert_eq!(encode(&plain)[4] as u16, FORMAT_VERSION);
        let basis = Basis::spectral(
            1,
            ReflectanceScale::Percent,
            2,
            true,
            Transform::KubelkaMunk,
        );
        let x = faer::mat![
            [40.0, 0.5],
            [60.0, 1.5],
            [20.0, -1.0],
            [90.0, 0.3],
            [35.0, 0.9],
            [55.0, 0.1]
        ];
        let y = faer::mat![[1.0], [2.0], [0.5], [0.7], [1.4], [1.1]];
        let stats = BatchStatistics::from_rows(&basis, x.as_ref(), y.as_ref()).unwrap();
        let state = ModelState::fit(&ModelConfig::new(basis, 1), stats).unwrap();
        // A model that can match keeps the build-up statistics and their weighted copy: format
        // 8, and version 5 for its statistics; they round-trip, and without them the state is
        // format 6.
        assert!(state.totals().build_up().unwrap().relative().is_some());
        let blob = encode(&state);
        assert_eq!(blob[4] as u16, FORMAT_VERSION_RELATIVE);
        let decoded = decode(&blob).unwrap();
        assert_eq!(*decoded.basis(), basis);
        assert_eq!(decoded, state);
        assert_eq!(
            encode_statistics(state.totals())[4] as u16,
            STATISTICS_VERSION_5
        );
        assert_eq!(
            &decode_statistics(&encode_statistics(state.totals())).unwrap(),
            state.totals()
        );
        // A state of format 7 (build-up statistics without the weighted copy) reads as it was
        // written and is written back the same way.
        let seven = decode(&encode_as(&state, FORMAT_VERSION_BUILD_UP)).unwrap();
        let kept = seven.totals().build_up().unwrap();
        assert!(kept.relative().is_none());
        assert_eq!(kept.gram(), state.totals().build_up().unwrap().gram());
        assert_eq!(encode(&seven)[4] as u16, FORMAT_VERSION_BUILD_UP);
        assert_eq!(decode(&encode(&seven)).unwrap(), seven);
        // A negative total weight is refused, and so is a state whose weighted statistics do
        // not split its basis as it does.
        let mut forged = encode_statistics(state.totals());
        let at = forged.len() - 4 - 8;
        forged[at..at + 8].copy_from_slice(&(-1.0f64).to_le_bytes());
        assert_eq!(
            decode_statistics(&reseal(forged)).unwrap_err(),
            EstimatorError::Decode(DecodeError::Invalid("weighted build-up statistics"))
        );
        let kept = state.totals().build_up().unwrap();
        let weighted = kept.relative().unwrap();
        let p = state.totals().dim();
        let misfit = Relative::from_parts(
            weighted.gram().to_owned(),
            weighted.design().to_owned(),
            Mat::zeros(1, p),
            vec![0.0; p - 1],
            weighted.weight(),
        );
        let mut totals = state.totals().clone();
        totals.set_build_up(BuildUp::from_parts(
            kept.saturations().to_vec(),
            kept.gram().to_owned(),
            kept.design().to_owned(),
            Some(misfit),
        ));
        let misfit = ModelState::from_parts(
            *state.basis(),
            totals,
            state.outputs().to_vec(),
            state.predictive(),
            state.fitted_rows().to_vec(),
            vec![Vec::new(); state.outputs().len()],
        )
        .unwrap();
        assert_eq!(
            decode(&encode(&misfit)).unwrap_err(),
            EstimatorError::Decode(DecodeError::Invalid("weighted build-up statistics"))
        );
        let stats_blob = encode_statistics(seven.totals());
        assert_eq!(stats_blob[4] as u16, STATISTICS_VERSION_4);
        assert_eq!(&decode_statistics(&stats_blob).unwrap(), seven.totals());
        let phi = basis.design(x.as_ref()).unwrap();
        let without = BatchStatistics::from_design(phi.as_ref(), y.as_ref())
            .unwrap()
            .with_output_products(y.as_ref())
            .unwrap();
        let older = ModelState::fit(&ModelConfig::new(basis, 1), without).unwrap();
        assert_eq!(encode(&older)[4] as u16, FORMAT_VERSION);
        assert_eq!(decode(&encode(&older)).unwrap(), older);
        // Saturations that are not the linear curve first, then positive ones decreasing, are
        // refused.
        // p = 3, m = 1, six curves: the saturations, ΨᵀΨ (21 values), ΦᵀΨ (18), the crc.
        let at = stats_blob.len() - 4 - 8 * (21 + 18) - 8 * 6;
        assert_eq!(&stats_blob[at..at + 8], &f64::INFINITY.to_le_bytes());
        for (rung, forged_value) in [(0, 2.0f64), (2, 40.0)] {
            let mut forged = stats_blob.clone();
            let at = at + 8 * rung;
            forged[at..at + 8].copy_from_slice(&forged_value.to_le_bytes());
            assert_eq!(
                decode_statistics(&reseal(forged)).unwrap_err(),
                EstimatorError::Decode(DecodeError::Invalid("build-up saturations"))
            );
        }

        // A Saunderson basis keeps its coefficients; a tag-2 transform with coefficients out
        // of range is refused, not misread.
        let surface = Saunderson { k1: 0.05, k2: 0.55 };
        let basis = Basis {
            transform: Transform::Saunderson(surface),
            ..basis
        };
        let stats = BatchStatistics::from_rows(&basis, x.as_ref(), y.as_ref()).unwrap();
        let state = ModelState::fit(&ModelConfig::new(basis, 1), stats).unwrap();
        let mut blob = encode(&state);
        let decoded = decode(&blob).unwrap();
        assert_eq!(decoded.basis().transform, Transform::Saunderson(surface));
        assert_eq!(decoded, state);
        // k₁ sits after magic, version, features and the intercept flag and the tag.
        let k1 = 4 + 2 + 4 + 1 + 1;
        assert_eq!(blob[k1 - 1], 2);
        blob[k1..k1 + 8].copy_from_slice(&1.5f64.to_le_bytes());
        assert_eq!(
            decode(&reseal(blob)).unwrap_err(),
            EstimatorError::Decode(DecodeError::Invalid("Saunderson coefficients"))
        );
    }

    #[test]
    fn foreign_blob_is_refused() {
        assert_eq!(
            decode(b"PK\x03\x04 not ours"),
            Err(EstimatorError::Decode(DecodeError::BadMagic))
        );
    }

    /// A newer state or statistics blob is refused, naming the newest version of its kind that
    /// this build reads.
    #[test]
    fn newer_version_is_refused() {
        let state = small_state();
        let refusal =
            |newest| EstimatorError::Decode(DecodeError::UnsupportedVersion { found: 12, newest });
        let (mut blob, mut stats) = (encode(&state), encode_statistics(state.totals()));
        blob[4] = 12;
        stats[4] = 12;
        assert_eq!(decode(&blob).unwrap_err(), refusal(FORMAT_VERSION_TAIL));
        assert_eq!(
            decode_statistics(&stats).unwrap_err(),
            refusal(STATISTICS_VERSION_5)
        );
    }

    #[test]
    fn flipped_bit_is_caught_by_the_checksum() {
        let mut blob = encode(&small_state());
        let mid = blob.len() / 2;
        blob[mid] ^= 0x10;
        assert_eq!(
            decode(&blob),
            Err(EstimatorError::Decode(DecodeError::Checksum))
        );
    }

    #[test]
    fn truncated_blob_is_refused() {
        let blob = encode(&small_state());
        for len in [0, 3, 5, 9, blob.len() - 1] {
            assert!(decode(&blob[..len]).is_err(), "length {len} decoded");
        }
    }
}
