//! Which URLs may be submitted to IndexNow, and the one form each is stored and sent in.
//!
//! A URL is submittable when it is an absolute http(s) URL of at most 2048 bytes, with no user
//! info, on a host that a search engine could reach: not `localhost` (or a name under it), not a
//! name under a top-level domain reserved for special use (`.test`, `.invalid`, `.local`,
//! `.internal`), not `metadata.google.internal`, not a private, loopback, link-local or reserved
//! IP address, and not on port 0.
//! Parsing is the `url` crate's (WHATWG rules), so `http://2130706433/` is seen as 127.0.0.1 and
//! `http://EXAMPLE.com:443` and `https://example.com/` are the same URL.
//!
//! The normal form is the parser's serialisation without the fragment: the host lower-cased and
//! IDN hosts in punycode, the default port dropped, the path percent-encoded. A fragment names a
//! part of a page, not a page, so `…/a#top` and `…/a` are one queue row.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use url::{Host, Url};

/// The protocol's (and the search engines') limit on one URL's length, in bytes.
pub const MAX_URL_BYTES: usize = 2048;

/// A URL that passed every rule, in normal form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubmittableUrl {
    /// The URL as it is stored and sent.
    pub url: String,
    /// The site the URL belongs to: the host name, with `:port` when not the default (a site on
    /// another port is another origin, with a key file of its own). The request's `host` field
    /// is its host name alone: [`host_name`].
    pub host: String,
}

/// The host name of a site (`example.com:8443` -> `example.com`): the request's `host` field.
/// The protocol's `host` is a URL's host (RFC 3986), which has no port, and the peers send it so
/// (the IndexNow plugins send the site address's host); an endpoint compares it with each URL's
/// host name and refuses `host:port` with a 422.
pub fn host_name(site: &str) -> &str {
    match site.rsplit_once(':') {
        Some((name, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => site,
    }
}

/// Why a URL cannot be submitted. The messages name the rule that was broken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UrlProblem {
    Empty,
    NotAbsolute(String),
    NotHttp(String),
    TooLong(usize),
    UserInfo,
    NoHost,
    Localhost(String),
    /// A name under a top-level domain reserved for special use: `.test` and `.invalid` (RFC
    /// 6761), `.local` (multicast DNS, RFC 6762), `.internal` (private use, ICANN 2024).
    SpecialUse {
        host: String,
        domain: &'static str,
    },
    /// Port 0: no server listens on it.
    PortZero,
    CloudMetadata(String),
    NonPublicIp {
        ip: String,
        kind: IpKind,
    },
    /// A `%` not followed by two hex digits: no server decodes it the same way.
    BadPercentEncoding,
    /// A host name of one label (`https://intranet/`, or `https:///x`, which parses as host
    /// `x`): no search engine can fetch it.
    SingleLabelHost(String),
    /// A host name with an empty label (`www..example.com`).
    EmptyLabel(String),
    /// Given as a host name, a value with a scheme, a path, a query, a fragment or user info.
    /// A host was asked for and something else given; `alone` is the host name the input holds,
    /// when it is a URL (`https://news.example.com/` holds `news.example.com`).
    NotABareHost {
        alone: Option<String>,
    },
}

/// Address ranges a search engine cannot (or must not) fetch from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpKind {
    Private,
    Loopback,
    LinkLocal,
    Reserved,
}

impl fmt::Display for IpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IpKind::Private => "private",
            IpKind::Loopback => "loopback",
            IpKind::LinkLocal => "link-local",
            IpKind::Reserved => "reserved",
        })
    }
}

