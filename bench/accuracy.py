"""Accuracy of mordant, trained through its HTTP API, against scikit-learn on real data
(`bench/accuracy` runs it; `python3 bench/accuracy.py run --help` lists the options).

    python3 bench/accuracy.py export      # writes the data sets to target/bench/accuracy-data/
    python3 bench/accuracy.py run [...]   # the benchmark; ACCURACY_BIN names the binary

Data (exported once, cached as CSV under target/bench/accuracy-data/):

* gasoline: 60 NIR spectra (log 1/R, 900–1700 nm every 2 nm, 401 bands) and octane numbers,
  Debian's r-cran-pls (`data(gasoline)`).
* yarn: 28 NIR spectra of PET yarns (268 bands) and densities, r-cran-pls (`data(yarn)`). The
  package names no wavelengths: the spectrum variant declares a nominal grid (1000 nm + 1 nm
  per band), marked as such.
* fermentation: chemotools' set, glucose (g/L) from ATR-MIR spectra (1047 wavenumbers,
  428–1833 cm⁻¹, integer-rounded and not evenly spaced: steps of 1 and 2 cm⁻¹, a local
  spacing from 1.26 to 1.48 cm⁻¹, so no spectrum variant). Training: 21 synthetic samples.
  Test: the on-line spectra (1629, one every 1.25 min, as chemotools' tutorial says) paired
  with the 34 off-line HPLC samples by time: the spectrum nearest to each HPLC time (index
  round(t / 1.25 min)), leaving out the last three spectra, which are identical to each other
  and far from every earlier one (a stale reading; the 33.9 h sample pairs with spectrum 1625).
* fermentation-sg: the same rows preprocessed row by row as in chemotools' PLS tutorial
  (950–1500 cm⁻¹, linear baseline, Savitzky–Golay first derivative, window 15, order 2): raw,
  the synthetic training spectra do not transfer to the on-line ones for any method.
* tecator-moisture, tecator-fat, tecator-protein: 215 NIR transmission spectra of chopped meat
  (absorbance, 100 channels on 850–1050 nm; taken as 850–1048 nm every 2 nm) and their
  moisture, fat and protein (%), Debian's r-cran-caret (`data(tecator)`). One data set per
  content, each learnt by its own model, so that each is scored on its own scale.
* dyeing: tests/data/dyeing/data.csv, features by prefix 小缸面料大类, 小缸光谱, 小缸配方组合
  (125: fabric, 43 bands of lab-dip reflectance in percent on 360–780 nm every 10 nm, 81 lab
  recipe concentrations), outputs 大缸物料代码 (82 dyes of the bulk recipe).

Splits, identical for every method (their row indices are written to the JSON):

* canonical: gasoline rows 1–50 train, 51–60 test (the pls vignette); yarn its `train` flag
  (21/7); fermentation(-sg) the given train/test sets (21/34); tecator rows 1–172 train (the
  original training and monitoring sets), 173–215 test (the original test set).
* random (gasoline, yarn and tecator): REPEATS splits (default 100: with 7 to 15 test rows a
  split, 20 splits left the ratio to the best peer uncertain by ±10 %), seeds 0…, 25 % test:
  test = sorted(default_rng(seed).permutation(n)[:round(n/4)]), the rest train.
* paper (dyeing, the paper's protocol): TRIALS trials (default 20), seeds 0…:
  perm = default_rng(seed).permutation(n); test = perm[:int(0.2 n)], of the rest the first
  int(0.6 × rest) rows are "old", the others "new". mordant learns old (one batch, folded),
  then new (a second batch: its incremental step); every peer is fitted on old + new.
  Scores are those of stage 2 ("test 2").

Methods:

* PLS: PLSRegression (scale=True, sklearn's default), n_components by 5-fold CV
  (KFold(shuffle=True, random_state=0), mean squared error) over 1…min(20, n_train − 2,
  smallest CV training fold, p). No predictive distribution.
* RidgeCV(alphas=logspace(−6, 6, 49)): efficient leave-one-out; no predictive distribution.
* BayesianRidge, ARDRegression (sklearn defaults), one per output; predict(return_std=True)
  gives the predictive sd (noise included). An output constant in the training rows (dyes
  absent from a dyeing split) is predicted as that constant with sd 0, without a fit. Fits
  that stop at max_iter are counted in the notes: ARD on the wide spectra often does, and its
  answer then depends on round-off (one BLAS thread gives yarn canonical 0.122, two 0.097).
* BLAS runs on one thread (OPENBLAS_NUM_THREADS=1 unless set): on 2 shared cores OpenBLAS's
  threads spin against the service and any build, making the per-output fits 50× slower.
* OLS (dyeing only): LinearRegression.
* mordant: the binary ACCURACY_BIN, run as `mordant serve` on an embedded SQLite file in a
  temporary directory on a free loopback port. Per split: POST /v1/models with only name,
  features and outputs (named features x0…); POST the training rows as one batch per stage;
  poll the batch until "folded"; POST …/predict with the test rows (≤ 10,000 per request);
  mean and variance (already the predictive variance σ² + φᵀΣφ) of each prediction; DELETE.
* mordant spectrum: the same with the spectral columns declared as "spectrum"
  ({"start_nm", "interval_nm", "count", "scale"}, named features then only the rest, none
  for gasoline, yarn and tecator) and sent as "spectra". Gasoline, yarn and tecator: scale
  "absorbance" (log 1/R; a release that predates that scale is given "fraction", which under
  the default transform "none" changes nothing but its warnings of values above 1); dyeing:
  "percent" with fabric and recipe as named features; fermentation: not applicable.
* mordant prev / prev spectrum: the same against ACCURACY_PREV_BIN, if set.

  A model waits for first_fit_rows (default p) rows before its first fit: a wide spectrum
  (p > n) never folds. With ACCURACY_FIRST_FIT_ROWS_WORKAROUND=1 a model whose first batch is
  shorter than p is created with first_fit_rows = that batch's length; without it such a model
  is reported "stuck" (with its status) and the configuration's other splits are skipped.
  A batch not folded within --fold-timeout seconds (60) is reported with its status JSON.

Metrics per target (one data set, one output, one split scheme), on the test rows:

* RMSEP: the root of the mean over splits of each split's mean squared error (with equal test
  sizes, the RMSE of all test predictions pooled);
* R²: sklearn's r2_score per split, mean over splits (dyeing: uniform over the 82 outputs, and
  over the dyes present, i.e. non-constant, in the test split; also the median, as the paper);
* 95 % coverage: the share of test values within mean ± 1.959964·sd, sd = √variance, pooled over
  every test prediction of every split (dyeing: every cell, and the non-zero cells); the
  calibration table adds the central 50 % and 80 % intervals (± 0.674490·sd, ± 1.281552·sd),
  which tell intervals that are too wide from well calibrated ones on a few test values where
  the 95 % interval cannot (10 calibrated values all fall inside it 60 % of the time), and a
  single split's binomial p-values;
* CRPS of the Gaussian predictive, closed form sd·(z(2Φ(z) − 1) + 2φ(z) − 1/√π),
  z = (y − mean)/sd (|y − mean| when sd = 0), mean over every test prediction;
* interval score of the central 95 % interval (Gneiting & Raftery 2007, α = 0.05):
  (u − l) + (2/α)(l − y)⁺ + (2/α)(y − u)⁺, mean over every test prediction.

An answer of mordant's that carries `dof` (a Student-t of that many degrees of freedom ν and
the answered variance) is scored as that distribution: its intervals are mean ±
q_ν·√((ν − 2)/ν)·sd (q_ν the t's quantile) and its CRPS the t's closed form (Jordan, Krüger &
Lerch 2019) at that scale; answers without it, and every peer's, as Gaussians.

Coverage, CRPS and the interval score need a predictive distribution: "—" for PLS, RidgeCV and
OLS. The report gives per target mordant's RMSEP over the best peer's and the coverage of
mordant's intervals pooled over all targets. Failures of mordant are reported, never raised:
the run exits 0.
"""

import argparse
import datetime
import importlib.metadata
import json
import math
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import warnings
from dataclasses import dataclass, field

