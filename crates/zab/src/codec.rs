//! Zab's wire and log encoding (see `synod_core::wire`).

use crate::msg::{Entry, Hard, LogSummary, Msg, PeerState, Point, SyncMode, Vote, Zxid};
use bytes::{BufMut, Bytes, BytesMut};
use std::sync::Arc;
use synod_core::wire::{
    get_bool, get_count, get_u16, get_u32, get_u64, get_u8, Wire, WireError, WireResult,
};
use synod_core::{Command, Config, Position, Snapshot};

impl Wire for Zxid {
    fn encode(&self, b: &mut BytesMut) {
        b.put_u64(self.as_u64());
    }
    fn decode(b: &mut Bytes) -> WireResult<Self> {
        Ok(Zxid::from_u64(get_u64(b)?))
    }
}

impl Wire for Point {
    fn encode(&self, b: &mut BytesMut) {
        self.zxid.encode(b);
        b.put_u64(self.slot);
    }
    fn decode(b: &mut Bytes) -> WireResult<Self> {
        Ok(Point {
            zxid: Zxid::decode(b)?,
            slot: get_u64(b)?,
        })
    }
}

/// An entry: zxid, slot, command. A reconfiguration entry sets the slot's top bit (no slot
/// reaches 2^63) and its configuration follows the command, so an ordinary entry is encoded
/// exactly as before reconfiguration existed (the previous release reads it).
impl Wire for Entry {
    fn encode(&self, b: &mut BytesMut) {
        self.zxid.encode(b);
        match &self.config {
            None => {
                b.put_u64(self.slot);
                self.command.encode(b);
            }
            Some(c) => {
                b.put_u64(self.slot | CONFIG_FLAG);
                self.command.encode(b);
                c.encode(b);
            }
        }
    }
    fn decode(b: &mut Bytes) -> WireResult<Self> {
        let zxid = Zxid::decode(b)?;
        let slot = get_u64(b)?;
        let command = Command::decode(b)?;
        let config = if slot & CONFIG_FLAG != 0 {
            let c = Config::decode(b)?;
            if c.version != zxid.as_u64() {
                return Err(WireError::Invalid("configuration version"));
            }
            Some(Arc::new(c))
        } else {
            None
        };
        Ok(Entry {
            zxid,
            slot: slot & !CONFIG_FLAG,
            command,
            config,
        })
    }
}

/// The most configurations a notification carries (the committed one and those pending).
const MAX_NOTIFIED_CONFIGS: u8 = 8;

/// The slot bit that marks a reconfiguration entry.
const CONFIG_FLAG: u64 = 1 << 63;

/// The hard state's encoding: four u32s, the `recovering` flag (one byte, 0 or 1) and, once the
/// group has changed its configuration, that configuration (the flag byte's bit 1 says it
/// follows). The write-ahead log stores a hard state as one whole record and reads it back with
/// [`Wire::from_bytes`], which also accepts the 16-byte form written before the flag existed
/// (read as `recovering = false`). A hard state without a configuration is encoded exactly as
/// before configurations existed.
impl Wire for Hard {
    fn encode(&self, b: &mut BytesMut) {
        b.put_u32(self.accepted_epoch);
        b.put_u32(self.accepted_leader);
        b.put_u32(self.current_epoch);
        b.put_u32(self.led_epoch);
        b.put_u8(self.recovering as u8 | (self.config.is_some() as u8) << 1);
        if let Some(c) = &self.config {
            c.encode(b);
        }
    }
    fn decode(b: &mut Bytes) -> WireResult<Self> {
        let mut h = decode_hard_without_flag(b)?;
        let flags = get_u8(b)?;
        if flags > 3 {
            return Err(WireError::Invalid("hard state flags"));
        }
        h.recovering = flags & 1 != 0;
        if flags & 2 != 0 {
            h.config = Some(Arc::new(Config::decode(b)?));
        }
        Ok(h)
    }
    fn from_bytes(mut b: Bytes) -> WireResult<Self> {
        if b.len() == HARD_LEGACY_LEN {
            return decode_hard_without_flag(&mut b);
        }
        let h = Self::decode(&mut b)?;
        if !b.is_empty() {
            return Err(WireError::Trailing(b.len()));
        }
        Ok(h)
    }
}

/// The length of a hard state written before the `recovering` flag.
const HARD_LEGACY_LEN: usize = 16;

fn decode_hard_without_flag(b: &mut Bytes) -> WireResult<Hard> {
    Ok(Hard {
        accepted_epoch: get_u32(b)?,
        accepted_leader: get_u32(b)?,
        current_epoch: get_u32(b)?,
        led_epoch: get_u32(b)?,
        recovering: false,
        config: None,
    })
}

