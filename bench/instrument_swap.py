"""An instrument replaced with an overlap, on the simulator's lab dips: mordant's transfer map
against the chemometric standard on the same rows.

    python3 bench/instrument_swap.py [--bin PATH] [--seeds N] [--transfer 10,30] [--out FILE.md]

Per seed, `mordant simulate --transfer-study` (protocol in
`crates/lab/src/simulate/transfer.rs`) trains the old model on `--train-rows` lab dips read by
the reference instrument, learns the map from the next T rows read by both instruments and the
new instrument's own model from the same T rows, and scores the following `--test-rows` rows
read by the new instrument (the simulator's swap: a 3 nm shift and a gain of 0.98). This script
writes the same rows with `mordant simulate` (the same seed, the model's grid as the
instrument's, once without a scenario and once with the swap from row 0: one sample per row,
read by each instrument) and fits the peers on them:

* PLS + PDS: PLS (components by 5-fold CV) on the calibration rows; piecewise direct
  standardisation learnt from the T pairs (per old band, a local principal-component regression
  on the new bands around it; window and components by leave-one-out reconstruction error on
  the pairs), the new readings standardised before PLS predicts;
* PLS and BayesianRidge refitted on both instruments' rows (the calibration rows and the T new
  ones).

Every method reads the same inputs: the spectrum through the model's transform (Saunderson's
surface, k1 = 0.04, k2 = 0.6, then Kubelka–Munk, as `mordant simulate`'s realistic world and its
model) and the fabric indicators. The score is the concentration RMSE over every test row and
dye (% owf), pooled over the seeds.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import accuracy  # noqa: E402  (PLS with CV components, the report writer)
from pds import pds_by_loo  # noqa: E402

ROOT = accuracy.ROOT
GRID = ("400", "10", "31")
K1, K2 = 0.04, 0.6


def simulate(binary, *args):
    done = subprocess.run([binary, "simulate", *args], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"mordant simulate {' '.join(args)} failed:\n{done.stderr}")
    return done.stdout


def read_rows(path):
    import pandas as pd

    frame = pd.read_csv(path)
    bands = [c for c in frame.columns if c.endswith("nm")]
    first = frame.columns.get_loc(bands[0])
    fabrics = list(frame.columns[:first])
    dyes = list(frame.columns[first + len(bands):])
    return frame[fabrics].to_numpy(float), frame[bands].to_numpy(float), frame[dyes].to_numpy(float)


def ks(reflectance_percent):
    """Saunderson's inverse, then Kubelka–Munk: the model's transform."""
    r = reflectance_percent / 100.0
    body = np.clip((r - K1) / (1 - K1 - K2 + K2 * r), 1e-3, 1.0)
    return (1 - body) ** 2 / (2 * body)


def bayesian_ridge(x, y, x_test):
    from sklearn.linear_model import BayesianRidge

    out = np.zeros((len(x_test), y.shape[1]))
    for k in range(y.shape[1]):
        out[:, k] = y[0, k] if np.ptp(y[:, k]) == 0 else BayesianRidge().fit(x, y[:, k]).predict(x_test)
    return out


def one_seed(binary, seed, transfer, args, directory):
    report = json.loads(simulate(binary, "--transfer-study", "--json", "--seed", str(seed),
                                 "--stream-rows", str(args.stream_rows),
                                 "--transfer-rows", str(transfer), "--train-rows", str(args.train_rows),
                                 "--test-rows", str(args.test_rows)))
    rows = str(args.train_rows + transfer + args.test_rows)
    grid = ["--start-nm", GRID[0], "--interval-nm", GRID[1], "--count", GRID[2]]
    old_csv, new_csv = (os.path.join(directory, f"{seed}-{name}.csv") for name in ("old", "new"))
    simulate(binary, "--rows", rows, "--seed", str(seed), "--scenario", "none", *grid, "--out", old_csv)
    simulate(binary, "--rows", rows, "--seed", str(seed), "--scenario", "instrument_swap", "--drift-at", "0",
             *grid, "--out", new_csv)
    fabrics, old_r, dyes = read_rows(old_csv)
    _, new_r, _ = read_rows(new_csv)
    # The CSV rounds to 4 decimals: the sums of the same readings agree to that.
    for readings, study in zip((old_r, new_r), report["reading_sums"]):
        if abs(readings.sum() - study) > 5e-5 * readings.size + 1e-9 * abs(study):
            sys.exit(f"seed {seed}: the CSV's rows are not the study's ({readings.sum()} against {study})")
    c, t = args.train_rows, transfer
    cal, pairs, test = slice(0, c), slice(c, c + t), slice(c + t, None)
    inputs = lambda r, rows: np.hstack([ks(r[rows]), fabrics[rows]])  # noqa: E731
    truth = dyes[test]
    errors = {}
    bands = np.arange(new_r.shape[1])
    standardise, chosen = pds_by_loo(new_r[pairs], old_r[pairs], bands, bands)
    standardised = np.hstack([ks(standardise(new_r[test])), fabrics[test]])
    n = len(truth)
    mean, _, _ = accuracy.fit_pls(inputs(old_r, cal), dyes[cal],
                                  np.vstack([standardised, inputs(new_r, test), inputs(old_r, test)]))
    errors["PLS + PDS (from the T pairs)"] = mean[:n] - truth
    errors["PLS, the new readings as they are"] = mean[n:2 * n] - truth
    errors["PLS, the old instrument's readings (no swap)"] = mean[2 * n:] - truth
    both_x = np.vstack([inputs(old_r, cal), inputs(new_r, pairs)])
    both_y = np.vstack([dyes[cal], dyes[pairs]])
    errors["PLS refitted on both instruments' rows"] = accuracy.fit_pls(both_x, both_y, inputs(new_r, test))[0] - truth
    errors["BayesianRidge refitted on both instruments' rows"] = bayesian_ridge(both_x, both_y, inputs(new_r, test)) - truth
    return report, errors, chosen


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", default=os.path.join(ROOT, "target/release/mordant"))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--transfer", default="10,30")
    parser.add_argument("--train-rows", type=int, default=1000)
    parser.add_argument("--test-rows", type=int, default=500)
    parser.add_argument("--stream-rows", type=int, default=300)
    parser.add_argument("--out", default=os.path.join(ROOT, "target/bench/instrument_swap.md"))
    args = parser.parse_args(argv)
    lines = ["# An instrument replaced with an overlap (simulator)\n",
             f"`python3 bench/instrument_swap.py --seeds {args.seeds} --transfer {args.transfer} "
             f"--train-rows {args.train_rows} --test-rows {args.test_rows}`; binary {args.bin}. "
             "Concentration RMSE (% owf) over every test row and dye, pooled over the seeds; "
             "mordant's 95 % coverage in brackets.\n"]
    with tempfile.TemporaryDirectory() as directory:
        for transfer in [int(t) for t in args.transfer.split(",")]:
            squared, counts, coverage, windows, stood = {}, {}, {}, [], []
            for seed in range(args.seeds):
                report, errors, chosen = one_seed(args.bin, seed, transfer, args, directory)
                windows.append((report["map_window"], chosen))
                cells = args.test_rows * len(errors[next(iter(errors))][0])
                scored = [("mordant: ", m) for m in report["methods"]] + [
                    (f"mordant, after {args.stream_rows} more new rows: ", m) for m in report["after_stream"]]
                stood.append(report["own_stood_after"])
                for prefix, m in scored:
                    name = prefix + m["method"]
                    squared[name] = squared.get(name, 0.0) + m["concentration_rmse"] ** 2 * cells
                    counts[name] = counts.get(name, 0) + cells
                    coverage.setdefault(name, []).append(m["coverage_95"])
                for name, e in errors.items():
                    squared[name] = squared.get(name, 0.0) + float(np.sum(e ** 2))
                    counts[name] = counts.get(name, 0) + e.size
            lines.append(f"\n## T = {transfer} rows read by both instruments\n")
            lines.append("| method | concentration RMSE |\n| --- | --- |")
            for name in sorted(squared, key=lambda n: squared[n] / counts[n]):
                rmse = np.sqrt(squared[name] / counts[name])
                cover = f" ({np.mean(coverage[name]):.3f})" if name in coverage else ""
                lines.append(f"| {name} | {rmse:.5f}{cover} |")
            lines.append(f"\nThe map's window (bands each side) per seed, and PDS's (window, components): {windows}")
            lines.append(f"\nStream rows after which the new instrument's own model stood alone, per seed: {stood}")
    accuracy.write_report(args.out, lines)


if __name__ == "__main__":
    main(sys.argv[1:])
