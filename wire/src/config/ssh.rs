//! Where a process runs: the SSH destination of the host that runs a coordinator or a node
//! (docs/cluster.md, "Several hosts"). A process without one runs on the host that runs the
//! `glass` command, as every process of the default file does.
//!
//! In `cluster.toml`, either a destination alone or a table:
//!
//! ```toml
//! ssh = "glass@10.0.0.2"
//! ssh = { to = "glass@10.0.0.2", port = 2222, identity = "keys/id_ed25519", dir = "glass" }
//! ```
//!
//! Guarantees: a destination is never taken for an option of `ssh` (it may not begin with
//! `-`) and holds no whitespace or control character; a port is 1–65535; a directory is
//! never empty. How the harness uses these is `harness::hosts`.

use std::fmt;
use std::path::PathBuf;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

use crate::error::Problem;

/// The remote directory a process's files are installed in when `dir` is not given: relative
/// to the remote user's home.
pub const DEFAULT_REMOTE_DIR: &str = "glass";

/// How the harness reaches the host that runs one process (OpenSSH's `ssh` and `scp`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct SshConfig {
    /// The destination, as `ssh` takes it: `user@host`, `host`, or a `Host` of ssh_config.
    pub to: String,
    /// The SSH port, when not ssh_config's or 22.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// The private key to log in with (`ssh -i`); relative to the directory holding
    /// cluster.toml. When absent, ssh's own choice (the agent, `~/.ssh`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub identity: Option<PathBuf>,
    /// The directory on the host that holds `glass`, cluster.toml and the process's
    /// certificates, and where the process runs; relative to the remote user's home.
    pub dir: String,
}

impl SshConfig {
    /// A destination with every other setting at its default.
    pub fn to(destination: impl Into<String>) -> SshConfig {
        SshConfig { to: destination.into(), port: None, identity: None, dir: DEFAULT_REMOTE_DIR.to_string() }
    }

    /// The first setting that cannot be used, as the field under the process's table
    /// (`ssh.to`, …) and what is wrong with it.
    pub fn problem(&self) -> Option<(&'static str, Problem)> {
        let bad = |why: &'static str| Problem::BadSsh { value: self.to.clone(), why };
        if self.to.is_empty() {
            return Some(("ssh.to", bad("it is empty")));
        }
        if self.to.starts_with('-') {
            return Some(("ssh.to", bad("it begins with `-`, which ssh would read as an option")));
        }
        if self.to.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Some(("ssh.to", bad("it holds whitespace or a control character")));
        }
        if self.port == Some(0) {
            return Some(("ssh.port", Problem::Zero));
        }
        if self.dir.is_empty() {
            return Some(("ssh.dir", Problem::EmptyPath));
        }
        // The directory travels through `scp` and a remote shell: only characters neither
        // reads as syntax.
        if let Some(c) = self.dir.chars().find(|c| !(c.is_ascii_alphanumeric() || "._-/+@:=,".contains(*c))) {
            return Some(("ssh.dir", Problem::BadRemoteDir { value: self.dir.clone(), found: c }));
        }
        if self.identity.as_ref().is_some_and(|p| p.as_os_str().is_empty()) {
            return Some(("ssh.identity", Problem::EmptyPath));
        }
        None
    }
}

impl fmt::Display for SshConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.port {
            Some(p) => write!(f, "{} (port {p})", self.to),
            None => write!(f, "{}", self.to),
        }
    }
}

/// The table form's keys; unknown keys are errors, as everywhere in cluster.toml.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SshTable {
    to: String,
    #[serde(default)]
    port: Option<u16>,
    #[serde(default)]
    identity: Option<PathBuf>,
    #[serde(default)]
    dir: Option<String>,
}

impl<'de> Deserialize<'de> for SshConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<SshConfig, D::Error> {
        struct Either;
        impl<'de> Visitor<'de> for Either {
            type Value = SshConfig;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an SSH destination (\"user@host\") or a table { to, port, identity, dir }")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<SshConfig, E> {
                Ok(SshConfig::to(v))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<SshConfig, A::Error> {
                let t = SshTable::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(SshConfig {
                    to: t.to,
                    port: t.port,
                    identity: t.identity,
                    dir: t.dir.unwrap_or_else(|| DEFAULT_REMOTE_DIR.to_string()),
                })
            }
        }
        d.deserialize_any(Either)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ClusterConfig;
    use crate::error::ConfigError;

    const COMMITTED: &str = include_str!("../../../cluster.toml");

    fn with_node_ssh(line: &str) -> String {
        COMMITTED.replacen("address = \"127.0.0.1:7401\"", &format!("address = \"127.0.0.1:7401\"\n{line}"), 1)
    }

