//! One way to reach the host that runs a process (issue 37; docs/cluster.md, "Several
//! hosts"): this host, or another one through the system's OpenSSH client. glass runs no agent
//! or daemon of its own on a host: what it does there is `ssh` running a shell command, and
//! `scp` copying a file.
//!
//! Every `ssh` and `scp` runs with `BatchMode=yes` (a host that would ask for a password or a
//! passphrase is an error, never a prompt), a connect timeout, keep-alives, and one shared
//! connection per host (`ControlMaster`, its socket in a directory of this user's under the
//! system's temporary directory), and is itself bounded by a timeout: a host that stops
//! answering costs a bounded wait and an error naming it. Host keys are learned on first use
//! (`StrictHostKeyChecking=accept-new`) into the cluster's own `run_dir/ssh/known_hosts`, and
//! a key that changed afterwards is refused.
//!
//! Guarantees: every word sent to a remote shell is quoted ([`quote`]); a destination never
//! reaches `ssh` where it could be read as an option (`--` precedes it, and cluster.toml
//! refuses one beginning with `-`).

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use wire::config::SshConfig;

use crate::error::HarnessError;
use crate::Result;

/// How long `ssh` may take to connect.
pub const CONNECT_TIMEOUT_S: u32 = 5;
/// How long one remote command may run (a copy of the binary gets [`COPY_TIMEOUT`]).
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(20);
/// How long one `scp` may run.
pub const COPY_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a host's shared connection outlives its last use.
const CONTROL_PERSIST_S: u32 = 60;

/// Quotes `word` for a POSIX shell: `'…'`, with each `'` written `'\''`.
pub fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// A host reached through OpenSSH (see the module documentation).
#[derive(Debug, Clone)]
pub struct SshHost {
    pub config: SshConfig,
    known_hosts: PathBuf,
}

impl SshHost {
    /// The host `config` names, learning host keys into `run_dir/ssh/known_hosts`.
    pub fn new(config: &SshConfig, run_dir: &Path) -> SshHost {
        SshHost { config: config.clone(), known_hosts: run_dir.join("ssh").join("known_hosts") }
    }

    /// The options every `ssh` and `scp` to this host takes (`scp` spells the port `-P`).
    fn options(&self, port_flag: &str) -> Result<Vec<OsString>> {
        let control = control_dir()?;
        if let Some(dir) = self.known_hosts.parent() {
            std::fs::create_dir_all(dir).map_err(|e| HarnessError::io(format!("create {}", dir.display()), e))?;
        }
        let mut o: Vec<OsString> = Vec::new();
        let mut opt = |s: String| {
            o.push("-o".into());
            o.push(s.into());
        };
        opt("BatchMode=yes".into());
        opt(format!("ConnectTimeout={CONNECT_TIMEOUT_S}"));
        opt("ServerAliveInterval=2".into());
        opt("ServerAliveCountMax=3".into());
        opt("ControlMaster=auto".into());
        // One shared connection per destination *and* key: a changed `identity` never rides a
        // connection authenticated with the old one. (Not per known-hosts file: the clusters
        // `compare` and `failover` derive, each with its own run directory, share their base
        // cluster's connections.)
        opt(format!("ControlPath={}/{:08x}-%C", control.display(), self.channel_key()));
        opt(format!("ControlPersist={CONTROL_PERSIST_S}"));
        opt("StrictHostKeyChecking=accept-new".into());
        opt(format!("UserKnownHostsFile={}", self.known_hosts.display()));
        if let Some(port) = self.config.port {
            o.push(port_flag.into());
            o.push(port.to_string().into());
        }
        if let Some(key) = &self.config.identity {
            o.push("-i".into());
            o.push(key.into());
            o.push("-o".into());
            o.push("IdentitiesOnly=yes".into());
        }
        Ok(o)
    }

    /// A short, stable digest (FNV-1a, 32 bits) of what authenticates a connection besides
    /// the destination `%C` covers: the identity file.
    fn channel_key(&self) -> u32 {
        let identity = self.config.identity.as_deref().map(|p| p.as_os_str().as_encoded_bytes()).unwrap_or_default();
        let mut h: u32 = 0x811c_9dc5;
        for b in identity {
            h = (h ^ u32::from(*b)).wrapping_mul(0x0100_0193);
        }
        h
    }

