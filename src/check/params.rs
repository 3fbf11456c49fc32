//! The sizes a model is checked at: their limits and what is wrong with a size outside them.

use crate::models::Params;

/// The largest sizes `check` accepts: beyond them an exhaustive search does not finish on a
/// workstation. At the largest it takes hours and gigabytes; `--max-states` bounds it.
pub const MAX_CLIENTS: usize = 8;
/// See [`MAX_CLIENTS`].
pub const MAX_WRITES: u8 = 4;
/// See [`MAX_CLIENTS`].
pub const MAX_RETRIES: u8 = 3;

/// A size outside what the models accept. It names the parameter, not a command-line flag: the
/// command line words its own message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParamsError {
    /// Clients out of range.
    #[error("clients = {0}: expected a number of clients from 1 to {MAX_CLIENTS}")]
    Clients(usize),
    /// A number of clients the model is not declared for.
    #[error(
        "clients = {clients}: model {model} is declared for {} clients",
        span(range)
    )]
    ClientsForModel {
        /// The model.
        model: &'static str,
        /// Clients asked for.
        clients: usize,
        /// What the model accepts.
        range: std::ops::RangeInclusive<usize>,
    },
    /// Writes out of range.
    #[error("writes = {0}: expected a number of writes per client from 1 to {MAX_WRITES}")]
    Writes(u64),
    /// Retries out of range.
    #[error("retries = {0}: expected a number of retries per client from 0 to {MAX_RETRIES}")]
    Retries(u64),
}

/// `2` or `2 to 6`.
pub fn span(range: &std::ops::RangeInclusive<usize>) -> String {
    if range.start() == range.end() {
        range.start().to_string()
    } else {
        format!("{} to {}", range.start(), range.end())
    }
}

impl ParamsError {
    /// The value given.
    pub fn value(&self) -> u64 {
        match self {
            ParamsError::Clients(n) | ParamsError::ClientsForModel { clients: n, .. } => *n as u64,
            ParamsError::Writes(n) | ParamsError::Retries(n) => *n,
        }
    }

    /// What was expected (the message after the parameter and its value).
    pub fn expected(&self) -> String {
        let text = self.to_string();
        text.split_once(": ")
            .map_or(text.clone(), |(_, rest)| rest.to_string())
    }

    /// The parameter at fault: `clients`, `writes` or `retries`.
    pub fn parameter(&self) -> &'static str {
        match self {
            ParamsError::Clients(_) | ParamsError::ClientsForModel { .. } => "clients",
            ParamsError::Writes(_) => "writes",
            ParamsError::Retries(_) => "retries",
        }
    }
}

impl Params {
    /// Checks the sizes against the limits.
    pub fn validate(&self) -> Result<(), ParamsError> {
        if !(1..=MAX_CLIENTS).contains(&self.clients) {
            return Err(ParamsError::Clients(self.clients));
        }
        if !(1..=MAX_WRITES).contains(&self.writes) {
            return Err(ParamsError::Writes(self.writes.into()));
        }
        if self.retries > MAX_RETRIES {
            return Err(ParamsError::Retries(self.retries.into()));
        }
        Ok(())
    }
}