# One BLAS thread: on the project's 2 cores, shared with the service (and often a build),
# OpenBLAS's threads spin against each other and make sklearn's per-output fits 50× slower.
for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

PIP_HINT = "pip install numpy scikit-learn pandas chemotools"
try:
    import numpy as np  # noqa: E402 (after the thread settings)
except ImportError:
    sys.exit(f"bench/accuracy needs numpy: {PIP_HINT}")

from peers import cpu_model  # noqa: E402  (bench/peers.py, beside this file)

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
DATA_DIR = os.path.join(ROOT, "target/bench/accuracy-data")
DYEING_CSV = os.path.join(ROOT, "tests/data/dyeing/data.csv")
DYEING_FEATURE_PREFIXES = ("小缸面料大类", "小缸光谱", "小缸配方组合")
DYEING_SPECTRUM_PREFIX = "小缸光谱"
DYEING_OUTPUT_PREFIX = "大缸物料代码"
FERMENTATION_MINUTES_PER_SPECTRUM = 1.25
TECATOR_CONTENTS = ["moisture", "fat", "protein"]  # the order of caret's `endpoints` columns
TECATOR_DATASETS = [f"tecator-{content}" for content in TECATOR_CONTENTS]
DATASETS = ["gasoline", "yarn", "fermentation", "fermentation-sg", *TECATOR_DATASETS, "dyeing"]
RANDOM_SPLIT_DATASETS = ("gasoline", "yarn", *TECATOR_DATASETS)
Z95 = 1.959964
# The central 50 % and 80 % intervals' half-widths in standard deviations, for the calibration table.
CENTRAL_Z = {50: 0.674490, 80: 1.281552}
ALPHA = 0.05
BOOTSTRAP_RESAMPLES = 2000
PREDICT_CHUNK = 10_000
PEERS = ["PLS", "RidgeCV", "BayesianRidge", "ARD", "OLS"]
MORDANT_VARIANTS = {"named": "", "spectrum": " spectrum"}


# ---------------------------------------------------------------------------------------------
# data sets


@dataclass
class Dataset:
    name: str
    target: str  # what is predicted, for the report
    x: np.ndarray  # n × p inputs
    y: np.ndarray  # n × m outputs
    outputs: list
    # The spectral columns of x (for the spectrum variant) and the grid they lie on, or None.
    spectrum_cols: list = field(default_factory=list)
    grid: dict = None
    grid_note: str = ""
    canonical: tuple = None  # (train rows, test rows), or None
    notes: list = field(default_factory=list)

    @property
    def named_cols(self):
        spectral = set(self.spectrum_cols) if self.grid else set()
        return [j for j in range(self.x.shape[1]) if j not in spectral]


R_EXPORT = r"""
suppressMessages(library(pls))
out <- commandArgs(trailingOnly = TRUE)[1]
data(gasoline); data(yarn)
g <- data.frame(octane = gasoline$octane, unclass(gasoline$NIR), check.names = FALSE)
names(g) <- c("octane", sub(" nm$", "", colnames(gasoline$NIR)))
write.csv(g, file.path(out, "gasoline.csv"), row.names = FALSE)
nir <- unclass(yarn$NIR)
colnames(nir) <- paste0("band", seq_len(ncol(nir)))
y <- data.frame(density = yarn$density, train = as.integer(yarn$train), nir, check.names = FALSE)
write.csv(y, file.path(out, "yarn.csv"), row.names = FALSE)
cat(as.character(packageVersion("pls")), R.version$major, R.version$minor, "\n",
    file = file.path(out, "r-versions.txt"))
"""


R_EXPORT_TECATOR = r"""
out <- commandArgs(trailingOnly = TRUE)[1]
data(tecator, package = "caret")
t <- data.frame(endpoints, absorp)
names(t) <- c("moisture", "fat", "protein", seq(850, by = 2, length.out = ncol(absorp)))
write.csv(t, file.path(out, "tecator.csv"), row.names = FALSE)
cat(as.character(packageVersion("caret")), "\n", file = file.path(out, "caret-version.txt"))
"""


def export_tecator(directory):
    """tecator.csv (moisture, fat, protein, then the 100 channels) from R's caret package
    (Debian: r-base-core r-cran-caret)."""
    if os.path.exists(os.path.join(directory, "tecator.csv")):
        return
    hint = "install R's caret package: apt-get install -y r-base-core r-cran-caret"
    if shutil.which("Rscript") is None:
        sys.exit(f"bench/accuracy needs R for the tecator set: {hint}")
    os.makedirs(directory, exist_ok=True)
    done = subprocess.run(["Rscript", "-e", R_EXPORT_TECATOR, directory], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"exporting tecator with Rscript failed:\n{done.stderr}\n{hint}")
    print(f"accuracy: exported tecator to {directory}", file=sys.stderr)


def export_r(directory):
    """gasoline.csv and yarn.csv from R's pls package (Debian: r-base-core r-cran-pls)."""
    if all(os.path.exists(os.path.join(directory, f)) for f in ["gasoline.csv", "yarn.csv"]):
        return
    if shutil.which("Rscript") is None:
        sys.exit("bench/accuracy needs R's pls package: apt-get install -y r-base-core r-cran-pls")
    os.makedirs(directory, exist_ok=True)
    done = subprocess.run(["Rscript", "-e", R_EXPORT, directory], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"exporting gasoline and yarn with Rscript failed:\n{done.stderr}\n"
                 "install R's pls package: apt-get install -y r-base-core r-cran-pls")
    print(f"accuracy: exported gasoline and yarn to {directory}", file=sys.stderr)


def write_report(path, lines):
    """Writes a report's markdown lines to path (making its directory) and prints them."""
    text = "\n".join(lines) + "\n"
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    print(text)


def export_fermentation(directory):
    """fermentation_train.csv (glucose, then the spectrum) and fermentation_test.csv (HPLC time
    in hours, glucose, the index of the paired on-line spectrum, then the spectrum)."""
    train_path = os.path.join(directory, "fermentation_train.csv")
    test_path = os.path.join(directory, "fermentation_test.csv")
    if os.path.exists(train_path) and os.path.exists(test_path):
        return
    from chemotools.datasets import load_fermentation_test, load_fermentation_train

    os.makedirs(directory, exist_ok=True)
    spectra, hplc = load_fermentation_train()
    train = spectra.copy()
    train.insert(0, "glucose", hplc["glucose"].to_numpy())
    train.to_csv(train_path, index=False)
    online, offline = load_fermentation_test()
    index = pair_by_time(online.to_numpy(float), offline["time"].to_numpy(float))
    test = online.iloc[index].reset_index(drop=True)
    test.insert(0, "spectrum_index", index)
    test.insert(0, "glucose", offline["glucose"].to_numpy())
    test.insert(0, "time_h", offline["time"].to_numpy())
    test.to_csv(test_path, index=False)
    print(f"accuracy: exported fermentation to {directory}", file=sys.stderr)


def pair_by_time(spectra, hours):
    """For each HPLC time, the index of the on-line spectrum nearest to it (spectrum i taken at
    i × 1.25 min), among the spectra that occur once: the series ends with three identical
    spectra far from their neighbours (a stale reading), which are left out."""
    _, inverse, counts = np.unique(spectra, axis=0, return_inverse=True, return_counts=True)
    candidates = np.flatnonzero(counts[inverse.ravel()] == 1)
    wanted = hours * 60.0 / FERMENTATION_MINUTES_PER_SPECTRUM
    return candidates[np.abs(candidates[None, :] - wanted[:, None]).argmin(axis=1)]


def export_all(directory, names):
    if {"gasoline", "yarn"} & set(names):
        export_r(directory)
    if {"fermentation", "fermentation-sg"} & set(names):
        export_fermentation(directory)
    if set(TECATOR_DATASETS) & set(names):
        export_tecator(directory)


def regular_grid(wavelengths):
    """(start, interval) if the wavelengths are evenly spaced, else None."""
    steps = np.diff(wavelengths)
    if len(steps) and np.allclose(steps, steps[0], rtol=0, atol=1e-9 * max(1.0, abs(steps[0]))):
        return float(wavelengths[0]), float(steps[0])
    return None


