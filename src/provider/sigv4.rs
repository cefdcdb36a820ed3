//! AWS Signature Version 4 for one HTTP request (header signing, `AWS4-HMAC-SHA256`), as the AWS
//! SDKs sign requests to non-S3 services: the path is normalized (dot segments removed, empty
//! segments collapsed) and URI-encoded once more on top of what the request line carries, query
//! parameters are decoded, re-encoded and sorted, header values trimmed with inner runs of spaces
//! collapsed, and the payload hash is sent as `x-amz-content-sha256`.
//!
//! Input: the request (method, host, path as sent, query, headers, body), credentials, region,
//! service and the signing time. Output: the headers to add (`x-amz-date`,
//! `x-amz-security-token` when there is a session token, `x-amz-content-sha256`, `authorization`).
//! Pure: hashing and HMAC come from `ring` (already in the build through rustls).
//!
//! Checked against AWS's published SigV4 test suite (unit tests below).

use ring::{digest, hmac};

pub use crate::config::aws::AwsCredentials;

/// One request to sign.
pub struct SigningRequest<'a> {
    pub method: &'a str,
    /// `Host` header value (host, plus `:port` when not the scheme's default).
    pub host: &'a str,
    /// The path exactly as it goes on the request line (already percent-encoded where needed).
    pub path: &'a str,
    /// The raw query string after `?` (may be empty).
    pub query: &'a str,
    /// Headers that are sent and signed besides `host` and the ones this module adds.
    pub headers: &'a [(String, String)],
    pub body: &'a [u8],
}

/// Where and when the signature applies.
pub struct SigningScope<'a> {
    pub region: &'a str,
    pub service: &'a str,
    /// `YYYYMMDDTHHMMSSZ`.
    pub amz_date: &'a str,
    /// Sign the payload hash header (`x-amz-content-sha256`), as the SDKs do for JSON APIs.
    pub content_sha256_header: bool,
}

/// The headers to add to the request, `authorization` last.
pub fn sign(
    request: &SigningRequest,
    credentials: &AwsCredentials,
    scope: &SigningScope,
) -> Vec<(String, String)> {
    let (added, authorization) = signature_parts(request, credentials, scope);
    let mut headers = added;
    headers.push(("authorization".into(), authorization.authorization));
    headers
}

/// The intermediate texts, kept apart so tests can compare each step with the suite.
#[cfg_attr(not(test), allow(dead_code))]
struct Signed {
    canonical_request: String,
    string_to_sign: String,
    signature: String,
    authorization: String,
}

fn signature_parts(
    request: &SigningRequest,
    credentials: &AwsCredentials,
    scope: &SigningScope,
) -> (Vec<(String, String)>, Signed) {
    let payload_hash = hex(digest::digest(&digest::SHA256, request.body).as_ref());
    let mut added: Vec<(String, String)> = vec![("x-amz-date".into(), scope.amz_date.into())];
    if let Some(token) = &credentials.session_token {
        added.push(("x-amz-security-token".into(), token.clone()));
    }
    if scope.content_sha256_header {
        added.push(("x-amz-content-sha256".into(), payload_hash.clone()));
    }

    // Lower-case names; repeated names join their values with commas, in order.
    let mut canonical: Vec<(String, String)> = Vec::new();
    let all = std::iter::once(("host".to_string(), request.host.to_string()))
        .chain(request.headers.iter().cloned())
        .chain(added.iter().cloned());
    for (name, value) in all {
        let name = name.to_ascii_lowercase();
        let value = collapse_spaces(&value);
        match canonical.iter_mut().find(|(n, _)| *n == name) {
            Some((_, existing)) => {
                existing.push(',');
                existing.push_str(&value);
            }
            None => canonical.push((name, value)),
        }
    }
    canonical.sort_by(|a, b| a.0.cmp(&b.0));
    let signed_headers = canonical
        .iter()
        .map(|(n, _)| n.as_str())
        .collect::<Vec<_>>()
        .join(";");
    let header_lines: String = canonical
        .iter()
        .map(|(n, v)| format!("{n}:{v}\n"))
        .collect();

    let canonical_request = format!(
        "{}\n{}\n{}\n{}\n{}\n{}",
        request.method,
        canonical_uri(request.path),
        canonical_query(request.query),
        header_lines,
        signed_headers,
        payload_hash
    );
    let date = &scope.amz_date[..8.min(scope.amz_date.len())];
    let credential_scope = format!("{date}/{}/{}/aws4_request", scope.region, scope.service);
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256\n{}\n{credential_scope}\n{}",
        scope.amz_date,
        hex(digest::digest(&digest::SHA256, canonical_request.as_bytes()).as_ref())
    );
    let key = signing_key(
        &credentials.secret_access_key,
        date,
        scope.region,
        scope.service,
    );
    let signature = hex(hmac::sign(&key, string_to_sign.as_bytes()).as_ref());
    let authorization = format!(
        "AWS4-HMAC-SHA256 Credential={}/{credential_scope}, SignedHeaders={signed_headers}, Signature={signature}",
        credentials.access_key_id
    );
    (
        added,
        Signed {
            canonical_request,
            string_to_sign,
            signature,
            authorization,
        },
    )
}

