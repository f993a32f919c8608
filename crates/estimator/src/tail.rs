//! The predictive's tail, set on the rows of the model's first fit (and read again by a refit
//! given every row behind its statistics, [`super::first_fit::refit_on_rows`]).
//!
//! A predictive variance says how far an answer may be off, not how that spread is shaped, and
//! a client reads it as a Gaussian's. Where a model's errors are more peaked than a Gaussian,
//! with heavier tails (most answers close, a few far off), the Gaussian of the same variance is
//! too wide at the centre and too narrow in the tails. A model may instead carry a tail: each
//! answer of a trained output with a mean other than 0 is then a Student-t with `ν` degrees of
//! freedom and the answered variance `v`,
//!
//! ```text
//! y ~ μ + √(v (ν − 2)/ν) · t_ν
//! ```
//!
//! `ν` is the one of [`DEGREES`] whose likelihood of the fit's standardised residuals
//! `z_ki = (y_ki − μ_ki)/√v_ki`, each output's profiled over a free scale `c_k` of its own, is
//! largest once every `ν` is charged BIC's `½ log n` against the Gaussian:
//!
//! ```text
//! ℓ_ν = Σ_k max_c Σ_i [log t_ν(z_ki / c) − log c] − ½ log n
//! ℓ_∞ = Σ_k max_c Σ_i [log φ(z_ki / c) − log c] = −½ Σ_k n_k (log(2π · mean_i z_ki²) + 1)
//! ```
//!
//! The scales are free because residuals on the rows a fit has seen are smaller than on rows it
//! has not, by as much as each output's fit has taken from them: only their shape is read, never
//! their level, and the answered variance stays what it was. One scale for all outputs would
//! read outputs shrunk by different amounts as a mixture of scales, which looks heavy-tailed
//! when each output's residuals are Gaussian. An output with fewer than [`OUTPUT_ROWS`]
//! residuals, whose scale they would barely fix, is left out, as is one with a residual that is
//! not finite. A `ν` whose profile has no maximum (residuals exactly 0 in so many places that
//! the t's scale shrinks to nothing) is not weighed. `ν` starts at 3, where the clamp of the
//! Student-t predictive's degrees of freedom starts too: below it the variance that fixes the
//! t's scale is infinite or vast (a stored state may hold any `ν > 2`, [`Tail::new`]). The
//! profile's maximum is found by the EM iteration for a t's scale (Lange, Little & Taylor,
//! 1989), `c² ← mean(w_i z_i²)` with `w_i = (ν + 1)/(ν + z_i²/c²)`, which never lowers the
//! likelihood.

use crate::EstimatorError;

/// The degrees of freedom the choice weighs (the Gaussian, `ν = ∞`, besides them).
pub const DEGREES: [f64; 7] = [3.0, 4.0, 5.0, 7.0, 10.0, 15.0, 30.0];

/// A tail: degrees of freedom `ν > 2`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tail(f64);

impl Tail {
    /// The tail of `ν > 2` degrees of freedom (a finite variance). [`choose`] picks among
    /// [`DEGREES`]; a stored state may hold any such `ν` (a later release may weigh others).
    pub fn new(nu: f64) -> Result<Self, EstimatorError> {
        if nu.is_finite() && nu > 2.0 {
            Ok(Self(nu))
        } else {
            Err(EstimatorError::NonFinite("the tail's degrees of freedom"))
        }
    }

    /// `ν`.
    pub fn degrees_of_freedom(self) -> f64 {
        self.0
    }
}

/// Fewer residuals than this set no tail: the shape of a distribution's tails is not read off
/// a handful of values.
pub const TAIL_ROWS: usize = 30;

/// An output with fewer residuals than this is left out of the choice.
pub const OUTPUT_ROWS: usize = 10;

/// Iterations of the scale's EM update, at most.
const SCALE_ITERATIONS: usize = 500;

