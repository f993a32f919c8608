//! Small predictions of a wide model answered together.
//!
//! A prediction from a 700-band, 10-output model reads every output's factor `F_k`: tens of
//! megabytes, more than the cores' caches hold, so requests answered one at a time each stream
//! all of it from memory, and a busy front end's single-row requests queue behind one another's
//! memory traffic. Here the requests of a few rows that arrive while the model's predictions
//! are being computed wait, and the next computation takes all of them (up to [`MAX_ROWS`]
//! rows): each factor column is read once for all of them
//! ([`Predictor::predict_each_row`]), and each row's answer is bit for bit the one it would have
//! had alone. Nothing waits on a timer: a request that finds fewer computations running than the
//! machine has cores starts one at once, so a lone request pays only the hop to the blocking
//! pool, and a busy model's computations use every core.
//!
//! Only predictors whose row costs at least [`FROM_WORK`] multiply-adds are worth the hop; a
//! narrow model's prediction takes a microsecond and is answered where its request is read.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use faer::MatRef;
use tokio::runtime::Handle;
use tokio::sync::{Semaphore, oneshot};

use crate::domain::Rows;
use crate::estimator::{Predictions, Predictor};

/// Multiply-adds per row ([`Predictor::work_per_row`]) from which a predictor's small requests
/// are answered together: about a hundred microseconds of one core.
pub const FROM_WORK: usize = 200_000;

/// Requests of at most this many rows are answered together; larger ones have rows enough to
/// share the factors' reads among themselves.
pub const MAX_REQUEST_ROWS: usize = 8;

/// Rows one computation takes at most, so that the first of them does not wait on too many.
pub const MAX_ROWS: usize = 64;

/// The requests waiting for one predictor, and the computations answering them.
#[derive(Debug)]
pub struct Coalescer {
    predictor: Arc<Predictor>,
    queue: Mutex<Queue>,
    /// Computations that may run at once: one per core.
    parallel: usize,
}

/// Computations run and requests answered by them, over every coalescer of a process: a
/// coalescer lives only as long as its version, a counter for `/metrics` as long as the process.
#[derive(Debug, Default)]
pub struct Tally {
    computations: AtomicU64,
    answered: AtomicU64,
}

impl Tally {
    /// The computations run so far and the requests they answered: their ratio is how many
    /// requests were answered together on average.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.computations.load(Ordering::Relaxed),
            self.answered.load(Ordering::Relaxed),
        )
    }
}

#[derive(Debug, Default)]
struct Queue {
    waiting: Vec<Waiting>,
    /// Computations running (at most the coalescer's `parallel`).
    running: usize,
}

#[derive(Debug)]
struct Waiting {
    rows: Rows,
    reply: oneshot::Sender<Predictions>,
}

/// Why a request was not answered.
#[derive(Debug, thiserror::Error)]
pub enum CoalesceError {
    #[error("{found} input columns where the model has {expected}")]
    Columns { expected: usize, found: usize },
    #[error("the computation of the predictions stopped before answering (see the log)")]
    Lost,
}

impl Coalescer {
    /// A coalescer for `predictor`, if its rows are costly enough ([`FROM_WORK`]).
    pub fn for_predictor(predictor: &Arc<Predictor>) -> Option<Arc<Self>> {
        (predictor.work_per_row() >= FROM_WORK).then(|| {
            Arc::new(Self {
                predictor: Arc::clone(predictor),
                queue: Mutex::new(Queue::default()),
                parallel: std::thread::available_parallelism().map_or(2, usize::from),
            })
        })
    }

    /// The predictions for `rows` (at most [`MAX_REQUEST_ROWS`] of them is what pays), computed
    /// on `runtime`'s blocking pool under one of `cpu`'s permits, with those of every request
    /// that waits with it; the computations this request starts are counted in `tally`.
    pub async fn predict(
        self: &Arc<Self>,
        rows: Rows,
        runtime: &Handle,
        cpu: &Arc<Semaphore>,
        tally: &Arc<Tally>,
    ) -> Result<Predictions, CoalesceError> {
        let expected = self.predictor.basis().features;
        if rows.width() != expected {
            return Err(CoalesceError::Columns {
                expected,
                found: rows.width(),
            });
        }
        let (reply, answer) = oneshot::channel();
        let lead = {
            let mut queue = self.lock();
            queue.waiting.push(Waiting { rows, reply });
            let lead = queue.running < self.parallel;
            queue.running += usize::from(lead);
            lead
        };
        if lead {
            let (this, cpu, pool) = (Arc::clone(self), Arc::clone(cpu), runtime.clone());
            let tally = Arc::clone(tally);
            runtime.spawn(async move {
                // A closed semaphore (the process stopping) still lets the waiting be answered.
                let permit = cpu.acquire_owned().await.ok();
                let drained = pool.spawn_blocking(move || {
                    let _permit = permit;
                    this.drain(&tally);
                });
                if let Err(e) = drained.await {
                    tracing::error!(error = %e, "answering predictions together stopped");
                }
            });
        }
        answer.await.map_err(|_| CoalesceError::Lost)
    }

