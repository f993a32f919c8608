"""How surprising the plant's own rows are to a model of them: the drift check on the dyeing data.

    python3 bench/surprise.py [--trials N] [--singles N] [--bin PATH ...]

On `bench/accuracy`'s paper splits of the dyeing data, mordant (through its HTTP API, the
default model spec, no drift threshold) learns a trial's training rows in one batch; then its
first `--singles` test rows arrive one per batch, as a plant's single dips and `/correct`'s
learnt dips do, and then the rest of the first 100 test rows as batches of 15 (a shorter tail
left out; four of them after the default 40 singles). Each batch
is folded; its status's `surprise` (one `z` per output, README "Drift and bad batches") is read.
These rows come from the same plant as the training rows: a model that counts its noise as it
was fitted reads `z` about 1 and seldom far above it, and a drift threshold of 25 (the README's
example) should hold none of them. Per binary: the largest `z` of each batch (median, 95th
percentile, maximum) and how many batches a threshold of 25 would have held, single rows and
15-row batches apart. Every binary given with --bin runs the same trials, one after the other.

Reads the dyeing data as `bench/accuracy` does.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import accuracy as A  # noqa: E402

HOLD = 25.0


def largest_surprise(service, name, batch_id, rows, timeout=600):
    """The largest `z` over the outputs of one folded batch (`None` where no output has one)."""
    A.wait_folded(service, name, batch_id, rows, timeout)
    status = A.expect(service.call("GET", f"/v1/models/{name}/batches/{batch_id}"), 200, "batch status")
    z = [v for v in status.get("surprise") or [] if v is not None]
    return max(z) if z else None


def trial(service, ds, split, singles):
    """The largest surprise of each single-row batch and of each 15-row batch of one trial."""
    name = "surprise"
    service.call("DELETE", f"/v1/models/{name}")
    A.create_model(service, A.model_spec(ds, "named", name, 0, False))
    try:
        train = A.train_rows(split)
        body = dict(A.input_body(ds, "named", train), batch_id="train", y=ds.y[train].tolist())
        A.expect(service.call("POST", f"/v1/models/{name}/batches", body), 202, "training batch")
        A.wait_folded(service, name, "train", len(train), 600)
        test = split["test"][:100]
        batches = [[i] for i in test[:singles]]
        batches += [test[s:s + 15] for s in range(singles, len(test) - 14, 15)]
        found = {"single": [], "batch": []}
        for b, rows in enumerate(batches):
            body = dict(A.input_body(ds, "named", rows), batch_id=f"b{b}", y=ds.y[rows].tolist())
            A.expect(service.call("POST", f"/v1/models/{name}/batches", body), 202, f"batch b{b}")
            z = largest_surprise(service, name, f"b{b}", len(rows))
            if z is not None:
                found["single" if len(rows) == 1 else "batch"].append(z)
        return found
    finally:
        service.call("DELETE", f"/v1/models/{name}")


def summary(z, rows):
    """One table row's cells after the build: batches, rows each, the largest z's spread, held."""
    z = np.asarray(z, float)
    if not len(z):
        return f"0 | {rows} | | "
    spread = f"{np.median(z):.3g} / {np.percentile(z, 95):.3g} / {z.max():.3g}"
    return f"{len(z)} | {rows} | {spread} | {int(np.sum(z > HOLD))}"


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--singles", type=int, default=40)
    parser.add_argument("--bin", action="append")
    args = parser.parse_args(argv[1:])
    if not 0 <= args.singles <= 100:
        sys.exit("--singles: from 0 to 100")
    binaries = args.bin or [os.path.join(A.ROOT, "target/release/mordant")]
    ds = A.load_dyeing(None)
    splits = A.paper_splits(len(ds.x), args.trials)
    print(f"dyeing data, {args.trials} paper trials; per batch the largest z over the 82 outputs")
    print()
    print(f"| build | batches | rows each | largest z: median / 95th percentile / max | held at {HOLD:g} |")
    print("| --- | --- | --- | --- | --- |")
    for binary in binaries:
        service = A.Service(binary)
        try:
            found = {"single": [], "batch": []}
            for split in splits:
                for kind, z in trial(service, ds, split, args.singles).items():
                    found[kind] += z
        finally:
            service.stop()
        for kind, rows in (("single", 1), ("batch", 15)):
            print(f"| {binary} | {summary(found[kind], rows)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