def load_gasoline(directory):
    import pandas as pd

    frame = pd.read_csv(os.path.join(directory, "gasoline.csv"))
    nm = frame.columns[1:].astype(float).to_numpy()
    start, interval = regular_grid(nm)
    x = frame.iloc[:, 1:].to_numpy(float)
    n = len(frame)
    return Dataset(
        name="gasoline", target="octane", x=x, y=frame[["octane"]].to_numpy(float), outputs=["octane"],
        spectrum_cols=list(range(x.shape[1])),
        grid={"start_nm": start, "interval_nm": interval, "count": x.shape[1], "scale": "absorbance"},
        grid_note=f"{nm[0]:g}–{nm[-1]:g} nm every {interval:g} nm (log 1/R)",
        canonical=(list(range(50)), list(range(50, n))),
    )


def load_yarn(directory):
    import pandas as pd

    frame = pd.read_csv(os.path.join(directory, "yarn.csv"))
    x = frame.iloc[:, 2:].to_numpy(float)
    train = frame["train"].to_numpy(bool)
    return Dataset(
        name="yarn", target="density", x=x, y=frame[["density"]].to_numpy(float), outputs=["density"],
        spectrum_cols=list(range(x.shape[1])),
        grid={"start_nm": 1000.0, "interval_nm": 1.0, "count": x.shape[1], "scale": "absorbance"},
        grid_note=f"{x.shape[1]} bands, wavelengths not given by the package: nominal grid 1000 nm + 1 nm per band",
        canonical=(np.flatnonzero(train).tolist(), np.flatnonzero(~train).tolist()),
        notes=["yarn holds replicate spectra at the same density (e.g. 6 rows at 0): random splits "
               "put replicates on both sides, so they flatter every method alike"],
    )


def load_fermentation(directory):
    import pandas as pd

    train = pd.read_csv(os.path.join(directory, "fermentation_train.csv"))
    test = pd.read_csv(os.path.join(directory, "fermentation_test.csv"))
    wavenumbers = train.columns[1:].astype(float).to_numpy()
    if not np.array_equal(wavenumbers, test.columns[3:].astype(float).to_numpy()):
        sys.exit("fermentation: the training and test spectra have different wavenumbers")
    x = np.vstack([train.iloc[:, 1:].to_numpy(float), test.iloc[:, 3:].to_numpy(float)])
    y = np.concatenate([train["glucose"].to_numpy(float), test["glucose"].to_numpy(float)])[:, None]
    n_train = len(train)
    steps = np.unique(np.diff(wavenumbers))
    plateau = int(np.sum(np.isclose(test["glucose"].to_numpy(), 4.0, atol=0.01)))
    return Dataset(
        name="fermentation", target="glucose", x=x, y=y, outputs=["glucose"],
        spectrum_cols=list(range(x.shape[1])), grid=None,
        grid_note=(f"{len(wavenumbers)} wavenumbers {wavenumbers[0]:g}–{wavenumbers[-1]:g} cm⁻¹, "
                   f"steps {', '.join(f'{s:g}' for s in steps)} cm⁻¹: not a regular grid, no spectrum variant"),
        canonical=(list(range(n_train)), list(range(n_train, len(x)))),
        notes=[f"fermentation test: {len(test)} HPLC samples, each paired with the on-line spectrum "
               f"nearest its time (one every {FERMENTATION_MINUTES_PER_SPECTRUM} min); {plateau} of them "
               "read glucose 4.00 g/L (a plateau from about 21 h on, where training glucose goes down to 0)"],
    )


def load_fermentation_sg(directory):
    """The fermentation set preprocessed as in chemotools' PLS tutorial, row by row (nothing is
    learnt from the data): 950–1500 cm⁻¹, linear baseline, Savitzky–Golay first derivative
    (window 15, order 2)."""
    from chemotools.baseline import LinearCorrection
    from chemotools.derivative import SavitzkyGolay
    from chemotools.feature_selection import RangeCut
    from sklearn.pipeline import make_pipeline

    import pandas as pd

    ds = load_fermentation(directory)
    wavenumbers = pd.read_csv(os.path.join(directory, "fermentation_train.csv"), nrows=0).columns[1:].astype(float)
    try:  # chemotools ≥ 0.5 names
        cut = RangeCut(start=950, end=1500, x_axis=wavenumbers.to_numpy())
        derivative = SavitzkyGolay(window_length=15, polyorder=2, deriv=1)
    except TypeError:  # earlier releases
        cut = RangeCut(start=950, end=1500, wavenumbers=wavenumbers.to_numpy())
        derivative = SavitzkyGolay(window_size=15, polynomial_order=2, derivate_order=1)
    x = make_pipeline(cut, LinearCorrection(), derivative).fit_transform(ds.x)
    kept = getattr(cut, "x_axis_", None)
    kept = np.asarray(cut.wavenumbers_ if kept is None else kept)
    ds.name, ds.x, ds.spectrum_cols, ds.notes = "fermentation-sg", x, list(range(x.shape[1])), []
    ds.grid_note = (f"the fermentation spectra cut to {kept[0]:g}–{kept[-1]:g} cm⁻¹ ({x.shape[1]} wavenumbers), "
                    "linear baseline removed, Savitzky–Golay first derivative (window 15, order 2), as in "
                    "chemotools' PLS tutorial; no spectrum variant")
    return ds


def tecator_loader(content):
    def load(directory):
        import pandas as pd

        frame = pd.read_csv(os.path.join(directory, "tecator.csv"))
        channels = frame.columns[len(TECATOR_CONTENTS):]
        nm = channels.astype(float).to_numpy()
        start, interval = regular_grid(nm)
        x = frame[channels].to_numpy(float)
        n = len(frame)
        return Dataset(
            name=f"tecator-{content}", target=content, x=x, y=frame[[content]].to_numpy(float),
            outputs=[content], spectrum_cols=list(range(x.shape[1])),
            grid={"start_nm": start, "interval_nm": interval, "count": x.shape[1], "scale": "absorbance"},
            grid_note=(f"{x.shape[1]} channels of absorbance on 850–1050 nm (caret names no wavelengths: "
                       f"declared as {nm[0]:g}–{nm[-1]:g} nm every {interval:g} nm); {content} in %"),
            canonical=(list(range(172)), list(range(172, n))),
        )

    return load


def load_dyeing(_directory):
    import pandas as pd

    frame = pd.read_csv(DYEING_CSV, encoding="utf-8-sig")
    features = [c for c in frame.columns if c.startswith(DYEING_FEATURE_PREFIXES)]
    outputs = [c for c in frame.columns if c.startswith(DYEING_OUTPUT_PREFIX)]
    spectrum = [j for j, c in enumerate(features) if c.startswith(DYEING_SPECTRUM_PREFIX)]
    if spectrum != list(range(spectrum[0], spectrum[0] + 43)):
        sys.exit("dyeing: expected 43 contiguous spectrum columns")
    return Dataset(
        name="dyeing", target=f"{len(outputs)} dyes", x=frame[features].to_numpy(float),
        y=frame[outputs].to_numpy(float), outputs=outputs, spectrum_cols=spectrum,
        grid={"start_nm": 360.0, "interval_nm": 10.0, "count": 43, "scale": "percent"},
        grid_note="lab-dip reflectance 360–780 nm every 10 nm in percent, beside fabric and lab recipe",
    )


LOADERS = {"gasoline": load_gasoline, "yarn": load_yarn, "fermentation": load_fermentation,
           "fermentation-sg": load_fermentation_sg, "dyeing": load_dyeing,
           **{f"tecator-{content}": tecator_loader(content) for content in TECATOR_CONTENTS}}


# ---------------------------------------------------------------------------------------------
# splits: every split is {"stages": [rows of each training batch], "test": rows}


def canonical_splits(ds):
    train, test = ds.canonical
    return [{"seed": None, "stages": [list(train)], "test": list(test)}]


def random_splits(n, repeats, test_share=0.25):
    splits = []
    for seed in range(repeats):
        perm = np.random.default_rng(seed).permutation(n)
        k = int(round(n * test_share))
        splits.append({"seed": seed, "stages": [sorted(perm[k:].tolist())], "test": sorted(perm[:k].tolist())})
    return splits


