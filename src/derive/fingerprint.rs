//! `indexnow_fingerprint()`: the fingerprint of a row's public columns as jsonb, for custom
//! triggers and application code that keep their own "did the content change?" state. Watches
//! do not call it: their generated SQL fingerprints the named columns (`super::statements`).
//!
//! md5 over a canonical JSON text: object keys sorted at every depth (so key order never matters),
//! ignored top-level keys removed, JSON `null` written as `null` and a missing key not written at
//! all (so the two differ). Numbers keep the text jsonb gave them (serde_json's
//! `arbitrary_precision`), so large numerics are not rounded into false equality.

use md5::{Digest, Md5};
use pgrx::prelude::*;
use pgrx::JsonB;
use serde_json::Value;

#[pg_extern(immutable, strict, parallel_safe)]
fn indexnow_fingerprint(
    data: JsonB,
    ignore: default!(Vec<String>, "'{created_at,updated_at}'"),
) -> String {
    fingerprint(&data.0, &ignore)
}

pub fn fingerprint(data: &Value, ignore: &[String]) -> String {
    let mut text = String::new();
    match data {
        Value::Object(map) => {
            let public = map
                .iter()
                .filter(|(k, _)| !ignore.iter().any(|i| i == *k))
                .collect();
            write_object(public, &mut text);
        }
        other => write_canonical(other, &mut text),
    }
    format!("{:x}", Md5::digest(text.as_bytes()))
}

fn write_object(mut entries: Vec<(&String, &Value)>, out: &mut String) {
    entries.sort_by(|a, b| a.0.cmp(b.0));
    out.push('{');
    for (i, (k, v)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&Value::String(k.clone()).to_string());
        out.push(':');
        write_canonical(v, out);
    }
    out.push('}');
}

fn write_canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(map) => write_object(map.iter().collect(), out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::fingerprint;
    use serde_json::json;

    fn fp(v: serde_json::Value, ignore: &[&str]) -> String {
        let ignore: Vec<String> = ignore.iter().map(|s| s.to_string()).collect();
        fingerprint(&v, &ignore)
    }

    #[test]
    fn fingerprint_rules() {
        let base = fp(json!({"a": 1, "b": {"x": [1, 2], "y": "t"}}), &[]);
        // (what, value, ignore, same as base?)
        let cases = [
            (
                "key order, top and nested",
                json!({"b": {"y": "t", "x": [1, 2]}, "a": 1}),
                vec![],
                true,
            ),
            (
                "ignored key added",
                json!({"a": 1, "b": {"x": [1, 2], "y": "t"}, "updated_at": "now"}),
                vec!["updated_at"],
                true,
            ),
            (
                "value changed",
                json!({"a": 2, "b": {"x": [1, 2], "y": "t"}}),
                vec![],
                false,
            ),
            (
                "array order matters",
                json!({"a": 1, "b": {"x": [2, 1], "y": "t"}}),
                vec![],
                false,
            ),
            (
                "null is not missing",
                json!({"a": 1, "b": {"x": [1, 2], "y": "t"}, "c": null}),
                vec![],
                false,
            ),
            (
                "string is not number",
                json!({"a": "1", "b": {"x": [1, 2], "y": "t"}}),
                vec![],
                false,
            ),
            (
                "ignore is top-level only",
                json!({"a": 1, "b": {"x": [1, 2], "y": "t", "updated_at": 1}}),
                vec!["updated_at"],
                false,
            ),
        ];
        for (what, v, ignore, same) in cases {
            assert_eq!(fp(v, &ignore) == base, same, "{what}");
        }
        assert_eq!(base.len(), 32);
    }
}