fn signing_key(secret: &str, date: &str, region: &str, service: &str) -> hmac::Key {
    let step = |key: &[u8], data: &str| -> Vec<u8> {
        hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), data.as_bytes())
            .as_ref()
            .to_vec()
    };
    let k_date = step(format!("AWS4{secret}").as_bytes(), date);
    let k_region = step(&k_date, region);
    let k_service = step(&k_region, service);
    let k_signing = step(&k_service, "aws4_request");
    hmac::Key::new(hmac::HMAC_SHA256, &k_signing)
}

/// Trimmed, with every run of spaces inside reduced to one.
fn collapse_spaces(value: &str) -> String {
    value.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Normalized path (no `.`/`..`, no empty segments), each segment URI-encoded.
fn canonical_uri(path: &str) -> String {
    let mut segments: Vec<&str> = Vec::new();
    for segment in path.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            s => segments.push(s),
        }
    }
    let mut out = String::from("/");
    out.push_str(
        &segments
            .iter()
            .map(|s| uri_encode(s.as_bytes()))
            .collect::<Vec<_>>()
            .join("/"),
    );
    if path.ends_with('/') && !segments.is_empty() {
        out.push('/');
    }
    out
}

/// `k=v` pairs decoded, re-encoded and sorted by key, then value.
fn canonical_query(query: &str) -> String {
    let mut pairs: Vec<(String, String)> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (
                uri_encode(&percent_decode(k)),
                uri_encode(&percent_decode(v)),
            )
        })
        .collect();
    pairs.sort();
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