def paper_splits(n, trials):
    splits = []
    for seed in range(trials):
        perm = np.random.default_rng(seed).permutation(n)
        n_test = int(0.2 * n)
        rest = perm[n_test:]
        n_old = int(0.6 * len(rest))
        splits.append({"seed": seed, "stages": [rest[:n_old].tolist(), rest[n_old:].tolist()],
                       "test": perm[:n_test].tolist()})
    return splits


def schemes_for(ds, args):
    """{scheme name: splits} for a data set."""
    if ds.name == "dyeing":
        return {"paper": paper_splits(len(ds.x), args.trials)}
    schemes = {"canonical": canonical_splits(ds)}
    if ds.name in RANDOM_SPLIT_DATASETS:
        schemes["random"] = random_splits(len(ds.x), args.repeats)
    return schemes


def train_rows(split):
    return [i for stage in split["stages"] for i in stage]


# ---------------------------------------------------------------------------------------------
# scikit-learn peers: each returns (mean n_test × m, sd n_test × m or None, info)


def fit_pls(x, y, x_test):
    from sklearn.cross_decomposition import PLSRegression
    from sklearn.model_selection import GridSearchCV, KFold

    folds = KFold(n_splits=5, shuffle=True, random_state=0)
    smallest_fold = min(len(tr) for tr, _ in folds.split(x))
    top = max(1, min(20, len(x) - 2, smallest_fold, x.shape[1]))
    search = GridSearchCV(PLSRegression(), {"n_components": list(range(1, top + 1))}, cv=folds,
                          scoring="neg_mean_squared_error")
    search.fit(x, y)
    mean = np.asarray(search.predict(x_test)).reshape(len(x_test), -1)
    return mean, None, {"n_components": int(search.best_params_["n_components"])}


def fit_ridge_cv(x, y, x_test):
    from sklearn.linear_model import RidgeCV

    model = RidgeCV(alphas=np.logspace(-6, 6, 49)).fit(x, y)
    mean = np.asarray(model.predict(x_test)).reshape(len(x_test), -1)
    return mean, None, {"alpha": float(np.ravel(model.alpha_)[0])}


def fit_ols(x, y, x_test):
    from sklearn.linear_model import LinearRegression

    mean = LinearRegression().fit(x, y).predict(x_test)
    return np.asarray(mean).reshape(len(x_test), -1), None, {}


def fit_per_output(make):
    """A peer that fits one sklearn model per output and predicts with return_std=True."""

    def fit(x, y, x_test):
        mean = np.zeros((len(x_test), y.shape[1]))
        sd = np.zeros_like(mean)
        info = {"constant_outputs": 0, "fits": 0, "stopped_at_max_iter": 0}
        for k in range(y.shape[1]):
            if np.ptp(y[:, k]) == 0:
                mean[:, k] = y[0, k]
                info["constant_outputs"] += 1
                continue
            model = make().fit(x, y[:, k])
            mean[:, k], sd[:, k] = model.predict(x_test, return_std=True)
            info["fits"] += 1
            info["stopped_at_max_iter"] += int(getattr(model, "n_iter_", 0) >= model.max_iter)
        return mean, sd, info

    return fit


def peer_fitters():
    from sklearn.linear_model import ARDRegression, BayesianRidge

    return {"PLS": fit_pls, "RidgeCV": fit_ridge_cv, "BayesianRidge": fit_per_output(BayesianRidge),
            "ARD": fit_per_output(ARDRegression), "OLS": fit_ols}


def peers_for(ds):
    return ["PLS", "RidgeCV", "BayesianRidge", "ARD"] + (["OLS"] if ds.name == "dyeing" else [])


# ---------------------------------------------------------------------------------------------
# mordant through its HTTP API


class MordantFailure(Exception):
    """A model that did not fold or answer: kind is "stuck", "timeout" or "error"."""

    def __init__(self, kind, message):
        super().__init__(message)
        self.kind = kind


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Service:
    """`mordant serve` on an embedded SQLite file in a temporary directory, on a free port."""

    def __init__(self, binary):
        self.binary = os.path.abspath(binary)
        self.work = tempfile.mkdtemp(prefix="mordant-accuracy-")
        port = free_port()
        self.base = f"http://127.0.0.1:{port}"
        env = dict(os.environ, DATABASE_URL=f"sqlite://{self.work}/m.db", MORDANT_ADDR=f"127.0.0.1:{port}",
                   MORDANT__LOG__FILTER="warn")
        self.log = open(os.path.join(self.work, "service.log"), "w")
        self.process = subprocess.Popen([self.binary, "serve"], env=env, stdout=self.log,
                                        stderr=subprocess.STDOUT, cwd=self.work)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is None and self.healthy():
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{binary} serve did not start; its log:\n{self.log_text()}")

    def healthy(self):
        try:
            return self.call("GET", "/healthz")[0] == 200
        except OSError:
            return False

    def log_text(self):
        with open(os.path.join(self.work, "service.log")) as f:
            return f.read()[-4000:]

    def version(self):
        done = subprocess.run([self.binary, "--version"], capture_output=True, text=True)
        return done.stdout.strip() or "unknown"

    def call(self, method, path, body=None, timeout=120):
        """(status, parsed JSON or text) of one request."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method,
                                         headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                status, raw = answer.status, answer.read()
        except urllib.error.HTTPError as e:
            status, raw = e.code, e.read()
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, raw.decode(errors="replace")

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()
        shutil.rmtree(self.work, ignore_errors=True)


def model_spec(ds, variant, name, first_stage_rows, workaround):
    spec = {"name": name, "outputs": [f"y{k}" for k in range(ds.y.shape[1])]}
    if variant == "spectrum":
        spec["spectrum"] = {key: ds.grid[key] for key in ("start_nm", "interval_nm", "count", "scale")}
        if ds.named_cols:
            spec["features"] = [f"x{j}" for j in ds.named_cols]
        p = len(ds.spectrum_cols) + len(ds.named_cols) + 1
    else:
        spec["features"] = [f"x{j}" for j in range(ds.x.shape[1])]
        p = ds.x.shape[1] + 1
    if workaround and first_stage_rows < p:
        spec["first_fit_rows"] = first_stage_rows
    return spec


def create_model(service, spec):
    """Creates the model `spec` describes. A release from before the `absorbance` scale refuses
    it (422 at /spectrum/scale) and is given the spectrum as reflectance fractions, the only
    way it had: with `"transform": "none"` the scale changes nothing but the warnings."""
    status, body = service.call("POST", "/v1/models", spec)
    details = body.get("error", {}).get("details", []) if isinstance(body, dict) else []
    if status == 422 and any(d.get("path") == "/spectrum/scale" for d in details):
        spec = dict(spec, spectrum=dict(spec["spectrum"], scale="fraction"))
        status, body = service.call("POST", "/v1/models", spec)
    return expect((status, body), 201, "create model")


def input_body(ds, variant, rows):
    """The inputs of `rows` as a batch or predict body."""
    x = ds.x[rows]
    if variant != "spectrum":
        return {"x": x.tolist()}
    body = {"spectra": {"start_nm": ds.grid["start_nm"], "interval_nm": ds.grid["interval_nm"],
                        "values": x[:, ds.spectrum_cols].tolist()}}
    if ds.named_cols:
        body["x"] = x[:, ds.named_cols].tolist()
    return body


def expect(status_body, wanted, what):
    status, body = status_body
    if status != wanted:
        raise MordantFailure("error", f"{what}: HTTP {status} {json.dumps(body, ensure_ascii=False)[:2000]}")
    return body


def wait_folded(service, name, batch_id, rows_posted, timeout):
    """Polls the batch until it is folded and returns the version it went into. A model still at
    version 0 with fewer rows queued than its first_fit_rows will never fold: reported at once,
    as is a rejected or held batch."""
    deadline = time.monotonic() + timeout
    while True:
        status = expect(service.call("GET", f"/v1/models/{name}/batches/{batch_id}"), 200, "batch status")
        if status.get("status") == "folded":
            return status.get("version")
        if status.get("status") != "queued":
            raise MordantFailure("error", f"batch {batch_id} is {status.get('status')}: {json.dumps(status)}")
        model = expect(service.call("GET", f"/v1/models/{name}"), 200, "model")
        first = model.get("first_fit_rows")
        if model.get("version") == 0 and isinstance(first, int) and rows_posted < first:
            raise MordantFailure("stuck", f"{rows_posted} rows queued, the first fit waits for first_fit_rows = "
                                          f"{first}; batch status {json.dumps(status)}")
        if time.monotonic() > deadline:
            raise MordantFailure("timeout", f"batch {batch_id} not folded after {timeout} s: {json.dumps(status)}; "
                                            f"model {json.dumps(model)}")
        time.sleep(0.05)


def predict_chunk(service, name, body, version, timeout, lag):
    """One predict request, repeated while the service answers from an older version than the
    batch status named (or 409, no posterior yet): the posterior cache is updated after the
    fold commits, so "folded" can be seen before predict serves it. lag counts the retries."""
    deadline = time.monotonic() + timeout
    while True:
        status, answer = service.call("POST", f"/v1/models/{name}/predict", body)
        stale = status == 409 or (status == 200 and version is not None and answer.get("version", 0) < version)
        if not stale:
            return expect((status, answer), 200, "predict")
        if time.monotonic() > deadline:
            raise MordantFailure("timeout", f"predict still answers HTTP {status} "
                                            f"{json.dumps(answer, ensure_ascii=False)[:500]} {timeout} s after the "
                                            f"batch status said folded into version {version}")
        if lag["retries"] == 0:
            lag["since"] = time.monotonic()
        lag["retries"] += 1
        time.sleep(0.02)


def predict(service, ds, variant, name, rows, version, timeout):
    """Means, variances and info of the answers; `info["dof"]`, where any answer carries the
    degrees of freedom of a Student-t (`dof`), holds them (∞ for a Gaussian's)."""
    means, variances, dofs, lag = [], [], [], {"retries": 0}
    for start in range(0, len(rows), PREDICT_CHUNK):
        body = input_body(ds, variant, rows[start:start + PREDICT_CHUNK])
        answer = predict_chunk(service, name, body, version, timeout, lag)
        means += [p["mean"] for p in answer["predictions"]]
        variances += [p["variance"] for p in answer["predictions"]]
        dofs += [[math.inf if v is None else v for v in p.get("dof") or [None] * len(p["mean"])]
                 for p in answer["predictions"]]
    info = {"version": answer.get("version")}
    if any(math.isfinite(v) for row in dofs for v in row):
        info["dof"] = np.array(dofs, float)
    if lag["retries"]:
        info["stale_predict_retries"] = lag["retries"]
        info["stale_predict_seconds"] = round(time.monotonic() - lag["since"], 3)
    return np.array(means, float), np.array(variances, float), info


def run_mordant(service, ds, variant, split, name, workaround, timeout, extra=None):
    """mean, sd and info of mordant's predictions for one split, trained through the API (the
    default model spec, with `extra`'s fields added)."""
    stages = split["stages"]
    service.call("DELETE", f"/v1/models/{name}")
    create_model(service, dict(model_spec(ds, variant, name, len(stages[0]), workaround), **(extra or {})))
    try:
        posted = 0
        for b, rows in enumerate(stages):
            body = dict(input_body(ds, variant, rows), batch_id=f"stage-{b}", y=ds.y[rows].tolist())
            expect(service.call("POST", f"/v1/models/{name}/batches", body), 202, f"batch stage-{b}")
            posted += len(rows)
            version = wait_folded(service, name, f"stage-{b}", posted, timeout)
        mean, variance, info = predict(service, ds, variant, name, split["test"], version, timeout)
    finally:
        service.call("DELETE", f"/v1/models/{name}")
    if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(variance)) and np.all(variance >= 0)):
        raise MordantFailure("error", "non-finite mean or negative variance in the predictions")
    return mean, np.sqrt(variance), info


