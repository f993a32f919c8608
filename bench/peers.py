"""mordant against its Python peers on byte-identical rows (`bench/peers` runs every step).

    python3 bench/peers.py data DIR                     # writes the rows of the problems
    python3 bench/peers.py compare DIR OUT.md [REPEATS] # times the peers, checks, writes OUT.md

`data` writes, for each problem, `{name}_{first,update,probe}.csv`: a header `x0,…,y0,…` and
the rows, every number in its shortest round-trip form, so that `benches/peers.rs` (which reads
them with `Dataset::from_csv`) and numpy hold the same doubles.

* dyeing: tests/data/dyeing/data.csv, features and outputs chosen by the column prefixes of
  `crates/lab/src/evaluate/dataset.rs` (125 features, 82 outputs); first fit on rows 0..1543, the update
  on the next 1,000 (1543..2543), the probe on the remaining 671 (never learnt).
* spectrum: 31 bands of reflectance R uniform in [0.05, 0.95] as Kubelka–Munk values
  (1 − R)² / 2R (the space the linear model uses, so mordant fits it with Transform::Identity),
  three outputs, each a sparse combination of a quarter of the bands plus an intercept and
  Gaussian noise; numpy's PCG64 with seed 31; 2,000 + 1,000 rows, 1,000 probe rows.
* wide: a 700-channel NIR-like spectrum (four absorbers, each a Gaussian band on a baseline of
  0.3, plus uniform noise of ±0.002 per channel, as `benches/estimator.rs`'s wide model), ten
  outputs mixing the absorbers' amounts; seed 700; 200 + 100 rows, 200 probe rows. mordant
  declares the spectrum, so its default prior weighs ridge against the smooth prior.

`compare` reads `DIR/mordant.json` (written by `cargo bench --bench peers -- DIR`) and times,
REPEATS times after one warm-up (min / median / max):

* scikit-learn ARDRegression and BayesianRidge, one model per output: the first fit on the
  first-fit rows; the update as a refit on the first-fit rows and the new rows (neither
  learns incrementally);
* on the wide problem, BayesianRidge and PLSRegression with its components chosen by 5-fold
  cross-validation (1 to 20, as `bench/accuracy` chooses them), refitted the same way; ARD
  and River, which keep a 700 × 700 matrix per output, are left out there;
* River BayesianLinearRegression, one model per output, with a constant feature for the
  intercept: the first fit as learn_many on the first-fit rows; the update as learn_many on the
  1,000 new rows, from a copy of the first fit made outside the timed region.

It checks the answers where the models coincide, writes the tables to OUT.md, prints them, and
exits non-zero if a check fails or a peer is not slower than mordant on some row.
"""

import copy
import csv
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import warnings

import numpy as np

# The column prefixes of crates/lab/src/evaluate/dataset.rs (DYEING_FEATURE_PREFIXES, DYEING_OUTPUT_PREFIXES).
DYEING_FEATURE_PREFIXES = ["小缸面料大类", "小缸光谱", "小缸配方组合"]
DYEING_OUTPUT_PREFIXES = ["大缸物料代码"]
DYEING_FIRST, UPDATE_ROWS = 1543, 1000
SPECTRUM_SEED, SPECTRUM_BANDS, SPECTRUM_OUTPUTS = 31, 31, 3
WIDE_SEED, WIDE_BANDS, WIDE_OUTPUTS, WIDE_ROWS = 700, 700, 10, (200, 100, 200)
PROBLEMS = ["dyeing", "spectrum", "wide"]
# The peers of each problem, and every table's columns.
PEERS_OF = {"dyeing": ["ARDRegression", "BayesianRidge", "River"],
            "spectrum": ["ARDRegression", "BayesianRidge", "River"],
            "wide": ["BayesianRidge", "PLS"]}
PEERS = ["ARDRegression", "BayesianRidge", "River", "PLS"]
UPDATE_ROWS_OF = {"dyeing": 1000, "spectrum": 1000, "wide": WIDE_ROWS[1]}
TASKS = [("first fit", "first_fit"), ("update", "update")]

# Where the answers are checked (see `limits_text` below for why these values).
ARD_LIMIT = 0.05  # mordant's first fit vs ARDRegression: RMS difference / RMS spread of y
EXACT_LIMIT = 1e-8  # River vs mordant's posterior under River's prior, the same formula


# ---------------------------------------------------------------------------------------------
# data


