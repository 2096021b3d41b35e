//! A cluster on five hosts driven from one control host over SSH (issue 37; docs/cluster.md,
//! "Several hosts"): five network namespaces, each with its own address and a real OpenSSH
//! server listening in it, three coordinators and two nodes placed on them by cluster.toml's
//! `ssh` keys. `glass cluster deploy` installs the binary, the file and each host's own
//! certificates (never the CA's key, never another host's key); `cluster up` refuses a host
//! that runs another build, none, or another cluster's glass process, and starts nothing,
//! then starts every process through ssh; `bench
//! --config` measures it from the control host, with each host's CPU, memory and network read
//! through ssh; `check` finds the replicas equal and every
//! acknowledged NewOrder present; `cluster down` leaves no process on any host; `failover`
//! kills a node, then the leading coordinator (in the full stack, whose logs the runs remove
//! from the nodes' hosts), on their hosts through ssh, and loses nothing; a kill loop and a
//! network partition run across them; Ctrl-C stops what a run started there.
//!
//! Needs root, iproute2 and OpenSSH's server (installed by `scripts/setup-test-tools sshd`
//! when missing). Without them the test says why on stderr and returns: it cannot build the
//! hosts it is about.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use common::netns::Hosts;
use common::{files_under, glass, text};

/// Installs OpenSSH's server if missing; why not, when it cannot.
fn sshd_installed() -> Result<(), String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/setup-test-tools");
    let o = Command::new("bash").arg(script).arg("sshd").output().map_err(|e| e.to_string())?;
    match o.status.code() {
        Some(0) => Ok(()),
        _ => Err(String::from_utf8_lossy(&o.stderr).trim().to_string()),
    }
}

fn run(cmd: &mut Command) {
    let o = cmd.output().expect("run a setup command");
    assert!(o.status.success(), "{cmd:?}: {}", text(&o));
}

/// An SSH server in each host, accepting `key` for root; stopped with the hosts.
fn start_sshd(hosts: &Hosts, n: usize, dir: &Path) -> Vec<Child> {
    let host_key = dir.join("host_key");
    run(Command::new("ssh-keygen").args(["-q", "-t", "ed25519", "-N", "", "-f"]).arg(&host_key));
    // The server's privilege separation directory.
    std::fs::create_dir_all("/run/sshd").unwrap();
    (0..n)
        .map(|i| {
            let config = dir.join(format!("sshd-{i}.conf"));
            let conf = format!(
                "Port 22\nListenAddress {addr}\nHostKey {key}\nPidFile {dir}/sshd-{i}.pid\n\
                 AuthorizedKeysFile {dir}/authorized_keys\nPermitRootLogin prohibit-password\n\
                 PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n\
                 Subsystem sftp /usr/lib/openssh/sftp-server\n",
                addr = hosts.address(i),
                key = host_key.display(),
                dir = dir.display(),
            );
            std::fs::write(&config, conf).unwrap();
            let log = dir.join(format!("sshd-{i}.log"));
            let config = config.to_str().unwrap().to_string();
            hosts.spawn_program(i, "/bin/sh", &["-c", CLEAN_SHELL_SSHD, "sshd", "-D", "-e", "-f", &config], &log)
        })
        .collect()
}

/// Starts sshd (its arguments follow) with root's shell start-up files hidden from the
/// sessions it serves. The hosts are namespaces of this machine and share its root's home,
/// and bash sources `~/.bashrc` for every command sshd runs: one that waits blocks every
/// remote command. (Found on a machine whose `.bashrc` ran `pyenv init`, which waited 60 s
/// for a rehash lock an interrupted run had left: every `deploy` "found no answer within
/// 20 s".) `ip netns exec` gives sshd a mount namespace of its own; the files are covered by
/// `/dev/null` there only.
const CLEAN_SHELL_SSHD: &str = r#"home=$(getent passwd root | cut -d: -f6)
for f in .bashrc .bash_profile .bash_login .profile; do
  if [ -f "$home/$f" ]; then mount --bind /dev/null "$home/$f" || exit 1; fi
