//! Reading an ingest body: a 1,000-row batch of 32 features and 3 outputs, as JSON and as CSV,
//! by the fast paths the service takes for plain bodies, and a 100-row batch of 700-band spectra
//! and 10 outputs by the fast path and by the full parse (`cargo bench --bench bodies`).
//!
//! The numbers are printed as Python's `repr` and Rust's `Display` print a double (the shortest
//! text that reads back to it, 16 or 17 significant digits for a uniform draw), and rounded to
//! four decimals, as a lab's instrument export might.

use criterion::{Criterion, criterion_group, criterion_main};
use mordant::domain::{Body, ModelSpec, NewBatch, row_fields};
use rand::{Rng, SeedableRng};

const ROWS: usize = 1_000;
const FEATURES: usize = 32;
const OUTPUTS: usize = 3;

fn spec() -> ModelSpec {
    let features: Vec<String> = (0..FEATURES)
        .map(|j| format!("R{}", 400 + 10 * j))
        .collect();
    ModelSpec::parse(&serde_json::json!({
        "name": "bodies", "features": features, "outputs": ["red", "yellow", "blue"]
    }))
    .expect("spec")
}

/// The rows' cells as text, `FEATURES + OUTPUTS` per row.
fn cells(format: impl Fn(f64) -> String) -> Vec<Vec<String>> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(6);
    (0..ROWS)
        .map(|_| {
            (0..FEATURES + OUTPUTS)
                .map(|j| {
                    let v: f64 = rng.random();
                    format(if j < FEATURES { v } else { 4.0 * v - 2.0 })
                })
                .collect()
        })
        .collect()
}

fn json(cells: &[Vec<String>]) -> Vec<u8> {
    let part = |range: std::ops::Range<usize>| {
        let rows: Vec<String> = cells
            .iter()
            .map(|row| format!("[{}]", row[range.clone()].join(",")))
            .collect();
        format!("[{}]", rows.join(","))
    };
    format!(
        "{{\"x\":{},\"y\":{}}}",
        part(0..FEATURES),
        part(FEATURES..FEATURES + OUTPUTS)
    )
    .into_bytes()
}

fn csv(cells: &[Vec<String>]) -> Vec<u8> {
    let mut header: Vec<String> = (0..FEATURES)
        .map(|j| format!("R{}", 400 + 10 * j))
        .collect();
    header.extend(["red", "yellow", "blue"].map(String::from));
    let mut text = header.join(",") + "\n";
    for row in cells {
        text += &row.join(",");
        text.push('\n');
    }
    text.into_bytes()
}

fn bodies(c: &mut Criterion) {
    let spec = spec();
    let shortest = cells(|v| format!("{v}"));
    let four = cells(|v| format!("{v:.4}"));
    let mut group = c.benchmark_group("ingest body, 1,000 rows of 35 numbers");
    for (name, cells) in [("shortest", &shortest), ("four decimals", &four)] {
        let body = json(cells);
        assert!(NewBatch::parse_fast(&body, &spec, None, ROWS).is_some());
        group.bench_function(format!("JSON, {name}"), |b| {
            b.iter(|| NewBatch::parse_fast(&body, &spec, None, ROWS))
        });
        let body = csv(cells);
        assert!(NewBatch::parse_csv(&body, &spec, None, ROWS).is_ok());
        group.bench_function(format!("CSV, {name}"), |b| {
            b.iter(|| NewBatch::parse_csv(&body, &spec, None, ROWS))
        });
    }
    group.finish();
}

const SPECTRA: usize = 100;
const BANDS: usize = 700;
const DYES: usize = 10;

/// A batch of `SPECTRA` reflectance spectra (400 nm on, 1 nm apart) and `DYES` outputs, the
/// numbers at four decimals; and its model.
fn spectral_batch() -> (ModelSpec, Vec<u8>) {
    let outputs: Vec<String> = (0..DYES).map(|k| format!("dye{k}")).collect();
    let spec = ModelSpec::parse(&serde_json::json!({
        "name": "wide",
        "spectrum": {"start_nm": 400, "interval_nm": 1, "count": BANDS, "scale": "fraction"},
        "outputs": outputs
    }))
    .expect("spec");
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut table = |width: usize| {
        let rows: Vec<String> = (0..SPECTRA)
            .map(|_| {
                let row: Vec<String> = (0..width)
                    .map(|_| format!("{:.4}", rng.random::<f64>()))
                    .collect();
                format!("[{}]", row.join(","))
            })
            .collect();
        format!("[{}]", rows.join(","))
    };
    let values = table(BANDS);
    let y = table(DYES);
    let body = format!(
        "{{\"spectra\":{{\"start_nm\":400,\"interval_nm\":1,\"values\":{values}}},\"y\":{y}}}"
    );
    (spec, body.into_bytes())
}

fn spectral(c: &mut Criterion) {
    let (spec, body) = spectral_batch();
    let full = || {
        let read = Body::parse(&body, &row_fields(&spec), SPECTRA).expect("a valid body");
        NewBatch::parse(read, &spec, None)
    };
    assert!(NewBatch::parse_fast(&body, &spec, None, SPECTRA).is_some());
    assert!(full().is_ok());
    let mut group = c.benchmark_group("ingest body, 100 spectra of 700 bands and 10 outputs");
    group.bench_function("JSON, fast path", |b| {
        b.iter(|| NewBatch::parse_fast(&body, &spec, None, SPECTRA))
    });
    group.bench_function("JSON, full parse", |b| b.iter(full));
    group.finish();
}

criterion_group!(benches, bodies, spectral);
criterion_main!(benches);
