//! Names and text quoted into SQL, for the statements built in Rust (a watch's, the catalog
//! queries): the same rules as PostgreSQL's `quote_ident()` (always quoted) and `quote_literal()`.

/// `name` as a quoted identifier: `"Pages"`, `"a""b"`.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `text` as a string literal: `'it''s'`.
pub fn quote_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_are_doubled() {
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
        assert_eq!(quote_literal("it's"), "'it''s'");
    }
}