/// `ν` for the standardised residuals of each output, `outputs[k]` (see the module's doc);
/// `None` (a Gaussian) where the Gaussian wins, or the outputs kept (at least [`OUTPUT_ROWS`]
/// residuals, all finite, not all 0) hold fewer than [`TAIL_ROWS`] in all.
pub fn choose(outputs: &[Vec<f64>]) -> Option<Tail> {
    // Each output kept with its mean square, the Gaussian's profiled scale².
    let kept: Vec<(&[f64], f64)> = outputs
        .iter()
        .filter(|z| z.len() >= OUTPUT_ROWS && z.iter().all(|z| z.is_finite()))
        .map(|z| {
            (
                z.as_slice(),
                z.iter().map(|z| z * z).sum::<f64>() / z.len() as f64,
            )
        })
        .filter(|(_, mean_square)| *mean_square > 0.0 && mean_square.is_finite())
        .collect();
    let n: usize = kept.iter().map(|(z, _)| z.len()).sum();
    if n < TAIL_ROWS {
        return None;
    }
    let gaussian: f64 = kept
        .iter()
        .map(|(z, mean_square)| {
            -0.5 * z.len() as f64 * ((std::f64::consts::TAU * mean_square).ln() + 1.0)
        })
        .sum();
    let charge = 0.5 * (n as f64).ln();
    let (best, likelihood) = DEGREES
        .iter()
        .map(|&nu| {
            let l: f64 = kept.iter().map(|(z, ms)| profile(z, nu, *ms)).sum();
            (nu, l - charge)
        })
        .filter(|(_, l)| l.is_finite())
        .max_by(|a, b| a.1.total_cmp(&b.1))?;
    (likelihood > gaussian).then_some(Tail(best))
}

/// `max_c Σ log t_ν(z_i/c) − n log c`, from the start `c² = mean z²`.
fn profile(z: &[f64], nu: f64, mean_square: f64) -> f64 {
    let rows = z.len() as f64;
    let mut c2 = mean_square;
    for _ in 0..SCALE_ITERATIONS {
        let next = z
            .iter()
            .map(|z| {
                let z2 = z * z;
                (nu + 1.0) * z2 / (nu + z2 / c2)
            })
            .sum::<f64>()
            / rows;
        let settled = (next - c2).abs() <= 1e-13 * c2;
        c2 = next;
        if settled || c2 <= 0.0 {
            break;
        }
    }
    // A scale shrunk to round-off: residuals exactly 0 in more than ν/(ν + 1) of the places,
    // where the likelihood grows without bound as the scale vanishes.
    if !(c2 > 1e-12 * mean_square && c2.is_finite()) {
        return f64::NEG_INFINITY;
    }
    let constant =
        ln_gamma_half(nu + 1.0) - ln_gamma_half(nu) - 0.5 * (nu * std::f64::consts::PI).ln();
    let kernel: f64 = z.iter().map(|z| (z * z / (nu * c2)).ln_1p()).sum();
    rows * constant - 0.5 * (nu + 1.0) * kernel - 0.5 * rows * c2.ln()
}

/// `log Γ(k/2)` for a whole `k ≥ 1` (every `ν` of [`DEGREES`] and `ν + 1`), by
/// `Γ(x + 1) = x Γ(x)` from `Γ(1) = 1` or `Γ(½) = √π` (a sum of logarithms, to its rounding).
fn ln_gamma_half(k: f64) -> f64 {
    let mut x = if k % 2.0 == 0.0 { 1.0 } else { 0.5 };
    let mut sum = if x == 1.0 {
        0.0
    } else {
        0.5 * std::f64::consts::PI.ln()
    };
    while x < 0.5 * k {
        sum += x.ln();
        x += 1.0;
    }
    sum
}

/// The t's quantile scale: an answer of variance `v` under `ν` degrees of freedom is
/// `μ + √(v · scale_factor(ν)) · t_ν`.
pub fn scale_factor(nu: f64) -> f64 {
    (nu - 2.0) / nu
}

/// The upper 97.5 % point of the standard t with each `ν` of [`DEGREES`] (the quantile function
/// has no elementary form for most of them; these are its values to a double's precision).
const QUANTILES_975: [f64; 7] = [
    3.182_446_305_283_708,
    2.776_445_105_197_793,
    2.570_581_835_636_315,
    2.364_624_251_592_784,
    2.228_138_851_986_274,
    2.131_449_545_559_776,
    2.042_272_456_301_238,
];

