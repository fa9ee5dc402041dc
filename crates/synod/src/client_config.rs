//! The client configuration: where a cluster's client ports are and which certificates reach
//! them. `synod dev` writes one for the cluster it starts; `synod cli`, `synod kv`, `synod
//! backup`, `synod member` and `synod env` read it when no address is given on the command line,
//! so a secure (TLS) dev cluster needs no flags. Flags always win over the file.
//!
//! Where it is: `$SYNOD_CLIENT_CONFIG` when set, else `$XDG_CONFIG_HOME/synod/client.toml`
//! (`~/.config/synod/client.toml`). `synod dev` writes it there unless a file it did not write
//! is already there (an operator's own, which it never overwrites), and removes it on exit.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The first line of every file `synod dev` writes: it only ever replaces or removes such files.
pub const DEV_MARK: &str = "# written by synod dev";

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientConfig {
    /// What this file describes (shown by `synod env`).
    #[serde(default)]
    pub cluster: String,
    /// ZooKeeper client ports in plain text, host:port.
    #[serde(default)]
    pub zookeeper: Vec<String>,
    /// ZooKeeper client ports over TLS, host:port.
    #[serde(default)]
    pub zookeeper_tls: Vec<String>,
    /// SconeKV's gRPC API, host:port.
    #[serde(default)]
    pub kv: Vec<String>,
    /// etcd's v3 API, as URLs (https://host:port when TLS is on).
    #[serde(default)]
    pub etcd: Vec<String>,
    /// Admin ports, host:port (HTTPS when `ca` is set).
    #[serde(default)]
    pub admin: Vec<String>,
    /// The cluster CA (PEM); set when the cluster uses TLS.
    #[serde(default)]
    pub ca: Option<PathBuf>,
    /// A client certificate of the cluster CA and its key (PEM): the admin port's writes and
    /// backups need them.
    #[serde(default)]
    pub cert: Option<PathBuf>,
    #[serde(default)]
    pub key: Option<PathBuf>,
}

impl ClientConfig {
    /// Where the client configuration lives (whether or not it exists).
    pub fn path() -> Option<PathBuf> {
        if let Some(p) = std::env::var_os("SYNOD_CLIENT_CONFIG").filter(|p| !p.is_empty()) {
            return Some(PathBuf::from(p));
        }
        let base = std::env::var_os("XDG_CONFIG_HOME")
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
        Some(base.join("synod").join("client.toml"))
    }

    /// The client configuration, if there is one; a file that does not parse is an error (a
    /// client must not quietly go to default ports when its configuration is broken).
    pub fn load() -> Result<Option<ClientConfig>> {
        match Self::path() {
            Some(p) if p.exists() => Self::read(&p).map(Some),
            _ => Ok(None),
        }
    }

    pub fn read(path: &Path) -> Result<ClientConfig> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the client configuration {}", path.display()))?;
        toml::from_str(&text).with_context(|| {
            format!(
                "the client configuration {} does not parse (delete it, or set \
                 SYNOD_CLIENT_CONFIG to another file)",
                path.display()
            )
        })
    }

    /// The file's text, with `synod dev`'s mark on its first line.
    pub fn to_dev_toml(&self) -> String {
        let body = toml::to_string(self).expect("the client configuration serialises");
        format!("{DEV_MARK}: clients read this file when no address is given (docs/cli.md)\n{body}")
    }

    /// `--ca/--cert/--key` given on the command line, else this file's (when it has any).
    pub fn tls_files(
        cfg: Option<&ClientConfig>,
        ca: Option<PathBuf>,
        cert: Option<PathBuf>,
        key: Option<PathBuf>,
    ) -> (Option<PathBuf>, Option<PathBuf>, Option<PathBuf>) {
        if ca.is_some() {
            return (ca, cert, key);
        }
        match cfg {
            Some(c) => (c.ca.clone(), c.cert.clone(), c.key.clone()),
            None => (None, cert, key),
        }
    }
}

