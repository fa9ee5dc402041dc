//! The server half of SASL DIGEST-MD5 (RFC 2831) as Apache ZooKeeper runs it on its client
//! port: realm `zk-sasl-md5`, digest-uri `zookeeper/zk-sasl-md5`, quality of protection `auth`
//! only (no integrity or confidentiality layer), algorithm md5-sess.
//!
//! The exchange has two steps. The client opens with an empty token and gets the challenge
//! (realm, a fresh nonce, charset, algorithm); it then sends its digest-response, which is
//! verified against the user's password, and gets `rspauth=...`, which proves to the client
//! that the server knows the password too. The authenticated identity is the username (as
//! ZooKeeper's SaslServerCallbackHandler authorizes the authentication id, whatever authzid the
//! client names). Anything else — a step after the end, a response over
//! [`MAX_RESPONSE`] bytes, a malformed or mismatched directive — fails the exchange for good.
//!
//! This module is pure: the nonce comes from the caller (the server draws it from the OS RNG),
//! and passwords are looked up through a closure.

use md5::{Digest, Md5};

/// ZooKeeper's fixed DIGEST-MD5 server name, which is also the realm it offers.
pub const REALM: &str = "zk-sasl-md5";
/// The digest-uri ZooKeeper clients send: service `zookeeper`, host `zk-sasl-md5`.
pub const DIGEST_URI: &str = "zookeeper/zk-sasl-md5";
/// Longest client response accepted (as the JDK's DIGEST-MD5 server: 4 KiB).
pub const MAX_RESPONSE: usize = 4096;
/// Most directives in one response (a real one has about ten).
const MAX_DIRECTIVES: usize = 32;

/// Why an exchange failed: a sentence for the server's log (never sent to the client).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaslError(pub String);

impl std::fmt::Display for SaslError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DIGEST-MD5: {}", self.0)
    }
}

fn fail<T>(why: impl Into<String>) -> Result<T, SaslError> {
    Err(SaslError(why.into()))
}

/// What the server sends back for one client token.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// The challenge, for the client's empty opening token.
    Challenge(Vec<u8>),
    /// The client proved it knows `user`'s password: `rspauth` goes back to it.
    Success { user: String, rspauth: Vec<u8> },
}

enum State {
    Start,
    Challenged,
    Finished,
}

/// One connection's DIGEST-MD5 exchange.
pub struct DigestMd5Server {
    nonce: String,
    state: State,
}

impl DigestMd5Server {
    /// `nonce`: fresh random text (base64 of random bytes), never reused.
    pub fn new(nonce: String) -> Self {
        DigestMd5Server {
            nonce,
            state: State::Start,
        }
    }

    /// Has the exchange ended (succeeded or failed)?
    pub fn finished(&self) -> bool {
        matches!(self.state, State::Finished)
    }

    /// Evaluate the client's next token. Any error ends the exchange: later tokens fail too.
    pub fn step(
        &mut self,
        token: &[u8],
        password_of: impl Fn(&str) -> Option<String>,
    ) -> Result<Step, SaslError> {
        let state = std::mem::replace(&mut self.state, State::Finished);
        if token.len() > MAX_RESPONSE {
            return fail(format!(
                "a response of {} bytes (at most {MAX_RESPONSE})",
                token.len()
            ));
        }
        match state {
            State::Start => {
                // DIGEST-MD5 has no initial response; whatever the client sent is ignored, as
                // ZooKeeper 3.8 (the JDK's server) ignores it. The challenge names no qop: auth
                // is the default, and the only one offered.
                self.state = State::Challenged;
                Ok(Step::Challenge(
                    format!(
                        "realm=\"{REALM}\",nonce=\"{}\",charset=utf-8,algorithm=md5-sess",
                        self.nonce
                    )
                    .into_bytes(),
                ))
            }
            State::Challenged => self.verify(token, password_of),
            State::Finished => fail("a token after the end of the exchange"),
        }
    }

