use faer::linalg::matmul::matmul;
use faer::{Accum, Mat, Par};
use mordant::estimator::{Basis, BatchStatistics, Transform};
use mordant::evaluate::{
    Split,
    dataset::{DYEING_FEATURE_PREFIXES, DYEING_OUTPUT_PREFIXES, Dataset},
};
use std::time::Instant;
fn main() {
    let f: Vec<String> = DYEING_FEATURE_PREFIXES
        .iter()
        .map(|s| s.to_string())
        .collect();
    let o: Vec<String> = DYEING_OUTPUT_PREFIXES
        .iter()
        .map(|s| s.to_string())
        .collect();
    let data = Dataset::from_csv("tests/data/dyeing/data.csv".as_ref(), &f, &o).unwrap();
    let split = Split::new(&data, 0);
    let basis = Basis::new(data.x.ncols(), true, Transform::Identity);
    let phi = basis.design(split.new_x.as_ref()).unwrap();
    let y = split.new_y.as_ref();
    let nz = phi
        .col_iter()
        .map(|c| c.iter().filter(|v| **v != 0.0).count())
        .collect::<Vec<_>>();
    println!(
        "phi density {:.3}, per col {:?}",
        nz.iter().sum::<usize>() as f64 / (phi.nrows() * phi.ncols()) as f64,
        nz
    );
    for _ in 0..3 {
        let t = Instant::now();
        for _ in 0..200 {
            std::hint::black_box(BatchStatistics::from_design(phi.as_ref(), y).unwrap());
        }
        let a = t.elapsed().as_secs_f64() / 200.0;
        let t = Instant::now();
        for _ in 0..200 {
            let mut b = Mat::<f64>::zeros(phi.ncols(), y.ncols());
            matmul(
                b.as_mut(),
                Accum::Replace,
                phi.transpose(),
                y,
                1.0,
                Par::Seq,
            );
            std::hint::black_box(b);
        }
        let d = t.elapsed().as_secs_f64() / 200.0;
        println!("stats {:.3} ms, dense B alone {:.3} ms", a * 1e3, d * 1e3);
    }
}
#[allow(dead_code)]
fn density() {}
