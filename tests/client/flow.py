"""The README's service flow through a client generated from the committed OpenAPI document.

    python3 tests/client/flow.py BASE_URL ADMIN_KEY GENERATED_DIR

GENERATED_DIR holds the package `openapi-python-client` generated (`client`). Every call goes
through the generated functions and models, CSV included; any answer other than the documented
one, or a value of another type than the document promises, fails the run.
"""

import io
import sys
import time

base, key, generated = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, generated)

from client import AuthenticatedClient  # noqa: E402
from client.api.batches import get_batch, ingest_batch, list_batches  # noqa: E402
from client.api.models import create_model, delete_model, get_model, get_posterior  # noqa: E402
from client.api.operations import healthz, readyz  # noqa: E402
from client.api.predict import predict  # noqa: E402
from client.api.versions import list_versions, refit_model, restore_version  # noqa: E402
from client.models import (  # noqa: E402
    BatchAccepted,
    BatchList,
    BatchRequest,
    BatchStatus,
    BatchView,
    CreateModel,
    ErrorBody,
    ModelView,
    PredictRequest,
    PredictResponse,
)
from client.types import File  # noqa: E402

api = AuthenticatedClient(base_url=base, token=key, raise_on_unexpected_status=True)


def check(condition, what):
    if not condition:
        raise SystemExit(f"FAILED: {what}")


assert healthz.sync_detailed(client=api).status_code == 200
assert readyz.sync_detailed(client=api).status_code == 200

# 1. Create a model.
created = create_model.sync(
    client=api,
    body=CreateModel.from_dict(
        {"name": "cotton-reactive", "features": ["R400", "R410", "R420"], "outputs": ["red_195", "yellow_145"]}
    ),
)
check(isinstance(created, ModelView) and created.name == "cotton-reactive", f"create: {created}")

# 2. A batch of lab results as JSON, named by its Idempotency-Key, then the same again.
batch = BatchRequest.from_dict(
    {
        "x": [[0.41, 0.39, 0.35], [0.28, 0.26, 0.25], [0.33, 0.31, 0.30], [0.52, 0.50, 0.47],
              [0.22, 0.24, 0.29], [0.45, 0.40, 0.38]],
        "y": [[1.2, 0.3], [2.5, 0.8], [1.9, 0.5], [0.4, 0.1], [2.9, 0.0], [0.9, 0.2]],
    }
)
for attempt in range(2):
    sent = ingest_batch.sync_detailed("cotton-reactive", client=api, body=batch, idempotency_key="lot-0042")
    check(sent.status_code == 202 and isinstance(sent.parsed, BatchAccepted), f"ingest: {sent}")
    check(sent.parsed.batch_id == "lot-0042", f"batch id: {sent.parsed}")
    replayed = sent.headers.get("idempotent-replayed")
    check((replayed == "true") == (attempt == 1), f"replayed header on attempt {attempt}: {replayed}")
    check(sent.headers.get("x-request-id"), "x-request-id")

# 3. Until it is folded.
deadline = time.time() + 60
while True:
    status = get_batch.sync("cotton-reactive", "lot-0042", client=api)
    check(isinstance(status, BatchView), f"status: {status}")
    if status.status == BatchStatus.FOLDED:
        break
    check(time.time() < deadline, f"not folded in 60 s: {status}")
    time.sleep(0.1)
check(isinstance(status.version, int) and status.version >= 1, f"version: {status}")

# 4. Predict: a number for every mean and variance.
answer = predict.sync(
    "cotton-reactive", client=api, body=PredictRequest.from_dict({"x": [[0.35, 0.33, 0.31]]})
)
check(isinstance(answer, PredictResponse) and len(answer.predictions) == 1, f"predict: {answer}")
for value in answer.predictions[0].mean + answer.predictions[0].variance:
    check(isinstance(value, float), f"a number: {answer}")
check(all(v > 0 for v in answer.predictions[0].variance), f"variances: {answer}")

# CSV, any column order, as bytes.
csv = b"R420,R410,R400,red_195,yellow_145\n0.30,0.32,0.34,1.7,0.4\n"
sent = ingest_batch.sync_detailed(
    "cotton-reactive", client=api, body=File(payload=io.BytesIO(csv)), idempotency_key="lot-0043"
)
check(sent.status_code == 202 and sent.parsed.rows == 1, f"CSV: {sent}")

# A documented error comes back as the documented error body.
bad = predict.sync_detailed(
    "cotton-reactive", client=api, body=PredictRequest.from_dict({"x": [[0.35, 0.33]]})
)
check(bad.status_code == 422 and isinstance(bad.parsed, ErrorBody), f"error: {bad}")
check(bad.parsed.error.details[0].path == "/x/0", f"error path: {bad.parsed}")

# The other endpoints of the README's flow.
listed = list_batches.sync("cotton-reactive", client=api, status=BatchStatus.FOLDED, limit=10)
check(isinstance(listed, BatchList) and listed.batches, f"list: {listed}")
check(isinstance(get_model.sync("cotton-reactive", client=api), ModelView), "model")
check(get_posterior.sync_detailed("cotton-reactive", client=api).status_code == 200, "posterior")
versions = list_versions.sync_detailed("cotton-reactive", client=api)
check(versions.status_code == 200, f"versions: {versions}")
check(restore_version.sync_detailed("cotton-reactive", 1, client=api).status_code == 201, "restore")
check(refit_model.sync_detailed("cotton-reactive", client=api).status_code == 201, "refit")
check(delete_model.sync_detailed("cotton-reactive", client=api).status_code == 204, "delete")
print("the README's flow ran through the generated client")