/// Where a client goes: the addresses and TLS files of the command line, else of the client
/// configuration (the list `pick` chooses from it), else `default` in plain text.
pub struct Target {
    pub addrs: Vec<String>,
    pub ca: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

impl Target {
    pub fn resolve(
        flag: Option<Vec<String>>,
        pick: impl Fn(&ClientConfig) -> Vec<String>,
        default: &str,
        tls: (Option<PathBuf>, Option<PathBuf>, Option<PathBuf>),
    ) -> Result<Target> {
        let (ca, cert, key) = tls;
        if let Some(addrs) = flag.filter(|a| !a.is_empty()) {
            return Ok(Target {
                addrs,
                ca,
                cert,
                key,
            });
        }
        match ClientConfig::load()? {
            Some(cfg) if !pick(&cfg).is_empty() => {
                let (ca, cert, key) = ClientConfig::tls_files(Some(&cfg), ca, cert, key);
                Ok(Target {
                    addrs: pick(&cfg),
                    ca,
                    cert,
                    key,
                })
            }
            _ => Ok(Target {
                addrs: vec![default.to_string()],
                ca,
                cert,
                key,
            }),
        }
    }
}

/// Splits comma-separated addresses.
pub fn split_addrs(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(String::from)
        .collect()
}

/// Writes `cfg` for `synod dev` at `path`, unless a file not written by `synod dev` is there.
/// Returns whether it wrote (the caller removes it on exit with [`remove_dev`]).
pub fn install_dev(path: &Path, cfg: &ClientConfig) -> Result<bool> {
    if let Ok(old) = std::fs::read_to_string(path) {
        if !old.starts_with(DEV_MARK) {
            return Ok(false);
        }
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let tmp = path.with_extension("toml.tmp");
    std::fs::write(&tmp, cfg.to_dev_toml())
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(true)
}

/// Removes the client configuration `synod dev` wrote, if it is still the one it wrote (another
/// dev cluster started since then owns it now).
pub fn remove_dev(path: &Path, cfg: &ClientConfig) {
    if std::fs::read_to_string(path).is_ok_and(|t| t == cfg.to_dev_toml()) {
        let _ = std::fs::remove_file(path);
    }
}

/// Shell lines that point the usual tools at the cluster: etcdctl's own variables, and
/// SYNOD_* for the rest (`eval "$(synod env)"`).
pub fn env_lines(cfg: &ClientConfig) -> Vec<String> {
    fn q(s: &str) -> String {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
    let mut out = Vec::new();
    let mut export = |k: &str, v: &str| out.push(format!("export {k}={}", q(v)));
    if !cfg.zookeeper.is_empty() {
        export("SYNOD_ZOOKEEPER", &cfg.zookeeper.join(","));
    }
    if !cfg.zookeeper_tls.is_empty() {
        export("SYNOD_ZOOKEEPER_TLS", &cfg.zookeeper_tls.join(","));
    }
    if !cfg.kv.is_empty() {
        export("SYNOD_KV", &cfg.kv.join(","));
    }
    if !cfg.admin.is_empty() {
        export("SYNOD_ADMIN", &cfg.admin.join(","));
    }
    if let Some(ca) = &cfg.ca {
        export("SYNOD_CA", &ca.display().to_string());
    }
    if let Some(c) = &cfg.cert {
        export("SYNOD_CERT", &c.display().to_string());
    }
    if let Some(k) = &cfg.key {
        export("SYNOD_KEY", &k.display().to_string());
    }
    if !cfg.etcd.is_empty() {
        export("ETCDCTL_API", "3");
        export("ETCDCTL_ENDPOINTS", &cfg.etcd.join(","));
        if let Some(ca) = &cfg.ca {
            export("ETCDCTL_CACERT", &ca.display().to_string());
        }
    }
    out
}

/// `synod env`: print the exports for the client configuration.
pub fn run_env() -> Result<()> {
    let Some(path) = ClientConfig::path() else {
        bail!("no HOME, XDG_CONFIG_HOME or SYNOD_CLIENT_CONFIG: nowhere to find a client configuration");
    };
    let Some(cfg) = ClientConfig::load()? else {
        bail!(
            "no client configuration at {} (start a cluster with `synod dev`, or write one: see \
             docs/cli.md)",
            path.display()
        );
    };
    println!("# {} ({})", cfg.cluster, path.display());
    for l in env_lines(&cfg) {
        println!("{l}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ClientConfig {
        ClientConfig {
            cluster: "synod dev".into(),
            zookeeper: vec!["127.0.0.1:2181".into()],
            zookeeper_tls: vec!["127.0.0.1:2281".into()],
            kv: vec!["127.0.0.1:2479".into()],
            etcd: vec!["https://127.0.0.1:2379".into()],
            admin: vec!["127.0.0.1:9181".into()],
            ca: Some("/d/certs/ca.crt".into()),
            cert: Some("/d/certs/client-root.crt".into()),
            key: Some("/d/certs/client-root.key".into()),
        }
    }

    #[test]
    fn dev_writes_reads_back_and_removes_only_its_own_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("synod/client.toml");
        let cfg = sample();
        assert!(install_dev(&p, &cfg).unwrap());
        assert_eq!(ClientConfig::read(&p).unwrap(), cfg);
        // Another dev cluster took the file over: the first one leaves it alone on exit.
        let mut other = cfg.clone();
        other.kv = vec!["127.0.0.1:3479".into()];
        assert!(install_dev(&p, &other).unwrap());
        remove_dev(&p, &cfg);
        assert_eq!(ClientConfig::read(&p).unwrap(), other);
        remove_dev(&p, &other);
        assert!(!p.exists());
        // An operator's own file is never replaced.
        std::fs::write(&p, "kv = [\"10.0.0.1:2479\"]\n").unwrap();
        assert!(!install_dev(&p, &cfg).unwrap());
        remove_dev(&p, &cfg);
        assert_eq!(ClientConfig::read(&p).unwrap().kv, vec!["10.0.0.1:2479"]);
    }

    #[test]
    fn a_broken_file_is_an_error_that_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("client.toml");
        std::fs::write(&p, "kvv = 1\n").unwrap();
        let e = format!("{:#}", ClientConfig::read(&p).unwrap_err());
        assert!(e.contains("client.toml") && e.contains("kvv"), "{e}");
    }

    #[test]
    fn env_quotes_and_names_etcdctls_variables() {
        let mut cfg = sample();
        cfg.ca = Some("/it's/ca.crt".into());
        let lines = env_lines(&cfg);
        assert!(lines.contains(&"export ETCDCTL_ENDPOINTS='https://127.0.0.1:2379'".to_string()));
        assert!(lines.contains(&"export SYNOD_CA='/it'\\''s/ca.crt'".to_string()));
        assert!(lines.contains(&"export ETCDCTL_CACERT='/it'\\''s/ca.crt'".to_string()));
    }

    #[test]
    fn flags_win_over_the_file() {
        let cfg = sample();
        let (ca, cert, _) =
            ClientConfig::tls_files(Some(&cfg), Some("/mine.crt".into()), None, None);
        assert_eq!(ca.unwrap(), PathBuf::from("/mine.crt"));
        assert!(cert.is_none());
        let (ca, cert, key) = ClientConfig::tls_files(Some(&cfg), None, None, None);
        assert_eq!(ca, cfg.ca);
        assert_eq!((cert, key), (cfg.cert.clone(), cfg.key.clone()));
    }
}