impl fmt::Display for UrlProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UrlProblem::Empty => write!(f, "the URL is empty"),
            UrlProblem::NotAbsolute(why) => {
                write!(f, "the URL is not an absolute http(s) URL ({why})")
            }
            UrlProblem::NotHttp(scheme) => write!(
                f,
                "the URL's scheme is \"{scheme}\": only http and https URLs can be submitted"
            ),
            UrlProblem::TooLong(n) => write!(
                f,
                "the URL is {n} bytes long: at most {MAX_URL_BYTES} bytes can be submitted"
            ),
            UrlProblem::UserInfo => write!(
                f,
                "the URL carries a user name or password: URLs with user info cannot be submitted"
            ),
            UrlProblem::NoHost => write!(f, "the URL has no host"),
            UrlProblem::Localhost(h) => write!(
                f,
                "the URL's host \"{h}\" is localhost: search engines cannot fetch it"
            ),
            UrlProblem::SpecialUse { host, domain } => write!(
                f,
                "the URL's host \"{host}\" is under .{domain}, a domain reserved for special use \
                 that no search engine resolves"
            ),
            UrlProblem::PortZero => write!(f, "the URL's port is 0: no server listens on it"),
            UrlProblem::CloudMetadata(h) => write!(
                f,
                "the URL's host \"{h}\" is a cloud metadata service: it cannot be submitted"
            ),
            UrlProblem::NonPublicIp { ip, kind } => write!(
                f,
                "the URL's host {ip} is a {kind} IP address: search engines cannot fetch it"
            ),
            UrlProblem::BadPercentEncoding => write!(
                f,
                "the URL has a \"%\" not followed by two hex digits (broken percent-encoding)"
            ),
            UrlProblem::EmptyLabel(h) => write!(
                f,
                "the URL's host \"{h}\" has an empty label (two dots in a row)"
            ),
            UrlProblem::NotABareHost { alone: Some(host) } => write!(
                f,
                "give the host name alone, \"{host}\": a host is named without a scheme, path, \
                 ?, # or @ (it is not a bare host name)"
            ),
            UrlProblem::NotABareHost { alone: None } => write!(
                f,
                "give the host name alone, such as \"www.example.com\": a host is named without a \
                 scheme, path, ?, # or @ (it is not a bare host name)"
            ),
            UrlProblem::SingleLabelHost(h) => write!(
                f,
                "the URL's host \"{h}\" is a single label, not a public domain name: search \
                 engines cannot fetch it"
            ),
        }
    }
}

impl std::error::Error for UrlProblem {}

/// Checks `input` against every rule and returns its normal form.
pub fn submittable_url(input: &str) -> Result<SubmittableUrl, UrlProblem> {
    let trimmed = input.trim();
    if trimmed.is_empty() {
        return Err(UrlProblem::Empty);
    }
    // Refuse before parsing: a URL this long can only grow when it is normalised.
    if trimmed.len() > MAX_URL_BYTES {
        return Err(UrlProblem::TooLong(trimmed.len()));
    }
    let mut url = Url::parse(trimmed).map_err(|e| UrlProblem::NotAbsolute(e.to_string()))?;
    if url.scheme() != "http" && url.scheme() != "https" {
        return Err(UrlProblem::NotHttp(url.scheme().to_string()));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(UrlProblem::UserInfo);
    }
    // `www.example.com.` and `www.example.com` are one site: the trailing dots are dropped (as a
    // host added with one is stored without it) before the host is checked, so that
    // `127.0.0.1..` is seen as the address it names.
    if let Some(Host::Domain(name)) = url.host() {
        if name.ends_with('.') {
            let bare = name.trim_end_matches('.').to_string();
            if bare.is_empty() {
                return Err(UrlProblem::NoHost);
            }
            url.set_host(Some(&bare)).map_err(|_| UrlProblem::NoHost)?;
        }
    }
    check_host(url.host().ok_or(UrlProblem::NoHost)?)?;
    if url.port() == Some(0) {
        return Err(UrlProblem::PortZero);
    }
    url.set_fragment(None);
    if !percent_encoding_is_whole(url.as_str()) {
        return Err(UrlProblem::BadPercentEncoding);
    }
    let host = host_field(&url).ok_or(UrlProblem::NoHost)?;
    let url = String::from(url);
    if url.len() > MAX_URL_BYTES {
        return Err(UrlProblem::TooLong(url.len()));
    }
    Ok(SubmittableUrl { url, host })
}

/// The normal form of a bare host name as a user types it (`WWW.Example.com`, `bücher.de`,
/// `example.com:8080`), the same form [`submittable_url`] gives a URL's host.
pub fn normalise_host(input: &str) -> Result<String, UrlProblem> {
    let trimmed = input.trim();
    if trimmed.is_empty() || trimmed.contains(['/', '?', '#', '@']) {
        let alone = Url::parse(trimmed)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.username().is_empty())
            .and_then(|u| host_field(&u));
        return Err(UrlProblem::NotABareHost { alone });
    }
    submittable_url(&format!("https://{trimmed}/")).map(|u| u.host)
}

