"""Small batches after a small first fit: what one-step updates cost against a refit.

    python3 bench/incremental.py [--repeats N] [--bin PATH ...] [--out PATH.md]

A calibration often starts with a few samples and grows batch by batch. mordant is trained
through its HTTP API with the default model spec on gasoline (Debian's r-cran-pls; 401 bands),
the spectrum declared and, on the same splits, posted as named features: per repeat (seed 0…), a quarter of the rows held out for test, then a
first batch of 10 rows and batches of 5 until 45 rows are in, each folded by the model's default
update; then the test rows are predicted (RMSEP, 95 % coverage), and once more after an explicit
refit (`POST /v1/models/{name}/refit`: Algorithm 2 on all its statistics, what a model trained on
the 45 rows at once answers). Every binary given with --bin runs the same splits.

Reads the data that `bench/accuracy export` writes (target/bench/accuracy-data/).
"""

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import accuracy  # noqa: E402  (the API client and the data loaders)

FIRST, STEP, TOTAL = 10, 5, 45


def run(service, ds, variant, seed, timeout=120):
    """Test errors and coverage flags after the batches and after a refit."""
    perm = np.random.default_rng(seed).permutation(len(ds.x))
    test, rest = perm[:len(ds.x) // 4], perm[len(ds.x) // 4:]
    name = "incremental"
    service.call("DELETE", f"/v1/models/{name}")
    spec = accuracy.model_spec(ds, variant, name, FIRST, True)
    accuracy.create_model(service, spec)
    try:
        sizes = [FIRST] + [STEP] * ((TOTAL - FIRST) // STEP)
        start, version = 0, None
        for b, size in enumerate(sizes):
            rows = rest[start:start + size].tolist()
            start += size
            body = dict(accuracy.input_body(ds, variant, rows), batch_id=f"b{b}", y=ds.y[rows].tolist())
            accuracy.expect(service.call("POST", f"/v1/models/{name}/batches", body), 202, f"batch {b}")
            version = accuracy.wait_folded(service, name, f"b{b}", start, timeout)
        out = {}
        for label in ("batches", "refit"):
            if label == "refit":
                version = accuracy.expect(service.call("POST", f"/v1/models/{name}/refit"), 201, "refit").get("version")
            mean, variance, _ = accuracy.predict(service, ds, variant, name, test.tolist(), version, timeout)
            error = mean[:, 0] - ds.y[test, 0]
            out[label] = (error, np.abs(error) <= accuracy.Z95 * np.sqrt(variance[:, 0]))
        return out
    finally:
        service.call("DELETE", f"/v1/models/{name}")


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # 15 test rows a repeat: 20 repeats move a coverage figure by several points.
    parser.add_argument("--repeats", type=int, default=100)
    parser.add_argument("--bin", action="append", help="binaries to compare (default target/release/mordant)")
    parser.add_argument("--out", default="target/bench/incremental.md")
    args = parser.parse_args(argv)
    ds = accuracy.load_gasoline(os.path.join("target", "bench", "accuracy-data"))
    started = time.monotonic()
    lines = [
        "# Small batches after a small first fit",
        "",
        f"`python3 bench/incremental.py --repeats {args.repeats}`; protocol: the docstring of "
        "`bench/incremental.py`. gasoline: a first batch of 10 rows, then batches of 5 "
        "to 45; RMSEP and 95 % coverage on the held-out quarter, pooled over the repeats.",
        "",
        "| binary | spectrum | RMSEP after the batches | after a refit | ratio | coverage after the batches | after a refit |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for binary in args.bin or ["target/release/mordant"]:
        service = accuracy.Service(binary)
        try:
            for variant in ("spectrum", "named"):
                pooled = {"batches": ([], []), "refit": ([], [])}
                for seed in range(args.repeats):
                    for label, (error, covered) in run(service, ds, variant, seed).items():
                        pooled[label][0].extend(error)
                        pooled[label][1].extend(covered)
                rmsep = {k: float(np.sqrt(np.mean(np.square(e)))) for k, (e, _) in pooled.items()}
                coverage = {k: float(np.mean(c)) for k, (_, c) in pooled.items()}
                lines.append(f"| {binary} | {'declared' if variant == 'spectrum' else 'named features'} | "
                             f"{rmsep['batches']:.4g} | {rmsep['refit']:.4g} | "
                             f"{rmsep['batches'] / rmsep['refit']:.3f} | {coverage['batches']:.3f} | "
                             f"{coverage['refit']:.3f} |")
        finally:
            service.stop()
    lines += ["", f"{time.monotonic() - started:.0f} s."]
    accuracy.write_report(args.out, lines)


if __name__ == "__main__":
    main(sys.argv[1:])