def answered_spread(sd, info):
    """The spread the metrics score: `sd`, or (sd, dof) where the answers carry a Student-t's
    degrees of freedom (`info["dof"]`, which this takes out of `info`)."""
    dof = info.pop("dof", None)
    if dof is None:
        return sd
    info["dof_values"] = sorted({float(v) for v in dof.flat if math.isfinite(v)})
    return sd, dof


# ---------------------------------------------------------------------------------------------
# metrics


def student_crps(y, mean, sd, dof):
    """CRPS of the Student-t with `dof` degrees of freedom and standard deviation `sd` at y
    (Jordan, Krüger & Lerch 2019, the standard t's closed form scaled by √((ν − 2)/ν)·sd);
    the Gaussian's where dof is ∞."""
    from scipy import special, stats

    gaussian = gaussian_crps(y, mean, sd)
    finite = np.isfinite(dof) & (sd > 0)
    if not finite.any():
        return gaussian
    nu = np.where(finite, dof, 3.0)
    scale = np.where(finite, sd * np.sqrt((nu - 2) / nu), 1.0)
    z = (y - mean) / scale
    beta = np.exp(special.betaln(0.5, nu - 0.5) - 2 * special.betaln(0.5, nu / 2))
    standard = (z * (2 * stats.t.cdf(z, nu) - 1) + 2 * stats.t.pdf(z, nu) * (nu + z * z) / (nu - 1)
                - 2 * np.sqrt(nu) * beta / (nu - 1))
    return np.where(finite, scale * standard, gaussian)


def half_widths(sd, dof, level):
    """Half the width of the central `level` interval: sd·z, or for a Student-t of standard
    deviation sd, sd·√((ν − 2)/ν)·t_ν's quantile."""
    from scipy import stats

    z = stats.norm.ppf(0.5 + level / 2)
    if dof is None:
        return z * sd
    nu = np.where(np.isfinite(dof), dof, 3.0)
    t = stats.t.ppf(0.5 + level / 2, nu) * np.sqrt((nu - 2) / nu)
    return sd * np.where(np.isfinite(dof), t, z)


def gaussian_crps(y, mean, sd):
    """CRPS of N(mean, sd²) at y (Gneiting & Raftery 2007); |y − mean| where sd = 0."""
    from scipy.special import ndtr  # Φ; scipy comes with scikit-learn

    error = y - mean
    safe = np.where(sd > 0, sd, 1.0)
    z = error / safe
    pdf = np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    crps = safe * (z * (2 * ndtr(z) - 1) + 2 * pdf - 1 / math.sqrt(math.pi))
    return np.where(sd > 0, crps, np.abs(error))


def interval_score(y, mean, sd, alpha=ALPHA, dof=None):
    half = Z95 * sd if dof is None else half_widths(sd, dof, 1 - alpha)
    lower, upper = mean - half, mean + half
    return (upper - lower) + (2 / alpha) * np.maximum(lower - y, 0) + (2 / alpha) * np.maximum(y - upper, 0)


def split_metrics(y, mean, sd):
    """Sums and scores of one split's test predictions (arrays n × m); `sd` may be (sd, dof)
    for answers that are Student-t's ([`answered_spread`])."""
    from sklearn.metrics import r2_score

    out = {"n": int(y.size), "mse": float(np.mean((y - mean) ** 2)), "r2": float(r2_score(y, mean)),
           "row_se": np.sum((y - mean) ** 2, axis=1).tolist()}
    if y.shape[1] > 1:
        present = [k for k in range(y.shape[1]) if np.ptp(y[:, k]) > 0]
        out["r2_present"] = float(np.mean([r2_score(y[:, k], mean[:, k]) for k in present]))
        out["dyes_present"] = len(present)
    if sd is not None:
        sd, dof = sd if isinstance(sd, tuple) else (sd, None)
        inside = np.abs(y - mean) <= (Z95 * sd if dof is None else half_widths(sd, dof, 0.95))
        nonzero = y != 0
        crps = gaussian_crps(y, mean, sd) if dof is None else student_crps(y, mean, sd, dof)
        out.update(covered=int(inside.sum()), crps_sum=float(crps.sum()),
                   is_sum=float(interval_score(y, mean, sd, dof=dof).sum()), n_nonzero=int(nonzero.sum()),
                   covered_nonzero=int((inside & nonzero).sum()))
        for level, z in CENTRAL_Z.items():
            narrower = np.abs(y - mean) <= (z * sd if dof is None else half_widths(sd, dof, level / 100))
            out[f"covered{level}"] = int(narrower.sum())
            out[f"covered{level}_nonzero"] = int((narrower & nonzero).sum())
    return out


