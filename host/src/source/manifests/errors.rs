//! [`ManifestError`]: every problem with the directory, a file or a
//! document, naming the path and, where there is one, the line and column.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A problem with the manifest directory, a file, or a document.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ManifestError {
    /// The directory is missing or is not a readable directory.
    #[error("manifest directory {}: {source}", path.display())]
    Directory {
        path: PathBuf,
        #[source]
        source: Arc<io::Error>,
    },
    /// A file (or subdirectory) could not be read.
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: Arc<io::Error>,
    },
    /// YAML or JSON that does not parse, or text that is not UTF-8;
    /// `line`/`column` are 1-based.
    #[error("{}:{line}:{column}: {message}", path.display())]
    Syntax { path: PathBuf, line: usize, column: usize, message: String },
    /// A document that parses but is not a valid manifest; `line` is where
    /// the document's content starts.
    #[error("{}:{line}: {message}", path.display())]
    Document { path: PathBuf, line: usize, message: String },
    /// A file larger than [`ManifestLimits::max_file_bytes`](super::ManifestLimits::max_file_bytes); it was not read.
    #[error("{}: the file is {size} bytes, over the limit of {limit} bytes per file", path.display())]
    FileTooLarge { path: PathBuf, size: u64, limit: u64 },
    /// A document larger than [`ManifestLimits::max_document_bytes`](super::ManifestLimits::max_document_bytes); `line`
    /// is where its content starts. It was not parsed.
    #[error("{}:{line}: the document is {size} bytes, over the limit of {limit} bytes per document", path.display())]
    DocumentTooLarge { path: PathBuf, line: usize, size: usize, limit: usize },
    /// Mappings and sequences nested deeper than [`ManifestLimits::max_depth`](super::ManifestLimits::max_depth):
    /// `line` and `column` (1-based) are where the first level too many
    /// opens, or, without a column, where the document's content starts.
    #[error("{}:{}: nested deeper than {limit} levels", path.display(), line_column(*line, *column))]
    TooDeep { path: PathBuf, line: usize, column: Option<usize>, limit: usize },
    /// `count` more `what` ("errors", "duplicate definitions") of the file
    /// than the [`MAX_ERRORS_PER_FILE`](super::MAX_ERRORS_PER_FILE) reported before this one.
    #[error("{}: and {count} more {what}", path.display())]
    More { path: PathBuf, count: usize, what: &'static str },
    /// `key` is defined at `path:line` and already at `first_path:first_line`,
    /// which wins.
    #[error(
        "{}:{line}: {key} is already defined in {}:{first_line}; that definition is used",
        path.display(),
        first_path.display()
    )]
    Duplicate { key: String, path: PathBuf, line: usize, first_path: PathBuf, first_line: usize },
    /// The filesystem watcher failed or could not start.
    #[error("watching {}: {message}", path.display())]
    Watch { path: PathBuf, message: String },
}

fn line_column(line: usize, column: Option<usize>) -> String {
    match column {
        Some(column) => format!("{line}:{column}"),
        None => line.to_string(),
    }
}

impl ManifestError {
    /// The file (or directory) the error is about.
    pub fn path(&self) -> &Path {
        match self {
            ManifestError::Directory { path, .. }
            | ManifestError::Read { path, .. }
            | ManifestError::Syntax { path, .. }
            | ManifestError::Document { path, .. }
            | ManifestError::FileTooLarge { path, .. }
            | ManifestError::DocumentTooLarge { path, .. }
            | ManifestError::TooDeep { path, .. }
            | ManifestError::More { path, .. }
            | ManifestError::Duplicate { path, .. }
            | ManifestError::Watch { path, .. } => path,
        }
    }
    /// The 1-based line the error points at, when it points at one.
    pub fn line(&self) -> Option<usize> {
        match self {
            ManifestError::Syntax { line, .. }
            | ManifestError::Document { line, .. }
            | ManifestError::DocumentTooLarge { line, .. }
            | ManifestError::TooDeep { line, .. }
            | ManifestError::Duplicate { line, .. } => Some(*line),
            _ => None,
        }
    }
}
