//! A thread that unlinks files, off the write path: freeing a 64 MiB segment takes milliseconds
//! (about 13 ms on the workplace disk), which the WAL thread must not spend, since every write
//! waits for it.

use crate::segment::fsync_dir;
use std::fs;
use std::path::PathBuf;

/// A thread that unlinks files and then syncs their directory, in the order asked.
pub(crate) struct Deleter {
    tx: Option<std::sync::mpsc::Sender<DeleteJob>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

enum DeleteJob {
    Remove(Vec<PathBuf>),
    Settle(std::sync::mpsc::SyncSender<()>),
}

impl Deleter {
    pub(crate) fn new() -> Self {
        let (tx, rx) = std::sync::mpsc::channel::<DeleteJob>();
        let thread = std::thread::Builder::new()
            .name("synod-wal-unlink".into())
            .spawn(move || {
                for job in rx {
                    match job {
                        DeleteJob::Remove(paths) => {
                            // A file that cannot be unlinked stays: replay reads a dead segment
                            // harmlessly, and an old snapshot file is only space.
                            for p in &paths {
                                let _ = fs::remove_file(p);
                            }
                            if let Some(dir) = paths.first().and_then(|p| p.parent()) {
                                let _ = fsync_dir(dir);
                            }
                        }
                        DeleteJob::Settle(done) => {
                            let _ = done.send(());
                        }
                    }
                }
            })
            .expect("spawn the unlink thread");
        Deleter {
            tx: Some(tx),
            thread: Some(thread),
        }
    }

    pub(crate) fn remove(&self, paths: Vec<PathBuf>) {
        if paths.is_empty() {
            return;
        }
        if let Some(tx) = &self.tx {
            let _ = tx.send(DeleteJob::Remove(paths));
        }
    }

    pub(crate) fn settle(&self) {
        let (done, wait) = std::sync::mpsc::sync_channel(1);
        if let Some(tx) = &self.tx {
            if tx.send(DeleteJob::Settle(done)).is_ok() {
                let _ = wait.recv();
            }
        }
    }
}

impl Drop for Deleter {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