    /// `ssh … -- destination 'remote'`: `remote` is one shell command line, its words
    /// already quoted by the caller.
    pub fn command(&self, remote: &str) -> Result<Command> {
        let mut cmd = Command::new("ssh");
        cmd.args(self.options("-p")?).arg("--").arg(&self.config.to).arg(remote);
        cmd.stdin(Stdio::null());
        Ok(cmd)
    }

    /// Runs `remote` on the host within `timeout`; its standard output when it succeeds.
    pub fn run(&self, remote: &str, timeout: Duration) -> Result<String> {
        let out = run_bounded(self.command(remote)?, timeout).map_err(|e| self.error(remote, e))?;
        if out.status.success() {
            return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
        }
        Err(self.failed(remote, &out))
    }

    /// Runs `remote` on the host within `timeout`; its standard output and whether it
    /// succeeded (a command that may fail on purpose, as `kill -0`), or an error when the
    /// host could not be reached (ssh's own exit status, 255).
    pub fn probe(&self, remote: &str, timeout: Duration) -> Result<(bool, Vec<u8>)> {
        let out = run_bounded(self.command(remote)?, timeout).map_err(|e| self.error(remote, e))?;
        if out.status.code() == Some(255) {
            return Err(self.failed(remote, &out));
        }
        Ok((out.status.success(), out.stdout))
    }

    /// Copies the local file `from` to `to` on the host (relative to the remote home), within
    /// [`COPY_TIMEOUT`].
    pub fn copy_to(&self, from: &Path, to: &str) -> Result<()> {
        let mut cmd = Command::new("scp");
        cmd.args(self.options("-P")?).arg("-q").arg("--").arg(from).arg(format!("{}:{to}", self.config.to));
        cmd.stdin(Stdio::null());
        let what = format!("scp {} {}:{to}", from.display(), self.config.to);
        let out = run_bounded(cmd, COPY_TIMEOUT).map_err(|e| self.error(&what, e))?;
        if out.status.success() {
            return Ok(());
        }
        Err(self.failed(&what, &out))
    }

    /// Copies `from` on the host (relative to the remote home) to the local file `to`, within
    /// [`COPY_TIMEOUT`].
    pub fn copy_from(&self, from: &str, to: &Path) -> Result<()> {
        let mut cmd = Command::new("scp");
        cmd.args(self.options("-P")?).arg("-q").arg("--").arg(format!("{}:{from}", self.config.to)).arg(to);
        cmd.stdin(Stdio::null());
        let what = format!("scp {}:{from} {}", self.config.to, to.display());
        let out = run_bounded(cmd, COPY_TIMEOUT).map_err(|e| self.error(&what, e))?;
        if out.status.success() {
            return Ok(());
        }
        Err(self.failed(&what, &out))
    }

    fn error(&self, what: &str, source: std::io::Error) -> HarnessError {
        HarnessError::Host { host: self.config.to_string(), what: what.to_string(), problem: source.to_string() }
    }

    fn failed(&self, what: &str, out: &Output) -> HarnessError {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let problem = match stderr.trim() {
            "" => format!("exited with {}", out.status),
            s => format!("exited with {}: {}", out.status, s.lines().last().unwrap_or(s)),
        };
        HarnessError::Host { host: self.config.to_string(), what: what.to_string(), problem }
    }
}

/// Where the shared connections' sockets live: short (a socket's path has ~100 bytes), this
/// user's own, mode 0700.
fn control_dir() -> Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    // SAFETY: getuid(2) has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    let dir = std::env::temp_dir().join(format!("glass-ssh-{uid}"));
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(HarnessError::io(format!("create {}", dir.display()), e)),
    }
    let meta = std::fs::symlink_metadata(&dir).map_err(|e| HarnessError::io(format!("read {}", dir.display()), e))?;
    // Another user's directory (or a link) would let them take over the connections.
    if !meta.is_dir() || meta.uid() != uid || meta.permissions().mode() & 0o077 != 0 {
        return Err(HarnessError::io(
            format!("{} is not a directory of this user's alone", dir.display()),
            std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        ));
    }
    Ok(dir)
}