done
exec /usr/sbin/sshd "$@""#;

/// cluster.toml: coordinators on hosts 0–2, nodes on 3 and 4, each reached as root with
/// `key`, each host in its own directory (the namespaces share one file system).
fn cluster_toml(dir: &Path, hosts_root: &Path, hosts: &Hosts, key: &Path) -> PathBuf {
    let ssh = |i: usize| {
        format!(
            "ssh = {{ to = \"root@{}\", identity = \"{}\", dir = \"{}\" }}",
            hosts.address(i),
            key.display(),
            hosts_root.join(format!("host-{i}")).display()
        )
    };
    let mut text = String::from("mode = \"active-active\"\nseed = 11\nrun_dir = \"run\"\ncert_dir = \"run/certs\"\n\n");
    for c in 0..3 {
        text.push_str(&format!("[[coordinators]]\nid = {c}\naddress = \"{}:7400\"\n{}\n\n", hosts.address(c), ssh(c)));
    }
    for (id, h) in [(1, 3), (2, 4)] {
        text.push_str(&format!("[[nodes]]\nid = {id}\naddress = \"{}:7401\"\n{}\n\n", hosts.address(h), ssh(h)));
    }
    text.push_str(
        "[[partitions]]\nid = 1\nwarehouses = { first = 1, last = 1 }\nreplicas = [1, 2]\n\n\
         [[partitions]]\nid = 2\nwarehouses = { first = 2, last = 2 }\nreplicas = [2, 1]\n",
    );
    let path = dir.join("cluster.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// The pids running in host `i`'s namespace, but its SSH server's.
fn glass_pids(hosts: &Hosts, i: usize) -> Vec<String> {
    let o = Command::new("ip").args(["netns", "pids", hosts.ns(i)]).output().unwrap();
    String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .filter(|pid| std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "glass"))
        .map(String::from)
        .collect()
}

#[test]
fn deploy_up_bench_check_down_across_five_hosts_over_ssh() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("ssh_hosts: not run: network namespaces and an SSH server need root");
        return;
    }
    if let Err(why) = sshd_installed() {
        eprintln!("ssh_hosts: not run: {why}");
        return;
    }
    let tag = format!("{}", (std::process::id() + 2_500) % 10_000);
    // A subnet of this run's own: two runs at once (a developer's beside CI's) must not
    // answer for each other's addresses.
    let subnet = format!("10.79.{}", std::process::id() % 250);
    let hosts = match Hosts::build(&tag, &subnet, 5) {
        Ok(h) => h,
        Err(why) => {
            eprintln!("ssh_hosts: not run: {why}");
            return;
        }
    };
    let dir = std::env::temp_dir().join(format!("glass-ssh-hosts-{tag}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("id_ed25519");
    run(Command::new("ssh-keygen").args(["-q", "-t", "ed25519", "-N", "", "-f"]).arg(&key));
    std::fs::copy(dir.join("id_ed25519.pub"), dir.join("authorized_keys")).unwrap();
    let _sshd = start_sshd(&hosts, 5, &dir);
    let control = dir.join("control");
    std::fs::create_dir_all(&control).unwrap();
    let cfg = cluster_toml(&control, &dir, &hosts, &key);
    let cfg_s = cfg.to_str().unwrap();

    // Each server listening first. The refused key gets a shared connection of its own (the
    // key is part of what a connection is shared by), so no earlier connection answers for it.
    for i in 0..5 {
        let addr: std::net::SocketAddr = format!("{}:22", hosts.address(i)).parse().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_millis(200)).is_err() {
            assert!(std::time::Instant::now() < deadline, "sshd of host {i} never listened");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
    // A key the hosts refuse: an error that names the host.
    let stranger = dir.join("stranger");
    run(Command::new("ssh-keygen").args(["-q", "-t", "ed25519", "-N", "", "-f"]).arg(&stranger));
    let refused = control.join("refused.toml");
    std::fs::write(
        &refused,
        std::fs::read_to_string(&cfg).unwrap().replace(key.to_str().unwrap(), stranger.to_str().unwrap()),
    )
    .unwrap();
    let deploy = glass(&["cluster", "deploy", "--config", refused.to_str().unwrap()]);
    let said = String::from_utf8_lossy(&deploy.stderr);
    assert!(!deploy.status.success() && said.contains("Permission denied"), "a refused key: {said}");
    assert!(said.contains(&format!("root@{}", hosts.address(0))), "names the host: {said}");

    // sshd needs a moment to listen; deploy's first connection is bounded and retried here.
    let mut deploy = glass(&["cluster", "deploy", "--config", cfg_s]);
    for _ in 0..20 {
        if deploy.status.success() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
        deploy = glass(&["cluster", "deploy", "--config", cfg_s]);
    }
    assert!(deploy.status.success(), "deploy: {}", text(&deploy));
    let said = String::from_utf8_lossy(&deploy.stdout);
    assert!(said.contains("deploying to 5 hosts"), "{said}");

    // Each host holds the binary, the file and its own certificates: never the CA's key,
    // never a key of a process it does not run.
    let own = ["coordinator-0", "coordinator-1", "coordinator-2", "node-1", "node-2"];
    for (i, name) in own.iter().enumerate() {
        let host_dir = dir.join(format!("host-{i}"));
        let files: Vec<String> =
            files_under(&host_dir).iter().map(|p| p.strip_prefix(&host_dir).unwrap().display().to_string()).collect();
        let want: Vec<String> = vec![
            "cluster.toml".into(),
            "glass".into(),
            "run/certs/ca.pem".into(),
            format!("run/certs/{name}.key"),
            format!("run/certs/{name}.pem"),
        ];
        let mut want = want;
        want.sort();
        assert_eq!(files, want, "host {i}");
    }

    // A host that runs another build is refused before anything starts anywhere.
    let host4 = dir.join("host-4").join("glass");
    let real = std::fs::read(&host4).unwrap();
    std::fs::write(&host4, "#!/bin/sh\necho 'glass 0.0.0 (commit other)'\n").unwrap();
    let up = glass(&["cluster", "up", "--config", cfg_s]);
    assert!(!up.status.success(), "up with another build on host 4: {}", text(&up));
    let said = String::from_utf8_lossy(&up.stderr);
    assert!(said.contains("glass 0.0.0 (commit other)") && said.contains("glass cluster deploy"), "{said}");
    for i in 0..5 {
        assert!(glass_pids(&hosts, i).is_empty(), "host {i} runs glass after a refused up");
    }
    // A host with no glass at all: the same refusal, naming the host.
    std::fs::remove_file(&host4).unwrap();
    let up = glass(&["cluster", "up", "--config", cfg_s]);
    let said = String::from_utf8_lossy(&up.stderr);
    assert!(!up.status.success() && said.contains("no glass in its directory"), "{said}");
    assert!(said.contains(&format!("root@{}", hosts.address(4))), "names the host: {said}");
    std::fs::write(&host4, real).unwrap();
    std::fs::set_permissions(&host4, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();

    // A host nobody answers at: an error that names the host.
    let nobody = control.join("nobody.toml");
    let gone = format!("{}.99", subnet);
    std::fs::write(
        &nobody,
        std::fs::read_to_string(&cfg)
            .unwrap()
            .replace(&format!("root@{}\"", hosts.address(4)), &format!("root@{gone}\"")),
    )
    .unwrap();
    let up = glass(&["cluster", "up", "--config", nobody.to_str().unwrap()]);
    let said = String::from_utf8_lossy(&up.stderr);
    assert!(!up.status.success() && said.contains(&format!("root@{gone}")), "an unreachable host: {said}");
    for i in 0..5 {
        assert!(glass_pids(&hosts, i).is_empty(), "host {i} runs glass after a refused up");
    }

    // A host whose port another cluster's process holds: up fails naming the host and what
    // its process logged, and leaves nothing running on any host.
    let squatter = hosts.spawn_program(
        3,
        "python3",
        &[
            "-c",
            &format!(
                "import socket,time; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('{}', 7401)); \
                 time.sleep(120)",
                hosts.address(3)
            ),
        ],
        &control.join("squatter.log"),
    );
    let mut squatter = squatter;
    std::thread::sleep(std::time::Duration::from_millis(500));
    let up = glass(&["cluster", "up", "--config", cfg_s]);
    let said = String::from_utf8_lossy(&up.stderr);
    let _ = squatter.kill();
    let _ = squatter.wait();
    assert!(!up.status.success(), "up beside a squatter: {}", text(&up));
    assert!(said.contains(&format!("root@{}", hosts.address(3))) && said.contains("cannot bind"), "{said}");
    for i in 0..5 {
        assert!(glass_pids(&hosts, i).is_empty(), "host {i} runs glass after a failed up");
    }

    // A host that already runs a glass node of another cluster (on this cluster's node
    // address): up refuses before it starts anything, naming the host and the process.
    let other = dir.join("other");
    std::fs::create_dir_all(&other).unwrap();
    let other_cfg = other.join("cluster.toml");
    std::fs::write(
        &other_cfg,
        format!(
            "mode = \"active-active\"\nseed = 5\nrun_dir = \"run\"\ncert_dir = \"run/certs\"\n\n\
             [[coordinators]]\nid = 0\naddress = \"{a}:7500\"\n\n[[nodes]]\nid = 1\naddress = \"{a}:7401\"\n\n\
             [[partitions]]\nid = 1\nwarehouses = {{ first = 1, last = 1 }}\nreplicas = [1]\n",
            a = hosts.address(3)
        ),
    )
    .unwrap();
    let init = glass(&["cluster", "init", "--config", other_cfg.to_str().unwrap()]);
    assert!(init.status.success(), "init of the other cluster: {}", text(&init));
    let mut stranger_node = hosts.spawn_program(
        3,
        env!("CARGO_BIN_EXE_glass"),
        &["node", "--config", other_cfg.to_str().unwrap(), "--id", "1"],
        &control.join("other-node.log"),
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while glass_pids(&hosts, 3).is_empty() {
        assert!(std::time::Instant::now() < deadline, "the other cluster's node never ran");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let up = glass(&["cluster", "up", "--config", cfg_s]);
    let said = String::from_utf8_lossy(&up.stderr).into_owned();
    let _ = stranger_node.kill();
    let _ = stranger_node.wait();
    assert!(!up.status.success(), "up beside another cluster's node: {}", text(&up));
    assert!(
        said.contains(&format!("root@{}", hosts.address(3)))
            && said.contains("not this cluster's")
            && said.contains(&format!("node --config {}", other_cfg.display())),
        "{said}"
    );
    for i in 0..5 {
        assert!(glass_pids(&hosts, i).is_empty(), "host {i} runs glass after a refused up");
    }

    let up = glass(&["cluster", "up", "--config", cfg_s]);
    assert!(up.status.success(), "up: {}", text(&up));
    for i in 0..5 {
        assert_eq!(glass_pids(&hosts, i).len(), 1, "host {i} runs its process");
    }
    let status = glass(&["cluster", "status", "--config", cfg_s]);
    assert!(status.status.success(), "status: {}", text(&status));
    eprintln!("up: {}\nstatus: {}", text(&up), text(&status));

    let acks = control.join("acks.log");
    let bench =
        glass(&["bench", "--config", cfg_s, "--duration", "2", "--warmup", "0", "--ack-log", acks.to_str().unwrap()]);
    let bench_out = text(&bench);
    assert!(bench.status.success(), "bench: {bench_out}");
    eprintln!("bench: {bench_out}");
    // Per-host figures: this host (the client) and each of the five, read through ssh.
    let table = bench_out.split("per host (").nth(1).unwrap_or_else(|| panic!("no per-host table: {bench_out}"));
    for i in 0..5 {
        let row = table.lines().find(|l| l.contains(&format!("root@{} ", hosts.address(i))));
        let row = row.unwrap_or_else(|| panic!("no row for host {i}: {table}"));
        let cpu: f64 = row.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap();
        // A standby coordinator may use less than a clock tick in two seconds; a node never.
        assert!(cpu > 0.0 || i < 3, "host {i} used no CPU: {row}");
    }
    assert!(table.lines().any(|l| l.trim_start().starts_with("this host")), "{table}");
    let check = glass(&["check", "--config", cfg_s, "--ack-log", acks.to_str().unwrap()]);
    assert!(check.status.success(), "check: {}", text(&check));

    let down = glass(&["cluster", "down", "--config", cfg_s]);
    assert!(down.status.success(), "down: {}", text(&down));
    eprintln!("down: {}", text(&down));
    for i in 0..5 {
        assert!(glass_pids(&hosts, i).is_empty(), "host {i} still runs glass after down");
    }

    // The main job across the hosts: the lean active-active cluster against the full stack,
    // whose write-ahead log the nodes write on their own hosts.
    let json = control.join("compare.json");
    let compare =
        glass(&["compare", "--config", cfg_s, "--duration", "3", "--warmup", "0", "--json", json.to_str().unwrap()]);
    let out = text(&compare);
    eprintln!("compare: {out}");
    assert!(compare.status.success(), "compare across hosts: {out}");
    let rows: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let rows = rows.get("runs").and_then(|r| r.as_array()).unwrap_or_else(|| panic!("no runs in {rows}"));
    assert_eq!(rows.len(), 3, "{rows:?}");
    for row in rows {
        let mode = row["mode"].as_str().unwrap();
        assert_eq!(row["consistent"], true, "{mode}: {row}");
        assert_eq!(row["digests_equal"], true, "{mode}: {row}");
        assert!(row["cpu_us_per_txn"].as_f64().is_some_and(|v| v > 0.0), "{mode}: {row}");
        let disk = row["disk_bytes"].as_u64().unwrap();
        assert_eq!(disk > 0, mode == "full-stack", "{mode}: files on the nodes' hosts: {disk} bytes");
    }

    // A failover across the hosts: node 1 SIGKILLed on its host through ssh, restarted there,
    // rejoins; nothing acknowledged lost, the replicas equal (the run's own checks).
    let failover = glass(&[
        "failover",
        "--config",
        cfg_s,
        "--duration",
        "5",
        "--at",
        "1",
        "--restart-after",
        "1",
        "--warmup",
        "0",
    ]);
    let out = text(&failover);
    eprintln!("failover: {out}");
    assert!(failover.status.success(), "failover across hosts: {out}");
    // And the leading coordinator, on its own host, in the full stack: its nodes write their
    // write-ahead logs on their own hosts, which the run removes when it ends.
    let failover = glass(&[
        "failover",
        "--config",
        cfg_s,
        "--mode",
        "full-stack",
        "--kill",
        "coordinator",
        "--duration",
        "4",
        "--at",
        "1",
        "--warmup",
        "0",
    ]);
    let out = text(&failover);
    eprintln!("coordinator failover: {out}");
    assert!(failover.status.success(), "coordinator failover across hosts: {out}");
    // A kill loop: a node killed, restarted, killed again mid-rejoin and restarted, on its host.
    let kill_loop = glass(&[
        "failover",
        "--config",
        cfg_s,
        "--kill-loop",
        "1",
        "--every",
        "3",
        "--at",
        "1",
        "--restart-after",
        "1",
        "--duration",
        "6",
        "--warmup",
        "0",
        // Half of what this machine's cores give two clusters' worth of processes: the
        // rejoin's catch-up finishes within the run whatever else runs beside it.
        "--rate",
        "20000",
    ]);
    let out = text(&kill_loop);
    eprintln!("kill loop: {out}");
    assert!(kill_loop.status.success(), "kill loop across hosts: {out}");
    // A network partition: the leading coordinator and node 1 cut off from the rest (routes
    // on their hosts, through ssh), then healed; the isolated leader acknowledges nothing once
    // the majority's leader serves, the majority goes on, and nothing acknowledged is lost.
    let json = control.join("partition.json");
    let cut = glass(&[
        "failover",
        "--config",
        cfg_s,
        "--partition",
        "c0,n1/c1,c2,n2",
        "--at",
        "1",
        // Long enough for the majority to serve while cut: the failure timeout (1 s), an
        // election, and a take-over that waits its timeout for the cut-off node's standing.
        "--heal-after",
        "4",
        "--duration",
        "7",
        "--warmup",
        "0",
        "--json",
        json.to_str().unwrap(),
    ]);
    let out = text(&cut);
    eprintln!("partition: {out}");
    assert!(cut.status.success(), "partition across hosts: {out}");
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    // (The record's fields sit beside its `run` heading.)
    assert_eq!(r["majority_side"], 1, "{r}");
    let leader = r["majority_leader"].as_u64().unwrap_or_else(|| panic!("the majority never served: {r}"));
    assert!(leader == 1 || leader == 2, "{r}");
    assert!(r["heal_errors"].as_array().is_some_and(|e| e.is_empty()), "{r}");
    assert_eq!(r["leader_after_heal"].as_u64(), Some(leader), "everyone follows the majority's leader: {r}");
    if r["leader_before"] == 0 {
        // Fencing (docs/design.md §11): the cut-off leader's lease ends it before a new
        // leader serves.
        assert_eq!(r["cut_off_leader_batches_after"], 0, "{r}");
    }
    for i in 0..3 {
        let routes =
            Command::new("ip").args(["-n", hosts.ns(i), "route", "show", "type", "prohibit"]).output().unwrap();
        assert!(routes.stdout.is_empty(), "host {i} kept a route: {}", String::from_utf8_lossy(&routes.stdout));
    }
    for i in 0..5 {
        assert!(glass_pids(&hosts, i).is_empty(), "host {i} still runs glass after the failover runs");
    }
    // What the runs' nodes wrote on their hosts (the full stack's logs and checkpoints) is
    // gone with the runs: only what `deploy` installed and the processes' logs and raft
    // state remain.
    for i in 0..5 {
        let left: Vec<PathBuf> = files_under(&dir.join(format!("host-{i}")))
            .into_iter()
            .filter(|f| {
                let name = f.file_name().unwrap().to_string_lossy();
                let kept = name.ends_with(".log")
                    || name.contains(".log.")
                    || name.ends_with(".raft")
                    || name.ends_with(".pem")
                    || name.ends_with(".key")
                    || ["cluster.toml", "glass"].contains(&name.as_ref());
                !kept
            })
            .collect();
        assert!(left.is_empty(), "host {i} keeps the runs' data: {left:?}");
    }

    // Ctrl-C in the middle of a run stops what it started on the other hosts too.
    let log = control.join("interrupted.log");
    let mut run = Command::new(env!("CARGO_BIN_EXE_glass"))
        .env("GLASS_RESULTS_DIR", std::env::temp_dir().join("glass-test-results"))
        .args(["failover", "--config", cfg_s, "--duration", "30", "--warmup", "0"])
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::fs::File::create(control.join("interrupted.err")).unwrap())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !std::fs::read_to_string(&log).unwrap_or_default().contains("cluster up in") {
        if std::time::Instant::now() > deadline {
            let _ = run.kill();
            panic!("the run never came up: {}", std::fs::read_to_string(&log).unwrap());
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // SAFETY: kill(2) with our own child's pid.
    unsafe { libc::kill(run.id() as i32, libc::SIGINT) };
    let status = run.wait().unwrap();
    let err = std::fs::read_to_string(control.join("interrupted.err")).unwrap_or_default();
    assert_eq!(status.code(), Some(130), "{err}");
    for i in 0..5 {
        assert!(glass_pids(&hosts, i).is_empty(), "host {i} still runs glass after Ctrl-C: {err}");
    }
    drop(hosts);
    let _ = std::fs::remove_dir_all(&dir);
}