def write_part(path, x, y):
    with open(path, "w", newline="") as f:
        f.write(",".join([f"x{j}" for j in range(x.shape[1])] + [f"y{k}" for k in range(y.shape[1])]))
        f.write("\n")
        for xr, yr in zip(x.tolist(), y.tolist()):
            # repr is the shortest text that reads back to the same double.
            f.write(",".join(map(repr, xr + yr)))
            f.write("\n")


def write_problem(directory, name, rows):
    for part, (x, y) in zip(["first", "update", "probe"], rows):
        write_part(os.path.join(directory, f"{name}_{part}.csv"), x, y)


def dyeing_rows(root):
    with open(os.path.join(root, "tests/data/dyeing/data.csv"), encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(f)
        header = [h.lstrip("\ufeff") for h in next(reader)]
        records = list(reader)
    pick = lambda prefixes: [i for i, h in enumerate(header) if any(h.startswith(p) for p in prefixes)]
    fx, fy = pick(DYEING_FEATURE_PREFIXES), pick(DYEING_OUTPUT_PREFIXES)
    x = np.array([[float(r[i].strip()) for i in fx] for r in records])
    y = np.array([[float(r[i].strip()) for i in fy] for r in records])
    a, b = DYEING_FIRST, DYEING_FIRST + UPDATE_ROWS
    return [(x[:a], y[:a]), (x[a:b], y[a:b]), (x[b:], y[b:])]


def spectrum_rows():
    rng = np.random.Generator(np.random.PCG64(SPECTRUM_SEED))
    n = 2000 + UPDATE_ROWS + 1000
    reflectance = rng.uniform(0.05, 0.95, size=(n, SPECTRUM_BANDS))
    x = (1.0 - reflectance) ** 2 / (2.0 * reflectance)
    w = np.array([[0.3 + 0.1 * k if (j + k) % 4 == 0 else 0.0 for k in range(SPECTRUM_OUTPUTS)]
                  for j in range(SPECTRUM_BANDS)])
    intercept = np.array([0.5, -0.2, 0.1])
    y = x @ w + intercept + rng.normal(0.0, 0.05, size=(n, SPECTRUM_OUTPUTS))
    a, b = 2000, 2000 + UPDATE_ROWS
    return [(x[:a], y[:a]), (x[a:b], y[a:b]), (x[b:], y[b:])]


def wide_rows():
    rng = np.random.Generator(np.random.PCG64(WIDE_SEED))
    n = sum(WIDE_ROWS)
    amounts = rng.uniform(0.0, 1.0, size=(n, 4))
    t = np.arange(WIDE_BANDS) / WIDE_BANDS
    bands = np.array([np.exp(-((t - c) ** 2) / 0.004) for c in [0.2, 0.45, 0.6, 0.85]])
    x = 0.3 + amounts @ bands + rng.uniform(-0.002, 0.002, size=(n, WIDE_BANDS))
    y = np.column_stack([1.0 + amounts[:, k % 3] - 0.5 * amounts[:, 3] * (1 + k // 3)
                         for k in range(WIDE_OUTPUTS)]) + rng.uniform(-0.01, 0.01, size=(n, WIDE_OUTPUTS))
    a, b = WIDE_ROWS[0], WIDE_ROWS[0] + WIDE_ROWS[1]
    return [(x[:a], y[:a]), (x[a:b], y[a:b]), (x[b:], y[b:])]


def cmd_data(directory):
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    os.makedirs(directory, exist_ok=True)
    write_problem(directory, "dyeing", dyeing_rows(root))
    write_problem(directory, "spectrum", spectrum_rows())
    write_problem(directory, "wide", wide_rows())
    print(f"peers: wrote the rows of {', '.join(PROBLEMS)} to {directory}", file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# compare


def load(directory, name, part):
    data = np.loadtxt(os.path.join(directory, f"{name}_{part}.csv"), delimiter=",", skiprows=1, ndmin=2)
    with open(os.path.join(directory, f"{name}_{part}.csv")) as f:
        d = sum(1 for h in f.readline().strip().split(",") if h.startswith("x"))
    return data[:, :d], data[:, d:]


def timed(repeats, f, setup=lambda: None):
    """min, median, max seconds of `f(setup())` over `repeats` runs after one warm-up run (setup
    untimed), and the last result."""
    result = f(setup())
    seconds = []
    for _ in range(repeats):
        arg = setup()
        start = time.perf_counter()
        result = f(arg)
        seconds.append(time.perf_counter() - start)
    return (min(seconds), statistics.median(seconds), max(seconds)), result


def rmse(a, b):
    return float(np.sqrt(np.mean((np.asarray(a) - np.asarray(b)) ** 2)))


def spread(y):
    """RMS of y around each output's mean: what a model that predicts the means misses by."""
    return float(np.sqrt(np.mean((y - y.mean(axis=0)) ** 2)))


def cmd_compare(directory, out, repeats):
    import pandas as pd
    import river
    import scipy
    import sklearn
    from river import linear_model as river_linear
    from sklearn.cross_decomposition import PLSRegression
    from sklearn.linear_model import ARDRegression, BayesianRidge
    from sklearn.model_selection import GridSearchCV, KFold

    # ARDRegression and BayesianRidge warn when they stop at max_iter; the iteration counts
    # are reported instead.
    warnings.filterwarnings("ignore")
    mordant = json.load(open(os.path.join(directory, "mordant.json")))
    if mordant["repeats"] != repeats:
        sys.exit(f"peers: mordant ran {mordant['repeats']} times, the peers would run {repeats}")

    def sklearn_fit(cls, x, y, init=None):
        models = []
        for k in range(y.shape[1]):
            kwargs = {} if init is None else {"alpha_init": init[k].alpha_, "lambda_init": init[k].lambda_}
            models.append(cls(**kwargs).fit(x, y[:, k]))
        return models

    def sklearn_predict(models, x):
        return np.column_stack([m.predict(x) for m in models])

    def pls_fit(x, y):
        # As bench/accuracy: one PLS of every output, its components by 5-fold CV.
        folds = KFold(n_splits=5, shuffle=True, random_state=0)
        top = max(1, min(20, len(x) - 2, min(len(tr) for tr, _ in folds.split(x)), x.shape[1]))
        return GridSearchCV(PLSRegression(), {"n_components": list(range(1, top + 1))}, cv=folds,
                            scoring="neg_mean_squared_error").fit(x, y)

    def pls_predict(search, x):
        return np.asarray(search.predict(x)).reshape(len(x), -1)

    def river_frame(x):
        frame = pd.DataFrame(x, columns=[f"x{j}" for j in range(x.shape[1])])
        frame["intercept"] = 1.0
        return frame

    def river_learn(models, frame, ys):
        for model, y in zip(models, ys):
            model.learn_many(frame, y)
        return models

    def river_predict(models, frame):
        return np.column_stack([m.predict_many(frame).to_numpy() for m in models])

    rows, spreads, checks, accuracy, iterations, components = [], [], [], [], [], []
    failed = []
    for name in PROBLEMS:
        ours = mordant["problems"][name]
        (x1, y1), (x2, y2), (xp, yp) = (load(directory, name, part) for part in ["first", "update", "probe"])
        x12, y12 = np.vstack([x1, x2]), np.vstack([y1, y2])
        if x2.shape[0] != UPDATE_ROWS_OF[name] or x1.shape[0] != ours["rows"]["first"]:
            sys.exit(f"peers: {name}: the rows differ from the ones mordant read")
        label = f"{name} (p = {ours['p']}, m = {ours['m']}; {x1.shape[0]:,} + {x2.shape[0]:,} rows)"
        times, preds = {}, {}
        peers = PEERS_OF[name]
        # scikit-learn: one model per output; the update is a refit on all rows. BayesianRidge
        # starts its refit from the first fit's (alpha, lambda), which only helps it.
        fitted = {}
        if "ARDRegression" in peers:
            ard_t1, ard1 = timed(repeats, lambda _: sklearn_fit(ARDRegression, x1, y1))
            ard_t2, ard2 = timed(repeats, lambda _: sklearn_fit(ARDRegression, x12, y12))
            times["ARDRegression"] = {"first fit": ard_t1, "update": ard_t2}
            preds["ARDRegression"] = (sklearn_predict(ard1, xp), sklearn_predict(ard2, xp))
            fitted["ARDRegression"] = (ard1, ard2)
        br_t1, br1 = timed(repeats, lambda _: sklearn_fit(BayesianRidge, x1, y1))
        br_t2, br2 = timed(repeats, lambda _: sklearn_fit(BayesianRidge, x12, y12, init=br1))
        times["BayesianRidge"] = {"first fit": br_t1, "update": br_t2}
        preds["BayesianRidge"] = (sklearn_predict(br1, xp), sklearn_predict(br2, xp))
        fitted["BayesianRidge"] = (br1, br2)
        for peer, (a, b) in fitted.items():
            counts = [getattr(model, "n_iter_", None) for model in a + b]
            if all(c is not None for c in counts):
                iterations.append((name, peer, statistics.median(counts), max(counts)))
        if "PLS" in peers:
            pls_t1, pls1 = timed(repeats, lambda _: pls_fit(x1, y1))
            pls_t2, pls2 = timed(repeats, lambda _: pls_fit(x12, y12))
            times["PLS"] = {"first fit": pls_t1, "update": pls_t2}
            preds["PLS"] = (pls_predict(pls1, xp), pls_predict(pls2, xp))
            components.append((name, int(pls1.best_params_["n_components"]),
                               int(pls2.best_params_["n_components"])))
        if "River" in peers:
            # River: frames and per-output series made outside the timed region.
            f1, f2, fp = river_frame(x1), river_frame(x2), river_frame(xp)
            s1 = [pd.Series(y1[:, k]) for k in range(y1.shape[1])]
            s2 = [pd.Series(y2[:, k]) for k in range(y2.shape[1])]
            fresh = lambda: [river_linear.BayesianLinearRegression() for _ in s1]
            river_t1, river1 = timed(repeats, lambda models: river_learn(models, f1, s1), fresh)
            river_first_preds = river_predict(river1, fp)
            river_t2, river2 = timed(repeats, lambda models: river_learn(models, f2, s2),
                                     lambda: copy.deepcopy(river1))
            times["River"] = {"first fit": river_t1, "update": river_t2}
            preds["River"] = (river_first_preds, river_predict(river2, fp))
        preds = {"mordant": (np.array(ours["predict_after_first_fit"]),
                             np.array(ours["predict_after_update"])), **preds}

        for task, key in TASKS:
            t = ours[key]
            spreads.append((name, task, "mordant", (t["min"], t["median"], t["max"])))
            row = {"problem": label, "task": task, "mordant": t["median"]}
            for peer in peers:
                spreads.append((name, task, peer, times[peer][task]))
                row[peer] = times[peer][task][1]
                if row[peer] <= t["median"]:
                    failed.append(f"{name} {task}: {peer} is not slower than mordant")
            rows.append(row)

        y_spread = spread(yp)
        if "River" in peers:
            # River (alpha = beta = 1: prior variance 1 for every weight, noise variance 1) and
            # mordant's posterior under that prior from the same rows: the same numbers.
            for when, which, river_pred in [("first-fit rows", "predict_fixed_prior_first", preds["River"][0]),
                                            ("all rows", "predict_fixed_prior_all", preds["River"][1])]:
                value = rmse(river_pred, np.array(ours[which])) / y_spread
                checks.append((name, f"River (alpha = beta = 1) vs mordant's posterior under that prior, {when}",
                               value, EXACT_LIMIT))
        if "ARDRegression" in peers:
            # Same model (ARD by evidence maximisation), different details: see `limits_text`.
            # On the dyeing data mordant's documented assumptions for sparse dyes decide much of
            # the answer, so there the difference is reported, not checked.
            value = rmse(preds["mordant"][0], preds["ARDRegression"][0]) / y_spread
            checks.append((name, "mordant's first fit vs ARDRegression's", value,
                           ARD_LIMIT if name == "spectrum" else None))
            value = rmse(preds["mordant"][1], preds["ARDRegression"][1]) / y_spread
            checks.append((name, "mordant's one-step update vs ARDRegression's refit on all rows", value, None))
        # Coefficients where they are identified (the dyeing design has collinear one-hot
        # columns, so only its predictions are comparable).
        if name == "spectrum":
            ours_w = np.array(ours["coefficients_after_first_fit"])  # m × p, intercept last
            ard_w = np.array([np.append(model.coef_, model.intercept_) for model in fitted["ARDRegression"][0]])
            value = float(np.linalg.norm(ours_w - ard_w) / np.linalg.norm(ard_w))
            checks.append((name, "coefficients (incl. intercept) of mordant's first fit vs "
                           "ARDRegression's, relative norm", value, ARD_LIMIT))
        for method, (after_first, after_update) in preds.items():
            accuracy.append((name, method, rmse(after_first, yp) / y_spread,
                             rmse(after_update, yp) / y_spread))
        accuracy.append((name, "(spread of the probe targets, absolute)", y_spread, y_spread))

    for name, what, value, limit in checks:
        if limit is not None and not value <= limit:
            failed.append(f"{name}: {what}: {value:.3g} > {limit:g}")

    fmt = lambda s: f"{s * 1e3:,.3g} ms" if s < 1 else f"{s:,.3g} s"
    versions = (f"scikit-learn {sklearn.__version__}, River {river.__version__}, numpy {np.__version__} "
                f"({blas_text(np)}), scipy {scipy.__version__}, pandas {pd.__version__}, "
                f"Python {platform.python_version()}; mordant: {rustc_version()}, "
                f"{mordant['threads']} rayon threads")
    lines = [
        f"Machine: {os.cpu_count()} cores ({cpu_model()}), Linux {platform.release()}. {versions}.",
        "",
        f"Every time is the median of {repeats} runs after a warm-up, all measured in this one run; "
        "the ratio is the peer's median over mordant's (higher: mordant faster).",
        "",
        "| problem | task | mordant | ARDRegression | BayesianRidge | River | PLS (CV) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        cells = [f"{fmt(r[p])} ({ratio_text(r[p] / r['mordant'])})" if p in r else "—" for p in PEERS]
        lines.append(f"| {r['problem']} | {r['task']} | {fmt(r['mordant'])} | " + " | ".join(cells) + " |")
    lines += ["", f"All runs, min / median / max of {repeats}:", "",
              "| problem | task | method | min | median | max |", "|---|---|---|---:|---:|---:|"]
    for name, task, method, (lo, med, hi) in spreads:
        lines.append(f"| {name} | {task} | {method} | {fmt(lo)} | {fmt(med)} | {fmt(hi)} |")
    lines += ["", "What is timed:", "", *what_text(), "", "Settings, and why:", "", *settings_text(), ""]
    if iterations:
        lines += ["Iterations of scikit-learn's fits (first fits and refits, over the outputs): " +
                  "; ".join(f"{peer} on {name} median {med:g}, max {hi}" for name, peer, med, hi in iterations) +
                  ".", ""]
    if components:
        lines += ["PLS components chosen by cross-validation (first fit, refit): " +
                  "; ".join(f"{name} {a}, {b}" for name, a, b in components) + ".", ""]
    lines += ["Answers checked (relative RMS difference of the predicted means on the probe rows: "
              "RMS of the difference over the RMS spread of the probe targets around their means):", "",
              "| problem | check | value | limit |", "|---|---|---:|---|"]
    for name, what, value, limit in checks:
        ok = limit is None or value <= limit
        lines.append(f"| {name} | {what} | {value:.2e} | "
                     f"{'reported' if limit is None else f'≤ {limit:g}'}{'' if ok else ' **FAILED**'} |")
    lines += ["", *limits_text(), "",
              "Held-out error on the probe rows (never learnt), RMSE over the RMS spread of the targets "
              "(1 = predicting each output's mean):", "",
              "| problem | method | after the first fit | after the update |", "|---|---|---:|---:|"]
    for name, method, a, b in accuracy:
        lines.append(f"| {name} | {method} | {a:.4g} | {b:.4g} |")
    lines += ["", "Result: " + ("every peer is slower than mordant on every row, and every check passed."
                               if not failed else "FAILED: " + "; ".join(failed) + ".")]
    text = "\n".join(lines) + "\n"
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        f.write(text)
    print(text)
    if failed:
        sys.exit("peers: " + "; ".join(failed))


def ratio_text(r):
    return f"{r:,.0f}×" if r >= 10 else f"{r:.2g}×"


def rustc_version():
    try:
        return subprocess.run(["rustc", "--version"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "rustc (version unknown)"


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def blas_text(np):
    try:
        from threadpoolctl import threadpool_info

        pools = [f"{p['internal_api']} {p['version']}, {p['num_threads']} threads"
                 for p in threadpool_info() if p.get("user_api") == "blas"]
        return "; ".join(pools) or "BLAS unknown"
    except ImportError:
        return "BLAS unknown"


def what_text():
    return [
        "* **mordant** (`benches/peers.rs`, release build): first fit = the statistics of the first-fit "
        "rows (design matrix, `G = ΦᵀΦ`, `B = ΦᵀY`) and Algorithm 2 on every output (`ModelState::fit`); "
        "update = the statistics of the new rows and one Bayesian step (`ModelState::update`, "
        "the default `UpdateMethod::OneStep`). Outputs in parallel on rayon's threads, but for a "
        "one-step update below 64 basis functions (the spectrum problem's), which maps its outputs "
        "on the calling thread.",
        "* **ARDRegression**, **BayesianRidge**: one model per output (`fit(X, y[:, k])`); first fit on "
        "the first-fit rows; update = a new fit on the first-fit rows and the new rows, the "
        "only way they learn new rows.",
        "* **PLS** (wide problem): `PLSRegression` (`scale=True`) of every output at once, its "
        "components chosen by `GridSearchCV` over 1 to 20 with 5 shuffled folds, as in `bench/accuracy`; "
        "the update is the same search on all rows. mordant's first fit chooses its hyperparameters "
        "too (the evidence of ridge and of the smooth prior at 17 length scales, per output).",
        "* **River** `BayesianLinearRegression`: one model per output; first fit = `learn_many` on the "
        "first-fit rows; update = `learn_many` on the 1,000 new rows, from a copy of the first fit "
        "made outside the timed region. Data frames and series are made outside the timed region.",
        "* All read the same doubles: the CSV files that `bench/peers.py data` wrote and mordant "
        "parsed (mordant checks the dyeing files against `tests/data/dyeing/data.csv`).",
    ]


def settings_text():
    return [
        "* Every model fits the same design: the raw features and an intercept. mordant gets "
        "`Basis::new(d, true, Transform::Identity)` (the spectrum features are already Kubelka–Munk "
        "values) on the dyeing and spectrum problems, and the wide problem's 700 channels as a declared "
        "reflectance spectrum (`Basis::spectral`, the default prior `auto`), default `FitOptions` (tol 1e-6 on the relative change of v and s, at most 100 "
        "iterations, a noise prior only for zero-inflated outputs, 2 pseudo-rows at 1 % of the mean "
        "square of their non-zero values; outputs with fewer than 5 non-zero rows, 2 if zero-inflated, "
        "left untrained and predicting 0).",
        "* scikit-learn: the defaults — `max_iter=300`, `tol=1e-3` (on the L1 change of the "
        "coefficients, much looser than mordant's), Gamma(1e-6, 1e-6) hyperpriors, ARD's "
        "`threshold_lambda=1e4`, and `fit_intercept=True`: it centres X and y and leaves the "
        "intercept unpenalised, where mordant has an intercept column under its own ARD prior; "
        "on these data both give the same predictions to within the limits below. Tightening "
        "`tol` to mordant's would only slow scikit-learn down. BayesianRidge's refit starts from "
        "the first fit's `alpha_`/`lambda_` (`alpha_init`, `lambda_init`), which saves it "
        "iterations.",
        "* River: the defaults `alpha=1, beta=1` (prior variance 1 for every weight, noise variance "
        "1, both fixed — River learns no hyperparameters), no smoothing, a constant feature "
        "`intercept = 1`. It has no evidence maximisation, so its predictions are compared with "
        "mordant's posterior under the same fixed prior, computed from mordant's statistics.",
        "* Threads: mordant fits outputs in parallel on all cores; numpy's BLAS (used by "
        "scikit-learn and River) also uses all cores. Nothing else was set.",
    ]


def limits_text():
    return [
        f"* River vs mordant under River's prior: the same posterior mean `(I + G)⁻¹ b` from the "
        f"same rows, so only rounding may differ; limit {EXACT_LIMIT:g}.",
        f"* mordant's first fit vs ARDRegression's: the same model and the same evidence "
        f"maximisation, but scikit-learn centres the data instead of fitting an intercept weight, "
        f"prunes a weight once its precision exceeds 1e4 (mordant: once γ < 1e-6), stops at a looser "
        f"tolerance, and mordant puts a weak prior and a floor on the noise variance and leaves "
        f"outputs with fewer than 5 non-zero rows untrained. So the predictions agree closely but "
        f"not to rounding: limit {ARD_LIMIT:g}, a twentieth of the targets' spread (and well under "
        f"either model's own held-out error, below).",
        "* On the dyeing data the two ARD fits are compared but not checked: most of its 82 dyes "
        "occur in a handful of rows and many one-hot columns are collinear, so mordant's documented "
        "assumptions for sparse outputs (a dye seen in fewer than 5 non-zero rows predicts 0; the "
        "noise floor) and the choice among equivalent collinear weights decide much of each "
        "answer. The exact check with River holds there; the held-out errors below show how "
        "each model does.",
        "* After the update mordant has taken one Bayesian step with its hyperparameters fixed "
        "(refitting only the outputs whose informative rows the update grew by a quarter) while "
        "ARDRegression re-estimated them on all rows: different estimates, reported only.",
    ]


def main(argv):
    if len(argv) == 3 and argv[1] == "data":
        cmd_data(argv[2])
    elif len(argv) in (4, 5) and argv[1] == "compare":
        cmd_compare(argv[2], argv[3], int(argv[4]) if len(argv) == 5 else 15)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