impl Wire for Vote {
    fn encode(&self, b: &mut BytesMut) {
        b.put_u32(self.epoch);
        self.zxid.encode(b);
        b.put_u32(self.leader);
    }
    fn decode(b: &mut Bytes) -> WireResult<Self> {
        Ok(Vote {
            epoch: get_u32(b)?,
            zxid: Zxid::decode(b)?,
            leader: get_u32(b)?,
        })
    }
}

impl Wire for LogSummary {
    fn encode(&self, b: &mut BytesMut) {
        self.base.encode(b);
        b.put_u32(self.epochs.len() as u32);
        for &(e, c) in &self.epochs {
            b.put_u32(e);
            b.put_u32(c);
        }
        b.put_u8(self.overflow as u8);
    }
    fn decode(b: &mut Bytes) -> WireResult<Self> {
        let base = Point::decode(b)?;
        let n = get_count(b, "log summary", 8)?;
        let mut epochs = Vec::with_capacity(n);
        for _ in 0..n {
            epochs.push((get_u32(b)?, get_u32(b)?));
        }
        Ok(LogSummary {
            base,
            epochs,
            overflow: get_bool(b)?,
        })
    }
}

impl Wire for SyncMode {
    fn encode(&self, b: &mut BytesMut) {
        match self {
            SyncMode::Diff { from } => {
                b.put_u8(1);
                from.encode(b);
            }
            SyncMode::Trunc { to } => {
                b.put_u8(2);
                to.encode(b);
            }
            SyncMode::Snap(s, None) => {
                b.put_u8(3);
                s.encode(b);
            }
            SyncMode::Snap(s, Some(c)) => {
                b.put_u8(4);
                s.encode(b);
                c.encode(b);
            }
        }
    }
    fn decode(b: &mut Bytes) -> WireResult<Self> {
        Ok(match get_u8(b)? {
            1 => SyncMode::Diff {
                from: Point::decode(b)?,
            },
            2 => SyncMode::Trunc {
                to: Point::decode(b)?,
            },
            3 => SyncMode::Snap(Snapshot::decode(b)?, None),
            4 => SyncMode::Snap(Snapshot::decode(b)?, Some(Arc::new(Config::decode(b)?))),
            _ => return Err(WireError::Invalid("sync mode")),
        })
    }
}

impl Wire for PeerState {
    fn encode(&self, b: &mut BytesMut) {
        b.put_u8(match self {
            PeerState::Looking => 1,
            PeerState::Following => 2,
            PeerState::Leading => 3,
        });
    }
    fn decode(b: &mut Bytes) -> WireResult<Self> {
        Ok(match get_u8(b)? {
            1 => PeerState::Looking,
            2 => PeerState::Following,
            3 => PeerState::Leading,
            _ => return Err(WireError::Invalid("peer state")),
        })
    }
}