    fn verify(
        &self,
        token: &[u8],
        password_of: impl Fn(&str) -> Option<String>,
    ) -> Result<Step, SaslError> {
        let d = parse_directives(token)?;
        let get = |name: &str| d.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_slice());
        let utf8 = match get("charset") {
            None => false,
            Some(c) if c.eq_ignore_ascii_case(b"utf-8") => true,
            Some(_) => return fail("charset must be utf-8"),
        };
        let text = |name: &str, v: &[u8]| -> Result<String, SaslError> {
            if utf8 {
                String::from_utf8(v.to_vec()).or_else(|_| fail(format!("{name} is not UTF-8")))
            } else {
                // ISO 8859-1, as RFC 2831 says when the client names no charset.
                Ok(v.iter().map(|&b| b as char).collect())
            }
        };
        let Some(username) = get("username") else {
            return fail("no username");
        };
        let user = text("username", username)?;
        let realm = get("realm").unwrap_or(b"");
        if !realm.is_empty() && realm != REALM.as_bytes() {
            return fail(format!(
                "realm {:?} is not {REALM}",
                String::from_utf8_lossy(realm)
            ));
        }
        if get("nonce") != Some(self.nonce.as_bytes()) {
            return fail("the nonce is not the one this server sent");
        }
        let cnonce = match get("cnonce") {
            Some(c) if !c.is_empty() => c,
            _ => return fail("no cnonce"),
        };
        let nc = get("nc").unwrap_or(b"");
        if nc.len() != 8 || u32::from_str_radix(&String::from_utf8_lossy(nc), 16) != Ok(1) {
            return fail("nc must be 00000001");
        }
        match get("qop") {
            None | Some(b"auth") => {}
            Some(q) => {
                return fail(format!(
                    "qop {:?} was not offered (only auth)",
                    String::from_utf8_lossy(q)
                ))
            }
        }
        let Some(uri) = get("digest-uri") else {
            return fail("no digest-uri");
        };
        if !uri.eq_ignore_ascii_case(DIGEST_URI.as_bytes()) {
            return fail(format!(
                "digest-uri {:?} is not {DIGEST_URI}",
                String::from_utf8_lossy(uri)
            ));
        }
        let response = get("response").unwrap_or(b"");
        if response.len() != 32 || !response.iter().all(u8::is_ascii_hexdigit) {
            return fail("response must be 32 hexadecimal digits");
        }
        let Some(password) = password_of(&user) else {
            return fail(format!("unknown user {user:?}"));
        };
        // Hashed in the charset the client used: ISO 8859-1 unless it said utf-8, and even then
        // ISO 8859-1 when every character fits (RFC 2831 §2.1.2.1, as the JDK's client does).
        let latin1 = |s: &str| -> Option<Vec<u8>> {
            s.chars().map(|c| u8::try_from(c as u32).ok()).collect()
        };
        let username_hashed: Vec<u8> = if utf8 {
            latin1(&user).unwrap_or_else(|| username.to_vec())
        } else {
            username.to_vec()
        };
        let password: Vec<u8> = if utf8 {
            latin1(&password).unwrap_or_else(|| password.into_bytes())
        } else {
            match password.chars().map(|c| u8::try_from(c as u32)).collect() {
                Ok(p) => p,
                Err(_) => {
                    return fail("the password is not ISO 8859-1 and the client named no charset")
                }
            }
        };
        let secret = Secret {
            username: &username_hashed,
            realm,
            password: &password,
            nonce: self.nonce.as_bytes(),
            cnonce,
            nc,
            authzid: get("authzid"),
        };
        let expected = secret.digest(&[b"AUTHENTICATE:".as_slice(), uri].concat());
        if !constant_time_eq(expected.as_bytes(), &response.to_ascii_lowercase()) {
            return fail(format!("wrong password for user {user:?}"));
        }
        let rspauth = secret.digest(&[b":".as_slice(), uri].concat());
        Ok(Step::Success {
            user,
            rspauth: format!("rspauth={rspauth}").into_bytes(),
        })
    }
}

/// What the response digest is computed from (RFC 2831 2.1.2.1, qop=auth).
pub struct Secret<'a> {
    pub username: &'a [u8],
    pub realm: &'a [u8],
    pub password: &'a [u8],
    pub nonce: &'a [u8],
    pub cnonce: &'a [u8],
    pub nc: &'a [u8],
    pub authzid: Option<&'a [u8]>,
}