fn host_field(url: &Url) -> Option<String> {
    let host = url.host_str()?;
    Some(match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    })
}

/// Every `%` of `url` starts a `%XX` escape. (The parser leaves a broken one as it is.)
fn percent_encoding_is_whole(url: &str) -> bool {
    let bytes = url.as_bytes();
    bytes.iter().enumerate().all(|(i, &b)| {
        b != b'%'
            || (bytes.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                && bytes.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
    })
}

/// Top-level domains reserved for special use, which no public resolver answers for (see
/// [`UrlProblem::SpecialUse`]). (`.example` and `example.com` are reserved for documentation but
/// resolve: they stay submittable, as the examples use them.)
const SPECIAL_USE: [&str; 4] = ["test", "invalid", "local", "internal"];

fn check_host(host: Host<&str>) -> Result<(), UrlProblem> {
    match host {
        Host::Domain(name) => {
            let bare = name.trim_end_matches('.');
            if bare == "localhost" || bare.ends_with(".localhost") {
                Err(UrlProblem::Localhost(name.to_string()))
            } else if bare == "metadata.google.internal" {
                Err(UrlProblem::CloudMetadata(name.to_string()))
            } else if let Some(domain) = SPECIAL_USE
                .iter()
                .find(|d| bare == **d || bare.ends_with(&format!(".{d}")))
            {
                Err(UrlProblem::SpecialUse {
                    host: name.to_string(),
                    domain,
                })
            } else if bare.is_empty() {
                Err(UrlProblem::NoHost)
            } else if !bare.contains('.') {
                Err(UrlProblem::SingleLabelHost(name.to_string()))
            } else if bare.split('.').any(str::is_empty) {
                Err(UrlProblem::EmptyLabel(name.to_string()))
            } else {
                Ok(())
            }
        }
        Host::Ipv4(ip) => match ipv4_kind(ip) {
            Some(kind) => Err(UrlProblem::NonPublicIp {
                ip: ip.to_string(),
                kind,
            }),
            None => Ok(()),
        },
        Host::Ipv6(ip) => match ipv6_kind(ip) {
            Some(kind) => Err(UrlProblem::NonPublicIp {
                ip: format!("[{ip}]"),
                kind,
            }),
            None => Ok(()),
        },
    }
}

/// The kind of a non-public IPv4 address (IANA special-purpose registry), `None` when public.
pub fn ipv4_kind(ip: Ipv4Addr) -> Option<IpKind> {
    let [a, b, c, _] = ip.octets();
    if ip.is_loopback() {
        Some(IpKind::Loopback)
    } else if ip.is_private() || (a == 100 && (64..128).contains(&b)) {
        // 10/8, 172.16/12, 192.168/16, and 100.64/10 (carrier-grade NAT).
        Some(IpKind::Private)
    } else if ip.is_link_local() {
        Some(IpKind::LinkLocal)
    } else if a == 0
        || a >= 224 // multicast 224/4, reserved 240/4, broadcast
        || (a == 192 && b == 0 && (c == 0 || c == 2))
        || (a == 198 && (b == 18 || b == 19))
        || (a == 198 && b == 51 && c == 100)
        || (a == 203 && b == 0 && c == 113)
    {
        Some(IpKind::Reserved)
    } else {
        None
    }
}

/// The kind of a non-public IPv6 address, `None` when public.
pub fn ipv6_kind(ip: Ipv6Addr) -> Option<IpKind> {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return ipv4_kind(v4);
    }
    let s = ip.segments();
    let embedded =
        |hi: u16, lo: u16| Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8);
    // NAT64 (64:ff9b::/96) and 6to4 (2002::/16) reach the IPv4 address they carry.
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return ipv4_kind(embedded(s[6], s[7]));
    }
    if s[0] == 0x2002 {
        return ipv4_kind(embedded(s[1], s[2]));
    }
    if ip.is_loopback() {
        Some(IpKind::Loopback)
    } else if s[0] & 0xfe00 == 0xfc00 {
        Some(IpKind::Private) // unique local fc00::/7
    } else if s[0] & 0xffc0 == 0xfe80 {
        Some(IpKind::LinkLocal)
    } else if ip.is_unspecified()
        || s[0] & 0xff00 == 0xff00 // multicast
        || s[0] & 0xffc0 == 0xfec0 // deprecated site-local
        || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
        || (s[0] == 0x0100 && s[1..4] == [0, 0, 0]) // discard-only
        || s[..6] == [0; 6] // IPv4-compatible (deprecated)
        || (s[0] == 0x2001 && s[1] == 0)
    // Teredo: tunnels to an address it hides
    {
        Some(IpKind::Reserved)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(input: &str) -> SubmittableUrl {
        submittable_url(input).unwrap_or_else(|e| panic!("{input}: {e}"))
    }

    #[test]
    fn accepts_and_normalises() {
        let cases = [
            // input, stored URL, host field
            (
                "https://www.example.com/th/news",
                "https://www.example.com/th/news",
                "www.example.com",
            ),
            (
                "HTTPS://WWW.Example.COM/a?b=1",
                "https://www.example.com/a?b=1",
                "www.example.com",
            ),
            (
                "https://example.com:443/x",
                "https://example.com/x",
                "example.com",
            ),
            (
                "http://example.com:80/x",
                "http://example.com/x",
                "example.com",
            ),
            (
                "https://example.com:8443/x",
                "https://example.com:8443/x",
                "example.com:8443",
            ),
            ("https://example.com", "https://example.com/", "example.com"),
            (
                "https://example.com/a#section",
                "https://example.com/a",
                "example.com",
            ),
            (
                "  https://example.com/a  ",
                "https://example.com/a",
                "example.com",
            ),
            (
                "https://bücher.de/x",
                "https://xn--bcher-kva.de/x",
                "xn--bcher-kva.de",
            ),
            (
                "https://example.com/ข่าว",
                "https://example.com/%E0%B8%82%E0%B9%88%E0%B8%B2%E0%B8%A7",
                "example.com",
            ),
            ("https://8.8.8.8/x", "https://8.8.8.8/x", "8.8.8.8"),
            (
                "https://[2606:4700::1111]/",
                "https://[2606:4700::1111]/",
                "[2606:4700::1111]",
            ),
            (
                "https://localhost.example.com/",
                "https://localhost.example.com/",
                "localhost.example.com",
            ),
            (
                "https://WWW.Example.COM./a",
                "https://www.example.com/a",
                "www.example.com",
            ),
            (
                "https://example.com/a%2Fb?q=%e0%B8",
                "https://example.com/a%2Fb?q=%e0%B8",
                "example.com",
            ),
        ];
        for (input, url, host) in cases {
            let got = ok(input);
            assert_eq!(got.url, url, "{input}");
            assert_eq!(got.host, host, "{input}");
        }
    }

    #[test]
    fn refuses_with_the_rule_broken() {
        use IpKind::*;
        let long = format!("https://example.com/{}", "a".repeat(2100));
        let almost = format!("https://example.com/{}", "ก".repeat(300)); // 900 bytes, 2700 encoded
        let cases: Vec<(&str, UrlProblem)> = vec![
            ("", UrlProblem::Empty),
            (
                "/relative/path",
                UrlProblem::NotAbsolute("relative URL without a base".into()),
            ),
            ("ftp://example.com/x", UrlProblem::NotHttp("ftp".into())),
            (
                "javascript:alert(1)",
                UrlProblem::NotHttp("javascript".into()),
            ),
            (&long, UrlProblem::TooLong(long.len())),
            (&almost, UrlProblem::TooLong(20 + 300 * 9)),
            ("https://user:pw@example.com/", UrlProblem::UserInfo),
            ("https://user@example.com/", UrlProblem::UserInfo),
            (
                "https://localhost/x",
                UrlProblem::Localhost("localhost".into()),
            ),
            (
                "https://LOCALHOST./x",
                UrlProblem::Localhost("localhost".into()),
            ),
            (
                "https://app.localhost/x",
                UrlProblem::Localhost("app.localhost".into()),
            ),
            (
                "http://metadata.google.internal/computeMetadata/v1/",
                UrlProblem::CloudMetadata("metadata.google.internal".into()),
            ),
            (
                "https://shop.test/x",
                UrlProblem::SpecialUse {
                    host: "shop.test".into(),
                    domain: "test",
                },
            ),
            (
                "https://www.example.invalid/x",
                UrlProblem::SpecialUse {
                    host: "www.example.invalid".into(),
                    domain: "invalid",
                },
            ),
            (
                "http://printer.local/",
                UrlProblem::SpecialUse {
                    host: "printer.local".into(),
                    domain: "local",
                },
            ),
            (
                "https://wiki.corp.internal/a",
                UrlProblem::SpecialUse {
                    host: "wiki.corp.internal".into(),
                    domain: "internal",
                },
            ),
            ("https://www.example.com:0/x", UrlProblem::PortZero),
            (
                "http://127.0.0.1/",
                UrlProblem::NonPublicIp {
                    ip: "127.0.0.1".into(),
                    kind: Loopback,
                },
            ),
            (
                "http://2130706433/",
                UrlProblem::NonPublicIp {
                    ip: "127.0.0.1".into(),
                    kind: Loopback,
                },
            ),
            (
                "http://10.1.2.3/",
                UrlProblem::NonPublicIp {
                    ip: "10.1.2.3".into(),
                    kind: Private,
                },
            ),
            (
                "http://172.20.0.1/",
                UrlProblem::NonPublicIp {
                    ip: "172.20.0.1".into(),
                    kind: Private,
                },
            ),
            (
                "http://192.168.1.1/",
                UrlProblem::NonPublicIp {
                    ip: "192.168.1.1".into(),
                    kind: Private,
                },
            ),
            (
                "http://100.64.0.1/",
                UrlProblem::NonPublicIp {
                    ip: "100.64.0.1".into(),
                    kind: Private,
                },
            ),
            (
                "http://169.254.169.254/latest/",
                UrlProblem::NonPublicIp {
                    ip: "169.254.169.254".into(),
                    kind: LinkLocal,
                },
            ),
            (
                "http://0.0.0.0/",
                UrlProblem::NonPublicIp {
                    ip: "0.0.0.0".into(),
                    kind: Reserved,
                },
            ),
            (
                "http://192.0.2.1/",
                UrlProblem::NonPublicIp {
                    ip: "192.0.2.1".into(),
                    kind: Reserved,
                },
            ),
            (
                "http://198.18.0.1/",
                UrlProblem::NonPublicIp {
                    ip: "198.18.0.1".into(),
                    kind: Reserved,
                },
            ),
            (
                "http://203.0.113.9/",
                UrlProblem::NonPublicIp {
                    ip: "203.0.113.9".into(),
                    kind: Reserved,
                },
            ),
            (
                "http://224.0.0.1/",
                UrlProblem::NonPublicIp {
                    ip: "224.0.0.1".into(),
                    kind: Reserved,
                },
            ),
            (
                "http://255.255.255.255/",
                UrlProblem::NonPublicIp {
                    ip: "255.255.255.255".into(),
                    kind: Reserved,
                },
            ),
            (
                "http://[::1]/",
                UrlProblem::NonPublicIp {
                    ip: "[::1]".into(),
                    kind: Loopback,
                },
            ),
            (
                "http://[::]/",
                UrlProblem::NonPublicIp {
                    ip: "[::]".into(),
                    kind: Reserved,
                },
            ),
            (
                "http://[fd00::1]/",
                UrlProblem::NonPublicIp {
                    ip: "[fd00::1]".into(),
                    kind: Private,
                },
            ),
            (
                "http://[fe80::1]/",
                UrlProblem::NonPublicIp {
                    ip: "[fe80::1]".into(),
                    kind: LinkLocal,
                },
            ),
            (
                "http://[ff02::1]/",
                UrlProblem::NonPublicIp {
                    ip: "[ff02::1]".into(),
                    kind: Reserved,
                },
            ),
            (
                "http://[2001:db8::1]/",
                UrlProblem::NonPublicIp {
                    ip: "[2001:db8::1]".into(),
                    kind: Reserved,
                },
            ),
            (
                "http://[::ffff:192.168.0.1]/",
                UrlProblem::NonPublicIp {
                    ip: "[::ffff:192.168.0.1]".into(),
                    kind: Private,
                },
            ),
            (
                "http://[64:ff9b::7f00:1]/",
                UrlProblem::NonPublicIp {
                    ip: "[64:ff9b::7f00:1]".into(),
                    kind: Loopback,
                },
            ),
            (
                "http://[2002:c0a8:101::]/",
                UrlProblem::NonPublicIp {
                    ip: "[2002:c0a8:101::]".into(),
                    kind: Private,
                },
            ),
            (
                "http://[2001:0:4136:e378::1]/",
                UrlProblem::NonPublicIp {
                    ip: "[2001:0:4136:e378::1]".into(),
                    kind: Reserved,
                },
            ),
            (
                "https://www.example.com/%zz",
                UrlProblem::BadPercentEncoding,
            ),
            (
                "https://www.example.com/a?b=%4",
                UrlProblem::BadPercentEncoding,
            ),
            (
                "https://www.example.com/100%",
                UrlProblem::BadPercentEncoding,
            ),
            ("https:///x", UrlProblem::SingleLabelHost("x".into())),
            (
                "https://intranet/page",
                UrlProblem::SingleLabelHost("intranet".into()),
            ),
            (
                "https://com./page",
                UrlProblem::SingleLabelHost("com".into()),
            ),
            (
                "http://127.0.0.1../x",
                UrlProblem::NonPublicIp {
                    ip: "127.0.0.1".into(),
                    kind: Loopback,
                },
            ),
            (
                "https://www..example.com/",
                UrlProblem::EmptyLabel("www..example.com".into()),
            ),
        ];
        for (input, problem) in cases {
            assert_eq!(submittable_url(input), Err(problem), "{input}");
        }
    }

    #[test]
    fn exactly_2048_bytes_is_allowed() {
        let prefix = "https://example.com/";
        let at_limit = format!("{prefix}{}", "a".repeat(MAX_URL_BYTES - prefix.len()));
        assert_eq!(ok(&at_limit).url.len(), MAX_URL_BYTES);
        let over = format!("{at_limit}a");
        assert_eq!(
            submittable_url(&over),
            Err(UrlProblem::TooLong(MAX_URL_BYTES + 1))
        );
    }

    #[test]
    fn messages_name_the_rule() {
        let msg = |u: &str| submittable_url(u).unwrap_err().to_string();
        assert!(msg("ftp://example.com/").contains("only http and https"));
        assert!(msg("https://u:p@example.com/").contains("user info"));
        assert!(msg("http://10.0.0.1/").contains("private IP address"));
        assert!(msg("http://[fe80::1]/").contains("link-local IP address"));
        assert!(msg("https://localhost/").contains("localhost"));
    }

    #[test]
    fn normalises_bare_hosts() {
        assert_eq!(
            normalise_host("WWW.Example.com").unwrap(),
            "www.example.com"
        );
        assert_eq!(normalise_host("bücher.de").unwrap(), "xn--bcher-kva.de");
        assert_eq!(normalise_host("example.com:443").unwrap(), "example.com");
        // The request names a site on another port by its host name alone.
        assert_eq!(host_name("example.com:8080"), "example.com");
        assert_eq!(host_name("example.com"), "example.com");
        assert_eq!(host_name("[2001:db8::1]:8443"), "[2001:db8::1]");
        assert_eq!(host_name("[2001:db8::1]"), "[2001:db8::1]");
        assert_eq!(
            normalise_host("example.com:8080").unwrap(),
            "example.com:8080"
        );
        assert!(normalise_host("example.com/path").is_err());
        assert!(normalise_host("https://example.com").is_err());
        // A URL where a host was asked for: the error names the host it holds.
        for (given, alone) in [
            ("https://news.example.com", "news.example.com"),
            ("https://News.Example.com/path?q", "news.example.com"),
            ("http://example.com:8080/", "example.com:8080"),
        ] {
            let e = normalise_host(given).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("give the host name alone, \"{alone}\"")),
                "{e}"
            );
        }
        let e = normalise_host("example.com/path").unwrap_err().to_string();
        assert!(e.contains("such as \"www.example.com\""), "{e}");
        assert!(normalise_host("localhost").is_err());
        assert_eq!(
            normalise_host("SA3.Example.COM.").unwrap(),
            "sa3.example.com"
        );
        assert!(normalise_host("intranet").is_err());
        assert!(normalise_host("").is_err());
    }
}