    fn invalid(text: &str) -> (String, String) {
        match ClusterConfig::parse(text).and_then(|c| c.validate().map(|()| c)) {
            Err(e @ (ConfigError::Invalid { .. } | ConfigError::Parse { .. })) => (e.field(), e.to_string()),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    /// Issue 37: a process may name the host that runs it, as a destination alone or as a
    /// table; the default file names none, and the way to a host is not what processes agree
    /// on (the fingerprint ignores it).
    #[test]
    fn a_destination_alone_or_a_table_names_the_host() {
        let c = ClusterConfig::parse(&with_node_ssh("ssh = \"glass@10.0.0.2\"")).unwrap();
        c.validate().unwrap();
        assert_eq!(c.nodes[0].ssh, Some(SshConfig::to("glass@10.0.0.2")));
        assert_eq!(c.nodes[0].ssh.as_ref().unwrap().dir, DEFAULT_REMOTE_DIR);
        assert!(c.any_ssh());
        let base = ClusterConfig::parse(COMMITTED).unwrap();
        assert!(!base.any_ssh(), "the default file runs everything here");
        assert_eq!(c.fingerprint(), base.fingerprint());

        let text = with_node_ssh("ssh = { to = \"h2\", port = 2222, identity = \"keys/id\", dir = \"/srv/glass\" }");
        let c = ClusterConfig::parse(&text).unwrap();
        c.validate().unwrap();
        let ssh = c.nodes[0].ssh.clone().unwrap();
        assert_eq!((ssh.to.as_str(), ssh.port, ssh.dir.as_str()), ("h2", Some(2222), "/srv/glass"));
        assert_eq!(ssh.identity, Some(PathBuf::from("keys/id")));
        assert_eq!(ssh.to_string(), "h2 (port 2222)");
    }

    /// Bad input gets an error naming the field: an option smuggled in as a destination, a
    /// destination with a space, port 0, an empty directory, an unknown key.
    #[test]
    fn unusable_settings_are_refused_by_field() {
        for (line, field, says) in [
            ("ssh = \"-oProxyCommand=sh\"", "nodes[0].ssh.to", "begins with `-`"),
            ("ssh = \"a b\"", "nodes[0].ssh.to", "whitespace"),
            ("ssh = \"\"", "nodes[0].ssh.to", "empty"),
            ("ssh = { to = \"h\", port = 0 }", "nodes[0].ssh.port", "at least 1"),
            ("ssh = { to = \"h\", dir = \"\" }", "nodes[0].ssh.dir", "is empty"),
            ("ssh = { to = \"h\", dir = \"my glass\" }", "nodes[0].ssh.dir", "holds `' '`"),
            ("ssh = { to = \"h\", dir = \"g'$(id)\" }", "nodes[0].ssh.dir", "holds `'\\''`"),
            ("ssh = { to = \"h\", dir = \"~/glass\" }", "nodes[0].ssh.dir", "holds `'~'`"),
            ("ssh = { to = \"h\", user = \"x\" }", "nodes[0].ssh.user", "unknown field `user`"),
            ("ssh = { port = 22 }", "nodes[0].ssh", "missing field `to`"),
            ("ssh = 7", "nodes[0].ssh", "an SSH destination"),
        ] {
            let (f, msg) = invalid(&with_node_ssh(line));
            assert_eq!(f, field, "{line}: {msg}");
            assert!(msg.contains(says), "{line}: {msg}");
        }
    }

    /// On another host cluster.toml sits in the process's directory: an absolute run_dir
    /// would name a directory of this host there, and is refused; a relative identity file is
    /// relative to the file, as run_dir is.
    #[test]
    fn directories_stay_relative_when_processes_run_elsewhere() {
        let dir = std::env::temp_dir().join(format!("glass-ssh-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("cluster.toml");
        let text = with_node_ssh("ssh = { to = \"h\", identity = \"id_ed25519\" }");
        std::fs::write(&path, &text).unwrap();
        let c = ClusterConfig::from_file(&path).unwrap();
        assert_eq!(c.nodes[0].ssh.as_ref().unwrap().identity, Some(dir.join("id_ed25519")));
        std::fs::write(&path, text.replacen("run_dir = \"run\"", "run_dir = \"/var/glass\"", 1)).unwrap();
        match ClusterConfig::from_file(&path) {
            Err(e @ ConfigError::Invalid { .. }) => {
                assert_eq!(e.field(), "run_dir");
                assert!(e.to_string().contains("relative"), "{e}");
            }
            other => panic!("an absolute run_dir with ssh: {other:?}"),
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
