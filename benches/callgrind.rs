//! A `redis-server` under callgrind whose instructions are counted over a window of work:
//! for `lua_cost -- --callgrind` and `load_instructions`. Counts repeat from run to run
//! where times on this machine move by 10-50 %.

/// A `redis-server` under `valgrind --tool=callgrind`, collecting nothing until told.
pub(crate) struct Callgrind {
    child: std::process::Child,
    dir: tempfile::TempDir,
    pub(crate) port: u16,
}

impl Callgrind {
    /// Starts one, with `extra` arguments (the module's `--loadmodule`).
    pub(crate) fn start(extra: &[&str]) -> Callgrind {
        let dir = tempfile::tempdir().unwrap();
        let port = testkit::free_port();
        let child = std::process::Command::new("valgrind")
            .arg("--tool=callgrind")
            .arg("--instr-atstart=no")
            .arg(format!(
                "--callgrind-out-file={}/callgrind.out.%p",
                dir.path().display()
            ))
            .arg(testkit::redis_server_bin())
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path())
            .args(extra)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("valgrind (the --callgrind measurement needs it)");
        let started = std::time::Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < std::time::Duration::from_secs(120),
                "redis-server under callgrind never listened"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        Callgrind { child, dir, port }
    }

    fn control(&self, args: &[&str]) {
        let status = std::process::Command::new("callgrind_control")
            .args(args)
            .arg(self.child.id().to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "callgrind_control {args:?}");
    }

    /// The instructions of the whole server while `work` runs, read from a dump of that
    /// window alone.
    pub(crate) async fn count<F: std::future::Future<Output = ()>>(&self, work: F) -> u64 {
        self.control(&["-z"]);
        self.control(&["-i", "on"]);
        work.await;
        self.control(&["-i", "off"]);
        let before: std::collections::HashSet<_> = self.dumps().into_iter().collect();
        self.control(&["-d"]);
        let dump = self
            .dumps()
            .into_iter()
            .find(|d| !before.contains(d))
            .expect("a new dump");
        // `CALLGRIND_KEEP=<dir>`: each window's dump kept there, for `callgrind_annotate`.
        if let Some(keep) = std::env::var_os("CALLGRIND_KEEP") {
            let name = dump.file_name().unwrap_or_default();
            let _ = std::fs::copy(&dump, std::path::Path::new(&keep).join(name));
        }
        let text = std::fs::read_to_string(&dump).unwrap();
        text.lines()
            // `totals:`, the sum of every cost in the dump (its `summary:` may say 0 after
            // a zeroing).
            .find_map(|l| l.strip_prefix("totals: "))
            .and_then(|n| n.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("no total in {}", dump.display()))
    }

    fn dumps(&self) -> Vec<std::path::PathBuf> {
        std::fs::read_dir(self.dir.path())
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.to_string_lossy().contains("callgrind.out"))
            .collect()
    }
}

impl Drop for Callgrind {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