impl Secret<'_> {
    /// HEX(KD(HEX(H(A1)), nonce:nc:cnonce:auth:HEX(H(A2)))), with
    /// A1 = H(username:realm:password):nonce:cnonce[:authzid]. A2 is `AUTHENTICATE:uri` for
    /// the client's response, `:uri` for the server's rspauth.
    pub fn digest(&self, a2: &[u8]) -> String {
        let mut key = Md5::new();
        for (i, part) in [self.username, self.realm, self.password]
            .iter()
            .enumerate()
        {
            if i > 0 {
                key.update(b":");
            }
            key.update(part);
        }
        let mut a1 = key.finalize().to_vec();
        for part in [Some(self.nonce), Some(self.cnonce), self.authzid]
            .into_iter()
            .flatten()
        {
            a1.push(b':');
            a1.extend_from_slice(part);
        }
        let mut h = Md5::new();
        h.update(hex(&Md5::digest(&a1)).as_bytes());
        for part in [self.nonce, self.nc, self.cnonce, b"auth"] {
            h.update(b":");
            h.update(part);
        }
        h.update(b":");
        h.update(hex(&Md5::digest(a2)).as_bytes());
        hex(&h.finalize())
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Parse a digest-response: `name=value` pairs separated by commas (empty elements allowed),
/// values a token or a quoted string with backslash escapes, whitespace around them. Names
/// are lower-cased. Refused: a name that is not a token, an unterminated quote, a missing
/// `=`, text after a quoted value, a directive given twice, more than 32 directives, and
/// anything over [`MAX_RESPONSE`] bytes.
pub fn parse_directives(input: &[u8]) -> Result<Vec<(String, Vec<u8>)>, SaslError> {
    if input.len() > MAX_RESPONSE {
        return fail(format!("a response of {} bytes", input.len()));
    }
    let is_token = |c: u8| c.is_ascii_graphic() && !b"()<>@,;:\\\"/[]?={}".contains(&c);
    let mut out: Vec<(String, Vec<u8>)> = Vec::new();
    let mut i = 0;
    let skip_ws = |i: &mut usize| {
        while *i < input.len() && matches!(input[*i], b' ' | b'\t' | b'\r' | b'\n') {
            *i += 1;
        }
    };
    loop {
        skip_ws(&mut i);
        if i == input.len() {
            break;
        }
        if input[i] == b',' {
            i += 1;
            continue;
        }
        let start = i;
        while i < input.len() && is_token(input[i]) {
            i += 1;
        }
        if i == start {
            return fail(format!("unexpected byte {:#04x} at {i}", input[i]));
        }
        let name = String::from_utf8_lossy(&input[start..i]).to_ascii_lowercase();
        skip_ws(&mut i);
        if input.get(i) != Some(&b'=') {
            return fail(format!("directive {name:?} has no value"));
        }
        i += 1;
        skip_ws(&mut i);
        let mut value = Vec::new();
        if input.get(i) == Some(&b'"') {
            i += 1;
            loop {
                match input.get(i) {
                    None => return fail(format!("unterminated quoted value of {name:?}")),
                    Some(b'"') => {
                        i += 1;
                        break;
                    }
                    Some(b'\\') => match input.get(i + 1) {
                        Some(&c) => {
                            value.push(c);
                            i += 2;
                        }
                        None => return fail(format!("unterminated quoted value of {name:?}")),
                    },
                    Some(&c) => {
                        value.push(c);
                        i += 1;
                    }
                }
            }
        } else {
            while i < input.len() && is_token(input[i]) {
                value.push(input[i]);
                i += 1;
            }
        }
        skip_ws(&mut i);
        if i < input.len() && input[i] != b',' {
            return fail(format!("unexpected text after the value of {name:?}"));
        }
        if out.iter().any(|(n, _)| *n == name) {
            return fail(format!("directive {name:?} given twice"));
        }
        if out.len() == MAX_DIRECTIVES {
            return fail("too many directives");
        }
        out.push((name, value));
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
