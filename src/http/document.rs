//! What every operation of the OpenAPI document shares, written once: the answers any request
//! may get from the layers in front of the handlers (`413`, `415`, `431`, `501`, `503`, and
//! `400` for an undocumented query parameter of the API), and the headers on every answer.

use axum::http::Method;
use utoipa::openapi::header::{Header, HeaderBuilder};
use utoipa::openapi::path::{Operation, ParameterIn, PathItem};
use utoipa::openapi::{
    ContentBuilder, KnownFormat, Object, ObjectBuilder, OpenApi, Ref, RefOr, ResponseBuilder,
    Schema, SchemaFormat, Type,
};

/// Adds the shared answers and headers to every operation.
pub struct ProtocolAddon;

impl utoipa::Modify for ProtocolAddon {
    fn modify(&self, openapi: &mut OpenApi) {
        for (path, item) in openapi.paths.paths.iter_mut() {
            for (_, operation) in operations_mut(item) {
                shared_answers(operation);
                if path.starts_with("/v1/") {
                    undocumented_query(operation);
                }
                parameters(operation);
                csv_is_bytes(operation);
            }
        }
    }
}

fn string_header(description: &str) -> Header {
    HeaderBuilder::new()
        .schema(Object::with_type(Type::String))
        .description(Some(description))
        .build()
}

fn error_answer(description: &str) -> RefOr<utoipa::openapi::Response> {
    RefOr::T(
        ResponseBuilder::new()
            .description(description)
            .content(
                "application/json",
                ContentBuilder::new()
                    .schema(Some(Ref::from_schema_name("ErrorBody")))
                    .build(),
            )
            .build(),
    )
}

fn shared_answers(operation: &mut Operation) {
    let responses = &mut operation.responses.responses;
    let mut add = |status: &str, description: &str| {
        responses
            .entry(status.to_owned())
            .or_insert_with(|| error_answer(description));
    };
    if operation.request_body.is_some() {
        add(
            "413",
            "The body is over `limits.max_body_bytes` (refused as soon as its announced length \
             says so), or holds more rows than `limits.max_rows_per_request`",
        );
        add(
            "415",
            "The body is not of a media type the operation reads, not UTF-8, or in a content \
             coding (`Content-Encoding`; answered with `Accept-Encoding: identity`)",
        );
    }
    add(
        "501",
        "`not_implemented`: the body comes in a transfer coding other than `chunked` \
         (`Transfer-Encoding`)",
    );
    add(
        "431",
        "The request line and headers are over `limits.max_header_bytes`, or there are more \
         than `limits.max_headers` header fields",
    );
    add(
        "503",
        "`timeout`: the request took longer than `limits.request_timeout_secs`; `busy`: the \
         request bodies in flight fill `limits.max_body_bytes_in_flight`; \
         `database_unavailable`. Retry after `Retry-After` seconds",
    );
    for (status, response) in responses.iter_mut() {
        let RefOr::T(response) = response else {
            continue;
        };
        response.headers.insert(
            "x-request-id".into(),
            string_header(
                "The request's id: the one it sent in `x-request-id`, else a new UUID. Logged \
                 with everything the request caused.",
            ),
        );
        if status == "401" {
            response.headers.insert(
                "www-authenticate".into(),
                string_header("`Bearer`: the API expects `Authorization: Bearer <key>`"),
            );
        }
        if status == "503" {
            let mut retry = string_header("Seconds to wait before retrying");
            retry.schema = RefOr::T(Schema::Object(Object::with_type(Type::Integer)));
            response.headers.insert("retry-after".into(), retry);
        }
    }
}

/// The route layer refuses a query parameter an API operation does not document
/// (`Policy::check_query`): said in the operation's `400`, which it adds where there is none.
fn undocumented_query(operation: &mut Operation) {
    const UNDOCUMENTED: &str = "`invalid_query`: a query parameter the operation does not \
        document";
    match operation.responses.responses.get_mut("400") {
        Some(RefOr::T(response)) => {
            response.description = format!("{}; or {UNDOCUMENTED}", response.description);
        }
        Some(RefOr::Ref(_)) => {}
        None => {
            operation
                .responses
                .responses
                .insert("400".to_owned(), error_answer(UNDOCUMENTED));
        }
    }
}

/// Model names and batch ids as the server accepts them; utoipa writes an optional header as
/// `string | null`, but a header is absent or a string.
fn parameters(operation: &mut Operation) {
    use crate::domain::{BATCH_ID_PATTERN, MAX_BATCH_ID_LEN, model};
    for parameter in operation.parameters.iter_mut().flatten() {
        let (pattern, max_length) = match (&parameter.parameter_in, parameter.name.as_str()) {
            (ParameterIn::Path, "name") => (model::NAME_PATTERN, model::MAX_NAME_LEN),
            (ParameterIn::Path, "batch_id") => (BATCH_ID_PATTERN, MAX_BATCH_ID_LEN),
            (ParameterIn::Header, name) if name.eq_ignore_ascii_case("idempotency-key") => {
                (BATCH_ID_PATTERN, MAX_BATCH_ID_LEN)
            }
            _ => continue,
        };
        let schema = ObjectBuilder::new()
            .schema_type(Type::String)
            .pattern(Some(pattern))
            .min_length(Some(1))
            .max_length(Some(max_length));
        parameter.schema = Some(RefOr::T(Schema::Object(schema.build())));
    }
}

/// A CSV body is bytes a client sends as they are (`format: binary`): generators then take a
/// file or a buffer for it instead of a string they do not know how to encode.
fn csv_is_bytes(operation: &mut Operation) {
    let Some(body) = operation.request_body.as_mut() else {
        return;
    };
    if let Some(csv) = body.content.get_mut("text/csv") {
        csv.schema = Some(RefOr::T(Schema::Object(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .format(Some(SchemaFormat::KnownFormat(KnownFormat::Binary)))
                .build(),
        )));
    }
}

/// The operations of `item`, by method.
pub(super) fn operations(item: &PathItem) -> impl Iterator<Item = (Method, &Operation)> + '_ {
    [
        (Method::GET, &item.get),
        (Method::POST, &item.post),
        (Method::PUT, &item.put),
        (Method::DELETE, &item.delete),
        (Method::PATCH, &item.patch),
        (Method::HEAD, &item.head),
        (Method::OPTIONS, &item.options),
        (Method::TRACE, &item.trace),
    ]
    .into_iter()
    .filter_map(|(method, operation)| operation.as_ref().map(|o| (method, o)))
}

/// The operations of `item`, by method, to be written to: every method, so that what is
/// written to every operation (the shared answers, the security) misses none.
pub(super) fn operations_mut(
    item: &mut PathItem,
) -> impl Iterator<Item = (Method, &mut Operation)> {
    [
        (Method::GET, item.get.as_mut()),
        (Method::POST, item.post.as_mut()),
        (Method::PUT, item.put.as_mut()),
        (Method::DELETE, item.delete.as_mut()),
        (Method::PATCH, item.patch.as_mut()),
        (Method::HEAD, item.head.as_mut()),
        (Method::OPTIONS, item.options.as_mut()),
        (Method::TRACE, item.trace.as_mut()),
    ]
    .into_iter()
    .filter_map(|(method, operation)| operation.map(|o| (method, o)))
}
