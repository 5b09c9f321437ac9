//! A real `redis-server` on loopback for the fleet's tests: a free port, a
//! directory of its own, no persistence, stopped when dropped. Debian's
//! `redis-server` package provides it (`.ci/run` installs it); a test that
//! cannot start it fails.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A running `redis-server`.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    /// More arguments for the server: a password, say.
    extra: Vec<String>,
}

impl RedisServer {
    /// Starts one on a free loopback port, once it accepts connections.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// As [`start`](Self::start), with `extra` arguments for the server.
    pub fn start_with(extra: &[&str]) -> Self {
        static STARTED: AtomicUsize = AtomicUsize::new(0);
        let n = STARTED.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("rsr-redis-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a directory for redis-server");
        let port = free_port();
        let extra = extra.iter().map(|arg| (*arg).to_owned()).collect();
        let mut server = Self { child: None, port, dir, extra };
        server.run();
        server
    }

    /// Starts the server process on the port, and waits for its log to
    /// say it is ready (reading it, not sleeping).
    fn run(&mut self) {
        let mut child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .args(&self.extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server runs (Debian's redis-server package; .ci/run installs it)");
        let mut log = BufReader::new(child.stdout.take().unwrap()).lines();
        let ready = log.by_ref().map_while(Result::ok).any(|line| line.contains("Ready to accept"));
        assert!(ready, "redis-server on port {} did not start", self.port);
        // Keep reading the log, so that the server never blocks on it.
        std::thread::spawn(move || log.for_each(drop));
        self.child = Some(child);
    }

    /// One that also takes TLS connections, on [`tls_url`](Self::tls_url),
    /// with the tests' certificate for `localhost` (its own root); clients
    /// are not asked for one.
    pub fn start_tls() -> Self {
        let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/all/fixtures");
        let (cert, key) =
            (format!("{fixtures}/localhost.crt.pem"), format!("{fixtures}/localhost.key.pem"));
        let tls_port = free_port().to_string();
        let args = [
            "--tls-port",
            &tls_port,
            "--tls-cert-file",
            &cert,
            "--tls-key-file",
            &key,
            "--tls-ca-cert-file",
            &cert,
            "--tls-auth-clients",
            "no",
        ];
        Self::start_with(&args)
    }

    /// The `rediss://` URL of a server started with [`start_tls`](Self::start_tls).
    pub fn tls_url(&self) -> String {
        let at = self.extra.iter().position(|arg| arg == "--tls-port").expect("a TLS server");
        format!("rediss://localhost:{}/", self.extra[at + 1])
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The server's URL with `password`.
    pub fn url_with_password(&self, password: &str) -> String {
        format!("redis://:{password}@127.0.0.1:{}/", self.port)
    }

    /// Freezes the server (`SIGSTOP`): it holds its connections and
    /// answers nothing, as a Redis stuck in a long command does.
    pub fn freeze(&self) {
        self.signal("-STOP");
    }

    /// Thaws a frozen server (`SIGCONT`).
    pub fn thaw(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("a running server").id().to_string();
        let status = Command::new("kill").args([signal, &pid]).status().expect("kill runs");
        assert!(status.success(), "kill {signal} {pid}");
    }

    /// Stops the server: its data goes with it.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // A frozen server dies of SIGKILL all the same.
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port, empty.
    pub fn restart(&mut self) {
        self.stop();
        self.run();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A loopback port free now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}
