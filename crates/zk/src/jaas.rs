//! The users of ZooKeeper's DIGEST-MD5 SASL from a JAAS login configuration, as ZooKeeper
//! operators write it:
//!
//! ```text
//! Server {
//!     org.apache.zookeeper.server.auth.DigestLoginModule required
//!     user_super="adminsecret"
//!     user_bob="bobsecret";
//! };
//! ```
//!
//! Only the `Server` section is read (other sections, such as a `Client` one, are skipped), and
//! in it only DigestLoginModule, whose `user_<name>="<password>"` options are the users. Other
//! login modules (Kerberos) are refused with the line they are on, as is any syntax error.
//! Comments are `//`, `/* */` and `#`.

use std::collections::BTreeMap;

/// The login module whose options list the users.
pub const DIGEST_LOGIN_MODULE: &str = "org.apache.zookeeper.server.auth.DigestLoginModule";
/// Largest JAAS file read.
pub const MAX_FILE_BYTES: usize = 1 << 20;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Word(String),
    Quoted(String),
    Punct(char),
}

fn tokens(text: &str) -> Result<Vec<(usize, Tok)>, String> {
    let mut out = Vec::new();
    let mut line = 1;
    let mut it = text.chars().peekable();
    while let Some(c) = it.next() {
        match c {
            '\n' => line += 1,
            c if c.is_whitespace() => {}
            '#' => {
                while it.peek().is_some_and(|&c| c != '\n') {
                    it.next();
                }
            }
            '/' if it.peek() == Some(&'/') => {
                while it.peek().is_some_and(|&c| c != '\n') {
                    it.next();
                }
            }
            '/' if it.peek() == Some(&'*') => {
                let start = line;
                it.next();
                let mut prev = ' ';
                loop {
                    match it.next() {
                        None => return Err(format!("line {start}: unterminated /* comment")),
                        Some('/') if prev == '*' => break,
                        Some(c) => {
                            if c == '\n' {
                                line += 1;
                            }
                            prev = c;
                        }
                    }
                }
            }
            '"' | '\'' => {
                let start = line;
                let mut s = String::new();
                loop {
                    match it.next() {
                        None => return Err(format!("line {start}: unterminated quoted string")),
                        Some(q) if q == c => break,
                        Some('\\') => match it.next() {
                            Some(e) => s.push(e),
                            None => {
                                return Err(format!("line {start}: unterminated quoted string"))
                            }
                        },
                        Some(ch) => {
                            if ch == '\n' {
                                line += 1;
                            }
                            s.push(ch);
                        }
                    }
                }
                out.push((start, Tok::Quoted(s)));
            }
            '{' | '}' | ';' | '=' => out.push((line, Tok::Punct(c))),
            c => {
                let mut s = String::from(c);
                while it
                    .peek()
                    .is_some_and(|&c| !c.is_whitespace() && !"{};=\"'#".contains(c))
                {
                    s.push(it.next().expect("peeked"));
                }
                out.push((line, Tok::Word(s)));
            }
        }
    }
    Ok(out)
}

