//! Hostile input for the URL rules, as properties over generated input and as a kept corpus.
//!
//! - No input panics, and every refusal has a message.
//! - The normal form is a fixed point: an accepted URL, given again, is accepted as itself.
//! - An accepted URL's host is never loopback, private, link-local, reserved or a metadata
//!   service, in any spelling: decimal, octal, hex, short IPv4, IPv4-mapped, -compatible, NAT64
//!   and 6to4 IPv6, percent-encoded, full-width digits, a trailing dot, upper case.
//!
//! `corpus/urls.txt` keeps inputs worth keeping (written by hand, or found by a failing run: add
//! the input proptest prints), one a line: `accept`, `refuse` or `any`, a space, the input. Every
//! line is replayed, so an input that once broke a rule stays tested.

use indexnow_protocol::submittable::{ipv4_kind, ipv6_kind, MAX_URL_BYTES};
use indexnow_protocol::{normalise_host, submittable_url};
use proptest::prelude::*;
use std::net::Ipv4Addr;
use url::{Host, Url};

/// Every rule an answer must keep, whatever the input.
fn check(input: &str) -> bool {
    let _ = normalise_host(input).map_err(|e| e.to_string());
    match submittable_url(input) {
        Ok(u) => {
            assert_eq!(
                submittable_url(&u.url).as_ref(),
                Ok(&u),
                "not a fixed point: {input:?}"
            );
            assert!(u.url.len() <= MAX_URL_BYTES, "{input:?}");
            assert_eq!(normalise_host(&u.host).as_deref(), Ok(u.host.as_str()));
            let parsed = Url::parse(&u.url).unwrap();
            assert!(parsed.fragment().is_none() && parsed.username().is_empty());
            match parsed.host().expect("an accepted URL has a host") {
                Host::Ipv4(ip) => assert_eq!(ipv4_kind(ip), None, "{input:?} -> {ip}"),
                Host::Ipv6(ip) => assert_eq!(ipv6_kind(ip), None, "{input:?} -> {ip}"),
                Host::Domain(name) => {
                    assert!(name.contains('.') && !name.ends_with('.'), "{input:?}");
                    assert!(
                        name != "localhost" && !name.ends_with(".localhost"),
                        "{input:?}"
                    );
                    assert_ne!(name, "metadata.google.internal", "{input:?}");
                }
            }
            true
        }
        Err(problem) => {
            assert!(!problem.to_string().is_empty());
            false
        }
    }
}

#[test]
fn the_corpus_is_replayed() {
    let corpus = include_str!("corpus/urls.txt");
    let mut replayed = 0;
    for line in corpus
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let (verdict, input) = line.split_once(' ').unwrap_or((line, ""));
        let accepted = check(input);
        match verdict {
            "accept" => assert!(accepted, "should be accepted: {input:?}"),
            "refuse" => assert!(!accepted, "should be refused: {input:?}"),
            "any" => {}
            other => panic!("corpus line with verdict {other:?}: {line:?}"),
        }
        replayed += 1;
    }
    assert!(replayed > 50, "the corpus has {replayed} lines");
}

/// An address no search engine can fetch, from each range the rules name.
fn non_public_ipv4() -> impl Strategy<Value = Ipv4Addr> {
    let in_range = |first: u32, bits: u32| {
        (0u32..(1u32 << (32 - bits)).max(1)).prop_map(move |low| Ipv4Addr::from(first | low))
    };
    prop_oneof![
        in_range(0x7f00_0000, 8),  // 127/8 loopback
        in_range(0x0a00_0000, 8),  // 10/8
        in_range(0xac10_0000, 12), // 172.16/12
        in_range(0xc0a8_0000, 16), // 192.168/16
        in_range(0x6440_0000, 10), // 100.64/10
        in_range(0xa9fe_0000, 16), // 169.254/16 (metadata services live here)
        in_range(0x0000_0000, 8),  // 0/8
        in_range(0xe000_0000, 3),  // 224/3: multicast, reserved, broadcast
    ]
}

