//! An error answer, and the HTTP status each kind of service error gets.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::service::{ErrorKind, ServiceError};

/// An error answer: a stable machine code and a message for people.
pub struct Failure {
    pub(super) status: StatusCode,
    pub(super) code: &'static str,
    pub(super) message: String,
}

impl Failure {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Failure {
        Failure { status, code, message: message.into() }
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        (self.status, axum::Json(json!({ "error": self.code, "message": self.message }))).into_response()
    }
}

impl From<ServiceError> for Failure {
    fn from(err: ServiceError) -> Failure {
        Failure::new(status_of(err.kind()), err.code(), err.to_string())
    }
}

/// The HTTP status of each kind of service error.
fn status_of(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::Invalid => StatusCode::BAD_REQUEST,
        ErrorKind::Ambiguous | ErrorKind::Conflict => StatusCode::CONFLICT,
        ErrorKind::Forbidden => StatusCode::FORBIDDEN,
        ErrorKind::Unprocessable => StatusCode::UNPROCESSABLE_ENTITY,
        // Nothing was written and the same request can succeed once space returns.
        ErrorKind::StorageFull => StatusCode::INSUFFICIENT_STORAGE,
        ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each kind of service error answers with its own status; the codes clients match on stay.
    #[test]
    fn each_kind_of_error_has_its_status() {
        use crate::model::RunState;
        let cases: [(ServiceError, StatusCode, &str); 8] = [
            (ServiceError::UnknownRun("x".into()), StatusCode::NOT_FOUND, "not_found"),
            (
                ServiceError::BadAssignment { what: "--var", text: "x".into() },
                StatusCode::BAD_REQUEST,
                "invalid",
            ),
            (
                ServiceError::Ambiguous { what: "runs", prefix: "a".into(), candidates: vec![] },
                StatusCode::CONFLICT,
                "ambiguous",
            ),
            (
                ServiceError::AlreadyEnded { id: "x".into(), state: RunState::Failed },
                StatusCode::CONFLICT,
                "already_ended",
            ),
            (ServiceError::NoSelection, StatusCode::CONFLICT, "no_selection"),
            (
                ServiceError::MissingCredentials { workflow: "w".into(), wanted: vec![], missing: vec![] },
                StatusCode::UNPROCESSABLE_ENTITY,
                "missing_credentials",
            ),
            (
                ServiceError::Edit(crate::environments::EditError::Locked {
                    field: "f".into(),
                    value: serde_json::json!(1),
                }),
                StatusCode::FORBIDDEN,
                "locked_field",
            ),
            (
                ServiceError::InBatch { index: 2, source: Box::new(ServiceError::UnknownTest("t".into())) },
                StatusCode::NOT_FOUND,
                "not_found",
            ),
        ];
        for (err, status, code) in cases {
            let failure = Failure::from(err);
            assert_eq!((failure.status, failure.code), (status, code), "{}", failure.message);
        }
        let kinds = [
            (ErrorKind::Conflict, StatusCode::CONFLICT),
            (ErrorKind::StorageFull, StatusCode::INSUFFICIENT_STORAGE),
            (ErrorKind::Internal, StatusCode::INTERNAL_SERVER_ERROR),
        ];
        for (kind, status) in kinds {
            assert_eq!(status_of(kind), status, "{kind:?}");
        }
    }
}