/// Half the width of the central 95 % interval of an answer of standard deviation 1 under `ν`
/// degrees of freedom, `t_ν(0.975) · √((ν − 2)/ν)`; `None` for a `ν` the choice does not weigh.
pub fn half_width_95(nu: f64) -> Option<f64> {
    let at = DEGREES.iter().position(|&d| d == nu)?;
    Some(QUANTILES_975[at] * scale_factor(nu).sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic stand-ins for draws (a fixed low-discrepancy sequence through a quantile
    /// function), so that the tests do not depend on a generator.
    fn uniform(i: usize) -> f64 {
        ((i as f64 + 0.5) * 0.618_033_988_749_895).fract()
    }

    /// The standard normal's quantile (Acklam's rational approximation; ample for a test).
    fn normal(u: f64) -> f64 {
        let (a, b, c, d) = (
            [
                -39.696_830_286_653_76,
                220.946_098_424_520_5,
                -275.928_510_446_968_7,
                138.357_751_867_269,
                -30.664_798_066_147_16,
                2.506_628_277_459_239,
            ],
            [
                -54.476_098_798_224_06,
                161.585_836_858_040_9,
                -155.698_979_859_886_6,
                66.801_311_887_719_72,
                -13.280_681_552_885_72,
            ],
            [
                -0.007_784_894_002_430_293,
                -0.322_396_458_041_136_5,
                -2.400_758_277_161_838,
                -2.549_732_539_343_734,
                4.374_664_141_464_968,
                2.938_163_982_698_783,
            ],
            [
                0.007_784_695_709_041_462,
                0.322_467_129_070_039_8,
                2.445_134_137_142_996,
                3.754_408_661_907_416,
            ],
        );
        let tail = |q: f64| {
            (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5])
                / ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1.0)
        };
        if u < 0.02425 {
            tail((-2.0 * u.ln()).sqrt())
        } else if u > 1.0 - 0.02425 {
            -tail((-2.0 * (1.0 - u).ln()).sqrt())
        } else {
            let q = u - 0.5;
            let r = q * q;
            (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q
                / (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1.0)
        }
    }

    /// The quantile of a t with 4 degrees of freedom (closed form; Shaw, 2006).
    fn student4(u: f64) -> f64 {
        let alpha = 4.0 * u * (1.0 - u);
        let q = ((alpha.sqrt()).acos() / 3.0).cos() / alpha.sqrt();
        (u - 0.5).signum() * 2.0 * (q - 1.0).sqrt()
    }

    fn student(i: usize) -> f64 {
        student4(uniform(i))
    }

    #[test]
    fn heavy_tailed_residuals_choose_few_degrees_of_freedom() {
        let z: Vec<f64> = (0..2_000).map(|i| 0.7 * student(i)).collect();
        let nu = choose(&[z]).expect("a tail").degrees_of_freedom();
        assert!(nu <= 5.0, "ν = {nu}");
    }

    #[test]
    fn gaussian_residuals_keep_the_gaussian_whatever_their_level() {
        for level in [1e-3, 0.6, 1.0, 40.0] {
            let z: Vec<f64> = (0..2_000).map(|i| level * normal(uniform(i))).collect();
            assert_eq!(choose(&[z]), None, "level {level}");
        }
    }

    #[test]
    fn a_few_residuals_zeros_or_a_non_finite_one_set_no_tail() {
        let few: Vec<f64> = (0..TAIL_ROWS - 1).map(student).collect();
        assert_eq!(choose(&[few]), None);
        assert_eq!(choose(&[vec![0.0; 100]]), None);
        let mut z: Vec<f64> = (0..500).map(student).collect();
        assert!(choose(std::slice::from_ref(&z)).is_some());
        // Outputs of fewer than OUTPUT_ROWS residuals count for nothing, however many.
        let scraps: Vec<Vec<f64>> = z.chunks(OUTPUT_ROWS - 1).map(<[f64]>::to_vec).collect();
        assert_eq!(choose(&scraps), None);
        z[7] = f64::NAN;
        assert_eq!(choose(std::slice::from_ref(&z)), None);
        // A non-finite residual leaves its own output out, not the others.
        let others: Vec<f64> = (500..1_000).map(student).collect();
        assert!(choose(&[z, others]).is_some());
        // Residuals exactly 0 nearly everywhere give the t no maximum: no tail from them.
        let mut spike = vec![0.0; 200];
        spike[3] = 1.0;
        spike[150] = -2.0;
        assert_eq!(choose(&[spike]), None);
    }

    /// Gaussian residuals of outputs shrunk by different amounts (a fit that took more from one
    /// output's rows than another's) are no tail: each output's scale is its own.
    #[test]
    fn gaussian_outputs_at_different_scales_keep_the_gaussian() {
        let outputs: Vec<Vec<f64>> = [0.3, 0.7, 1.0, 2.5]
            .iter()
            .enumerate()
            .map(|(k, scale)| {
                (0..2_000)
                    .map(|i| scale * normal(uniform(i * 4 + k)))
                    .collect()
            })
            .collect();
        assert_eq!(choose(&outputs), None);
        // Pooled as one output, the same residuals look heavy-tailed.
        assert!(choose(&[outputs.concat()]).is_some());
    }

    #[test]
    fn the_profiled_scale_is_the_likelihoods_maximum() {
        // Against a grid of scales around the EM's answer, for each ν.
        let z: Vec<f64> = (0..300).map(|i| 2.0 * student(i)).collect();
        let ms = z.iter().map(|z| z * z).sum::<f64>() / z.len() as f64;
        for nu in DEGREES {
            let at = |c2: f64| {
                let constant = ln_gamma_half(nu + 1.0)
                    - ln_gamma_half(nu)
                    - 0.5 * (nu * std::f64::consts::PI).ln();
                z.len() as f64 * constant
                    - 0.5 * (nu + 1.0) * z.iter().map(|z| (z * z / (nu * c2)).ln_1p()).sum::<f64>()
                    - 0.5 * z.len() as f64 * c2.ln()
            };
            let best = profile(&z, nu, ms);
            for step in 1..60 {
                let c2 = ms * (step as f64 / 20.0);
                assert!(
                    at(c2) <= best + 1e-9,
                    "ν {nu}, c² {c2}: {} > {best}",
                    at(c2)
                );
            }
        }
    }

    /// The tabled quantiles are the t's: at ν = 3 its distribution function has the closed form
    /// `½ + (t/(√3 (1 + t²/3)) + atan(t/√3))/π`, at ν = 4 its quantile one (Shaw, 2006).
    #[test]
    fn the_tabled_quantiles_are_the_ts() {
        let q3 = QUANTILES_975[0];
        let cdf3 = 0.5
            + (q3 / (3f64.sqrt() * (1.0 + q3 * q3 / 3.0)) + (q3 / 3f64.sqrt()).atan())
                / std::f64::consts::PI;
        assert!((cdf3 - 0.975).abs() < 1e-14, "{cdf3}");
        assert!((QUANTILES_975[1] - student4(0.975)).abs() < 1e-12);
        // Within 7 % of the Gaussian's 1.96 at every ν weighed: narrower at ν = 3, whose
        // intervals are narrower up to 96.4 %, a little wider from ν = 4 (94.9 %) on.
        assert!(half_width_95(3.0).is_some_and(|half| half < 1.84));
        for nu in DEGREES {
            let half = half_width_95(nu).expect("a weighed ν");
            assert!((half / 1.959_964 - 1.0).abs() < 0.07, "ν {nu}: {half}");
        }
        assert_eq!(half_width_95(6.0), None);
    }

    #[test]
    fn log_gamma_at_halves_follows_the_recursion() {
        // Γ(3/2) = √π/2, Γ(2) = 1, Γ(5/2) = 3√π/4, Γ(8) = 5040, Γ(31/2) from its recursion.
        let pi = std::f64::consts::PI;
        assert!((ln_gamma_half(3.0) - (pi.sqrt() / 2.0).ln()).abs() < 1e-14);
        assert!(ln_gamma_half(4.0).abs() < 1e-14);
        assert!((ln_gamma_half(5.0) - (3.0 * pi.sqrt() / 4.0).ln()).abs() < 1e-14);
        assert!((ln_gamma_half(16.0) - 5040f64.ln()).abs() < 1e-12);
        let by_product: f64 = (0..15).map(|i| (0.5 + i as f64).ln()).sum::<f64>() + 0.5 * pi.ln();
        assert!((ln_gamma_half(31.0) - by_product).abs() < 1e-12);
        assert_eq!(scale_factor(3.0), 1.0 / 3.0);
        assert!(Tail::new(2.0).is_err() && Tail::new(f64::NAN).is_err());
        assert_eq!(Tail::new(6.0).map(Tail::degrees_of_freedom), Ok(6.0));
    }
}
