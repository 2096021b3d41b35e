//! Hosts for the tests that cross a network (tests/multihost.rs, tests/ssh_hosts.rs):
//! network namespaces on a bridge, each with its own address, as separate machines; the
//! test's own process stays outside them all, as a control host. Needs root and iproute2.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

pub fn ip(args: &[&str]) -> Output {
    Command::new("ip").args(args).output().expect("run ip")
}

pub fn ip_ok(args: &[&str]) {
    let o = ip(args);
    assert!(o.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&o.stderr));
}

/// "Hosts" (network namespaces) on a bridge, on subnet `subnet`.0/24 (host `i` at `.i+1`),
/// torn down on drop.
pub struct Hosts {
    tag: String,
    subnet: String,
    names: Vec<String>,
}

impl Hosts {
    pub fn ns(&self, i: usize) -> &str {
        &self.names[i]
    }

    pub fn bridge(&self) -> String {
        format!("gb{}", self.tag)
    }

    pub fn build(tag: &str, subnet: &str, hosts: usize) -> Result<Hosts, String> {
        let me = Hosts {
            tag: tag.to_string(),
            subnet: subnet.to_string(),
            names: (0..hosts).map(|i| format!("glass-{tag}-h{i}")).collect(),
        };
        let br = me.bridge();
        let o = ip(&["link", "add", &br, "type", "bridge"]);
        if !o.status.success() {
            return Err(format!("cannot create a bridge: {}", String::from_utf8_lossy(&o.stderr).trim()));
        }
        ip_ok(&["addr", "add", &format!("{subnet}.254/24"), "dev", &br]);
        ip_ok(&["link", "set", &br, "up"]);
        for (i, ns) in me.names.iter().enumerate() {
            let o = ip(&["netns", "add", ns]);
            if !o.status.success() {
                return Err(format!(
                    "cannot create a network namespace: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                ));
            }
            let (inner, outer) = (format!("gi{tag}{i}"), format!("go{tag}{i}"));
            ip_ok(&["link", "add", &inner, "type", "veth", "peer", "name", &outer]);
            ip_ok(&["link", "set", &inner, "netns", ns]);
            ip_ok(&["link", "set", &outer, "master", &br]);
            ip_ok(&["link", "set", &outer, "up"]);
            ip_ok(&["-n", ns, "addr", "add", &format!("{subnet}.{}/24", i + 1), "dev", &inner]);
            ip_ok(&["-n", ns, "link", "set", &inner, "up"]);
            ip_ok(&["-n", ns, "link", "set", "lo", "up"]);
        }
        Ok(me)
    }

    /// Host `i`'s address.
    pub fn address(&self, i: usize) -> String {
        format!("{}.{}", self.subnet, i + 1)
    }

    /// Cuts hosts `a` and `b` off from each other, both ways (each refuses the other's
    /// address), or heals the cut.
    pub fn cut(&self, a: usize, b: usize, cut: bool) {
        let verb = if cut { "add" } else { "del" };
        ip_ok(&["-n", self.ns(a), "route", verb, "prohibit", &format!("{}/32", self.address(b))]);
        ip_ok(&["-n", self.ns(b), "route", verb, "prohibit", &format!("{}/32", self.address(a))]);
    }

    /// Starts `glass ARGS` inside host `i`, its output in `log`.
    pub fn spawn(&self, i: usize, args: &[&str], log: &Path) -> Child {
        self.spawn_program(i, env!("CARGO_BIN_EXE_glass"), args, log)
    }

    /// Starts `program ARGS` inside host `i`, its output in `log`.
    pub fn spawn_program(&self, i: usize, program: &str, args: &[&str], log: &Path) -> Child {
        let out = std::fs::File::create(log).expect("log file");
        Command::new("ip")
            .args(["netns", "exec", self.ns(i), program])
            .args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log file"))
            .stderr(out)
            .spawn()
            .expect("start a glass process in a namespace")
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for ns in &self.names {
            // Any process left in the namespace goes with it.
            if let Ok(o) = Command::new("ip").args(["netns", "pids", ns]).output() {
                for pid in String::from_utf8_lossy(&o.stdout).split_whitespace() {
                    let _ = Command::new("kill").args(["-9", pid]).status();
                }
            }
            let _ = ip(&["netns", "del", ns]);
        }
        let _ = ip(&["link", "del", &self.bridge()]);
    }
}
