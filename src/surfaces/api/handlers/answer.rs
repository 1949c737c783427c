//! What every handler shares: its answer, and the body and query extractors whose refusals are
//! JSON errors like every other.

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Query, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::api::Failure;

pub type Answer = Result<axum::Json<Value>, Failure>;

pub fn ok(value: impl serde::Serialize) -> Answer {
    Ok(axum::Json(serde_json::to_value(value).unwrap_or(Value::Null)))
}

/// A JSON body whose rejections are JSON errors too.
pub struct Body<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = Failure;
    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(value)) => Ok(Body(value)),
            Err(JsonRejection::BytesRejection(e)) => {
                Err(Failure::new(StatusCode::PAYLOAD_TOO_LARGE, "body_too_large", e.body_text()))
            }
            Err(e) => Err(Failure::new(
                StatusCode::BAD_REQUEST,
                "invalid_body",
                crate::text::one_line(&e.body_text()),
            )),
        }
    }
}

/// A query string whose rejections are JSON errors, like the bodies'.
pub struct Q<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> axum::extract::FromRequestParts<S> for Q<T> {
    type Rejection = Failure;
    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self, Failure> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(value)) => Ok(Q(value)),
            Err(e) => Err(Failure::new(
                StatusCode::BAD_REQUEST,
                "invalid_query",
                crate::text::one_line(&e.body_text()),
            )),
        }
    }
}

/// Turns any refusal axum answers in plain text (a path segment that isn't UTF-8, a wrong
/// method, a wrong content type) into the JSON error every other refusal is. A dashboard
/// page's own refusal (an unknown run or sweep, a bad window) is a page, and stays one.
pub async fn json_refusals(response: Response) -> Response {
    let content_type = response.headers().get(axum::http::header::CONTENT_TYPE);
    let is_json = content_type.is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    let is_page = content_type.is_some_and(|v| v.as_bytes().starts_with(b"text/html"));
    let status = response.status();
    if !status.is_client_error() || is_json || is_page {
        return response;
    }
    let code = match status {
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::PAYLOAD_TOO_LARGE => "body_too_large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        StatusCode::NOT_FOUND => "not_found",
        _ => "invalid_request",
    };
    let text = axum::body::to_bytes(response.into_body(), 4096).await.unwrap_or_default();
    let message = crate::text::one_line(String::from_utf8_lossy(&text).trim());
    let message = if message.is_empty() { status.to_string() } else { message };
    Failure::new(status, code, message).into_response()
}