/// RFC 3986 encoding: unreserved characters stay, every other byte becomes `%XX`.
pub fn uri_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn percent_decode(text: &str) -> Vec<u8> {
    let hex_digit = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let (Some(hi), Some(lo)) = (
                bytes.get(i + 1).and_then(|b| hex_digit(*b)),
                bytes.get(i + 2).and_then(|b| hex_digit(*b)),
            )
        {
            out.push(hi << 4 | lo);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    out
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `YYYYMMDDTHHMMSSZ` for a Unix time in milliseconds.
pub fn amz_date(unix_ms: i64) -> String {
    // `2015-08-30T12:36:00.000Z` → `20150830T123600Z`
    let iso = crate::session::iso_from_ms(unix_ms);
    let digits: String = iso[..19]
        .chars()
        .filter(|c| *c != '-' && *c != ':')
        .collect();
    format!("{digits}Z")
}

#[cfg(test)]
mod tests {
    //! Cases from AWS's SigV4 test suite (aws-c-auth `tests/aws-signing-test-suite/v4`): the
    //! request, the expected canonical request, string to sign and signature, verbatim.
    use super::*;

    const SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
    const DATE: &str = "20150830T123600Z";
    const EMPTY_SHA: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    struct Case {
        name: &'static str,
        method: &'static str,
        path: &'static str,
        query: &'static str,
        headers: &'static [(&'static str, &'static str)],
        body: &'static str,
        token: Option<&'static str>,
        sign_body: bool,
        canonical_request: String,
        string_to_sign_hash: &'static str,
        signature: &'static str,
    }

    fn simple(method: &str, path: &str, query: &str, signed: &str) -> String {
        format!(
            "{method}\n{path}\n{query}\nhost:example.amazonaws.com\nx-amz-date:{DATE}\n\nhost;x-amz-date\n{signed}"
        )
    }

    const STS_TOKEN: &str = "AQoDYXdzEPT//////////wEXAMPLEtc764bNrC9SAPBSM22wDOk4x4HIZ8j4FZTwdQWLWsKWHGBuFqwAeMicRXmxfpSPfIeoIYRqTflfKD8YUuwthAx7mSEI/qkPpKPi/kMcGdQrmGdeehM4IC1NtBmUpp2wUE8phUZampKsburEDy0KPkyQDYwT7WZ0wq5VSXDvp75YU9HFvlRd8Tx6q6fE8YQcHNVXAkiY9q6d+xo0rKwT38xVqr7ZD0u0iPPkUL64lIZbqBAz+scqKmlzm8FDrypNC9Yjc8fPOLn9FX9KSYvKTr4rvx3iSIlTJabIQwj2ICCR/oLxBA==";
    const FORM_SHA: &str = "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e";

    fn cases() -> Vec<Case> {
        let plain = |name, method, path, query, canonical, sts, sig| Case {
            name,
            method,
            path,
            query,
            headers: &[],
            body: "",
            token: None,
            sign_body: false,
            canonical_request: canonical,
            string_to_sign_hash: sts,
            signature: sig,
        };
        vec![
            plain(
                "get-vanilla",
                "GET",
                "/",
                "",
                simple("GET", "/", "", EMPTY_SHA),
                "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63",
                "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
            ),
            plain(
                "post-vanilla",
                "POST",
                "/",
                "",
                simple("POST", "/", "", EMPTY_SHA),
                "553f88c9e4d10fc9e109e2aeb65f030801b70c2f6468faca261d401ae622fc87",
                "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b",
            ),
            plain(
                "get-vanilla-query-order-key-case",
                "GET",
                "/",
                "Param2=value2&Param1=value1",
                simple("GET", "/", "Param1=value1&Param2=value2", EMPTY_SHA),
                "816cd5b414d056048ba4f7c5386d6e0533120fb1fcfa93762cf0fc39e2cf19e0",
                "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500",
            ),
            plain(
                "get-vanilla-query-order-encoded",
                "GET",
                "/",
                "Param-3=Value3&Param=Value2&%E1%88%B4=Value1",
                simple(
                    "GET",
                    "/",
                    "%E1%88%B4=Value1&Param=Value2&Param-3=Value3",
                    EMPTY_SHA,
                ),
                "868294f5c38bd141c4972a373a76654f1418a8e4fc18b2e7903ae45e8ae0ec71",
                "371d3713e185cc334048618a97f809c9ffe339c62934c032af5a0e595648fcac",
            ),
            plain(
                "get-utf8",
                "GET",
                "/\u{1234}",
                "",
                simple("GET", "/%E1%88%B4", "", EMPTY_SHA),
                "2a0a97d02205e45ce2e994789806b19270cfbbb0921b278ccf58f5249ac42102",
                "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85",
            ),
            plain(
                "get-space-normalized",
                "GET",
                "/example space/",
                "",
                simple("GET", "/example%20space/", "", EMPTY_SHA),
                "63ee75631ed7234ae61b5f736dfc7754cdccfedbff4b5128a915706ee9390d86",
                "652487583200325589f1fba4c7e578f72c47cb61beeca81406b39ddec1366741",
            ),
            plain(
                "get-slashes-normalized",
                "GET",
                "//example//",
                "",
                simple("GET", "/example/", "", EMPTY_SHA),
                "cb96b4ac96d501f7c5c15bc6d67b3035061cfced4af6585ad927f7e6c985c015",
                "9a624bd73a37c9a373b5312afbebe7a714a789de108f0bdfe846570885f57e84",
            ),
            plain(
                "get-relative-relative-normalized",
                "GET",
                "/example1/example2/../..",
                "",
                simple("GET", "/", "", EMPTY_SHA),
                "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63",
                "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
            ),
            Case {
                headers: &[("My-Header1", " value1"), ("My-Header2", " \"a   b   c\"")],
                ..plain(
                    "get-header-value-trim",
                    "GET",
                    "/",
                    "",
                    format!(
                        "GET\n/\n\nhost:example.amazonaws.com\nmy-header1:value1\nmy-header2:\"a b c\"\nx-amz-date:{DATE}\n\nhost;my-header1;my-header2;x-amz-date\n{EMPTY_SHA}"
                    ),
                    "a726db9b0df21c14f559d0a978e563112acb1b9e05476f0a6a1c7d68f28605c7",
                    "acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367055dee359757a9c736",
                )
            },
            Case {
                headers: &[
                    ("My-Header1", "value4"),
                    ("My-Header1", "value1"),
                    ("My-Header1", "value3"),
                    ("My-Header1", "value2"),
                ],
                ..plain(
                    "get-header-value-order",
                    "GET",
                    "/",
                    "",
                    format!(
                        "GET\n/\n\nhost:example.amazonaws.com\nmy-header1:value4,value1,value3,value2\nx-amz-date:{DATE}\n\nhost;my-header1;x-amz-date\n{EMPTY_SHA}"
                    ),
                    "31ce73cd3f3d9f66977ad3dd957dc47af14df92fcd8509f59b349e9137c58b86",
                    "08c7e5a9acfcfeb3ab6b2185e75ce8b1deb5e634ec47601a50643f830c755c01",
                )
            },
            Case {
                token: Some(STS_TOKEN),
                ..plain(
                    "post-sts-header-before",
                    "POST",
                    "/",
                    "",
                    format!(
                        "POST\n/\n\nhost:example.amazonaws.com\nx-amz-date:{DATE}\nx-amz-security-token:{STS_TOKEN}\n\nhost;x-amz-date;x-amz-security-token\n{EMPTY_SHA}"
                    ),
                    "c237e1b440d4c63c32ca95b5b99481081cb7b13c7e40434868e71567c1a882f6",
                    "85d96828115b5dc0cfc3bd16ad9e210dd772bbebba041836c64533a82be05ead",
                )
            },
            Case {
                headers: &[
                    ("Content-Type", "application/x-www-form-urlencoded"),
                    ("Content-Length", "13"),
                ],
                body: "Param1=value1",
                sign_body: true,
                ..plain(
                    "post-x-www-form-urlencoded",
                    "POST",
                    "/",
                    "",
                    format!(
                        "POST\n/\n\ncontent-length:13\ncontent-type:application/x-www-form-urlencoded\nhost:example.amazonaws.com\nx-amz-content-sha256:{FORM_SHA}\nx-amz-date:{DATE}\n\ncontent-length;content-type;host;x-amz-content-sha256;x-amz-date\n{FORM_SHA}"
                    ),
                    "b1edd1d03544c25390e32085d55b57acc9a3961bb59415ff86c45c3d89d16cfb",
                    "d3875051da38690788ef43de4db0d8f280229d82040bfac253562e56c3f20e0b",
                )
            },
        ]
    }

    #[test]
    fn aws_test_suite_cases() {
        for case in cases() {
            let headers: Vec<(String, String)> = case
                .headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let request = SigningRequest {
                method: case.method,
                host: "example.amazonaws.com",
                path: case.path,
                query: case.query,
                headers: &headers,
                body: case.body.as_bytes(),
            };
            let credentials = AwsCredentials {
                access_key_id: "AKIDEXAMPLE".into(),
                secret_access_key: SECRET.into(),
                session_token: case.token.map(str::to_string),
            };
            let scope = SigningScope {
                region: "us-east-1",
                service: "service",
                amz_date: DATE,
                content_sha256_header: case.sign_body,
            };
            let (_, signed) = signature_parts(&request, &credentials, &scope);
            assert_eq!(
                signed.canonical_request, case.canonical_request,
                "{}",
                case.name
            );
            assert_eq!(
                signed.string_to_sign,
                format!(
                    "AWS4-HMAC-SHA256\n{DATE}\n20150830/us-east-1/service/aws4_request\n{}",
                    case.string_to_sign_hash
                ),
                "{}",
                case.name
            );
            assert_eq!(signed.signature, case.signature, "{}", case.name);
            let added = sign(&request, &credentials, &scope);
            let (name, authorization) = added.last().unwrap();
            assert_eq!(name, "authorization");
            assert!(
                authorization.starts_with(
                    "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders="
                ) && authorization.ends_with(&format!(", Signature={}", case.signature)),
                "{}: {authorization}",
                case.name
            );
        }
    }

    #[test]
    fn an_encoded_path_is_encoded_again() {
        // The SDKs sign Bedrock's `/model/<id>/…` with the id's `%3A` encoded a second time.
        assert_eq!(
            canonical_uri("/model/us.anthropic.claude-v1%3A0/converse-stream"),
            "/model/us.anthropic.claude-v1%253A0/converse-stream"
        );
    }

    #[test]
    fn amz_date_format() {
        assert_eq!(amz_date(1_440_938_160_000), "20150830T123600Z");
    }

    #[test]
    fn credentials_debug_hides_the_secret() {
        let c = AwsCredentials {
            access_key_id: "AKID".into(),
            secret_access_key: "very-secret".into(),
            session_token: Some("tok-secret".into()),
        };
        let text = format!("{c:?}");
        assert!(!text.contains("secret\"") && !text.contains("very-secret"));
        assert!(!text.contains("tok-secret"));
    }
}
