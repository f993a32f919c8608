//! API keys and scopes: every endpoint against every kind of caller, CORS and the separate
//! metrics listener. (The key lifecycle across replicas is in `replicas.rs`.)

use mordant::auth::Scope;
use mordant::http::auth::Access;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::spawn_configured;

pub(crate) const ADMIN_KEY: &str = "test-bootstrap-admin-key-0123456789abcdef";

fn model_spec() -> Value {
    json!({"name": "cotton", "features": ["R400", "R410"], "outputs": ["red"]})
}

/// A request to `route` (placeholders filled in) with a body that the endpoint accepts.
fn concrete(route: &str, key_id: i64) -> (String, Option<Value>) {
    let path = route
        .replace("{name}", "cotton")
        .replace("{batch_id}", "lot-1")
        .replace("{version}", "1")
        .replace("{id}", &key_id.to_string())
        .replace("{file}", file_of(route));
    let body = match route {
        "/v1/models" => Some(model_spec()),
        "/v1/models/{name}/batches" => Some(json!({
            "batch_id": "lot-2",
            "x": [[0.4, 0.3], [0.2, 0.5], [0.7, 0.1], [0.3, 0.3]],
            "y": [[1.0], [2.0], [0.5], [1.5]],
        })),
        "/v1/models/{name}/predict" => Some(json!({"x": [[0.4, 0.3]]})),
        "/v1/colour/compare" => Some(json!({
            "reference": {"start_nm": 400, "interval_nm": 150, "values": [40.0, 45.0, 50.0]},
            "sample": {"start_nm": 400, "interval_nm": 150, "values": [41.0, 45.0, 49.0]},
            "scale": "percent",
        })),
        "/v1/keys" => Some(json!({"name": "spare", "scopes": ["predict"]})),
        _ => None,
    };
    (path, body)
}

/// A file each page's route serves.
fn file_of(route: &str) -> &'static str {
    if route.starts_with("/console/") {
        "console.js"
    } else {
        "swagger-ui.css"
    }
}

pub(crate) async fn call(
    client: &reqwest::Client,
    base: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
    key: Option<&str>,
) -> reqwest::Response {
    let mut request = client.request(
        Method::from_bytes(method.as_bytes()).unwrap(),
        format!("{base}{path}"),
    );
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    if let Some(body) = body {
        request = request.json(body);
    }
    request.send().await.unwrap()
}

pub(crate) async fn new_key(
    app: &crate::helpers::TestApp,
    name: &str,
    scopes: &[&str],
) -> (i64, String) {
    let response = call(
        &app.client,
        &app.address,
        "POST",
        "/v1/keys",
        Some(&json!({"name": name, "scopes": scopes})),
        Some(ADMIN_KEY),
    )
    .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let body: Value = response.json().await.unwrap();
    (
        body["id"].as_i64().unwrap(),
        body["key"].as_str().unwrap().to_owned(),
    )
}

