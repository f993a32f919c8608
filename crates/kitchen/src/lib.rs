//! The colour kitchen: what a dye house's colourist asks of a learnt forward map. For a target's
//! reflectance, every recipe of a few dyes the map can solve, each judged by the colour it is
//! predicted to dye (CIEDE2000 and CMC under D65, A and F11) and priced, ranked as the colourist
//! asks ([`candidates()`]); the correction of a dip that came out off-shade ([`correct`]); the
//! colour of a spectrum on a model's bands as a dot product ([`Colorimeter`]); the verdict
//! against a tolerance ([`judge()`]).
//!
//! The numerics of a match (the forward map, the bounded least squares of one combination) are
//! the estimator's ([`mordant_estimator::recipe`]); the colour science is `mordant-colour`'s.
//! Both the service and the simulator's evaluation use this crate, so that a figure measured on
//! the simulator is the service's own behaviour.

pub mod candidates;
pub mod colorimeter;
pub mod correction;
#[cfg(test)]
mod fixtures;
pub mod judge;

pub use candidates::{
    Candidate, KitchenError, Ranking, Search, candidates, combination_count, combinations,
    unrestricted,
};
pub use colorimeter::{Colorimeter, can_judge};
pub use correction::{Correction, correct};
pub use judge::{Comparison, Seen, Tolerance, judge};
