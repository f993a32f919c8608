use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::*;

#[tokio::test]
async fn a_created_model_can_be_read_listed_and_deleted() {
    let app = spawn_app().await;
    let created = app.create_model(&spec("cotton", 3, 2)).await;
    assert_eq!(created["name"], "cotton");
    assert_eq!(created["version"], 0);
    assert_eq!(created["intercept"], true);
    assert_eq!(created["transform"], "none");
    assert_eq!(created["update"], "one_step");
    assert_eq!(created["prior_variance"], 1.0);
    assert_eq!(created["first_fit_rows"], 4, "p = 3 features + intercept");
    assert_eq!(created["pending_batches"], 0);

    let one: Value = app.get("/v1/models/cotton").await.json().await.unwrap();
    assert_eq!(one["features"], json!(["R400", "R410", "R420"]));
    let list: Value = app.get("/v1/models").await.json().await.unwrap();
    assert_eq!(list["models"].as_array().unwrap().len(), 1);

    let response = app
        .client
        .delete(app.url("/v1/models/cotton"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    assert_eq!(
        app.get("/v1/models/cotton").await.status(),
        StatusCode::NOT_FOUND
    );
    let response = app
        .client
        .delete(app.url("/v1/models/cotton"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_taken_name_is_a_conflict() {
    let app = spawn_app().await;
    app.create_model(&spec("cotton", 3, 2)).await;
    let response = app.post("/v1/models", &spec("cotton", 5, 1)).await;
    assert_eq!(response.status(), StatusCode::CONFLICT);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "conflict");
    let one: Value = app.get("/v1/models/cotton").await.json().await.unwrap();
    assert_eq!(
        one["features"].as_array().unwrap().len(),
        3,
        "the first model is untouched"
    );
}

#[tokio::test]
async fn an_invalid_specification_names_every_bad_field() {
    let app = spawn_app().await;
    let response = app
        .post(
            "/v1/models",
            &json!({
                "name": "Cotton Reactive",
                "features": ["R400", "R410", "R400", "", " R420"],
                "outputs": ["red", "R410"],
                "transform": "log",
                "prior_variance": -1,
                "forgetting": {"half_life_rows": 0},
                "colour": "blue"
            }),
        )
        .await;
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_input");
    let paths: Vec<&str> = body["error"]["details"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["path"].as_str().unwrap())
        .collect();
    for expected in [
        "/name",
        "/features/2",
        "/features/3",
        "/features/4",
        "/outputs/1",
        "/transform",
        "/prior_variance",
        "/forgetting/half_life_rows",
        "/colour",
    ] {
        assert!(
            paths.contains(&expected),
            "{expected} missing from {paths:?}"
        );
    }
    let list: Value = app.get("/v1/models").await.json().await.unwrap();
    assert_eq!(list["models"], json!([]), "nothing was created");
}

#[tokio::test]
async fn unknown_models_and_endpoints_are_404_in_the_error_format() {
    let app = spawn_app().await;
    for path in [
        "/v1/models/nope",
        "/v1/models/nope/versions",
        "/v1/models/Not%20A%20Slug",
        "/v2/x",
    ] {
        let response = app.get(path).await;
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "{path}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "not_found", "{path}");
    }
    let response = app
        .post("/v1/models/nope/predict", &json!({"x": [[1.0]]}))
        .await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    let response = app
        .post(
            "/v1/models/nope/batches",
            &json!({"x": [[1.0]], "y": [[1.0]]}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
}
