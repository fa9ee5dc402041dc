//! The configuration reference, generated from the configuration structures so that it cannot
//! drift: their JSON Schema (schemars: doc comments become descriptions, serde defaults
//! become defaults) rendered as markdown (`synod config reference`, docs/configuration.md)
//! and as a commented TOML file with every key at its default (`synod config default`).

use super::Config;
use schemars::generate::SchemaSettings;
use schemars::JsonSchema;
use serde_json::Value;

/// The command that regenerates docs/configuration.md.
pub const REGENERATE: &str = "cargo run -p synod -- config reference > docs/configuration.md";

/// The schema of `T` with every subschema inlined (no `$ref`).
pub fn schema_of<T: JsonSchema>() -> Value {
    SchemaSettings::draft2020_12()
        .with(|s| s.inline_subschemas = true)
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value()
}

/// The JSON Schema of a whole configuration file.
pub fn schema() -> Value {
    schema_of::<Config>()
}

/// The keys serde reads for the struct `T`, in declaration order (the field list its derived
/// `Deserialize` hands the deserializer).
pub fn serde_keys<T: serde::de::DeserializeOwned>() -> Vec<&'static str> {
    use serde::de::{Error, Visitor};
    struct Probe<'a>(&'a mut Option<&'static [&'static str]>);
    impl<'de> serde::Deserializer<'de> for Probe<'_> {
        type Error = serde::de::value::Error;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(Error::custom("not a struct"))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            *self.0 = Some(fields);
            Err(Error::custom("probed"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
            option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
            ignored_any
        }
    }
    let mut fields = None;
    let _ = T::deserialize(Probe(&mut fields));
    fields.expect("a struct").to_vec()
}

/// One key of a section.
#[derive(Debug)]
struct Key {
    name: String,
    ty: String,
    default: DefaultValue,
    description: String,
}

#[derive(Debug)]
enum DefaultValue {
    /// No default: the key must be given.
    Required,
    /// Unset by default (an optional value).
    Unset,
    Value(toml::Value),
}

/// One table of the file: the top level, `[kv]`, `[[groups]]`, `[link_emulation.peers.<id>]`…
#[derive(Debug)]
struct Section {
    /// The TOML header (empty for the top level).
    header: String,
    description: String,
    keys: Vec<Key>,
    /// Absent by default (an optional table, an array of tables, a table per id): the
    /// default file shows it commented out.
    absent: bool,
}

/// `schema` without the `null` an `Option` adds.
fn non_null(schema: &Value) -> &Value {
    if let Some(any) = schema.get("anyOf").and_then(Value::as_array) {
        let rest: Vec<&Value> = any.iter().filter(|s| s["type"] != "null").collect();
        if rest.len() == 1 && rest.len() < any.len() {
            return rest[0];
        }
    }
    schema
}

fn types(schema: &Value) -> Vec<&str> {
    match &schema["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(a) => a
            .iter()
            .filter_map(Value::as_str)
            .filter(|t| *t != "null")
            .collect(),
        _ => vec![],
    }
}

/// An object with named keys: a TOML table of its own.
fn is_table(schema: &Value) -> bool {
    types(schema) == ["object"] && schema.get("properties").is_some()
}

/// The type of a key, in words.
fn type_name(schema: &Value) -> String {
    let schema = non_null(schema);
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        let names: Vec<String> = values
            .iter()
            .filter_map(Value::as_str)
            .map(|v| format!("`\"{v}\"`"))
            .collect();
        return format!("string: {}", names.join(", "));
    }
    if let Some(c) = schema.get("const").and_then(Value::as_str) {
        return format!("`\"{c}\"`");
    }
    if let Some(any) = schema
        .get("anyOf")
        .or(schema.get("oneOf"))
        .and_then(Value::as_array)
    {
        let names: Vec<String> = any.iter().map(type_name).collect();
        return names.join(" or ");
    }
    let t = types(schema);
    match t.first().copied() {
        Some("integer") => "integer".into(),
        Some("number") => "float".into(),
        Some("boolean") => "boolean".into(),
        Some("string") => match schema["format"].as_str() {
            Some(f) => format!("string (`{f}`)"),
            None => "string".into(),
        },
        Some("array") => format!("array of {}", type_name(&schema["items"])),
        Some("object") => match schema.get("additionalProperties") {
            Some(v) if v.is_object() => format!("table of {}", type_name(v)),
            _ => "table".into(),
        },
        _ => "any".into(),
    }
}