impl Wire for Msg {
    fn encode(&self, b: &mut BytesMut) {
        match self {
            Msg::Notification {
                round,
                vote,
                state,
                accepted,
                configs,
            } => {
                // A notification with configurations has a type of its own: a group that never
                // changed its configuration sends what the previous release sends.
                b.put_u8(if configs.is_empty() { 1 } else { 16 });
                b.put_u64(*round);
                vote.encode(b);
                state.encode(b);
                b.put_u32(*accepted);
                if !configs.is_empty() {
                    b.put_u8(configs.len() as u8);
                    for c in configs {
                        c.encode(b);
                    }
                }
            }
            Msg::FollowerInfo {
                accepted_epoch,
                accepted_leader,
                recovering,
            } => {
                b.put_u8(2);
                b.put_u32(*accepted_epoch);
                b.put_u32(*accepted_leader);
                b.put_u8(*recovering as u8);
            }
            Msg::NewEpoch { epoch } => {
                b.put_u8(3);
                b.put_u32(*epoch);
            }
            Msg::AckEpoch {
                epoch,
                current_epoch,
                summary,
            } => {
                b.put_u8(4);
                b.put_u32(*epoch);
                b.put_u32(*current_epoch);
                summary.encode(b);
            }
            Msg::Sync { epoch, mode } => {
                b.put_u8(5);
                b.put_u32(*epoch);
                mode.encode(b);
            }
            Msg::Entries { epoch, entries } => {
                b.put_u8(6);
                b.put_u32(*epoch);
                entries.encode(b);
            }
            Msg::NewLeader { epoch, last } => {
                b.put_u8(7);
                b.put_u32(*epoch);
                last.encode(b);
            }
            Msg::AckNewLeader { epoch, last } => {
                b.put_u8(8);
                b.put_u32(*epoch);
                last.encode(b);
            }
            Msg::UpToDate { epoch, commit } => {
                b.put_u8(9);
                b.put_u32(*epoch);
                commit.encode(b);
            }
            Msg::Proposal {
                epoch,
                first,
                commands,
                echo,
            } => {
                b.put_u8(10);
                b.put_u32(*epoch);
                first.encode(b);
                commands.encode(b);
                b.put_u64(echo.0);
                b.put_u64(echo.1);
            }
            Msg::Ack {
                epoch,
                zxid,
                zab,
                mode,
                stamp,
            } => {
                b.put_u8(11);
                b.put_u32(*epoch);
                zxid.encode(b);
                // The vote and the mode share one byte: bit 0 the vote, bit 1 the mode.
                b.put_u8(*zab as u8 | (*mode as u8) << 1);
                b.put_u64(*stamp);
            }
            Msg::Commit { epoch, at, zab } => {
                b.put_u8(12);
                b.put_u32(*epoch);
                at.encode(b);
                b.put_u8(*zab as u8);
            }
            Msg::Ping {
                epoch,
                commit,
                last,
                live,
            } => {
                b.put_u8(13);
                b.put_u32(*epoch);
                commit.encode(b);
                last.encode(b);
                b.put_u16(*live);
            }
            Msg::Forward {
                epoch,
                nonce,
                seq,
                commands,
            } => {
                b.put_u8(14);
                b.put_u32(*epoch);
                b.put_u64(*nonce);
                b.put_u64(*seq);
                commands.encode(b);
            }
            Msg::ProposeConfig { epoch, entry } => {
                b.put_u8(15);
                b.put_u32(*epoch);
                entry.encode(b);
            }
        }
    }

    fn decode(b: &mut Bytes) -> WireResult<Self> {
        Ok(match get_u8(b)? {
            t @ (1 | 16) => {
                let (round, vote, state, accepted) = (
                    get_u64(b)?,
                    Vote::decode(b)?,
                    PeerState::decode(b)?,
                    get_u32(b)?,
                );
                let mut configs = Vec::new();
                if t == 16 {
                    let n = get_u8(b)?;
                    if n == 0 || n > MAX_NOTIFIED_CONFIGS {
                        return Err(WireError::Invalid("configuration count"));
                    }
                    for _ in 0..n {
                        configs.push(Arc::new(Config::decode(b)?));
                    }
                }
                Msg::Notification {
                    round,
                    vote,
                    state,
                    accepted,
                    configs,
                }
            }
            2 => Msg::FollowerInfo {
                accepted_epoch: get_u32(b)?,
                accepted_leader: get_u32(b)?,
                recovering: get_bool(b)?,
            },
            3 => Msg::NewEpoch { epoch: get_u32(b)? },
            4 => Msg::AckEpoch {
                epoch: get_u32(b)?,
                current_epoch: get_u32(b)?,
                summary: LogSummary::decode(b)?,
            },
            5 => Msg::Sync {
                epoch: get_u32(b)?,
                mode: SyncMode::decode(b)?,
            },
            6 => Msg::Entries {
                epoch: get_u32(b)?,
                entries: Vec::<Entry>::decode(b)?,
            },
            7 => Msg::NewLeader {
                epoch: get_u32(b)?,
                last: Point::decode(b)?,
            },
            8 => Msg::AckNewLeader {
                epoch: get_u32(b)?,
                last: Point::decode(b)?,
            },
            9 => Msg::UpToDate {
                epoch: get_u32(b)?,
                commit: Point::decode(b)?,
            },
            10 => Msg::Proposal {
                epoch: get_u32(b)?,
                first: Point::decode(b)?,
                commands: Vec::<Command>::decode(b)?,
                echo: (get_u64(b)?, get_u64(b)?),
            },
            11 => {
                let epoch = get_u32(b)?;
                let zxid = Zxid::decode(b)?;
                let flags = get_u8(b)?;
                if flags > 3 {
                    return Err(WireError::Invalid("ack flags"));
                }
                Msg::Ack {
                    epoch,
                    zxid,
                    zab: flags & 1 != 0,
                    mode: flags & 2 != 0,
                    stamp: get_u64(b)?,
                }
            }
            12 => Msg::Commit {
                epoch: get_u32(b)?,
                at: Point::decode(b)?,
                zab: get_bool(b)?,
            },
            13 => Msg::Ping {
                epoch: get_u32(b)?,
                commit: Point::decode(b)?,
                last: Zxid::decode(b)?,
                live: get_u16(b)?,
            },
            14 => Msg::Forward {
                epoch: get_u32(b)?,
                nonce: get_u64(b)?,
                seq: get_u64(b)?,
                commands: Vec::<Command>::decode(b)?,
            },
            15 => {
                let epoch = get_u32(b)?;
                let entry = Entry::decode(b)?;
                if entry.config.is_none() {
                    return Err(WireError::Invalid(
                        "reconfiguration without a configuration",
                    ));
                }
                Msg::ProposeConfig { epoch, entry }
            }
            _ => return Err(WireError::Invalid("message type")),
        })
    }
}