#[tokio::test]
async fn every_endpoint_against_every_scope() {
    let app = spawn_configured(|s| s.auth.admin_key = ADMIN_KEY.into()).await;
    let (_, admin) = new_key(&app, "ops", &["admin"]).await;
    let (_, ingest) = new_key(&app, "mes-line-3", &["ingest"]).await;
    let (_, predict) = new_key(&app, "colour-desk", &["predict"]).await;
    let (spare_id, _) = new_key(&app, "to-revoke", &["predict"]).await;
    // A model with a folded batch, so that every read has something to read.
    let (path, body) = concrete("/v1/models", 0);
    let created = call(
        &app.client,
        &app.address,
        "POST",
        &path,
        body.as_ref(),
        Some(&admin),
    )
    .await;
    assert_eq!(created.status(), StatusCode::CREATED);
    let batch = json!({"batch_id": "lot-1", "x": [[0.1, 0.2], [0.3, 0.1], [0.5, 0.5]], "y": [[1.0], [0.4], [2.0]]});
    let posted = call(
        &app.client,
        &app.address,
        "POST",
        "/v1/models/cotton/batches",
        Some(&batch),
        Some(&ingest),
    )
    .await;
    assert_eq!(posted.status(), StatusCode::ACCEPTED);

    // Destructive requests last, so the others see the model.
    let policy = mordant::http::policy();
    let mut policy: Vec<_> = policy
        .rules()
        .iter()
        .map(|rule| (rule.method.as_str(), rule.path.as_str(), rule.access))
        .collect();
    policy.sort_by_key(|(method, _, _)| *method == "DELETE");
    let callers = [
        ("ingest", Some(Scope::Ingest), ingest.as_str()),
        ("predict", Some(Scope::Predict), predict.as_str()),
        ("admin", Some(Scope::Admin), admin.as_str()),
        ("bootstrap", Some(Scope::Admin), ADMIN_KEY),
    ];
    let mut checked = 0;
    for (method, route, access) in policy {
        let (path, body) = concrete(route, spare_id);
        let anonymous = call(
            &app.client,
            &app.address,
            method,
            &path,
            body.as_ref(),
            None,
        )
        .await;
        let Access::Scopes(allowed) = access else {
            // Open, and served: not refused, and not the answer of a path no route has.
            assert!(
                !matches!(
                    anonymous.status(),
                    StatusCode::UNAUTHORIZED
                        | StatusCode::FORBIDDEN
                        | StatusCode::NOT_FOUND
                        | StatusCode::METHOD_NOT_ALLOWED
                ),
                "{method} {route} is open but answered {}",
                anonymous.status()
            );
            continue;
        };
        assert_eq!(
            anonymous.status(),
            StatusCode::UNAUTHORIZED,
            "{method} {route} without a key"
        );
        assert_eq!(anonymous.headers()["www-authenticate"], "Bearer");
        let error: Value = anonymous.json().await.unwrap();
        assert_eq!(error["error"]["code"], "unauthorized");

        let unknown = call(
            &app.client,
            &app.address,
            method,
            &path,
            body.as_ref(),
            Some("mdk_00000000000000000000000000000000"),
        )
        .await;
        assert_eq!(
            unknown.status(),
            StatusCode::UNAUTHORIZED,
            "{method} {route} with an unknown key"
        );

        for (who, scope, key) in callers {
            let scope = scope.unwrap();
            let response = call(
                &app.client,
                &app.address,
                method,
                &path,
                body.as_ref(),
                Some(key),
            )
            .await;
            let status = response.status();
            if scope == Scope::Admin || allowed.contains(&scope) {
                assert!(
                    !matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN),
                    "{who} may call {method} {route} but got {status}"
                );
            } else {
                assert_eq!(status, StatusCode::FORBIDDEN, "{who} on {method} {route}");
                let error: Value = response.json().await.unwrap();
                assert_eq!(error["error"]["code"], "forbidden");
                let message = error["error"]["message"].as_str().unwrap();
                assert!(
                    message.contains(who) || message.contains(route),
                    "{message}"
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 14 * 4, "{checked} checks");

    // HEAD follows GET's rule: open stays open, a read scope may read.
    let head = app.client.head(app.url("/healthz")).send().await.unwrap();
    assert_eq!(head.status(), StatusCode::OK);
    let head = app
        .client
        .head(app.url("/v1/models"))
        .bearer_auth(&predict)
        .send()
        .await
        .unwrap();
    assert_eq!(head.status(), StatusCode::OK);
    let head = app.client.head(app.url("/v1/models")).send().await.unwrap();
    assert_eq!(head.status(), StatusCode::UNAUTHORIZED);

    // A header that is not `Bearer <key>` is refused with a reason.
    let response = app
        .client
        .get(app.url("/v1/models"))
        .header("authorization", format!("Basic {ADMIN_KEY}"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    let error: Value = response.json().await.unwrap();
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Bearer")
    );
}

#[tokio::test]
async fn cors_allows_the_configured_origins_only() {
    let app = spawn_configured(|s| {
        s.auth.admin_key = ADMIN_KEY.into();
        s.server.cors_origins = vec!["https://colour.plant.example".into()];
    })
    .await;
    let preflight = |origin: &'static str| {
        app.client
            .request(Method::OPTIONS, app.url("/v1/models/cotton/predict"))
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "authorization, content-type",
            )
            .send()
    };
    let allowed = preflight("https://colour.plant.example").await.unwrap();
    assert!(allowed.status().is_success(), "{}", allowed.status());
    assert_eq!(
        allowed.headers()["access-control-allow-origin"],
        "https://colour.plant.example"
    );
    let methods = allowed.headers()["access-control-allow-methods"]
        .to_str()
        .unwrap();
    assert!(methods.contains("POST"), "{methods}");
    let headers = allowed.headers()["access-control-allow-headers"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    assert!(headers.contains("authorization"), "{headers}");

    let other = preflight("https://elsewhere.example").await.unwrap();
    assert!(other.headers().get("access-control-allow-origin").is_none());

    // A browser may call every operation the document lists, so every method in it is allowed.
    let document: Value = serde_json::from_str(&mordant::http::openapi_json().unwrap()).unwrap();
    let mut used: Vec<String> = document["paths"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|item| item.as_object().unwrap().keys())
        .filter(|key| !matches!(key.as_str(), "parameters" | "summary" | "description"))
        .map(|method| method.to_ascii_uppercase())
        .collect();
    used.sort();
    used.dedup();
    assert!(used.contains(&"PATCH".to_owned()), "{used:?}");
    for method in used {
        let response = app
            .client
            .request(Method::OPTIONS, app.url("/v1/models/cotton"))
            .header("origin", "https://colour.plant.example")
            .header("access-control-request-method", &method)
            .send()
            .await
            .unwrap();
        let allowed = response.headers()["access-control-allow-methods"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(
            allowed.split(',').any(|m| m.trim() == method),
            "{method} is not in {allowed}"
        );
    }

    // A real request from the allowed origin carries the header (and still needs a key).
    let response = app
        .client
        .get(app.url("/v1/models"))
        .header("origin", "https://colour.plant.example")
        .bearer_auth(ADMIN_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()["access-control-allow-origin"],
        "https://colour.plant.example"
    );
}

#[tokio::test]
async fn metrics_can_move_to_their_own_listener() {
    let app = spawn_configured(|s| s.server.metrics_addr = "127.0.0.1:0".into()).await;
    let metrics_address = app.metrics_address.clone().expect("a metrics listener");
    assert_eq!(app.get("/metrics").await.status(), StatusCode::NOT_FOUND);
    let response = app
        .client
        .get(format!("{metrics_address}/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(
        response
            .text()
            .await
            .unwrap()
            .contains("mordant_build_info")
    );
    // The metrics listener serves nothing else.
    let other = app
        .client
        .get(format!("{metrics_address}/v1/models"))
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), StatusCode::NOT_FOUND);
    // The API still answers on its own address.
    assert_eq!(app.get("/healthz").await.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_caller_learns_what_its_key_may_do() {
    let app = spawn_configured(|s| s.auth.admin_key = ADMIN_KEY.into()).await;
    let whoami = |key: Option<&str>| {
        let mut request = app.client.get(app.url("/v1/keys/self"));
        if let Some(key) = key {
            request = request.header("authorization", key);
        }
        async move { request.send().await.unwrap() }
    };
    let read = |response: reqwest::Response| async move {
        assert_eq!(response.status(), StatusCode::OK);
        response.json::<Value>().await.unwrap()
    };
    // No key: one is needed, and it may do nothing yet.
    assert_eq!(
        read(whoami(None).await).await,
        json!({"name": null, "scopes": [], "enforced": true})
    );
    let bootstrap = format!("Bearer {ADMIN_KEY}");
    assert_eq!(
        read(whoami(Some(&bootstrap)).await).await,
        json!({"name": "bootstrap admin key", "scopes": ["admin"], "enforced": true})
    );
    let created: Value = app
        .client
        .post(app.url("/v1/keys"))
        .bearer_auth(ADMIN_KEY)
        .json(&json!({"name": "mes-line-3", "scopes": ["ingest", "predict"]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let key = format!("Bearer {}", created["key"].as_str().unwrap());
    let seen = read(whoami(Some(&key)).await).await;
    assert_eq!(seen["name"], "mes-line-3");
    assert_eq!(seen["scopes"], json!(["ingest", "predict"]));
    assert!(
        !seen.to_string().contains(created["key"].as_str().unwrap()),
        "the secret is never shown again: {seen}"
    );
    // A key it does not know, or a header that is not a bearer key, is refused.
    for refused in ["Bearer mdk_00000000000000000000000000000000", "Token abc"] {
        let response = whoami(Some(refused)).await;
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{refused}");
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"]["code"], "unauthorized");
    }

    // Where keys are not enforced, anyone may do everything.
    let open = crate::helpers::spawn_app().await;
    let seen: Value = open
        .get("/v1/keys/self")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        seen,
        json!({"name": null, "scopes": ["admin"], "enforced": false})
    );
    // A key made there says that it guards nothing yet; one made where keys are checked, that
    // it does.
    let made: Value = open
        .post("/v1/keys", &json!({"name": "line-3", "scopes": ["predict"]}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(made["enforced"], false, "{made}");
    let response = call(
        &app.client,
        &app.address,
        "POST",
        "/v1/keys",
        Some(&json!({"name": "line-4", "scopes": ["predict"]})),
        Some(ADMIN_KEY),
    )
    .await;
    let made: Value = response.json().await.unwrap();
    assert_eq!(made["enforced"], true, "{made}");
}

/// A key name with a control character (a NUL, which PostgreSQL's text cannot store, a newline,
/// a tab) is refused with its path, on either store, and no key is made.
#[tokio::test]
async fn a_key_name_with_control_characters_is_refused() {
    let app = spawn_configured(|s| s.auth.admin_key = ADMIN_KEY.into()).await;
    let keys = || async {
        let response = call(&app.client, &app.address, "GET", "/v1/keys", None, Some(ADMIN_KEY)).await;
        assert_eq!(response.status(), StatusCode::OK);
        response.json::<Value>().await.unwrap()
    };
    let before = keys().await;
    for name in ["line\u{0}3", "line\n3", "\tline 3", "line 3\u{7f}"] {
        let response = call(
            &app.client,
            &app.address,
            "POST",
            "/v1/keys",
            Some(&json!({"name": name, "scopes": ["ingest"]})),
            Some(ADMIN_KEY),
        )
        .await;
        assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY, "{name:?}");
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"]["details"][0]["path"], "/name", "{error}");
        assert_eq!(
            error["error"]["details"][0]["message"],
            "must not contain control characters"
        );
    }
    assert_eq!(keys().await, before);
    // A name of letters from other scripts, spaces inside, is fine.
    let made = call(
        &app.client,
        &app.address,
        "POST",
        "/v1/keys",
        Some(&json!({"name": "Färberei Linie 3 · 染色", "scopes": ["ingest"]})),
        Some(ADMIN_KEY),
    )
    .await;
    assert_eq!(made.status(), StatusCode::CREATED);
}

/// `mordant simulate --post` with a key that may ingest and nothing else posts to a model an
/// admin made, and says so; with no model to post to, it says the key may not create one.
#[tokio::test]
async fn simulate_posts_to_an_existing_model_with_an_ingest_key() {
    let app = spawn_configured(|s| s.auth.admin_key = ADMIN_KEY.into()).await;
    let (_, mes) = new_key(&app, "mes-line-3", &["ingest"]).await;
    let simulate = |model: &'static str| {
        let (address, key) = (app.address.clone(), mes.clone());
        async move {
            tokio::process::Command::new(env!("CARGO_BIN_EXE_mordant"))
                .args(["simulate", "--rows", "40", "--batch-rows", "20", "--seed", "3"])
                .args(["--post", &address, "--model", model, "--key", &key])
                .output()
                .await
                .expect("mordant simulate runs")
        }
    };
    let missing = simulate("nowhere").await;
    assert!(!missing.status.success());
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(stderr.contains("403"), "{stderr}");

    let created = call(
        &app.client,
        &app.address,
        "POST",
        "/v1/models",
        Some(&json!({
            "name": "dips",
            "spectrum": {"start_nm": 400, "interval_nm": 10, "count": 31, "scale": "percent"},
            "features": ["greige_cotton", "polyester_cotton"],
            "outputs": crate::console::DYES,
            "transform": "saunderson",
        })),
        Some(ADMIN_KEY),
    )
    .await;
    assert_eq!(created.status(), StatusCode::CREATED);
    let posted = simulate("dips").await;
    let stdout = String::from_utf8_lossy(&posted.stdout);
    assert!(
        posted.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&posted.stderr)
    );
    assert!(stdout.contains("posted 40 rows in 2 batches") && stdout.contains("(existing)"), "{stdout}");
    let batches: Value = call(&app.client, &app.address, "GET", "/v1/models/dips/batches", None, Some(&mes))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(batches["batches"].as_array().map(Vec::len), Some(2), "{batches}");
}

/// Two `Authorization` headers are refused (`401`, saying so), whichever keys they carry: the
/// server does not guess which one speaks for the request. One of them alone is admitted.
#[tokio::test]
async fn two_authorization_headers_are_refused() {
    let app = spawn_configured(|s| s.auth.admin_key = ADMIN_KEY.into()).await;
    let (_, predict) = new_key(&app, "front-end", &["predict"]).await;
    for second in [predict.as_str(), ADMIN_KEY] {
        let response = app
            .client
            .get(format!("{}/v1/keys", app.address))
            .header("Authorization", format!("Bearer {ADMIN_KEY}"))
            .header("Authorization", format!("Bearer {second}"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        let body: Value = response.json().await.unwrap();
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("more than one Authorization header"), "{body}");
    }
    let response = call(&app.client, &app.address, "GET", "/v1/keys", None, Some(ADMIN_KEY)).await;
    assert_eq!(response.status(), StatusCode::OK);
}

/// With keys enforced, a method that an open endpoint does not have is answered `405` (in the
/// error shape, as without keys), not `401`: no key would make it exist. A protected route's
/// missing method still needs a key first.
#[tokio::test]
async fn a_method_an_open_endpoint_lacks_is_405_not_401() {
    let app = spawn_configured(|s| s.auth.admin_key = ADMIN_KEY.into()).await;
    for (method, path) in [("POST", "/healthz"), ("DELETE", "/metrics"), ("POST", "/openapi.json")] {
        let response = call(&app.client, &app.address, method, path, None, None).await;
        assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
        let body: Value = response.json().await.unwrap();
        assert!(body["error"]["message"].is_string(), "{method} {path}: {body}");
    }
    let response = call(&app.client, &app.address, "DELETE", "/v1/models", None, None).await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
}
