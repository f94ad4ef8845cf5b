//! Errors from reading cluster state. Every error names where it came from: the file,
//! the line the document starts on, the object (`Kind namespace/name`) and the field.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("{path}: cannot read: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{path}: {message}")]
    Syntax { path: PathBuf, message: String },
    #[error("{path}:{line}: document {doc}: {message}")]
    Document { path: PathBuf, line: u64, doc: usize, message: String },
    #[error("{path}:{line}: {kind} {object}: field {field}: {reason}")]
    Field { path: PathBuf, line: u64, kind: String, object: String, field: String, reason: String },
}

/// A field-level problem found while converting one object; the caller adds the place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub reason: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        FieldError { field: field.into(), reason: reason.into() }
    }
}
