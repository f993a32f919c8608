"""Where mordant's squared error on the dyeing data exceeds BayesianRidge's, dye by dye
(ACCURACY.md, "Tried and not adopted: the dyeing data's last 2 %").

    python3 bench/dyeing_gap.py [--trials 20] [--bin PATH] [--spec JSON] [--top 12]

mordant is trained through its HTTP API on the paper protocol's splits (bench/accuracy.py's:
first stage, then the second as one more batch), with the default model spec and named
features, plus whatever `--spec` adds (for example '{"update": "refit"}'); BayesianRidge is
fitted per dye on both stages' rows, as in bench/accuracy. Printed: both RMSEPs and their ratio,
R² (uniform and over the dyes present, means over the trials), and the dyes whose summed squared
error over the trials differs most, each split by whether the test row's lab dip uses that dye.
"""
import argparse
import json
import math
import os
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import accuracy as A  # noqa: E402

LAB_PREFIX = "小缸配方组合"


def mordant_means(binary, ds, splits, extra):
    """mordant's test means, one array per split."""
    service = A.Service(binary)
    try:
        return [A.run_mordant(service, ds, "named", split, "gap", False, 600, extra)[0] for split in splits]
    finally:
        service.stop()


def bayesian_ridge_means(ds, splits):
    from sklearn.linear_model import BayesianRidge

    means = []
    for split in splits:
        train = A.train_rows(split)
        mean = np.zeros((len(split["test"]), ds.y.shape[1]))
        for k in range(ds.y.shape[1]):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                mean[:, k] = BayesianRidge().fit(ds.x[train], ds.y[train, k]).predict(ds.x[split["test"]])
        means.append(mean)
    return means


def lab_column(features, output):
    """The feature holding the lab dip's dose of the output's dye, if any."""
    code = output[len(A.DYEING_OUTPUT_PREFIX):]
    return next((j for j, c in enumerate(features) if c.startswith(LAB_PREFIX) and c.endswith(code)), None)


def main():
    parser = argparse.ArgumentParser(prog="bench/dyeing_gap.py")
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--bin", default=os.path.join(A.ROOT, "target/release/mordant"))
    parser.add_argument("--spec", default="{}", help="JSON merged into the model spec")
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()

    import pandas as pd

    ds = A.load_dyeing(None)
    features = [c for c in pd.read_csv(A.DYEING_CSV, encoding="utf-8-sig", nrows=0).columns
                if c.startswith(A.DYEING_FEATURE_PREFIXES)]
    splits = A.paper_splits(len(ds.x), args.trials)
    methods = {"mordant": mordant_means(args.bin, ds, splits, json.loads(args.spec)),
               "BayesianRidge": bayesian_ridge_means(ds, splits)}

    sse = {}
    for method, means in methods.items():
        scores = [A.split_metrics(ds.y[s["test"]], m, None) for s, m in zip(splits, means)]
        rmsep = math.sqrt(np.mean([s["mse"] for s in scores]))
        print(f"{method}: RMSEP {rmsep:.6f}, R² {np.mean([s['r2'] for s in scores]):.4f}, "
              f"over the dyes present {np.mean([s['r2_present'] for s in scores]):.4f}")
        per = np.zeros((ds.y.shape[1], 2))  # [dye, (lab dip uses it, does not)]
        for split, mean in zip(splits, means):
            truth = ds.y[split["test"]]
            for k in range(ds.y.shape[1]):
                j = lab_column(features, ds.outputs[k])
                uses = ds.x[split["test"], j] != 0 if j is not None else np.zeros(len(truth), bool)
                error = (truth[:, k] - mean[:, k]) ** 2
                per[k] += [error[uses].sum(), error[~uses].sum()]
        sse[method] = per
        sse[method + " rmsep"] = rmsep
    print(f"mordant / BayesianRidge: {sse['mordant rmsep'] / sse['BayesianRidge rmsep']:.4f}")

    gap = sse["mordant"].sum(1) - sse["BayesianRidge"].sum(1)
    print(f"summed squared error over {args.trials} trials: mordant {sse['mordant'].sum():.1f}, "
          f"BayesianRidge {sse['BayesianRidge'].sum():.1f}")
    print("| dye | informative rows (all data) | mordant: lab dip uses it / not | BayesianRidge: uses / not | difference |")
    print("| --- | --- | --- | --- | --- |")
    for k in np.argsort(-np.abs(gap))[:args.top]:
        m, b = sse["mordant"][k], sse["BayesianRidge"][k]
        print(f"| {ds.outputs[k][len(A.DYEING_OUTPUT_PREFIX):]} | {int((ds.y[:, k] != 0).sum())} | "
              f"{m[0]:.2f} / {m[1]:.2f} | {b[0]:.2f} / {b[1]:.2f} | {gap[k]:+.2f} |")


if __name__ == "__main__":
    main()