/// The ways a host part can spell `ip` that a URL parser reads as that address.
fn spellings(ip: Ipv4Addr) -> Vec<String> {
    let [a, b, c, d] = ip.octets();
    let n = u32::from(ip);
    let dotted = ip.to_string();
    let fullwidth: String = dotted
        .chars()
        .map(|ch| match ch {
            '0'..='9' => char::from_u32(0xff10 + ch as u32 - '0' as u32).unwrap(),
            '.' => '\u{ff0e}',
            other => other,
        })
        .collect();
    let percent: String = dotted.bytes().map(|byte| format!("%{byte:02x}")).collect();
    vec![
        dotted.clone(),
        format!("{dotted}."),
        format!("{dotted}..."),
        n.to_string(),
        format!("0x{n:08x}"),
        format!("0X{n:X}"),
        format!("0{a:o}.0{b:o}.0{c:o}.0{d:o}"),
        format!("0x{a:x}.0x{b:x}.0x{c:x}.0x{d:x}"),
        format!(
            "{a}.{}",
            (u32::from(b) << 16) | (u32::from(c) << 8) | u32::from(d)
        ),
        format!("{a}.{b}.{}", (u32::from(c) << 8) | u32::from(d)),
        fullwidth,
        percent,
        format!("[::ffff:{dotted}]"),
        format!("[::FFFF:{:x}:{:x}]", n >> 16, n & 0xffff),
        format!("[0:0:0:0:0:ffff:{dotted}]"),
        format!("[::{dotted}]"),
        format!("[64:ff9b::{dotted}]"),
        format!("[2002:{:x}:{:x}::1]", n >> 16, n & 0xffff),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    #[test]
    fn no_string_panics(input in any::<String>()) {
        check(&input);
    }

    #[test]
    fn no_url_shaped_string_panics(
        scheme in "(https?|HTTPS?|ftp|)",
        slashes in "[:/\\\\]{0,4}",
        host in "[a-zA-Z0-9.\\-:@\\[\\]%_~\u{80}-\u{10ffff}]{0,40}",
        rest in "[ -~\u{80}-\u{7ff}]{0,60}",
    ) {
        check(&format!("{scheme}{slashes}{host}{rest}"));
    }

    #[test]
    fn no_spelling_of_a_non_public_address_is_accepted(
        ip in non_public_ipv4(),
        scheme in "https?",
        port in proptest::option::of(1u16..),
        path in "(/[a-z0-9]{0,8}){0,3}",
    ) {
        for spelled in spellings(ip) {
            let port = port.map(|p| format!(":{p}")).unwrap_or_default();
            let input = format!("{scheme}://{spelled}{port}{path}");
            prop_assert!(!check(&input), "accepted {input:?} ({ip})");
        }
    }

    #[test]
    fn accepted_urls_are_their_own_normal_form(
        sub in "[a-zA-Z0-9\\-]{1,12}",
        path in "(/[a-zA-Z0-9\\-._~!$&'()*+,;=:@ก-๙]{0,10}){0,4}",
        query in proptest::option::of("[a-zA-Z0-9=&]{0,12}"),
    ) {
        // A label starting with `xn--` (any case) is an IDNA A-label: refused unless what follows
        // is valid Punycode (`xN--` alone is not), so it is not a plain label.
        prop_assume!(!sub.to_ascii_lowercase().starts_with("xn--"));
        let input = format!("https://{sub}.example.com{path}{}",
                            query.map(|q| format!("?{q}")).unwrap_or_default());
        prop_assert!(check(&input), "refused {input:?}");
    }
}

/// An `xn--` label that is not valid Punycode is refused, whatever its case (found by the
/// generator above, which now leaves such labels out).
#[test]
fn an_empty_a_label_is_refused() {
    assert!(!check("https://xN--.example.com"));
    assert!(!check("https://xn--.example.com/page"));
}