    /// Answers the waiting requests, as many rows at a time as [`MAX_ROWS`] allows, until none
    /// waits.
    fn drain(&self, tally: &Tally) {
        // Should a computation panic, the requests still waiting are not left waiting for good.
        let stop = Stop { coalescer: self };
        loop {
            let taken = {
                let mut queue = self.lock();
                if queue.waiting.is_empty() {
                    queue.running -= 1;
                    stop.forget();
                    return;
                }
                let mut rows = 0;
                let count = queue
                    .waiting
                    .iter()
                    .take_while(|w| {
                        rows += w.rows.rows();
                        rows <= MAX_ROWS
                    })
                    .count()
                    .max(1);
                queue.waiting.drain(..count).collect::<Vec<_>>()
            };
            self.answer(taken, tally);
        }
    }

    /// Predicts the rows of `taken` as one matrix and sends each request its own.
    fn answer(&self, taken: Vec<Waiting>, tally: &Tally) {
        let width = self.predictor.basis().features;
        let total: usize = taken.iter().map(|w| w.rows.rows()).sum();
        let mut values = Vec::with_capacity(total * width);
        for w in &taken {
            values.extend_from_slice(w.rows.values());
        }
        let x = MatRef::from_row_major_slice(&values, total, width);
        // The widths were checked when each request was queued.
        let Ok(all) = self.predictor.predict_each_row(x) else {
            return;
        };
        tally.computations.fetch_add(1, Ordering::Relaxed);
        tally
            .answered
            .fetch_add(taken.len() as u64, Ordering::Relaxed);
        let mut start = 0;
        for w in taken {
            let n = w.rows.rows();
            let own = Predictions {
                mean: all.mean.subrows(start, n).to_owned(),
                variance: all.variance.subrows(start, n).to_owned(),
            };
            start += n;
            // A request whose client has gone no longer waits for its answer.
            let _ = w.reply.send(own);
        }
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        // The queue is a list and a flag, consistent after any panic.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Counts a computation out if [`Coalescer::drain`] unwinds, and, were it the last, drops the
/// waiting requests' replies (each answers [`CoalesceError::Lost`]) rather than leave them
/// waiting for a computation that no request will start.
struct Stop<'a> {
    coalescer: &'a Coalescer,
}

impl Stop<'_> {
    fn forget(self) {
        std::mem::forget(self);
    }
}

