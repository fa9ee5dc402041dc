//! ZooKeeper path rules (PathUtils.validatePath).

/// Why a path is invalid, or Ok.
pub fn validate(path: &str, sequential: bool) -> Result<(), &'static str> {
    // A sequential create may end with '/': the server appends the sequence number.
    let owned;
    let path = if sequential {
        owned = format!("{path}1");
        owned.as_str()
    } else {
        path
    };
    if path.is_empty() {
        return Err("path must not be empty");
    }
    if !path.starts_with('/') {
        return Err("path must start with /");
    }
    if path.len() == 1 {
        return Ok(());
    }
    if path.ends_with('/') {
        return Err("path must not end with /");
    }
    for seg in path[1..].split('/') {
        if seg.is_empty() {
            return Err("empty node name");
        }
        if seg == "." || seg == ".." {
            return Err("relative paths are not allowed");
        }
    }
    for c in path.chars() {
        let u = c as u32;
        if u == 0
            || (0x01..=0x1f).contains(&u)
            || (0x7f..=0x9f).contains(&u)
            || (0xd800..=0xf8ff).contains(&u)
            || (0xfff0..=0xffff).contains(&u)
            // Outside the Basic Multilingual Plane: Java sees a surrogate pair.
            || u > 0xffff
        {
            return Err("invalid character in path");
        }
    }
    Ok(())
}

/// The parent of a valid, non-root path.
pub fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) => "/",
        Some(i) => &path[..i],
        None => "/",
    }
}

/// The last segment of a valid, non-root path.
pub fn name(path: &str) -> &str {
    path.rfind('/').map_or(path, |i| &path[i + 1..])
}

pub fn join(parent: &str, name: &str) -> String {
    if parent == "/" {
        format!("/{name}")
    } else {
        format!("{parent}/{name}")
    }
}

/// Is `path` equal to `ancestor` or below it?
pub fn is_under(path: &str, ancestor: &str) -> bool {
    ancestor == "/"
        || path == ancestor
        || (path.starts_with(ancestor) && path.as_bytes().get(ancestor.len()) == Some(&b'/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation() {
        for ok in ["/", "/a", "/a/b", "/a-b_c.d", "/é"] {
            assert!(validate(ok, false).is_ok(), "{ok}");
        }
        for bad in [
            "", "a", "/a/", "//a", "/a//b", "/a/./b", "/..", "/a\u{0}b", "/a\u{1}",
        ] {
            assert!(validate(bad, false).is_err(), "{bad:?}");
        }
        assert!(validate("/a/", true).is_ok());
        assert!(validate("/a/b-", true).is_ok());
    }

    #[test]
    fn parents_and_names() {
        assert_eq!(parent("/a"), "/");
        assert_eq!(parent("/a/b/c"), "/a/b");
        assert_eq!(name("/a/b/c"), "c");
        assert_eq!(join("/", "x"), "/x");
        assert_eq!(join("/a", "x"), "/a/x");
        assert!(is_under("/a/b", "/a"));
        assert!(is_under("/a", "/a"));
        assert!(!is_under("/ab", "/a"));
        assert!(is_under("/x", "/"));
    }
}
