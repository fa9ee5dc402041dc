//! Loading: a TOML file, then `--set key=value` overrides (dotted keys for sections), then
//! serde (errors name the key) and `Config::validate`.

use super::Config;
use anyhow::{Context, Result};

impl Config {
    /// Load `path` (if any), apply `key=value` overrides, deserialize and validate.
    pub fn load(path: Option<&std::path::Path>, overrides: &[String]) -> Result<Config> {
        let mut doc: toml::Table = match path {
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .with_context(|| format!("cannot read config file {}", p.display()))?;
                text.parse()
                    .with_context(|| format!("config file {} is not valid TOML", p.display()))?
            }
            None => toml::Table::new(),
        };
        for o in overrides {
            let (key, value) = o
                .split_once('=')
                .with_context(|| format!("--set {o}: expected key=value"))?;
            set_path(&mut doc, key.trim(), parse_value(value.trim()))
                .with_context(|| format!("--set {o}"))?;
        }
        let cfg: Config =
            serde_path_to_error::deserialize(toml::Value::Table(doc)).map_err(|e| {
                let path = e.path().to_string();
                let inner = e.into_inner();
                anyhow::anyhow!("config key {path}: {}", inner.message().trim())
            })?;
        cfg.validate()?;
        Ok(cfg)
    }
}

fn parse_value(v: &str) -> toml::Value {
    // A TOML value if it parses as one (numbers, booleans, arrays, quoted strings), else a string.
    format!("x = {v}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("x"))
        .unwrap_or_else(|| toml::Value::String(v.to_string()))
}

fn set_path(doc: &mut toml::Table, key: &str, value: toml::Value) -> Result<()> {
    let mut parts: Vec<&str> = key.split('.').collect();
    let last = parts.pop().filter(|s| !s.is_empty()).context("empty key")?;
    let mut table = doc;
    for p in parts {
        table = table
            .entry(p.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            .as_table_mut()
            .with_context(|| format!("{p} is not a section"))?;
    }
    table.insert(last.to_string(), value);
    Ok(())
}