/// Parse a JAAS configuration's `Server` section into its DIGEST-MD5 users (name → password).
/// Errors name the line.
pub fn server_users(text: &str) -> Result<BTreeMap<String, String>, String> {
    let toks = tokens(text)?;
    let last_line = text.lines().count().max(1);
    let mut i = 0;
    let mut users = None;
    let at = |i: usize| toks.get(i).map_or(last_line, |(l, _)| *l);
    let expect = |i: usize, p: char| -> Result<(), String> {
        match toks.get(i) {
            Some((_, Tok::Punct(c))) if *c == p => Ok(()),
            Some((l, t)) => Err(format!("line {l}: expected '{p}', found {}", show(t))),
            None => Err(format!(
                "line {last_line}: expected '{p}' at the end of the file"
            )),
        }
    };
    while i < toks.len() {
        let name = match &toks[i] {
            (_, Tok::Word(w)) => w.clone(),
            (l, t) => {
                return Err(format!(
                    "line {l}: expected a section name, found {}",
                    show(t)
                ))
            }
        };
        let section_line = at(i);
        expect(i + 1, '{')?;
        i += 2;
        let mut section = BTreeMap::new();
        // Login modules: class flag options ;
        loop {
            match toks.get(i) {
                Some((_, Tok::Punct('}'))) => {
                    i += 1;
                    break;
                }
                Some((l, Tok::Word(class))) => {
                    let l = *l;
                    let flag = match toks.get(i + 1) {
                        Some((_, Tok::Word(f)))
                            if ["required", "requisite", "sufficient", "optional"]
                                .contains(&f.to_ascii_lowercase().as_str()) =>
                        {
                            f
                        }
                        Some((fl, t)) => {
                            return Err(format!(
                                "line {fl}: expected a control flag (required, requisite, sufficient, optional), found {}",
                                show(t)
                            ))
                        }
                        None => return Err(format!("line {l}: {class} has no control flag")),
                    };
                    let _ = flag;
                    i += 2;
                    let mut options = Vec::new();
                    loop {
                        match toks.get(i) {
                            Some((_, Tok::Punct(';'))) => {
                                i += 1;
                                break;
                            }
                            Some((ol, Tok::Word(key))) => {
                                let ol = *ol;
                                expect(i + 1, '=')?;
                                let value = match toks.get(i + 2) {
                                    Some((_, Tok::Quoted(v) | Tok::Word(v))) => v.clone(),
                                    Some((vl, t)) => {
                                        return Err(format!(
                                            "line {vl}: expected the value of {key}, found {}",
                                            show(t)
                                        ))
                                    }
                                    None => {
                                        return Err(format!("line {ol}: {key} has no value"))
                                    }
                                };
                                options.push((ol, key.clone(), value));
                                i += 3;
                            }
                            Some((ol, t)) => {
                                return Err(format!(
                                    "line {ol}: expected an option or ';', found {}",
                                    show(t)
                                ))
                            }
                            None => {
                                return Err(format!(
                                    "line {last_line}: the options of {class} do not end with ';'"
                                ))
                            }
                        }
                    }
                    if name != "Server" {
                        continue;
                    }
                    if class != DIGEST_LOGIN_MODULE {
                        return Err(format!(
                            "line {l}: login module {class} is not supported in the Server section (synod authenticates DIGEST-MD5 users of {DIGEST_LOGIN_MODULE})"
                        ));
                    }
                    for (ol, key, value) in options {
                        if let Some(user) = key.strip_prefix("user_") {
                            if user.is_empty() {
                                return Err(format!("line {ol}: user_ needs a user name"));
                            }
                            if section.insert(user.to_string(), value).is_some() {
                                return Err(format!("line {ol}: user {user} is given twice"));
                            }
                        }
                    }
                }
                Some((l, t)) => {
                    return Err(format!(
                        "line {l}: expected a login module class or '}}', found {}",
                        show(t)
                    ))
                }
                None => {
                    return Err(format!(
                        "line {last_line}: section {name} (line {section_line}) is not closed with '}};'"
                    ))
                }
            }
        }
        expect(i, ';')?;
        i += 1;
        if name == "Server" {
            if users.is_some() {
                return Err(format!("line {section_line}: a second Server section"));
            }
            users = Some(section);
        }
    }
    match users {
        None => Err("no Server section".into()),
        Some(u) if u.is_empty() => Err(format!(
            "the Server section has no user_<name>=\"<password>\" option of {DIGEST_LOGIN_MODULE}"
        )),
        Some(u) => Ok(u),
    }
}

fn show(t: &Tok) -> String {
    match t {
        Tok::Word(w) => format!("{w:?}"),
        Tok::Quoted(q) => format!("a quoted string ({} characters)", q.chars().count()),
        Tok::Punct(c) => format!("'{c}'"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_server_section_as_zookeeper_operators_write_it() {
        let text = r#"
// The users of the ensemble.
Server {
    org.apache.zookeeper.server.auth.DigestLoginModule required
    user_super="adminsecret"   # the super user
    user_bob="bob\"secret";
};
/* the client side,
   ignored here */
Client {
    org.apache.zookeeper.server.auth.DigestLoginModule required
    username="bob"
    password="bobsecret";
};
"#;
        let users = server_users(text).unwrap();
        assert_eq!(users.len(), 2);
        assert_eq!(users["bob"], "bob\"secret");
        assert_eq!(users["super"], "adminsecret");
    }

    #[test]
    fn bad_files_name_the_line() {
        let cases = [
            ("Server {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n  user_bob=\"x\"\n};", "line 4"),
            ("Server {\n  com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true;\n};", "line 2: login module"),
            ("Server {\n org.apache.zookeeper.server.auth.DigestLoginModule maybe user_bob=\"x\";\n};", "line 2: expected a control flag"),
            ("Server {\n org.apache.zookeeper.server.auth.DigestLoginModule required\n user_bob=\"x;\n};", "line 3: unterminated"),
            ("Client {\n org.apache.zookeeper.server.auth.DigestLoginModule required username=\"bob\";\n};", "no Server section"),
            ("Server {\n org.apache.zookeeper.server.auth.DigestLoginModule required debug=true;\n};", "no user_"),
            ("Server {\n org.apache.zookeeper.server.auth.DigestLoginModule required\n user_bob=\"x\"\n user_bob=\"y\";\n};", "line 4: user bob is given twice"),
            ("Server \n", "line 1: expected '{'"),
            ("/* open", "line 1: unterminated /*"),
            ("", "no Server section"),
        ];
        for (text, want) in cases {
            let e = server_users(text).unwrap_err();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }
}
