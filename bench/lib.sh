# Shared by the bench/ scripts: a release build of the service on a free loopback port,
# against a database of its own, stopped and dropped on exit: by default on the PostgreSQL that
# scripts/with-postgres finds or starts; with BENCH_STORE=sqlite, an embedded SQLite file in the
# service's work directory.
#
#   source bench/lib.sh
#   start_service NAME [VAR=VALUE ...]    # sets $base, $service (pid), $work, $database_url
#
# BENCH_BIN=path runs that binary instead of building target/release/mordant (to compare two
# builds in one run).
#   stop_service                          # stops it and drops its database

cd "$(dirname "${BASH_SOURCE[0]}")/.."

need() { # command, how to install it
    command -v "$1" >/dev/null || { echo "$(basename "$0") needs $1: $2" >&2; exit 1; }
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

stop_service() {
    if [[ -n "${service:-}" ]]; then
        kill "$service" 2>/dev/null || true
        wait "$service" 2>/dev/null || true
    fi
    if [[ "${database_url:-}" == postgres* ]]; then
        psql "${database_url%/*}/postgres" -qc "DROP DATABASE IF EXISTS \"${database_url##*/}\" WITH (FORCE)" \
            >/dev/null 2>&1 || true
    fi
    [[ -n "${work:-}" ]] && rm -rf "$work"
    service="" database_url="" work=""
}
trap stop_service EXIT

start_service() { # name, extra environment...
    local name=$1
    shift
    local binary=${BENCH_BIN:-target/release/mordant}
    [[ -n "${BENCH_BIN:-}" ]] || cargo build --release --quiet
    work=$(mktemp -d)
    case "${BENCH_STORE:-postgres}" in
        postgres) database_url=$(scripts/with-postgres --database "mordant_bench_${name}_$$" printenv DATABASE_URL) ;;
        sqlite) database_url="sqlite://$work/mordant.db" ;;
        *) echo "BENCH_STORE must be postgres or sqlite" >&2; exit 1 ;;
    esac
    local port
    port=$(free_port)
    base="http://127.0.0.1:$port"
    env DATABASE_URL="$database_url" MORDANT_ADDR="127.0.0.1:$port" MORDANT__LOG__FILTER=warn "$@" \
        "$binary" serve >"$work/service.log" 2>&1 &
    service=$!
    for _ in $(seq 100); do
        curl -sf "$base/healthz" >/dev/null && return 0
        sleep 0.1
    done
    echo "the service did not start:" >&2
    cat "$work/service.log" >&2
    exit 1
}

# Resident memory of the service, in kB.
rss_kb() {
    awk '/^VmRSS:/ {print $2}' "/proc/$service/status"
}

# POST a JSON file; fail loudly.
post_json() { # path, file
    curl -sf "$base$1" -H 'content-type: application/json' -d @"$2"
}

# Waits until every batch of model $1 is folded (asks the API: works on either store).
wait_folded() { # model name
    for _ in $(seq 6000); do
        local queued
        queued=$(curl -sf "$base/v1/models/$1" | python3 -c 'import json, sys; print(json.load(sys.stdin)["pending_batches"])')
        [[ "$queued" == 0 ]] && return 0
        sleep 0.05
    done
    echo "model $1 still has queued batches" >&2
    exit 1
}

# The predict benchmarks' model "bench" (p = 32 features, m = 3 outputs), trained on 2,000 rows
# and folded; writes $work/one.json (one row) and $work/thousand.json (1,000 rows) to predict.
predict_fixture() {
    python3 - "$work" <<'PY'
import json, random, sys
work = sys.argv[1]
random.seed(1)
p, m = 32, 3
features = [f"R{400 + 10 * i}" for i in range(p)]
json.dump({"name": "bench", "features": features, "outputs": ["red", "yellow", "blue"]},
          open(f"{work}/model.json", "w"))
weights = [[random.gauss(0, 1) for _ in range(p)] for _ in range(m)]
x = [[random.random() for _ in range(p)] for _ in range(2000)]
y = [[sum(w * v for w, v in zip(weights[k], row)) + random.gauss(0, 0.05) for k in range(m)]
     for row in x]
json.dump({"batch_id": "train", "x": x, "y": y}, open(f"{work}/train.json", "w"))
json.dump({"x": x[:1]}, open(f"{work}/one.json", "w"))
json.dump({"x": x[:1000]}, open(f"{work}/thousand.json", "w"))
PY
    post_json /v1/models "$work/model.json" >/dev/null
    post_json /v1/models/bench/batches "$work/train.json" >/dev/null
    wait_folded bench
}
