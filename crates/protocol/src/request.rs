//! The body of an IndexNow submission:
//! `{"host": ..., "key": ..., "keyLocation": ... (optional), "urlList": [...]}`, sent as
//! `Content-Type: application/json; charset=utf-8`.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SubmitRequest {
    pub host: String,
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_location: Option<String>,
    pub url_list: Vec<String>,
}

pub const CONTENT_TYPE: &str = "application/json; charset=utf-8";

impl SubmitRequest {
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a request of strings always serialises")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_names_are_the_protocol_ones() {
        let mut r = SubmitRequest {
            host: "www.example.com".into(),
            key: "abcdefgh".into(),
            key_location: None,
            url_list: vec!["https://www.example.com/a".into()],
        };
        assert_eq!(
            r.to_json(),
            r#"{"host":"www.example.com","key":"abcdefgh","urlList":["https://www.example.com/a"]}"#
        );
        r.key_location = Some("https://www.example.com/k.txt".into());
        assert!(r
            .to_json()
            .contains(r#""keyLocation":"https://www.example.com/k.txt""#));
        let back: SubmitRequest = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(back, r);
        assert!(
            serde_json::from_str::<SubmitRequest>(r#"{"host":"h","key":"k","urllist":[]}"#)
                .is_err()
        );
    }
}