def aggregate(per_split):
    """A scheme's scores from its splits' (see the module docstring)."""
    ok = [s for s in per_split if "mse" in s]
    if not ok:
        return {}
    out = {"splits": len(ok), "rmsep": math.sqrt(np.mean([s["mse"] for s in ok])),
           "r2": float(np.mean([s["r2"] for s in ok])), "r2_median": float(np.median([s["r2"] for s in ok]))}
    if "r2_present" in ok[0]:
        out["r2_present"] = float(np.mean([s["r2_present"] for s in ok]))
    if "covered" in ok[0]:
        n = sum(s["n"] for s in ok)
        nz = sum(s["n_nonzero"] for s in ok)
        out.update(n=n, covered=sum(s["covered"] for s in ok), coverage=sum(s["covered"] for s in ok) / n,
                   crps=sum(s["crps_sum"] for s in ok) / n, interval_score=sum(s["is_sum"] for s in ok) / n,
                   coverage_nonzero=sum(s["covered_nonzero"] for s in ok) / nz if nz else None,
                   covered_nonzero=sum(s["covered_nonzero"] for s in ok), n_nonzero=nz)
        for level in CENTRAL_Z:
            if all(f"covered{level}" in s for s in ok):
                for suffix, total in (("", n), ("_nonzero", nz)):
                    count = sum(s[f"covered{level}{suffix}"] for s in ok)
                    out[f"covered{level}{suffix}"] = count
                    out[f"coverage{level}{suffix}"] = count / total if total else None
    return out


# ---------------------------------------------------------------------------------------------
# the run


def mordant_methods(services):
    """[(method name, service label, variant)] for every binary given."""
    return [(label + suffix, label, variant) for label in services for variant, suffix in MORDANT_VARIANTS.items()]


def run_scheme(ds, scheme, splits, services, args, progress):
    """Every method on every split of one scheme: {method: {"per_split", "aggregate", "status",
    "seconds", "info"}}."""
    fitters = peer_fitters()
    methods = {m: {"per_split": [], "info": [], "seconds": 0.0, "status": "ok"} for m in peers_for(ds)}
    for method, _, variant in mordant_methods(services):
        applicable = variant == "named" or ds.grid is not None
        methods[method] = {"per_split": [], "info": [], "seconds": 0.0,
                           "status": "ok" if applicable else "n/a", "grid_note": ds.grid_note}
    ard_trials = args.ard_trials if ds.name == "dyeing" else None
    for i, split in enumerate(splits):
        progress(f"{ds.name} {scheme} {i + 1}/{len(splits)}")
        train, test = train_rows(split), split["test"]
        x, y, x_test, y_test = ds.x[train], ds.y[train], ds.x[test], ds.y[test]
        for method in peers_for(ds):
            if method == "ARD" and ard_trials is not None and i >= ard_trials:
                continue
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                mean, sd, info = fitters[method](x, y, x_test)
            methods[method]["seconds"] += time.perf_counter() - start
            methods[method]["per_split"].append(dict(split_metrics(y_test, mean, sd), seed=split["seed"]))
            methods[method]["info"].append(info)
        for method, label, variant in mordant_methods(services):
            record = methods[method]
            if record["status"] != "ok":
                continue
            name = f"acc-{ds.name}-{variant}-{scheme}-{i}"
            start = time.perf_counter()
            try:
                extra = {"prior": args.prior} if args.prior else None
                mean, sd, info = run_mordant(services[label], ds, variant, split, name, args.workaround,
                                             args.fold_timeout, extra)
            except MordantFailure as failure:
                record.update(status=failure.kind, failure=f"split {i}: {failure}")
                progress(f"  {method} {failure.kind}: {str(failure)[:300]}")
                continue
            finally:
                record["seconds"] += time.perf_counter() - start
            record["per_split"].append(dict(split_metrics(y_test, mean, answered_spread(sd, info)),
                                            seed=split["seed"]))
            record["info"].append(info)
    for record in methods.values():
        record["aggregate"] = aggregate(record["per_split"])
    return methods


def versions_text(services):
    def version(package):
        try:
            return importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            return "absent"

    r_versions = "unknown"
    path = os.path.join(DATA_DIR, "r-versions.txt")
    if os.path.exists(path):
        pls, major, minor = open(path).read().split()[:3]
        r_versions = f"R {major}.{minor}, pls {pls}"
    caret = os.path.join(DATA_DIR, "caret-version.txt")
    if os.path.exists(caret):
        r_versions += f", caret {open(caret).read().strip()}"
    binaries = "; ".join(f"{label}: {s.binary} ({s.version()}, built {binary_time(s.binary)})"
                         for label, s in services.items())
    return (f"Python {platform.python_version()}, numpy {version('numpy')}, scikit-learn {version('scikit-learn')}, "
            f"scipy {version('scipy')}, pandas {version('pandas')}, chemotools {version('chemotools')}, {r_versions}; BLAS threads "
            f"{os.environ.get('OPENBLAS_NUM_THREADS')}. {binaries}")


def binary_time(path):
    stamp = datetime.datetime.fromtimestamp(os.path.getmtime(path), datetime.timezone.utc)
    return stamp.strftime("%Y-%m-%d %H:%M UTC")


def git_text():
    try:
        head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--", "src", "Cargo.toml"],
                               capture_output=True, text=True).stdout.strip()
        return head + (" with uncommitted changes under src/" if dirty else "")
    except OSError:
        return "unknown"


# ---------------------------------------------------------------------------------------------
# the report


def fmt(value, digits=4):
    if value is None:
        return "—"
    if isinstance(value, str):
        return value
    if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
        return f"{value:.3g}"
    return f"{value:.{digits}g}"


def cell(record, key, digits=4):
    if record is None:
        return "—"
    if record["status"] == "n/a":
        return "n/a"
    if record["status"] != "ok" and not record["aggregate"]:
        return record["status"]
    value = record["aggregate"].get(key)
    text = fmt(value, digits)
    return text + ("*" if record["status"] != "ok" and value is not None else "")


def best_peer(methods):
    scored = [(r["aggregate"]["rmsep"], m) for m, r in methods.items()
              if m in PEERS and r["aggregate"].get("rmsep") is not None]
    return min(scored) if scored else (None, None)


def row_label(ds, scheme, splits):
    n_train = len(train_rows(splits[0]))
    n_test = len(splits[0]["test"])
    counts = f"{n_train}/{n_test}"
    if scheme == "random":
        counts += f" ×{len(splits)}"
    if scheme == "paper":
        counts = f"{len(splits[0]['stages'][0])}+{len(splits[0]['stages'][1])}/{n_test} ×{len(splits)}"
    return f"| {ds.name} | {ds.target} | {scheme} | {counts} |"


def metric_table(title, key, rows, columns, digits=4, with_ratio=False):
    head = "| data set | target | split | train/test | " + " | ".join(columns)
    rule = "| --- | --- | --- | --- | " + " | ".join("---" for _ in columns)
    if with_ratio:
        head += " | mordant / best peer"
        rule += " | ---"
    lines = [f"### {title}", "", head + " |", rule + " |"]
    for label, methods in rows:
        line = label + " " + " | ".join(cell(methods.get(c), key, digits) for c in columns)
        if with_ratio:
            line += " | " + ratio_text(methods)
        lines.append(line + " |")
    return lines + [""]


def ratio_text(methods, method="mordant"):
    best, peer = best_peer(methods)
    mine = methods.get(method, {}).get("aggregate", {}).get("rmsep")
    if best is None or mine is None:
        return methods.get(method, {}).get("status", "—")
    return f"{mine / best:.3f} ({peer})"


