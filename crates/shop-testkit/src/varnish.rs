//! A private `varnishd` per test, running the shop's own VCL
//! (`deploy/varnish/shop.vcl`) in front of the test's web servers, as
//! [`crate::TestRedis`] runs a private `redis-server`.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// The environment variable naming the `varnishd` binary (default: from `PATH`,
/// then `/usr/sbin/varnishd`).
pub const VARNISHD_ENV: &str = "SHOP_VARNISHD";

/// The shop's VCL, as deployed.
pub const SHOP_VCL: &str = include_str!("../../../deploy/varnish/shop.vcl");

/// A `varnishd` owned by one test: the shop's VCL with a `site.vcl` naming the
/// test's web servers (round robin) and `127.0.0.1` as the only purger, listening
/// on a free loopback port, its work directory in a temporary directory (`-j none`:
/// run as root over a private directory, the jail could not read the VCL).
/// Dropping it stops the process and removes the directory.
pub struct TestVarnish {
    child: Option<Child>,
    port: u16,
    dir: TempDir,
}

impl TestVarnish {
    /// A loopback port free now, for [`TestVarnish::start_on`]: the shop's
    /// `--edge-purge-url` must name it before the edge starts (it names the shop).
    pub fn free_port() -> u16 {
        TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port()
    }

    /// Starts Varnish on `port` in front of `backends` (`host:port` each) and waits
    /// until it answers. Panics with the reason (no `varnishd`, a VCL error) if it
    /// cannot.
    pub fn start_on(port: u16, backends: &[&str]) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("shop-varnish-")
            .tempdir()
            .expect("create a temporary directory for varnishd");
        std::fs::write(dir.path().join("shop.vcl"), SHOP_VCL).expect("write shop.vcl");
        std::fs::write(dir.path().join("site.vcl"), site_vcl(backends)).expect("write site.vcl");
        let bin = varnishd();
        let child = Command::new(&bin)
            .arg("-F")
            .args(["-j", "none"])
            .arg("-n")
            .arg(dir.path().join("work"))
            .args(["-a", &format!("127.0.0.1:{port}")])
            .args(["-T", "none"])
            .arg("-f")
            .arg(dir.path().join("shop.vcl"))
            .arg("-p")
            .arg(format!("vcl_path={}", dir.path().display()))
            .args(["-s", "malloc,64m"])
            .stdin(Stdio::null())
            .stdout(Stdio::from(log_file(dir.path())))
            .stderr(Stdio::from(log_file(dir.path())))
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start `{bin}`: {e}. Install Varnish 7 and its modules \
                     (Debian: `apt-get install varnish varnish-modules`; scripts/test does) \
                     or point {VARNISHD_ENV} at varnishd."
                )
            });
        let mut varnish = Self {
            child: Some(child),
            port,
            dir,
        };
        varnish.wait_ready();
        varnish
    }

    /// Where clients send requests: `127.0.0.1:<port>`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The URL the shop purges at (`--edge-purge-url`).
    pub fn purge_url(&self) -> String {
        format!("http://{}/", self.addr())
    }

    /// What varnishd has printed so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("varnishd.log")).unwrap_or_default()
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if std::net::TcpStream::connect(self.addr()).is_ok() {
                return;
            }
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!("varnishd exited ({status}):\n{}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "varnishd did not answer on {} within 60 s:\n{}",
                self.addr(),
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        // SIGTERM lets the manager stop its worker; SIGKILL if it does not.
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for TestVarnish {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("---- varnishd log ----\n{}", self.log());
        }
        self.stop();
    }
}

/// The `varnishd` to run.
fn varnishd() -> String {
    if let Ok(bin) = std::env::var(VARNISHD_ENV) {
        return bin;
    }
    let on_path = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|p| p.join("varnishd").is_file()))
        .unwrap_or(false);
    match on_path {
        true => "varnishd".into(),
        false => "/usr/sbin/varnishd".into(),
    }
}

fn log_file(dir: &Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("varnishd.log"))
        .expect("open varnishd.log")
}

/// The site part of the VCL: `backends` round robin (probed on `/healthz`), the
/// purgers' ACL.
pub fn site_vcl(backends: &[&str]) -> String {
    let mut vcl = String::from(
        "import directors;\n\
         probe shop_up { .url = \"/healthz\"; .interval = 1s; .timeout = 1s; .window = 3; .threshold = 1; .initial = 3; }\n\
         acl purgers { \"127.0.0.1\"; }\n",
    );
    for (n, backend) in backends.iter().enumerate() {
        let (host, port) = backend.rsplit_once(':').expect("a backend is host:port");
        vcl.push_str(&format!(
            "backend web{n} {{ .host = \"{host}\"; .port = \"{port}\"; .probe = shop_up; }}\n"
        ));
    }
    vcl.push_str("sub vcl_init {\n    new web = directors.round_robin();\n");
    for n in 0..backends.len() {
        vcl.push_str(&format!("    web.add_backend(web{n});\n"));
    }
    vcl.push_str("}\nsub shop_backend {\n    set req.backend_hint = web.backend();\n}\n");
    vcl
}