impl Drop for Stop<'_> {
    fn drop(&mut self) {
        let mut queue = self.coalescer.lock();
        queue.running -= 1;
        if queue.running == 0 {
            queue.waiting.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use faer::Mat;

    use super::*;
    use crate::estimator::{
        Basis, BatchStatistics, ModelConfig, ModelState, PriorFamily, ReflectanceScale, Transform,
    };

    /// A 150-band, 20-output model under the smooth prior: triangular factors of 151 × 150 / 2
    /// entries, about 230,000 multiply-adds a row.
    fn wide_predictor() -> Arc<Predictor> {
        let (bands, n, m) = (150, 60, 20);
        let mut next = crate::folder::tests::uniform(3);
        let amounts: Vec<[f64; 2]> = (0..n).map(|_| [next(), next()]).collect();
        let x = Mat::from_fn(n, bands, |i, j| {
            let t = j as f64 / bands as f64;
            0.2 + amounts[i][0] * (-(t - 0.3).powi(2) / 0.01).exp()
                + amounts[i][1] * (-(t - 0.7).powi(2) / 0.02).exp()
        });
        let noise: Vec<f64> = (0..n * m).map(|_| next() - 0.5).collect();
        let y = Mat::from_fn(n, m, |i, k| {
            1.0 + amounts[i][k % 2] * (1 + k) as f64 + 0.01 * noise[i * m + k]
        });
        let basis = Basis::spectral(
            bands,
            ReflectanceScale::Fraction,
            bands,
            true,
            Transform::Identity,
        );
        let phi = basis.design(x.as_ref()).unwrap();
        let stats = BatchStatistics::from_design(phi.as_ref(), y.as_ref()).unwrap();
        let config = ModelConfig {
            prior: PriorFamily::Smooth,
            ..ModelConfig::new(basis, m)
        };
        Arc::new(Predictor::new(&ModelState::fit(&config, stats).unwrap()))
    }

    fn rows(n: usize, width: usize, offset: f64) -> Rows {
        let values = (0..n * width)
            .map(|i| 0.2 + 0.3 * ((i as f64 + offset) * 0.37).sin().abs())
            .collect();
        Rows::from_row_major(n, width, values)
    }

    /// Requests queued while no computation could run are answered together, each with what
    /// the predictor answers for its rows alone, to the bit.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn waiting_requests_are_answered_together_each_with_its_own_answer() {
        let predictor = wide_predictor();
        let coalescer = Coalescer::for_predictor(&predictor).expect("a wide predictor");
        let width = predictor.basis().features;
        // The only CPU permit is held until every request waits.
        let cpu = Arc::new(Semaphore::new(1));
        let tally = Arc::new(Tally::default());
        let held = Arc::clone(&cpu).acquire_owned().await.unwrap();
        let requests: Vec<usize> = (0..50).map(|i| 1 + i % MAX_REQUEST_ROWS).collect();
        let total: usize = requests.iter().sum();
        let tasks: Vec<_> = requests
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let (coalescer, cpu, tally) =
                    (Arc::clone(&coalescer), Arc::clone(&cpu), Arc::clone(&tally));
                tokio::spawn(async move {
                    coalescer
                        .predict(rows(n, width, i as f64), &Handle::current(), &cpu, &tally)
                        .await
                })
            })
            .collect();
        while coalescer.lock().waiting.len() < requests.len() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        drop(held);
        for (i, (task, &n)) in tasks.into_iter().zip(&requests).enumerate() {
            let together = task.await.unwrap().unwrap();
            let alone = predictor
                .predict(rows(n, width, i as f64).as_mat())
                .unwrap();
            assert_eq!(together.mean.nrows(), n);
            for r in 0..n {
                for k in 0..alone.mean.ncols() {
                    assert_eq!(
                        together.mean[(r, k)].to_bits(),
                        alone.mean[(r, k)].to_bits()
                    );
                    assert_eq!(
                        together.variance[(r, k)].to_bits(),
                        alone.variance[(r, k)].to_bits(),
                        "request {i}, row {r}, output {k}"
                    );
                }
            }
        }
        let (computations, answered) = tally.counts();
        assert_eq!(answered, requests.len() as u64);
        // Taken in order, as many as fit in MAX_ROWS rows: every computation but the last has
        // more than MAX_ROWS − MAX_REQUEST_ROWS rows.
        let most = total.div_ceil(MAX_ROWS - MAX_REQUEST_ROWS + 1) as u64;
        assert!(
            (total.div_ceil(MAX_ROWS) as u64..=most).contains(&computations),
            "{computations} computations for {total} rows"
        );
        assert_eq!(coalescer.lock().running, 0, "the computations ended");
    }

    /// A lone request is answered at once, and one with the wrong width is refused before it
    /// waits; a narrow model's predictor has no coalescer.
    #[tokio::test]
    async fn a_lone_request_is_answered_and_a_wrong_width_refused() {
        let predictor = wide_predictor();
        let coalescer = Coalescer::for_predictor(&predictor).expect("a wide predictor");
        let cpu = Arc::new(Semaphore::new(2));
        let tally = Arc::new(Tally::default());
        let width = predictor.basis().features;
        let one = coalescer
            .predict(rows(1, width, 0.0), &Handle::current(), &cpu, &tally)
            .await
            .unwrap();
        let alone = predictor.predict(rows(1, width, 0.0).as_mat()).unwrap();
        assert_eq!(
            one.variance[(0, 3)].to_bits(),
            alone.variance[(0, 3)].to_bits()
        );
        let wrong = coalescer
            .predict(rows(1, width - 1, 0.0), &Handle::current(), &cpu, &tally)
            .await;
        assert!(
            matches!(wrong, Err(CoalesceError::Columns { .. })),
            "{wrong:?}"
        );
        assert_eq!(tally.counts(), (1, 1));

        let narrow = Basis::new(4, true, Transform::Identity);
        let x = Mat::from_fn(20, 4, |i, j| ((i * 4 + j) as f64 * 0.7).sin());
        let y = Mat::from_fn(20, 1, |i, _| x[(i, 0)] + 0.1 * ((i as f64) * 1.3).cos());
        let phi = narrow.design(x.as_ref()).unwrap();
        let stats = BatchStatistics::from_design(phi.as_ref(), y.as_ref()).unwrap();
        let state = ModelState::fit(&ModelConfig::new(narrow, 1), stats).unwrap();
        assert!(Coalescer::for_predictor(&Arc::new(Predictor::new(&state))).is_none());
    }
}