def report(results, datasets, services, args, seconds, versions):
    columns = [m for m in PEERS if any(m in r for _, r in rows_of(results))]
    columns += [m for m, _, _ in mordant_methods(services)]
    rows = [(row_label(datasets[d], s, results[d][s]["splits"]), r) for (d, s), r in rows_of(results, keys=True)]
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    workaround = ("1 (a model whose first batch is shorter than p is created with first_fit_rows = its length)"
                  if args.workaround else "unset")
    lines = [
        "# Accuracy: mordant through its API against scikit-learn", "",
        f"Written by `bench/accuracy` on {now} in {seconds:.0f} s. Machine: {os.cpu_count()} cores "
        f"({cpu_model()}), Linux {platform.release()}. Work tree at {git_text()}. {versions}.", "",
        f"Command: `{' '.join(['bench/accuracy'] + args.argv)}`; ACCURACY_FIRST_FIT_ROWS_WORKAROUND={workaround}.",
        "Protocol and metrics: the docstring of `bench/accuracy.py`. RMSEP is the root of the mean over splits of "
        "each split's MSE; R² the mean over splits (dyeing: uniform over the 82 outputs, test 2); coverage, CRPS and "
        "the interval score pool every test prediction (dyeing: every cell). `*`: some splits failed (see the notes); "
        "`stuck`/`timeout`/`error`: mordant gave no predictions; `n/a`: no regular grid to declare.", "",
    ]
    lines += metric_table("RMSEP (lower is better)", "rmsep", rows, columns, with_ratio=True)
    lines += metric_table("R² (mean over splits)", "r2", rows, columns)
    prob_columns = [c for c in columns if c not in ("PLS", "RidgeCV", "OLS")]
    lines += metric_table("95 % coverage (pooled; nominal 0.95)", "coverage", rows, prob_columns, digits=3)
    lines += metric_table("CRPS (mean; lower is better)", "crps", rows, prob_columns)
    lines += metric_table("95 % interval score (mean; lower is better)", "interval_score", rows, prob_columns)
    lines += dyeing_lines(results, services)
    lines += ratio_lines(rows_of(results, keys=True), services)
    lines += coverage_lines(rows_of(results, keys=True), services)
    lines += calibration_lines(rows_of(results, keys=True), services)
    lines += timing_lines(rows_of(results, keys=True), columns)
    lines += notes_lines(results, datasets)
    return "\n".join(lines) + "\n"


def rows_of(results, keys=False):
    out = []
    for d, schemes in results.items():
        for s, entry in schemes.items():
            out.append(((d, s), entry["methods"]) if keys else (d, entry["methods"]))
    return out


def dyeing_lines(results, services):
    if "dyeing" not in results:
        return []
    methods = results["dyeing"]["paper"]["methods"]
    lines = ["### Dyeing, the paper's protocol (test 2)", "",
             "| method | trials | R² uniform, mean | R² uniform, median | R² dyes present, mean | RMSEP | "
             "coverage | coverage non-zero | CRPS |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for method, record in methods.items():
        a = record["aggregate"]
        if not a:
            lines.append(f"| {method} | — | {record['status']} | | | | | | |")
            continue
        lines.append(f"| {method} | {a['splits']} | {fmt(a['r2'])} | {fmt(a['r2_median'])} | {fmt(a.get('r2_present'))} "
                     f"| {fmt(a['rmsep'])} | {fmt(a.get('coverage'), 3)} | {fmt(a.get('coverage_nonzero'), 3)} "
                     f"| {fmt(a.get('crps'))} |")
    return lines + [""]


def ratio_interval(mine, peer, resamples=BOOTSTRAP_RESAMPLES):
    """The central 95 % range of mordant's RMSEP over the peer's under a paired bootstrap: the
    splits resampled where there are at least 10, else the test rows of the one split (the same
    draws for both methods)."""
    pairs = {}
    for record, slot in ((peer, 1), (mine, 0)):
        for split in record["per_split"]:
            if "row_se" in split:
                pairs.setdefault(split["seed"], [None, None])[slot] = split
    pairs = [p for p in pairs.values() if p[0] is not None and p[1] is not None]
    if not pairs:
        return None
    rng = np.random.default_rng(0)
    if len(pairs) >= 10:
        a = np.array([p[0]["mse"] for p in pairs])
        b = np.array([p[1]["mse"] for p in pairs])
    else:
        a = np.concatenate([p[0]["row_se"] for p in pairs])
        b = np.concatenate([p[1]["row_se"] for p in pairs])
    draws = rng.integers(0, len(a), size=(resamples, len(a)))
    ratios = np.sqrt(a[draws].sum(axis=1) / np.maximum(b[draws].sum(axis=1), np.finfo(float).tiny))
    low, high = np.quantile(ratios, [0.025, 0.975])
    return float(low), float(high)


def ratio_lines(keyed_rows, services):
    lines = ["### mordant RMSEP / best peer RMSEP", "",
             "In brackets the central 95 % range of the ratio under a paired bootstrap (the splits "
             "resampled where there are 10 or more, else the test rows), the best peer held fixed.", ""]
    for (d, s), methods in keyed_rows:
        best, peer = best_peer(methods)
        parts = []
        for method, _, _ in mordant_methods(services):
            record = methods[method]
            mine = record["aggregate"].get("rmsep")
            if mine is None or best is None:
                parts.append(f"{method} {record['status']}")
            else:
                interval = ratio_interval(record, methods[peer])
                within = f" [{interval[0]:.2f}–{interval[1]:.2f}]" if interval else ""
                parts.append(f"{method} {fmt(mine)} → {mine / best:.3f}{within}")
        lines.append(f"- {d} ({s}): best peer {peer} {fmt(best)}; " + "; ".join(parts))
    return lines + [""]


def coverage_lines(keyed_rows, services):
    """The coverage of each probabilistic method's intervals pooled over every target, over the
    spectral targets alone (dyeing's 82 × 642 cells per trial outweigh the rest), and the mean
    of the per-target coverages."""
    lines = ["### Coverage of the 95 % intervals over all targets", ""]
    for method in [m for m, _, _ in mordant_methods(services)] + ["BayesianRidge", "ARD"]:
        aggs = {key: r[method]["aggregate"] for key, r in keyed_rows if method in r and r[method]["aggregate"].get("n")}
        if not aggs:
            continue
        n = sum(a["n"] for a in aggs.values())
        covered = sum(a["covered"] for a in aggs.values())
        text = f"- {method}: {covered / n:.3f} pooled over all {n} test predictions of {len(aggs)} targets"
        spectral = [a for (d, _), a in aggs.items() if d != "dyeing"]
        if spectral and len(spectral) < len(aggs):
            ns = sum(a["n"] for a in spectral)
            text += f"; {sum(a['covered'] for a in spectral) / ns:.3f} over the {ns} of the spectral targets"
        text += f"; mean of the per-target coverages {np.mean([a['coverage'] for a in aggs.values()]):.3f}"
        lines.append(text)
    return lines + [""]


def calibration_lines(keyed_rows, services):
    """Coverage of the central 50, 80 and 95 % intervals per target (dyeing: its non-zero cells,
    since an exact zero lies inside any interval around a prediction near it), and where the
    target has a single split, how surprising its 50 % and 95 % counts would be for calibrated
    intervals: their two-sided exact binomial p-values among that many independent test values.
    Random splits reuse the same rows across splits, so their pooled counts are not independent
    trials and get no p-value."""
    from scipy.stats import binomtest

    methods = [m for m, _, _ in mordant_methods(services)] + ["BayesianRidge"]
    lines = ["### Calibration: coverage of the central 50, 80 and 95 % intervals", "",
             "Nominal 0.50 / 0.80 / 0.95; dyeing: the non-zero cells. p: the two-sided binomial p-values "
             "of the 50 % and the 95 % counts for calibrated intervals (single-split targets only).", "",
             "| data set | split | test values | " + " | ".join(methods) + " |",
             "| --- | --- | --- | " + " | ".join("---" for _ in methods) + " |"]
    for (d, s), records in keyed_rows:
        cells, count = [], None
        for method in methods:
            a = records.get(method, {}).get("aggregate", {})
            suffix = "_nonzero" if d == "dyeing" else ""
            if a.get(f"coverage50{suffix}") is None:
                cells.append("—" if method not in records else records[method]["status"])
                continue
            n = a[f"n{suffix}"] if suffix else a["n"]
            covered = a[f"covered{suffix}"]
            count = n
            text = f"{a[f'coverage50{suffix}']:.3f} / {a[f'coverage80{suffix}']:.3f} / {covered / n:.3f}"
            if a["splits"] == 1:
                text += (f" (p {binomtest(a[f'covered50{suffix}'], n, 0.5).pvalue:.2g} at 50 %, "
                         f"{binomtest(covered, n, 1 - ALPHA).pvalue:.2g} at 95 %)")
            cells.append(text)
        lines.append(f"| {d} | {s} | {count if count is not None else '—'} | " + " | ".join(cells) + " |")
    return lines + [""]


def timing_lines(keyed_rows, columns):
    lines = ["### Seconds spent (fit and predict over all splits; mordant: HTTP, folding and polling)", "",
             "| data set | split | " + " | ".join(columns) + " |", "| --- | --- | " + " | ".join("---" for _ in columns) + " |"]
    for (d, s), methods in keyed_rows:
        lines.append(f"| {d} | {s} | " + " | ".join(
            f"{methods[c]['seconds']:.1f}" if c in methods and methods[c]["status"] != "n/a" else "—"
            for c in columns) + " |")
    return lines + [""]


def notes_lines(results, datasets):
    lines = ["### Notes", ""]
    for d in results:
        ds = datasets[d]
        lines.append(f"- {d}: {len(ds.x)} rows, {ds.x.shape[1]} inputs, {ds.y.shape[1]} output(s); {ds.grid_note}.")
        lines += [f"- {note}." for note in ds.notes]
        for s, entry in results[d].items():
            for method, record in entry["methods"].items():
                if record.get("failure"):
                    lines.append(f"- {d} ({s}), {method}: {record['status']} — {record['failure'][:600]}")
                stale = [i for i in record["info"] if i.get("stale_predict_retries")]
                if stale:
                    worst = max(i["stale_predict_seconds"] for i in stale)
                    lines.append(f"- {d} ({s}), {method}: in {len(stale)} of {len(record['info'])} splits predict "
                                 f"answered 409 or an older version after the batch status said folded (retried, "
                                 f"up to {worst:.2f} s)")
                if method == "PLS":
                    chosen = [i["n_components"] for i in record["info"]]
                    lines.append(f"- {d} ({s}), PLS components chosen: {summary(chosen)}")
                if method == "RidgeCV":
                    chosen = [i["alpha"] for i in record["info"]]
                    lines.append(f"- {d} ({s}), RidgeCV alpha chosen: {summary(chosen, '.3g')}")
                if method in ("BayesianRidge", "ARD"):
                    fits = sum(i.get("fits", 0) for i in record["info"])
                    capped = sum(i.get("stopped_at_max_iter", 0) for i in record["info"])
                    if capped:
                        lines.append(f"- {d} ({s}), {method}: {capped} of {fits} fits stopped at max_iter "
                                     "(not converged; such answers move with round-off, e.g. the BLAS thread count)")
                if method == "ARD" and d == "dyeing" and record["aggregate"].get("splits", 0) < len(entry["splits"]):
                    lines.append(f"- dyeing, ARD: first {record['aggregate'].get('splits', 0)} trials only "
                                 "(`--ard-trials`; 82 fits per trial)")
    return lines + [""]


def summary(values, spec="d"):
    if len(values) == 1:
        return format(values[0], spec)
    low, high = format(min(values), spec), format(max(values), spec)
    return f"median {format(float(np.median(values)), '.3g')}, range {low}–{high}"


def json_dump(results, datasets, args, seconds, versions):
    return {
        "written": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "seconds": seconds, "argv": args.argv, "workaround": args.workaround, "versions": versions,
        "work_tree": git_text(),
        "datasets": {d: {"rows": len(ds.x), "inputs": ds.x.shape[1], "outputs": ds.outputs, "grid": ds.grid,
                         "grid_note": ds.grid_note, "notes": ds.notes} for d, ds in datasets.items()},
        "results": {d: {s: {"splits": entry["splits"],
                            "methods": {m: {k: v for k, v in r.items()} for m, r in entry["methods"].items()}}
                        for s, entry in schemes.items()} for d, schemes in results.items()},
    }


# ---------------------------------------------------------------------------------------------
# commands


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="bench/accuracy", description="mordant's accuracy against scikit-learn")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("export", help="export the data sets to target/bench/accuracy-data/")
    run = sub.add_parser("run", help="the benchmark")
    run.add_argument("--quick", action="store_true", help="5 random repeats, 3 dyeing trials")
    run.add_argument("--only", default=",".join(DATASETS), help="comma-separated data sets")
    run.add_argument("--repeats", type=int, help="random splits of gasoline, yarn and tecator (100; --quick 5)")
    run.add_argument("--trials", type=int, help="dyeing trials (20; --quick 3)")
    run.add_argument("--ard-trials", type=int, help="dyeing trials for ARD (default: all; 82 fits each)")
    run.add_argument("--fold-timeout", type=float, default=60.0, help="seconds a batch may take to fold")
    run.add_argument("--prior", choices=["ard", "ridge", "smooth", "auto"],
                     help="every mordant model created with this prior family (default: the default "
                          "spec, which leaves it out); smooth needs a declared spectrum, so its named "
                          "variants are refused")
    run.add_argument("--out", default=os.path.join(ROOT, "target/bench/accuracy.md"))
    args = parser.parse_args(argv)
    args.argv = argv[1:]
    if args.command == "run":
        args.repeats = args.repeats or (5 if args.quick else 100)
        args.trials = args.trials or (3 if args.quick else 20)
        args.ard_trials = min(args.trials, args.ard_trials or args.trials)
        args.only = [d.strip() for d in args.only.split(",") if d.strip()]
        unknown = set(args.only) - set(DATASETS)
        if unknown:
            parser.error(f"unknown data sets {sorted(unknown)}; known: {', '.join(DATASETS)}")
        args.workaround = os.environ.get("ACCURACY_FIRST_FIT_ROWS_WORKAROUND") == "1"
    return args


