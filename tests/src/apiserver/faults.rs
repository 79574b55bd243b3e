//! Fault injection: failures answered instead of the real response.

use super::*;

pub(super) type FailureMatcher = Box<dyn Fn(&RecordedRequest) -> bool + Send>;

pub(super) struct Failure {
    pub(super) matches: FailureMatcher,
    pub(super) code: u16,
}
