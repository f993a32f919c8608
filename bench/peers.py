"""The Python peers on the rows benches/peers.rs wrote, and the comparison table.

    python3 bench/peers.py DIR OUT.md

DIR holds the CSV files and mordant.json that `cargo bench --bench peers -- DIR` wrote. For
each problem (the dyeing data; a 31-band spectrum set, p = 32 with the intercept), it times:

* scikit-learn ARDRegression and BayesianRidge, one model per output: the first fit on the
  first-fit rows; the update as a refit on the first-fit rows and the 1,000 new rows (neither
  can learn incrementally);
* River BayesianLinearRegression, one model per output, with a constant feature for the
  intercept: the first fit as learn_many on the first-fit rows; the update as learn_many on
  the 1,000 new rows.

Every timing is repeated (min / median / max). Answers are checked where the models coincide
and compared where they do not; the script exits non-zero if a check fails.
"""

import copy
import json
import statistics
import sys
import time
import warnings

import numpy as np
import pandas as pd
import river
import sklearn
from river import linear_model as river_linear
from sklearn.linear_model import ARDRegression, BayesianRidge

warnings.filterwarnings("ignore")

DIR, OUT = sys.argv[1], sys.argv[2]
mordant = json.load(open(f"{DIR}/mordant.json"))
# Fewer repeats for the slowest peers; the median is what the ratios use.
REPEATS = {"ARDRegression": 3, "BayesianRidge": 7, "River": 7}


def load(name, part):
    x = np.loadtxt(f"{DIR}/{name}_{part}_x.csv", delimiter=",", ndmin=2)
    y = np.loadtxt(f"{DIR}/{name}_{part}_y.csv", delimiter=",", ndmin=2)
    return x, y


def timed(repeats, f, setup=lambda: None):
    """min, median, max seconds of `f(setup())` over `repeats` runs after one warm-up (setup
    untimed), and the last result."""
    result = f(setup())
    seconds = []
    for _ in range(repeats):
        arg = setup()
        start = time.perf_counter()
        result = f(arg)
        seconds.append(time.perf_counter() - start)
    return (min(seconds), statistics.median(seconds), max(seconds)), result


def sklearn_fit(cls, x, y):
    return [cls().fit(x, y[:, k]) for k in range(y.shape[1])]


def sklearn_predict(models, x):
    return np.column_stack([m.predict(x) for m in models])


def river_frame(x):
    frame = pd.DataFrame(x, columns=[f"f{j}" for j in range(x.shape[1])])
    frame["intercept"] = 1.0
    return frame


def river_learn(models, frame, y):
    for k, model in enumerate(models):
        model.learn_many(frame, pd.Series(y[:, k]))
    return models


def river_predict(models, frame):
    return np.column_stack([m.predict_many(frame).to_numpy() for m in models])


def rmse(a, b):
    return float(np.sqrt(np.mean((np.asarray(a) - np.asarray(b)) ** 2)))


def relative_difference(a, b, y):
    """RMS of a − b over the RMS spread of the probe targets."""
    return rmse(a, b) / max(float(np.std(y)), 1e-300)