/// Runs `cmd` to its end, or kills it after `timeout` (an error, `TimedOut`). Its output goes
/// through files, not pipes: the shared connection `ssh` leaves behind (`ControlPersist`)
/// keeps the first command's output descriptors open for as long as it lives, and a pipe
/// would not end until then.
fn run_bounded(mut cmd: Command, timeout: Duration) -> std::io::Result<Output> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let base = std::env::temp_dir().join(format!("glass-host-{}-{n}", std::process::id()));
    let (out_path, err_path) = (base.with_extension("out"), base.with_extension("err"));
    let create = |p: &Path| std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(p);
    let result = (|| {
        let (out, err) = (create(&out_path)?, create(&err_path)?);
        let mut child = cmd.stdout(out.try_clone()?).stderr(err.try_clone()?).spawn()?;
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no answer within {:.0} s", timeout.as_secs_f64()),
                ));
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        let read = |mut f: std::fs::File| -> std::io::Result<Vec<u8>> {
            use std::io::Seek;
            f.seek(std::io::SeekFrom::Start(0))?;
            let mut b = Vec::new();
            f.read_to_end(&mut b)?;
            Ok(b)
        };
        Ok(Output { status, stdout: read(out)?, stderr: read(err)? })
    })();
    let _ = std::fs::remove_file(&out_path);
    let _ = std::fs::remove_file(&err_path);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every word reaches the remote shell as itself: quotes, spaces, `$`, `;` and a
    /// backquote are data, never syntax.
    #[test]
    fn quoted_words_are_data_to_a_shell() {
        for word in ["plain", "with space", "it's", "$(touch /tmp/x)", "a;b", "`id`", "", "'"] {
            let out = Command::new("sh").arg("-c").arg(format!("printf %s {}", quote(word))).output().unwrap();
            assert_eq!(String::from_utf8_lossy(&out.stdout), word);
        }
    }

    /// A destination comes after `--`, with batch mode, a connect timeout and the shared
    /// connection on; the port and key when given.
    #[test]
    fn the_ssh_command_line_is_bounded_and_never_prompts() {
        let run_dir = std::env::temp_dir().join(format!("glass-hosts-{}", std::process::id()));
        let mut config = SshConfig::to("glass@10.0.0.2");
        config.port = Some(2222);
        config.identity = Some(PathBuf::from("/keys/id"));
        let cmd = SshHost::new(&config, &run_dir).command("true").unwrap();
        let args: Vec<String> = cmd.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
        for want in ["BatchMode=yes", "ControlMaster=auto", "StrictHostKeyChecking=accept-new", "IdentitiesOnly=yes"] {
            assert!(args.iter().any(|a| a == want), "{want} in {args:?}");
        }
        let at = |s: &str| args.iter().position(|a| a == s).unwrap_or_else(|| panic!("{s} in {args:?}"));
        assert_eq!(args[at("-p") + 1], "2222");
        assert_eq!(args[at("-i") + 1], "/keys/id");
        assert_eq!(&args[at("--") + 1..], ["glass@10.0.0.2", "true"]);
        // Another key: another shared connection.
        let path = |args: &[String]| args.iter().find(|a| a.starts_with("ControlPath=")).cloned().unwrap();
        config.identity = Some(PathBuf::from("/keys/other"));
        let other = SshHost::new(&config, &run_dir).command("true").unwrap();
        let other: Vec<String> = other.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
        assert_ne!(path(&args), path(&other));
        assert!(path(&args).ends_with("%C"), "{}", path(&args));
        let _ = std::fs::remove_dir_all(&run_dir);
    }

    /// A command that outlives its bound is killed and reported, not waited for.
    #[test]
    fn a_command_past_its_timeout_is_killed() {
        let mut cmd = Command::new("sleep");
        cmd.arg("30");
        let e = run_bounded(cmd, Duration::from_millis(100)).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
    }
}
