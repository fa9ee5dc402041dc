//! The schema of `[paxos]` and `[mencius]`, whose structs live beside the protocols' options
//! (crate::protocol). Their descriptions are written here, once per key; the test below
//! proves that each lists exactly the keys serde reads, and the macro that the listed types
//! are the fields' own, so the reference cannot drift from the structs.

use super::{MenciusTuning, PaxosBatch, PaxosTuning};
use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::Serialize;
use std::borrow::Cow;

/// A section's schema: an object of `fields` (key, schema, description), each with its default
/// taken from `T::default()`.
fn section<T: Serialize + Default>(
    description: &str,
    fields: Vec<(&'static str, Schema, &'static str)>,
) -> Schema {
    let defaults = serde_json::to_value(T::default()).expect("a section serializes");
    let mut properties = serde_json::Map::new();
    for (key, mut schema, doc) in fields {
        schema.insert("description".into(), doc.into());
        if let Some(d) = defaults.get(key) {
            schema.insert("default".into(), d.clone());
        }
        properties.insert(key.into(), schema.to_value());
    }
    json_schema!({
        "type": "object",
        "description": description,
        "properties": properties,
        "additionalProperties": false,
    })
}

/// `impl JsonSchema` for a section from its keys, their Rust types and their descriptions.
macro_rules! described {
    ($ty:ident, $doc:expr, { $($field:ident: $fty:ty => $fdoc:expr,)* }) => {
        impl JsonSchema for $ty {
            fn schema_name() -> Cow<'static, str> {
                stringify!($ty).into()
            }

            fn json_schema(g: &mut SchemaGenerator) -> Schema {
                // Does not compile unless every listed type is its field's.
                let _types = |v: &$ty| {
                    $(let _: &$fty = &v.$field;)*
                };
                section::<$ty>($doc, vec![$((stringify!($field), g.subschema_for::<$fty>(), $fdoc),)*])
            }
        }
    };
}

described!(PaxosTuning, "`[paxos]`: the timers and batching of every PFT group.", {
    heartbeat_ms: u64 => "Primary → backups heartbeat (a repeated COMMIT) interval, in \
        milliseconds.",
    view_change_timeout_ms: u64 => "The view-change timer's first value, in milliseconds: a \
        backup that hears nothing from its primary, or sees an accepted order stay unchosen, \
        this long starts a view change. At least twice `heartbeat_ms`.",
    view_change_timeout_max_ms: u64 => "The view-change timer doubles for each view that fails \
        to install, up to this, in milliseconds.",
    adaptive_timeout: bool => "Adapt the view-change timer to the measured ordering latency \
        (never below three heartbeats).",
    batch: PaxosBatch => "`adaptive` (at most `window` batches in flight; what waits when one \
        commits leaves as the next batch, up to `batch.max_commands`), or a fixed batch size, a \
        count of commands: a batch leaves when it holds that many commands or `batch_timer_ms` \
        after its first arrived.",
    batch_timer_ms: u64 => "With a fixed `batch` size: how long a batch waits for more \
        commands after its first arrived, in milliseconds (at least 1).",
    window: usize => "With `batch = \"adaptive\"`: batches in flight (proposed, not yet \
        chosen) at most, a count.",
    catch_up: Option<String> => "Catch-up of the groups running plain `paxos`: `pbq` (ask the \
        primary), `mbq` (every replica reports its state every `mbq_period_ms`) or `none` \
        (wait for a checkpoint and a state transfer). `paxos-mbq` and `paxos-none` name \
        theirs. Unset: each protocol name's own.",
    mbq_period_ms: u64 => "With `mbq` catch-up: how often every replica reports its state, in \
        milliseconds.",
});

described!(MenciusTuning, "`[mencius]`: the failure detector, skips, revocation and batching \
    of every Mencius group.", {
    heartbeat_ms: u64 => "Every peer hears from a replica at least this often, in milliseconds \
        (a SKIP doubles as the heartbeat).",
    suspect_timeout_ms: u64 => "A peer silent this long is suspected, in milliseconds: its \
        instances are revoked, and a lower-id replica takes over the session duties. Clients of \
        a failed replica wait about this long. At least twice `heartbeat_ms`.",
    alpha: u64 => "Accelerator 1: skips owed to a peer go out once more than `alpha` (a count) \
        are outstanding or the oldest has waited `tau_ms`.",
    tau_ms: u64 => "Accelerator 1: the longest a skip owed to a peer waits before it goes out, \
        in milliseconds.",
    beta: u64 => "Optimization 3: a suspect's instances are revoked in blocks of `beta` \
        instances (a count).",
    revoke_timeout_ms: u64 => "A revocation not finished in this long starts again with a \
        higher ballot, in milliseconds. At least `heartbeat_ms`.",
    max_batch: usize => "Commands per instance, a count.",
    max_inflight: usize => "Own instances suggested and not yet decided, a count; beyond it \
        commands wait and batch.",
    max_queued: usize => "Commands waiting in the core, a count; beyond it submissions are \
        refused (busy).",
});

impl JsonSchema for PaxosBatch {
    fn schema_name() -> Cow<'static, str> {
        "PaxosBatch".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "anyOf": [
                { "type": "string", "const": "adaptive" },
                { "type": "integer", "minimum": 1 },
            ]
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::reference::tests::keys;
    use super::super::reference::{schema_of, serde_keys};
    use super::*;

    fn sorted(mut k: Vec<&str>) -> Vec<String> {
        k.sort();
        k.into_iter().map(String::from).collect()
    }

    #[test]
    fn the_hand_written_sections_list_exactly_the_serde_keys() {
        let paxos = schema_of::<PaxosTuning>();
        assert_eq!(keys(&paxos), sorted(serde_keys::<PaxosTuning>()));
        let mencius = schema_of::<MenciusTuning>();
        assert_eq!(keys(&mencius), sorted(serde_keys::<MenciusTuning>()));
        assert_eq!(paxos["properties"]["batch"]["default"], "adaptive");
        assert_eq!(
            mencius["properties"]["heartbeat_ms"]["default"],
            MenciusTuning::default().heartbeat_ms
        );
    }
}
