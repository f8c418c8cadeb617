//! How the SQL surface refuses bad input: one ERROR with the SQLSTATE a client can test for and a
//! message that names the problem.

use pgrx::prelude::*;

/// Raise `ERROR: <message>` with SQLSTATE 22023 (invalid_parameter_value).
pub fn invalid_parameter(message: impl Into<String>) -> ! {
    ereport!(
        ERROR,
        PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
        message.into()
    );
}

/// How a value a user gave is quoted in a message: at most its first 200 characters, so that one
/// call with a 10 MB value does not write 10 MB into the server log.
pub fn shown(value: &str) -> String {
    const SHOWN_CHARS: usize = 200;
    match value.char_indices().nth(SHOWN_CHARS) {
        None => format!("{value:?}"),
        Some((end, _)) => format!("{:?}... ({} bytes in all)", &value[..end], value.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::shown;

    #[test]
    fn a_long_value_is_shown_by_its_start() {
        assert_eq!(
            shown("https://x.example.com/a"),
            "\"https://x.example.com/a\""
        );
        let long = format!("https://x.example.com/{}", "ก".repeat(5_000_000));
        let s = shown(&long);
        assert!(s.len() < 700, "{}", s.len());
        assert!(s.starts_with("\"https://x.example.com/ก"), "{s}");
        assert!(
            s.ends_with(&format!("... ({} bytes in all)", long.len())),
            "{s}"
        );
    }
}
