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

/// The value of `function`'s argument `argument`, or `ERROR: <function>: <argument> must not be
/// NULL` with SQLSTATE 22004 (null_value_not_allowed): the functions that take optional arguments
/// cannot be STRICT, and a NULL where a value is needed would otherwise stop with a message
/// naming neither.
pub fn required<T>(function: &str, argument: &str, value: Option<T>) -> T {
    match value {
        Some(value) => value,
        None => null_value(format!("{function}: {argument} must not be NULL")),
    }
}

fn null_value(message: String) -> ! {
    ereport!(
        ERROR,
        PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
        message
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
