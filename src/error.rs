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
