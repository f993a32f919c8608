//! Reading an ingest body: a 1,000-row batch of 32 features and 3 outputs, as JSON and as CSV,
//! by the fast paths the service takes for plain bodies (`cargo bench --bench bodies`).
//!
//! The numbers are printed as Python's `repr` and Rust's `Display` print a double (the shortest
//! text that reads back to it, 16 or 17 significant digits for a uniform draw), and rounded to
//! four decimals, as a lab's instrument export might.

use criterion::{Criterion, criterion_group, criterion_main};
use mordant::domain::{ModelSpec, NewBatch};
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

criterion_group!(benches, bodies);
criterion_main!(benches);
