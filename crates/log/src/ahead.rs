//! Zero-filled space ahead of the log's end, prepared on a thread of its own.
//!
//! Appending into space that already exists makes each `fdatasync` a pure data flush, with no
//! file-size change to flush with it (measured on the workplace disk: 123 µs against 201 µs for
//! a 4 KiB append, docs/results/profile.md). But the zeros must be on disk before the log's own
//! syncs reach them: zeros written in line are flushed by the log's next `fdatasync`, a stall
//! of tens of milliseconds every time the padding is extended (the p99.9 of the benchmark showed
//! it). So a helper thread writes the zeros and syncs them well ahead of the writer.
//!
//! The writer never writes into a range the helper is filling: before writing past the filled
//! end it waits for a fill in progress, and if it is still past, it claims the range (the
//! helper then fills from the writer's end on).

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

/// Zeros written, and written back, at a time.
const CHUNK: usize = 1 << 20;

#[derive(Default)]
struct State {
    /// The segment being filled (a clone of the writer's handle) and its number.
    file: Option<Arc<File>>,
    segment: u64,
    /// Zeros are written (and synced) up to here; the writer owns everything below.
    filled: u64,
    /// The helper is asked to fill up to here.
    target: u64,
    busy: bool,
    stop: bool,
    error: Option<io::Error>,
}

pub(crate) struct Ahead {
    shared: Arc<(Mutex<State>, Condvar)>,
    /// How far ahead of the writer the zeros are kept (0: no padding at all).
    bytes: u64,
    thread: Option<JoinHandle<()>>,
}

impl Ahead {
    pub(crate) fn new(bytes: u64) -> Self {
        let shared: Arc<(Mutex<State>, Condvar)> = Arc::default();
        let thread = (bytes > 0).then(|| {
            let s = shared.clone();
            std::thread::Builder::new()
                .name("synod-wal-ahead".into())
                .spawn(move || fill_loop(&s))
                .expect("spawn the padding thread")
        });
        Ahead {
            shared,
            bytes,
            thread,
        }
    }

    /// The writer moved to `segment` (a new file, or the one found at start whose length is
    /// `filled`).
    pub(crate) fn segment(&self, file: Arc<File>, segment: u64, filled: u64) {
        let (m, cv) = &*self.shared;
        let mut s = m.lock().expect("padding state");
        while s.busy {
            s = cv.wait(s).expect("padding state");
        }
        s.file = Some(file);
        s.segment = segment;
        s.filled = filled;
        s.target = filled;
    }

    /// The writer is about to write up to `end`: make sure no fill runs under it, and ask for
    /// zeros ahead of it. Returns an error the helper met (the log then fails: a disk that
    /// cannot take zeros cannot take records either).
    pub(crate) fn before_write(&self, end: u64) -> io::Result<()> {
        if self.bytes == 0 {
            return Ok(());
        }
        let (m, cv) = &*self.shared;
        let mut s = m.lock().expect("padding state");
        if let Some(e) = s.error.take() {
            return Err(e);
        }
        if end > s.filled {
            // Past the zeros: wait for a fill under way, then claim the rest.
            while s.busy {
                s = cv.wait(s).expect("padding state");
            }
            s.filled = s.filled.max(end);
            s.target = s.target.max(s.filled);
        }
        if s.filled.saturating_sub(end) < self.bytes / 2 {
            s.target = s.target.max(end + self.bytes);
            cv.notify_all();
        }
        Ok(())
    }
}

/// Write back the pages of `[offset, offset + len)` and wait for it, without a cache flush of
/// the device: the padding only has to be clean in the page cache (the log's own `fdatasync`
/// then flushes the device's cache, which is cheap for data already written).
#[cfg(target_os = "linux")]
fn write_back(file: &File, offset: u64, len: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE
        | libc::SYNC_FILE_RANGE_WRITE
        | libc::SYNC_FILE_RANGE_WAIT_AFTER;
    // SAFETY: sync_file_range only reads its integer arguments; the descriptor is valid for the
    // call because `file` is borrowed for its duration, and offsets beyond the end of the file
    // are allowed (they are simply ignored).
    let r = unsafe { libc::sync_file_range(file.as_raw_fd(), offset as i64, len as i64, flags) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Elsewhere, a data sync of the whole file does the same job, more slowly.
#[cfg(not(target_os = "linux"))]
fn write_back(file: &File, _offset: u64, _len: u64) -> io::Result<()> {
    file.sync_data()
}

#[cfg(test)]
impl Ahead {
    /// Wait until every fill asked for is done.
    pub(crate) fn settle(&self) {
        let (m, cv) = &*self.shared;
        let mut s = m.lock().expect("padding state");
        while s.busy || s.target > s.filled {
            s = cv.wait(s).expect("padding state");
        }
    }
}

impl Drop for Ahead {
    fn drop(&mut self) {
        {
            let (m, cv) = &*self.shared;
            m.lock().expect("padding state").stop = true;
            cv.notify_all();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn fill_loop(shared: &(Mutex<State>, Condvar)) {
    let (m, cv) = shared;
    let zeros = vec![0u8; CHUNK];
    loop {
        let (file, segment, from, to) = {
            let mut s = m.lock().expect("padding state");
            while !s.stop && (s.target <= s.filled || s.file.is_none()) {
                s = cv.wait(s).expect("padding state");
            }
            // A fill asked for is finished before stopping (at most `bytes` of zeros), so a
            // closed log keeps the padding it promised.
            if s.stop && (s.target <= s.filled || s.file.is_none()) {
                return;
            }
            s.busy = true;
            // One chunk at a time: the writer waits at most for one chunk's write-back.
            let to = s.target.min(s.filled + CHUNK as u64);
            (s.file.clone().expect("file"), s.segment, s.filled, to)
        };
        // A chunk at a time, each written back on its own: so that the log's next fdatasync
        // has no padding pages to write, and in small steps, so that the log's own syncs (and
        // those of other processes on the disk) are never stuck behind a long write.
        let result = (|| {
            let mut at = from;
            while at < to {
                let n = ((to - at) as usize).min(CHUNK);
                file.write_all_at(&zeros[..n], at)?;
                write_back(&file, at, n as u64)?;
                at += n as u64;
            }
            Ok::<(), io::Error>(())
        })();
        let mut s = m.lock().expect("padding state");
        s.busy = false;
        match result {
            Ok(()) if s.segment == segment => s.filled = s.filled.max(to),
            Ok(()) => {}
            Err(e) => s.error = Some(e),
        }
        cv.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeros_are_kept_ahead_and_never_written_under_the_writer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("seg");
        let file = Arc::new(
            std::fs::OpenOptions::new()
                .create(true)
                .truncate(true)
                .read(true)
                .write(true)
                .open(&path)
                .unwrap(),
        );
        let ahead = Ahead::new(64 << 10);
        ahead.segment(file.clone(), 1, 0);
        let mut end = 0u64;
        for i in 0..200u64 {
            let rec = vec![(i % 250 + 1) as u8; 3000];
            ahead.before_write(end + rec.len() as u64).unwrap();
            file.write_all_at(&rec, end).unwrap();
            end += rec.len() as u64;
        }
        ahead.settle();
        drop(ahead);
        let data = std::fs::read(&path).unwrap();
        assert!(data.len() as u64 > end, "padding ahead of the log");
        for i in 0..200usize {
            let rec = &data[i * 3000..(i + 1) * 3000];
            assert!(
                rec.iter().all(|&b| b == (i % 250 + 1) as u8),
                "record {i} intact"
            );
        }
        assert!(data[end as usize..].iter().all(|&b| b == 0));
    }
}