/// One message of every kind (and of every sync mode), for codec tests and fuzzers.
#[doc(hidden)]
pub fn sample_messages() -> Vec<Msg> {
    let z = Zxid::new(3, 7);
    let p = Point { zxid: z, slot: 99 };
    let cmd = Command {
        id: 5,
        payload: Bytes::from_static(b"payload"),
    };
    let entry = Entry {
        zxid: z,
        slot: 99,
        command: cmd.clone(),
        config: None,
    };
    let config = Arc::new(Config::new(z.as_u64(), vec![1, 2, 4], vec![5]).expect("valid"));
    let reconfig = Entry {
        config: Some(config.clone()),
        ..entry.clone()
    };
    vec![
        Msg::Notification {
            round: 4,
            vote: Vote {
                epoch: 2,
                zxid: z,
                leader: 3,
            },
            state: PeerState::Following,
            accepted: 2,
            configs: vec![],
        },
        Msg::Notification {
            round: 4,
            vote: Vote {
                epoch: 2,
                zxid: z,
                leader: 3,
            },
            state: PeerState::Leading,
            accepted: 2,
            configs: vec![config.clone(), config.clone()],
        },
        Msg::FollowerInfo {
            accepted_epoch: 3,
            accepted_leader: 1,
            recovering: true,
        },
        Msg::NewEpoch { epoch: 4 },
        Msg::AckEpoch {
            epoch: 4,
            current_epoch: 3,
            summary: LogSummary {
                base: p,
                epochs: vec![(3, 9), (4, 1)],
                overflow: false,
            },
        },
        Msg::Sync {
            epoch: 4,
            mode: SyncMode::Trunc { to: p },
        },
        Msg::Sync {
            epoch: 4,
            mode: SyncMode::Snap(
                Snapshot {
                    at: Position { slot: 9, tag: 3 },
                    data: Bytes::from_static(b"state"),
                },
                None,
            ),
        },
        Msg::Sync {
            epoch: 4,
            mode: SyncMode::Snap(
                Snapshot {
                    at: Position { slot: 9, tag: 3 },
                    data: Bytes::from_static(b"state"),
                },
                Some(config.clone()),
            ),
        },
        Msg::ProposeConfig {
            epoch: 4,
            entry: reconfig.clone(),
        },
        Msg::Sync {
            epoch: 4,
            mode: SyncMode::Diff { from: p },
        },
        Msg::Entries {
            epoch: 4,
            entries: vec![entry.clone(), reconfig, entry.clone()],
        },
        Msg::NewLeader { epoch: 4, last: p },
        Msg::AckNewLeader { epoch: 4, last: p },
        Msg::UpToDate {
            epoch: 4,
            commit: p,
        },
        Msg::Proposal {
            epoch: 4,
            first: p,
            commands: vec![cmd.clone(), cmd.clone()],
            echo: (7, 3),
        },
        Msg::Ack {
            epoch: 4,
            zxid: z,
            zab: true,
            mode: false,
            stamp: 99,
        },
        Msg::Ack {
            epoch: 4,
            zxid: z,
            zab: false,
            mode: true,
            stamp: 99,
        },
        Msg::Commit {
            epoch: 4,
            at: p,
            zab: false,
        },
        Msg::Ping {
            epoch: 4,
            commit: p,
            last: z,
            live: 4,
        },
        Msg::Forward {
            epoch: 4,
            nonce: 0xfeed,
            seq: 7,
            commands: vec![cmd],
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use synod_core::rng::CoreRng;

    #[test]
    fn every_message_round_trips() {
        for m in sample_messages() {
            let bytes = m.to_bytes();
            let back = Msg::from_bytes(bytes.clone()).unwrap();
            assert_eq!(back.to_bytes(), bytes, "{m:?}");
        }
        let config = Some(Arc::new(Config::new(9, vec![1, 3], vec![2]).unwrap()));
        for (recovering, config) in [
            (false, None),
            (true, None),
            (true, config.clone()),
            (false, config),
        ] {
            let h = Hard {
                accepted_epoch: 1,
                accepted_leader: 2,
                current_epoch: 3,
                led_epoch: 3,
                recovering,
                config,
            };
            assert_eq!(Hard::from_bytes(h.to_bytes()).unwrap(), h);
            let mut b = h.to_bytes();
            assert_eq!(Hard::decode(&mut b).unwrap(), h);
        }
    }

    /// An ordinary entry is encoded as before reconfiguration existed (zxid, slot, command);
    /// a reconfiguration entry whose configuration's version is not its zxid, or a malformed
    /// configuration, is refused.
    #[test]
    fn entries_keep_their_old_form_and_configurations_are_checked() {
        let cmd = Command {
            id: 1,
            payload: Bytes::from_static(b"x"),
        };
        let e = Entry {
            zxid: Zxid::new(2, 1),
            slot: 7,
            command: cmd.clone(),
            config: None,
        };
        let mut old = BytesMut::new();
        e.zxid.encode(&mut old);
        old.put_u64(7);
        cmd.encode(&mut old);
        assert_eq!(e.to_bytes(), old.freeze());
        let good = Entry {
            config: Some(Arc::new(
                Config::new(Zxid::new(2, 1).as_u64(), vec![1, 2, 3], vec![]).unwrap(),
            )),
            ..e.clone()
        };
        assert_eq!(Entry::from_bytes(good.to_bytes()).unwrap(), good);
        let stale = Entry {
            config: Some(Arc::new(Config::new(5, vec![1], vec![]).unwrap())),
            ..e.clone()
        };
        assert_eq!(
            Entry::from_bytes(stale.to_bytes()),
            Err(WireError::Invalid("configuration version"))
        );
        let mut bad = good.to_bytes().to_vec();
        // The configuration's first voter (three voters, then the learner count) becomes 0.
        let at = bad.len() - 2 - 4 * 3;
        bad[at..at + 4].copy_from_slice(&0u32.to_be_bytes());
        assert_eq!(
            Entry::from_bytes(Bytes::from(bad)),
            Err(WireError::Invalid("configuration"))
        );
    }

    /// A hard state written before the `recovering` flag (16 bytes) still reads, as not
    /// recovering; anything else that is not exactly a hard state is an error.
    #[test]
    fn hard_state_legacy_form_and_malformed_input() {
        let h = Hard {
            accepted_epoch: 7,
            accepted_leader: 2,
            current_epoch: 6,
            led_epoch: 0,
            recovering: true,
            config: None,
        };
        let full = h.to_bytes();
        assert_eq!(full.len(), 17);
        let legacy = Hard::from_bytes(full.slice(..16)).unwrap();
        assert_eq!(
            legacy,
            Hard {
                recovering: false,
                ..h.clone()
            }
        );
        for cut in 0..16 {
            assert!(Hard::from_bytes(full.slice(..cut)).is_err(), "cut {cut}");
        }
        let mut v = full.to_vec();
        v[16] = 4;
        assert_eq!(
            Hard::from_bytes(Bytes::from(v.clone())),
            Err(WireError::Invalid("hard state flags"))
        );
        // A configuration announced by the flags must follow.
        v[16] = 2;
        assert_eq!(
            Hard::from_bytes(Bytes::from(v.clone())),
            Err(WireError::Truncated)
        );
        v[16] = 1;
        v.push(0);
        assert_eq!(
            Hard::from_bytes(Bytes::from(v)),
            Err(WireError::Trailing(1))
        );
        // Inside a larger value the flag is never optional.
        let mut short = full.slice(..16);
        assert_eq!(Hard::decode(&mut short), Err(WireError::Truncated));
    }

    #[test]
    fn truncated_and_mutated_messages_are_errors_not_panics() {
        let mut rng = CoreRng::new(11);
        for m in sample_messages() {
            let bytes = m.to_bytes();
            for cut in 0..bytes.len() {
                assert!(Msg::from_bytes(bytes.slice(..cut)).is_err());
            }
            for _ in 0..200 {
                let mut v = bytes.to_vec();
                let i = rng.below(v.len() as u64) as usize;
                v[i] ^= 1 << rng.below(8);
                let _ = Msg::from_bytes(Bytes::from(v));
            }
        }
        for _ in 0..20_000 {
            let len = rng.below(64) as usize;
            let v: Vec<u8> = (0..len).map(|_| rng.below(256) as u8).collect();
            let _ = Msg::from_bytes(Bytes::from(v));
        }
    }
}