/// A description on one line.
fn one_line(text: Option<&Value>) -> String {
    text.and_then(Value::as_str)
        .unwrap_or("")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

fn sections(schema: &Value) -> Vec<Section> {
    let mut out = Vec::new();
    collect(schema, "", String::new(), String::new(), false, &mut out);
    out
}

fn collect(
    schema: &Value,
    path: &str,
    header: String,
    description: String,
    absent: bool,
    out: &mut Vec<Section>,
) {
    let empty = serde_json::Map::new();
    let props = schema["properties"].as_object().unwrap_or(&empty);
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut names: Vec<&String> = props.keys().collect();
    names.sort();
    let mut keys = Vec::new();
    let mut children = Vec::new();
    for name in names {
        let prop = &props[name];
        let inner = non_null(prop);
        let description = one_line(prop.get("description").or(inner.get("description")));
        let full = if path.is_empty() {
            name.clone()
        } else {
            format!("{path}.{name}")
        };
        let optional = !required.contains(&name.as_str()) && prop["default"].is_null();
        if is_table(inner) {
            children.push((
                full.clone(),
                format!("[{full}]"),
                inner,
                description,
                optional,
            ));
        } else if types(inner) == ["array"] && is_table(&inner["items"]) {
            children.push((
                full.clone(),
                format!("[[{full}]]"),
                &inner["items"],
                description,
                true,
            ));
        } else if types(inner) == ["object"] && is_table(&inner["additionalProperties"]) {
            let id = format!("{full}.<id>");
            children.push((
                id.clone(),
                format!("[{id}]"),
                &inner["additionalProperties"],
                description,
                true,
            ));
        } else {
            let default = match prop.get("default") {
                _ if required.contains(&name.as_str()) => DefaultValue::Required,
                None | Some(Value::Null) => DefaultValue::Unset,
                Some(v) => match toml::Value::try_from(v) {
                    Ok(v) => DefaultValue::Value(v),
                    Err(_) => DefaultValue::Unset,
                },
            };
            keys.push(Key {
                name: name.clone(),
                ty: type_name(prop),
                default,
                description,
            });
        }
    }
    out.push(Section {
        header,
        description,
        keys,
        absent,
    });
    for (path, header, schema, description, optional) in children {
        collect(schema, &path, header, description, absent || optional, out);
    }
}

/// A default as TOML writes it.
fn literal(v: &toml::Value) -> String {
    match v {
        toml::Value::Table(t) if t.is_empty() => "{}".into(),
        v => v.to_string(),
    }
}

/// A large count of bytes or milliseconds, also in a readable unit: `(64 MiB)`, `(10 s)`.
fn readable(key: &str, v: &toml::Value) -> String {
    let Some(n) = v.as_integer().filter(|n| *n > 0) else {
        return String::new();
    };
    let per_second = if key.ends_with("_bytes_per_second") {
        "/s"
    } else {
        ""
    };
    if (key.ends_with("_bytes") || !per_second.is_empty()) && n >= 1024 {
        for (unit, size) in [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
            if n % size == 0 {
                return format!(" ({} {unit}{per_second})", n / size);
            }
        }
    }
    if key.ends_with("_ms") && n >= 1000 && n % 1000 == 0 {
        return format!(" ({} s)", n / 1000);
    }
    String::new()
}

fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

/// docs/configuration.md.
pub fn markdown() -> String {
    let mut md = String::new();
    md.push_str(&format!(
        "# Configuration reference\n\n\
         <!-- Generated by `synod config reference`; do not edit. Run `{REGENERATE}` after \
         changing the configuration structures (crates/server/src/config/). -->\n\n\
         This file is generated from the server's configuration structures \
         (`crates/server/src/config/`): their doc comments, types and defaults. Regenerate it \
         with `{REGENERATE}`; a test fails while it is out of date.\n\n\
         A replica reads one TOML file (`synod server --config FILE`). Any key can be \
         overridden on the command line with `--set key=value`, dotted for keys of a section \
         (`--set zab.heartbeat_ms=50`). Unknown keys and bad values are errors that name the \
         key. `synod config check FILE` loads a file as the server does and says what is \
         wrong; `synod config default` prints every key at its default.\n\n\
         Durations are in milliseconds (keys ending in `_ms`), sizes in bytes (`_bytes`). \
         *required* keys have no default; *unset* keys are optional and absent by default.\n"
    ));
    for s in sections(&schema()) {
        if s.header.is_empty() {
            md.push_str("\n## Top-level keys\n");
        } else {
            md.push_str(&format!("\n## `{}`\n", s.header));
        }
        if !s.description.is_empty() {
            md.push_str(&format!("\n{}\n", s.description));
        }
        if s.keys.is_empty() {
            continue;
        }
        md.push_str("\n| Key | Type | Default | Description |\n|---|---|---|---|\n");
        for k in &s.keys {
            let default = match &k.default {
                DefaultValue::Required => "*required*".to_string(),
                DefaultValue::Unset => "*unset*".to_string(),
                DefaultValue::Value(v) => format!("`{}`{}", literal(v), readable(&k.name, v)),
            };
            md.push_str(&format!(
                "| `{}` | {} | {} | {} |\n",
                k.name,
                cell(&k.ty),
                cell(&default),
                cell(&k.description)
            ));
        }
    }
    md
}

/// `text` as `# ` comment lines of at most about 90 columns, each line starting with `prefix`.
fn comment(text: &str, prefix: &str, out: &mut String) {
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && prefix.len() + 2 + line.len() + 1 + word.len() > 92 {
            out.push_str(&format!("{prefix}# {line}\n"));
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        out.push_str(&format!("{prefix}# {line}\n"));
    }
}

/// A commented configuration file with every key at its default (`synod config default`).
/// Required keys, unset ones and tables absent by default are commented out.
pub fn default_toml() -> String {
    let mut t = String::from(
        "# synod configuration: every key at its default (`synod config default`).\n\
         # Keys commented out are required (uncomment and set them) or unset by default.\n\
         # Reference: docs/configuration.md.\n",
    );
    for s in sections(&schema()) {
        let prefix = if s.absent { "# " } else { "" };
        t.push('\n');
        if !s.header.is_empty() {
            comment(&s.description, prefix, &mut t);
            t.push_str(&format!("{prefix}{}\n", s.header));
        }
        for k in &s.keys {
            comment(&k.description, prefix, &mut t);
            match &k.default {
                DefaultValue::Required => t.push_str(&format!(
                    "# {} = … ({}, required)\n",
                    k.name,
                    k.ty.replace('`', "")
                )),
                DefaultValue::Unset => t.push_str(&format!(
                    "# {} = … ({}, unset)\n",
                    k.name,
                    k.ty.replace('`', "")
                )),
                DefaultValue::Value(v) => {
                    t.push_str(&format!("{prefix}{} = {}\n", k.name, literal(v)))
                }
            }
        }
    }
    t
}

/// Whether the committed docs/configuration.md is the generated one; if not, a message that
/// says where they first differ and which command regenerates it.
pub fn compare(committed: &str, generated: &str) -> Result<(), String> {
    if committed == generated {
        return Ok(());
    }
    let lines = generated.lines().count().max(committed.lines().count());
    let mut g = generated.lines().map(Some).chain(std::iter::repeat(None));
    let mut c = committed.lines().map(Some).chain(std::iter::repeat(None));
    let at = (1..=lines).find_map(|n| {
        let (want, have) = (g.next().flatten(), c.next().flatten());
        (want != have).then_some((n, want, have))
    });
    let place = match at {
        Some((n, want, have)) => format!(
            "at line {n} it should read\n  {}\nbut reads\n  {}",
            want.unwrap_or("(end of file)"),
            have.unwrap_or("(end of file)")
        ),
        None => "its lines are the same but its line endings or final newline differ".into(),
    };
    Err(format!(
        "docs/configuration.md is out of date with the configuration structures: {place}\n\
         Regenerate it with `{REGENERATE}`"
    ))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A schema's property names, sorted.
    pub(in crate::config) fn keys(schema: &Value) -> Vec<String> {
        let mut k: Vec<String> = schema["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        k.sort();
        k
    }

    #[test]
    fn config_reference_lists_every_serde_key_with_a_description() {
        let schema = schema();
        let mut serde: Vec<String> = serde_keys::<Config>()
            .into_iter()
            .map(String::from)
            .collect();
        serde.sort();
        assert_eq!(keys(&schema), serde);
        assert!(serde.contains(&"log_format".to_string()));
        let all = sections(&schema);
        let mut missing = Vec::new();
        for s in &all {
            if s.description.is_empty() && !s.header.is_empty() {
                missing.push(s.header.clone());
            }
            for k in &s.keys {
                if k.description.is_empty() {
                    missing.push(format!("{} {}", s.header, k.name));
                }
            }
        }
        assert!(
            missing.is_empty(),
            "keys without a doc comment: {missing:?}"
        );
        let headers: Vec<&str> = all.iter().map(|s| s.header.as_str()).collect();
        for h in [
            "",
            "[zookeeper]",
            "[kv]",
            "[etcd]",
            "[tls]",
            "[[groups]]",
            "[limits]",
            "[zab]",
            "[paxos]",
            "[mencius]",
            "[batch]",
            "[link_emulation]",
            "[link_emulation.peers.<id>]",
        ] {
            assert!(headers.contains(&h), "{h} missing from {headers:?}");
        }
    }

    #[test]
    fn config_reference_shows_types_defaults_and_units() {
        let md = markdown();
        for row in [
            "| `log_format` | string: `\"text\"`, `\"json\"` | `\"text\"` |",
            "| `cluster_id` | string | *required* |",
            "| `max_message_bytes` | integer | `1073741824` (1 GiB) |",
            "| `request_timeout_ms` | integer | `10000` (10 s) |",
            "| `client_auth` | string: `\"none\"`, `\"want\"`, `\"need\"` | `\"want\"` |",
            "| `batch` | `\"adaptive\"` or integer | `\"adaptive\"` |",
            "| `peers` | table of string (`host:port`) | *required* |",
            "| `listen` | string | *unset* |",
        ] {
            assert!(md.contains(row), "{row}\n{md}");
        }
    }

    #[test]
    fn config_default_file_loads_as_the_defaults() {
        let toml = default_toml();
        let doc: toml::Table = toml.parse().expect("valid TOML");
        assert!(doc.contains_key("zab") && !doc.contains_key("tls"));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("default.toml");
        std::fs::write(&path, &toml).unwrap();
        let required: Vec<String> = [
            "cluster_id=c",
            "node_id=1",
            "peers.1=\"127.0.0.1:2881\"",
            "admin_addr=\"127.0.0.1:9181\"",
            "data_dir=/tmp/x",
            "insecure=true",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let from_file = Config::load(Some(&path), &required).unwrap();
        let bare = Config::load(None, &required).unwrap();
        assert_eq!(
            serde_json::to_value(&from_file).unwrap(),
            serde_json::to_value(&bare).unwrap()
        );
    }

    #[test]
    fn config_reference_comparison_names_the_line_and_the_command() {
        let md = markdown();
        assert_eq!(compare(&md, &md), Ok(()));
        let edited = md.replacen("`10000` (10 s)", "`5000` (5 s)", 1);
        let e = compare(&edited, &md).unwrap_err();
        assert!(e.contains(REGENERATE), "{e}");
        assert!(e.contains("`5000` (5 s)") && e.contains("at line"), "{e}");
        let e = compare(&md[..md.len() - 10], &md).unwrap_err();
        assert!(e.contains(REGENERATE), "{e}");
        let e = compare(&format!("{md}extra\n"), &md).unwrap_err();
        assert!(e.contains("(end of file)"), "{e}");
        let e = compare(&md.replace('\n', "\r\n"), &md).unwrap_err();
        assert!(e.contains("line endings") && e.contains(REGENERATE), "{e}");
    }
}