def check_python_packages():
    missing = []
    for module in ["numpy", "sklearn", "pandas", "chemotools"]:
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if missing:
        sys.exit(f"bench/accuracy needs {', '.join(missing)}: {PIP_HINT}")


def start_services():
    binary = os.environ.get("ACCURACY_BIN", os.path.join(ROOT, "target/release/mordant"))
    if not os.path.exists(binary):
        sys.exit(f"no mordant binary at {binary}: cargo build --release, or set ACCURACY_BIN")
    services = {"mordant": Service(binary)}
    prev = os.environ.get("ACCURACY_PREV_BIN")
    if prev:
        if not os.path.exists(prev):
            services["mordant"].stop()
            sys.exit(f"ACCURACY_PREV_BIN={prev} does not exist (bench/accuracy build-prev builds one)")
        services["mordant prev"] = Service(prev)
    return services


def cmd_run(args):
    started = time.perf_counter()
    progress = lambda text: print(f"accuracy [{time.perf_counter() - started:6.0f} s] {text}", file=sys.stderr)
    export_all(DATA_DIR, args.only)
    datasets = {d: LOADERS[d](DATA_DIR) for d in args.only}
    services = start_services()
    results = {}
    try:
        for d, ds in datasets.items():
            results[d] = {}
            for scheme, splits in schemes_for(ds, args).items():
                methods = run_scheme(ds, scheme, splits, services, args, progress)
                results[d][scheme] = {"splits": splits, "methods": methods}
        seconds = time.perf_counter() - started
        versions = versions_text(services)
        text = report(results, datasets, services, args, seconds, versions)
    finally:
        for service in services.values():
            service.stop()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    json_path = os.path.splitext(args.out)[0] + ".json"
    with open(json_path, "w") as f:
        json.dump(json_dump(results, datasets, args, seconds, versions), f, ensure_ascii=False)
    print(text)
    print(f"accuracy: wrote {args.out} and {json_path} in {seconds:.0f} s", file=sys.stderr)


def main(argv):
    args = parse_args(argv[1:])
    check_python_packages()
    if args.command == "export":
        export_all(DATA_DIR, DATASETS)
        for d in DATASETS:
            ds = LOADERS[d](DATA_DIR)
            print(f"{d}: {ds.x.shape[0]} rows × {ds.x.shape[1]} inputs, {ds.y.shape[1]} output(s); {ds.grid_note}")
        return 0
    cmd_run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
