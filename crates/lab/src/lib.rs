//! mordant's laboratory: a simulated dye house (`mordant simulate`) and the paper's experiment
//! on the dyeing data (`mordant evaluate`), beside the service rather than inside it. Both drive
//! the [`mordant_estimator`] crate directly; the simulator can also post its lab dips to a
//! running service over HTTP ([`simulate::post`]).

pub mod evaluate;
pub mod simulate;