rows, checks, accuracy, spread = [], [], [], []
failed = False
for name in ["dyeing", "spectrum"]:
    m = mordant[name]
    (x1, y1), (x2, y2), (xp, yp) = load(name, "first"), load(name, "update"), load(name, "probe")
    x12, y12 = np.vstack([x1, x2]), np.vstack([y1, y2])
    f1, f2, fp = river_frame(x1), river_frame(x2), river_frame(xp)
    label = f"{name} (n = {x1.shape[0]:,} + {x2.shape[0]:,}, p = {m['p']}, m = {m['m']})"
    times = {}
    preds = {"mordant": (np.array(m["predict_after_first_fit"]), np.array(m["predict_after_update"]))}
    for peer, cls in [("ARDRegression", ARDRegression), ("BayesianRidge", BayesianRidge)]:
        first_t, first = timed(REPEATS[peer], lambda _: sklearn_fit(cls, x1, y1))
        update_t, updated = timed(REPEATS[peer], lambda _: sklearn_fit(cls, x12, y12))
        times[peer] = {"first fit": first_t, "update": update_t}
        preds[peer] = (sklearn_predict(first, xp), sklearn_predict(updated, xp))
    fresh = lambda: [river_linear.BayesianLinearRegression() for _ in range(y1.shape[1])]
    first_t, river_first = timed(REPEATS["River"], lambda models: river_learn(models, f1, y1), fresh)
    first_preds = river_predict(river_first, fp)
    # Each update run starts from a copy of the first fit, made outside the timed region.
    update_t, river_updated = timed(
        REPEATS["River"], lambda models: river_learn(models, f2, y2),
        lambda: copy.deepcopy(river_first))
    times["River"] = {"first fit": first_t, "update": update_t}
    preds["River"] = (first_preds, river_predict(river_updated, fp))

    for task in ["first fit", "update"]:
        t = m["first_fit" if task == "first fit" else "update"]
        spread.append((name, task, "mordant", (t["min"], t["median"], t["max"])))
        for peer in ["ARDRegression", "BayesianRidge", "River"]:
            spread.append((name, task, peer, times[peer][task]))
        ours = t["median"]
        row = {"problem": label, "task": task, "mordant": ours}
        for peer in ["ARDRegression", "BayesianRidge", "River"]:
            row[peer] = times[peer][task][1]
        rows.append(row)
        if any(row[peer] <= ours for peer in ["ARDRegression", "BayesianRidge", "River"]):
            failed = True
    # Where the models coincide: River with alpha = beta = 1 is the exact posterior under one
    # fixed prior, which mordant computed from the same statistics.
    fixed = np.array(m["predict_fixed_prior_by_output"]).T
    river_vs_fixed = relative_difference(preds["River"][1], fixed, yp)
    checks.append((name, "River (alpha = beta = 1) vs mordant's posterior under that prior, "
                   "after both batches", river_vs_fixed, 1e-6))
    # Same model, same evidence maximisation, different details (sklearn centres the data
    # instead of an intercept weight, prunes at precision 1e4 and puts Gamma hyperpriors;
    # mordant keeps a noise floor and waits for 5 non-zero rows per output).
    ard = relative_difference(preds["mordant"][0], preds["ARDRegression"][0], yp)
    checks.append((name, "mordant's first fit vs ARDRegression (both ARD)", ard,
                   0.05 if name == "spectrum" else None))
    for method, (after_first, after_update) in preds.items():
        accuracy.append((name, method, rmse(after_first, yp), rmse(after_update, yp)))

fmt = lambda s: f"{s * 1e3:,.2f} ms" if s < 1 else f"{s:,.2f} s"
lines = [
    f"scikit-learn {sklearn.__version__}, River {river.__version__}, numpy {np.__version__}, "
    f"pandas {pd.__version__}; mordant {mordant['repeats']} runs, "
    f"ARDRegression {REPEATS['ARDRegression']}, BayesianRidge {REPEATS['BayesianRidge']}, "
    f"River {REPEATS['River']} (after a warm-up). Medians; the ratio is the peer's time over "
    "mordant's, measured in the same run.",
    "",
    "| problem | task | mordant | ARDRegression | BayesianRidge | River |",
    "|---|---|---|---|---|---|",
]
for r in rows:
    cells = [f"{fmt(r[p])} ({r[p] / r['mordant']:,.0f}×)" for p in ["ARDRegression", "BayesianRidge", "River"]]
    lines.append(f"| {r['problem']} | {r['task']} | {fmt(r['mordant'])} | " + " | ".join(cells) + " |")
lines += ["", "All runs, min / median / max:", "",
          "| problem | task | method | min | median | max |", "|---|---|---|---|---|---|"]
for name, task, method, (lo, med, hi) in spread:
    lines.append(f"| {name} | {task} | {method} | {fmt(lo)} | {fmt(med)} | {fmt(hi)} |")
lines += ["", "Answers:", "", "| problem | check | relative RMS difference | limit |", "|---|---|---|---|"]
for name, what, value, limit in checks:
    ok = limit is None or value <= limit
    failed |= not ok
    lines.append(f"| {name} | {what} | {value:.2e} | {'≤ %.0e' % limit if limit else 'reported'}"
                 f"{'' if ok else ' FAILED'} |")
lines += ["", "Held-out RMSE on the probe rows (after the first fit / after the update):", "",
          "| problem | method | after first fit | after update |", "|---|---|---|---|"]
for name, method, a, b in accuracy:
    lines.append(f"| {name} | {method} | {a:.4g} | {b:.4g} |")
text = "\n".join(lines) + "\n"
open(OUT, "w").write(text)
print(text)
if failed:
    sys.exit("peers: a check failed or a peer was not slower than mordant")
