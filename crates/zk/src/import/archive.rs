//! Reading jute's binary archive (`BinaryInputArchive`) out of a file held in memory: every
//! read checks what remains, and every error names the file and the byte offset where the
//! record broke.

use super::ImportError;
use crate::jute::{Acl, Id};
use std::path::Path;

/// The largest buffer or string a record may hold: ZooKeeper's default `jute.maxbuffer` is
/// 1 MiB less a little, and a server can be configured higher; beyond this, the length is junk.
pub const MAX_BUFFER: usize = 256 << 20;
/// The most elements a vector (ACL list, multi) may claim before its bytes are checked.
const MAX_VECTOR: usize = 1 << 24;

pub struct Archive<'a> {
    pub file: &'a Path,
    b: &'a [u8],
    /// Offset of `b[0]` in the file (a record decoded on its own still reports file offsets).
    base: u64,
    at: usize,
}

impl<'a> Archive<'a> {
    pub fn new(file: &'a Path, b: &'a [u8], base: u64) -> Self {
        Archive {
            file,
            b,
            base,
            at: 0,
        }
    }

    /// File offset of the next byte.
    pub fn offset(&self) -> u64 {
        self.base + self.at as u64
    }

    pub fn remaining(&self) -> usize {
        self.b.len() - self.at
    }

    /// The bytes read so far.
    pub fn consumed(&self) -> &'a [u8] {
        &self.b[..self.at]
    }

    pub fn error(&self, what: impl Into<String>) -> ImportError {
        ImportError::new(self.file, self.offset(), what)
    }

    pub fn bytes(&mut self, n: usize, what: &str) -> Result<&'a [u8], ImportError> {
        if self.remaining() < n {
            return Err(self.error(format!(
                "truncated: {what} needs {n} bytes, {} remain",
                self.remaining()
            )));
        }
        let s = &self.b[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }

    pub fn byte(&mut self, what: &str) -> Result<u8, ImportError> {
        Ok(self.bytes(1, what)?[0])
    }

    pub fn int(&mut self, what: &str) -> Result<i32, ImportError> {
        let s = self.bytes(4, what)?;
        Ok(i32::from_be_bytes(s.try_into().expect("4 bytes")))
    }

    pub fn long(&mut self, what: &str) -> Result<i64, ImportError> {
        let s = self.bytes(8, what)?;
        Ok(i64::from_be_bytes(s.try_into().expect("8 bytes")))
    }

    pub fn boolean(&mut self, what: &str) -> Result<bool, ImportError> {
        Ok(self.byte(what)? != 0)
    }

    /// A buffer: length -1 is null.
    pub fn buffer(&mut self, what: &str) -> Result<Option<&'a [u8]>, ImportError> {
        let at = self.offset();
        let n = self.int(what)?;
        if n < 0 {
            return Ok(None);
        }
        let n = n as usize;
        if n > MAX_BUFFER {
            return Err(ImportError::new(
                self.file,
                at,
                format!("{what} claims {n} bytes, more than any ZooKeeper record holds"),
            ));
        }
        self.bytes(n, what).map(Some)
    }

    /// A string (jute `ustring`): null reads as `None`.
    pub fn string(&mut self, what: &str) -> Result<Option<String>, ImportError> {
        let at = self.offset();
        match self.buffer(what)? {
            None => Ok(None),
            Some(b) => String::from_utf8(b.to_vec())
                .map(Some)
                .map_err(|_| ImportError::new(self.file, at, format!("{what} is not UTF-8"))),
        }
    }

    /// A string that must be present.
    pub fn path(&mut self, what: &str) -> Result<String, ImportError> {
        let at = self.offset();
        self.string(what)?
            .ok_or_else(|| ImportError::new(self.file, at, format!("{what} is null")))
    }

    /// A vector count: -1 (null) reads as 0; each element takes at least `min` bytes, which
    /// bounds the count by what remains.
    pub fn count(&mut self, min: usize, what: &str) -> Result<usize, ImportError> {
        let at = self.offset();
        let n = self.int(what)?;
        if n < 0 {
            return Ok(0);
        }
        let n = n as usize;
        if n > MAX_VECTOR || n.saturating_mul(min) > self.remaining() {
            return Err(ImportError::new(
                self.file,
                at,
                format!("{what} claims {n} elements, more than the bytes that follow hold"),
            ));
        }
        Ok(n)
    }

    /// `vector<ACL>`: each ACL is `int perms`, `Id { ustring scheme; ustring id }`.
    pub fn acls(&mut self, what: &str) -> Result<Vec<Acl>, ImportError> {
        let n = self.count(12, what)?;
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            let perms = self.int("an ACL's permissions")?;
            let scheme = self.string("an ACL's scheme")?.unwrap_or_default();
            let id = self.string("an ACL's id")?.unwrap_or_default();
            v.push(Acl {
                perms,
                id: Id { scheme, id },
            });
        }
        Ok(v)
    }
}

/// Adler-32 (RFC 1950), the checksum of ZooKeeper's snapshot files and log records
/// (`java.util.zip.Adler32`).
pub fn adler32(data: &[u8]) -> u32 {
    const MOD: u32 = 65_521;
    // 5552 bytes is the most that can be summed before the 32-bit sums must be reduced.
    let (mut a, mut b) = (1u32, 0u32);
    for chunk in data.chunks(5552) {
        for &x in chunk {
            a += x as u32;
            b += a;
        }
        a %= MOD;
        b %= MOD;
    }
    (b << 16) | a
}
