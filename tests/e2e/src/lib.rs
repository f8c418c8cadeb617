//! A throwaway PostgreSQL 15 cluster for end-to-end tests, with the installed `indexnow`
//! extension, optionally preloaded.
//!
//! Postgres refuses to run as root, and tests and CI run as root: the cluster's files belong to the
//! `postgres` user and `initdb`/`pg_ctl` run through `sudo -u postgres`. A cluster listens on a Unix
//! socket in its own folder only, never on TCP: the version jobs of `scripts/test.sh` run side by
//! side, and a TCP port picked free can be taken by any process's outgoing connection before the
//! server binds it (it failed CI so); a socket in a folder of the cluster's own cannot be taken.
//! The cluster is stopped and removed when the value is dropped. Its
//! data directory is a copy of one `initdb` made once per PostgreSQL version ([`template_data`]).

pub mod soak;

use postgres::{Client, NoTls};
use std::path::PathBuf;
use std::process::Command;

/// The PostgreSQL whose programs the clusters run: `INDEXNOW_PG_BIN` (the `bindir` of the
/// `pg_config` the extension was installed with; `scripts/test.sh` sets it for each version),
/// PostgreSQL 15 of Debian by default.
pub fn pg_bin() -> String {
    std::env::var("INDEXNOW_PG_BIN").unwrap_or_else(|_| "/usr/lib/postgresql/15/bin".to_string())
}

/// The major version of that PostgreSQL (`postgres --version`: `postgres (PostgreSQL) 16.2`).
pub fn pg_major() -> u32 {
    major_of(&run(
        "postgres --version",
        Command::new(format!("{}/postgres", pg_bin())).arg("--version"),
    ))
}

/// The major version in what `postgres --version` printed.
fn major_of(version: &str) -> u32 {
    version
        .split_whitespace()
        .last()
        .and_then(|v| v.split('.').next())
        .and_then(|m| m.parse().ok())
        .unwrap_or_else(|| panic!("no major version in {version:?}"))
}

pub struct Cluster {
    pub dir: PathBuf,
    pub port: u16,
    /// The `bindir` of the PostgreSQL it runs ([`pg_bin`], or another after
    /// [`Cluster::upgraded_to`]).
    bin: String,
}

/// How a cluster is started.
pub struct Options {
    /// `shared_preload_libraries = 'indexnow'`.
    pub preload: bool,
    /// Extra `postgresql.conf` lines.
    pub conf: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            preload: true,
            conf: vec![],
        }
    }
}

fn run(what: &str, cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{what} failed: {text}");
    text
}

fn as_postgres(program: &str) -> Command {
    let mut c = Command::new("sudo");
    c.args(["-n", "-u", "postgres", program]);
    c
}

/// A port number for a new cluster: it names the cluster's socket file (and its shared memory
/// key), and nothing listens on it over TCP. Distinct within a test process, and between test
/// processes most of the time (a clash would cost nothing: each socket is in its own folder).
fn next_port() -> u16 {
    static NEXT: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    20_000 + ((std::process::id() as u16).wrapping_mul(97).wrapping_add(n) % 10_000)
}

/// A new folder for a cluster on `port`, owned by the postgres user: the cluster's data, its log
/// and its socket.
fn cluster_dir(port: u16) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("indexnow-e2e-{}-{port}", std::process::id()));
    // (a folder left by an earlier process of the same id holds nothing this one wants)
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    run(
        "chown",
        Command::new("chown").args(["postgres:postgres", dir.to_str().unwrap()]),
    );
    dir
}

/// The postgresql.conf lines of a new test server on `port` in folder `dir`: its socket there and
/// no TCP (see the module's comment), no fsync, LOG lines kept.
fn server_conf(port: u16, dir: &std::path::Path) -> Vec<String> {
    vec![
        format!("port = {port}"),
        "listen_addresses = ''".to_string(),
        format!("unix_socket_directories = '{}'", dir.display()),
        "fsync = off".to_string(),
        "log_min_messages = info".to_string(),
    ]
}

/// Appends `lines` to the cluster's postgresql.conf (later lines win).
fn append_conf(data: &std::path::Path, lines: &[String]) {
    let conf_path = data.join("postgresql.conf");
    let mut text = std::fs::read_to_string(&conf_path).unwrap();
    text.push_str(&format!("\n# indexnow-e2e\n{}\n", lines.join("\n")));
    std::fs::write(&conf_path, text).unwrap();
}

/// The arguments every test cluster's `initdb` runs with. WAL segments of 1 MB, not 16: every
/// cluster starts as a copy of one data directory ([`template_data`]), and its first segment was
/// 17 MB of the 39 copied, a few hundred times a version.
const INITDB_ARGS: [&str; 10] = [
    "-A",
    "trust",
    "-U",
    "postgres",
    "--no-sync",
    "-E",
    "UTF8",
    "--locale",
    "C.UTF-8",
    "--wal-segsize=1",
];

/// A new data directory at `data` (its parent belongs to the postgres user).
fn initdb(data: &std::path::Path) {
    run(
        "initdb",
        as_postgres(&format!("{}/initdb", pg_bin()))
            .args(["-D", data.to_str().unwrap()])
            .args(INITDB_ARGS),
    );
}

/// A data directory made by `initdb` once for this PostgreSQL (`INDEXNOW_PG_BIN`) and copied for
/// each cluster: `initdb` took about 2 s a cluster, a copy takes a tenth of that, and the suite
/// starts a few hundred clusters per version. Kept in the temporary folder between runs, keyed by
/// the server's version and the arguments; made in a folder of its own and renamed into place, so that
/// test processes running at once never see half of one. Every copy has the template's system
/// identifier: a test about two distinct servers makes the second with [`Cluster::start_own_system`].
fn template_data() -> PathBuf {
    static MADE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    MADE.get_or_init(|| {
        let version = run(
            "postgres --version",
            Command::new(format!("{}/postgres", pg_bin())).arg("--version"),
        );
        let key = format!("{} {}", version.trim(), INITDB_ARGS.join(" "));
        let name: String = key
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        // (in the temporary folder, as the clusters are: the postgres user runs initdb there,
        // and may not enter the checkout, a folder of root's that may be closed to others)
        let root = std::env::temp_dir().join("indexnow-e2e-templates");
        let made = root.join(&name);
        if made.join("data/PG_VERSION").exists() {
            return made.join("data");
        }
        std::fs::create_dir_all(&root).unwrap();
        let making = root.join(format!("{name}.{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&making);
        std::fs::create_dir_all(&making).unwrap();
        run(
            "chown",
            Command::new("chown").args(["postgres:postgres", making.to_str().unwrap()]),
        );
        initdb(&making.join("data"));
        // (another process may have put its own in place meanwhile: either is as good)
        if std::fs::rename(&making, &made).is_err() {
            let _ = std::fs::remove_dir_all(&making);
        }
        made.join("data")
    })
    .clone()
}

impl Cluster {
    pub fn start(options: Options) -> Cluster {
        Cluster::start_from(options, true)
    }

    /// A cluster of its own `initdb`, so with a system identifier of its own (one another
    /// cluster's dump is restored into, as on another server).
    pub fn start_own_system(options: Options) -> Cluster {
        Cluster::start_from(options, false)
    }

    fn start_from(options: Options, template: bool) -> Cluster {
        let port = next_port();
        let dir = cluster_dir(port);
        let data = dir.join("data");
        if template {
            run(
                "copying the initdb template",
                Command::new("cp").arg("-a").arg(template_data()).arg(&data),
            );
        } else {
            initdb(&data);
        }
        let mut conf = server_conf(port, &dir);
        if options.preload {
            conf.push("shared_preload_libraries = 'indexnow'".to_string());
        }
        conf.extend(options.conf);
        append_conf(&data, &conf);
        let cluster = Cluster {
            dir,
            port,
            bin: pg_bin(),
        };
        cluster.pg_ctl(&["start", "-w", "-t", "60"]);
        cluster
    }

    /// A hot standby of `primary` (pg_basebackup -R), started with `conf` appended: it inherits the
    /// primary's settings, so `conf` overrides them.
    pub fn standby_of(primary: &Cluster, conf: &[&str]) -> Cluster {
        let standby = Cluster::base_backup_of(primary, true, conf);
        standby.pg_ctl(&["start", "-w", "-t", "60"]);
        standby
    }

    /// A physical copy of `primary` (pg_basebackup, no standby.signal: it starts as a primary of
    /// its own, as a copy for staging does), started the first time with
    /// `pg_ctl -o '<start_options>' start`, as a DBA starts it.
    pub fn copy_of(primary: &Cluster, start_options: &str) -> Cluster {
        let copy = Cluster::base_backup_of(primary, false, &[]);
        copy.start_with(start_options);
        copy
    }

    /// A base backup of `primary` in a new folder, not started: a standby (`-R`) or a copy, with
    /// its own port and socket folder and `conf` appended.
    fn base_backup_of(primary: &Cluster, standby: bool, conf: &[&str]) -> Cluster {
        let port = next_port();
        let dir = cluster_dir(port);
        let data = dir.join("data");
        let primary_port = primary.port.to_string();
        let primary_socket = primary.socket_dir();
        let mut args = vec![
            "-h",
            &primary_socket,
            "-p",
            &primary_port,
            "-U",
            "postgres",
            "-D",
            data.to_str().unwrap(),
            "-X",
            "stream",
            "-c",
            "fast",
        ];
        if standby {
            args.push("-R");
        }
        run(
            "pg_basebackup",
            as_postgres(&format!("{}/pg_basebackup", pg_bin())).args(&args),
        );
        let mut lines = vec![
            format!("port = {port}"),
            format!("unix_socket_directories = '{}'", dir.display()),
        ];
        lines.extend(conf.iter().map(|l| l.to_string()));
        append_conf(&data, &lines);
        Cluster {
            dir,
            port,
            bin: pg_bin(),
        }
    }

    /// `pg_ctl -o '<options>' start` (no `-o` when `options` is empty).
    pub fn start_with(&self, options: &str) {
        let mut args = vec!["start", "-w", "-t", "60"];
        if !options.is_empty() {
            args.extend(["-o", options]);
        }
        self.pg_ctl(&args);
    }

    /// `pg_ctl stop -m fast`.
    pub fn stop(&self) {
        self.pg_ctl(&["stop", "-w", "-t", "60", "-m", "fast"]);
    }

    pub fn promote(&self) {
        self.pg_ctl(&["promote", "-w", "-t", "60"]);
    }

    pub fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    fn pg_ctl(&self, args: &[&str]) {
        let log = self.dir.join("server.log");
        run(
            "pg_ctl",
            as_postgres(&format!("{}/pg_ctl", self.bin))
                .args([
                    "-D",
                    self.data().to_str().unwrap(),
                    "-l",
                    log.to_str().unwrap(),
                ])
                .args(args),
        );
    }

    /// Makes the server load `library` (an `indexnow.so`) from the next restart on, instead of the
    /// installed one: a copy in the cluster's folder, first in `dynamic_library_path`. `None`
    /// goes back to the installed library.
    pub fn use_library(&self, library: Option<&std::path::Path>) {
        let Some(library) = library else {
            self.configure(&["dynamic_library_path = '$libdir'"]);
            return;
        };
        let dir = self.dir.join("library");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::copy(library, dir.join("indexnow.so")).unwrap();
        run(
            "chown",
            Command::new("chown").args(["-R", "postgres:postgres", dir.to_str().unwrap()]),
        );
        self.configure(&[&format!(
            "dynamic_library_path = '{}:$libdir'",
            dir.display()
        )]);
    }

    /// Appends `lines` to postgresql.conf (later lines win); they apply at the next restart.
    pub fn configure(&self, lines: &[&str]) {
        let lines: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
        append_conf(&self.data(), &lines);
    }

    /// `pg_ctl start` of this cluster's data, stopped or crashed: fails (with what pg_ctl said
    /// and the server log) when the server does not start.
    pub fn start_again(&self) -> Result<(), String> {
        let log = self.dir.join("server.log");
        let out = as_postgres(&format!("{}/pg_ctl", self.bin))
            .args([
                "-D",
                self.data().to_str().unwrap(),
                "-l",
                log.to_str().unwrap(),
            ])
            .args(["start", "-w", "-t", "60"])
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            return Ok(());
        }
        Err(format!(
            "{}{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            self.log()
        ))
    }

    /// The postmaster's pid, from `postmaster.pid`.
    pub fn postmaster_pid(&self) -> i32 {
        let text = std::fs::read_to_string(self.data().join("postmaster.pid")).unwrap();
        text.lines().next().unwrap().trim().parse().unwrap()
    }

    pub fn restart(&self) {
        self.pg_ctl(&["restart", "-w", "-t", "60", "-m", "fast"]);
    }

    /// `pg_ctl restart -m immediate`: every process stops without cleaning up, as in a crash,
    /// and the server recovers from its WAL.
    pub fn restart_immediately(&self) {
        self.pg_ctl(&["restart", "-w", "-t", "120", "-m", "immediate"]);
    }

    /// Waits until the server accepts connections again (after a crash restart).
    pub fn wait_for_connections(&self, limit: std::time::Duration) {
        wait_until("the server accepts connections", limit, || {
            Client::connect(&self.conninfo("postgres"), NoTls).is_ok()
        });
    }

    /// The folder of the server's socket: the `host` clients connect to.
    pub fn socket_dir(&self) -> String {
        self.dir.display().to_string()
    }

    pub fn conninfo(&self, db: &str) -> String {
        format!(
            "host={} port={} user=postgres dbname={db}",
            self.socket_dir(),
            self.port
        )
    }

    pub fn connect(&self, db: &str) -> Client {
        Client::connect(&self.conninfo(db), NoTls)
            .unwrap_or_else(|e| panic!("connect to {db}: {e}\n{}", self.log()))
    }

    pub fn connect_as(&self, db: &str, user: &str) -> Client {
        Client::connect(
            &format!(
                "host={} port={} user={user} dbname={db}",
                self.socket_dir(),
                self.port
            ),
            NoTls,
        )
        .unwrap_or_else(|e| panic!("connect to {db} as {user}: {e}"))
    }

    /// A new database with the extension created in it.
    pub fn create_db_with_extension(&self, db: &str) -> Client {
        self.connect("postgres")
            .batch_execute(&format!("CREATE DATABASE {db}"))
            .unwrap();
        let mut c = self.connect(db);
        c.batch_execute("CREATE EXTENSION indexnow").unwrap();
        c
    }

    /// `psql -d db -c sql` with ON_ERROR_STOP; returns what psql printed (stdout and stderr:
    /// WARNINGs included).
    pub fn psql(&self, db: &str, sql: &str) -> String {
        self.client_program("psql", &["-d", db, "-v", "ON_ERROR_STOP=1", "-c", sql])
    }

    /// `pg_dump` of `from`, restored with `psql` into a new database `to`.
    pub fn dump_and_restore(&self, from: &str, to: &str) -> Client {
        let dump = self.dump(from);
        self.restore(&dump, to)
    }

    /// `pg_dump -d db` into a file in this cluster's folder; returns its path.
    pub fn dump(&self, db: &str) -> PathBuf {
        let dump = self.dir.join(format!("{db}.sql"));
        self.client_program("pg_dump", &["-d", db, "-f", dump.to_str().unwrap()]);
        dump
    }

    /// Creates database `to` and restores `dump` (a `pg_dump` file, from any cluster) into it.
    pub fn restore(&self, dump: &std::path::Path, to: &str) -> Client {
        self.connect("postgres")
            .batch_execute(&format!("CREATE DATABASE {to}"))
            .unwrap();
        self.client_program(
            "psql",
            &[
                "-d",
                to,
                "-v",
                "ON_ERROR_STOP=1",
                "-q",
                "-f",
                dump.to_str().unwrap(),
            ],
        );
        self.connect(to)
    }

    /// This cluster upgraded by `pg_upgrade` to the PostgreSQL whose programs are in `new_bin`
    /// (with indexnow installed for it), as a DBA upgrades: stopped, a new data directory made by
    /// that version's `initdb` with the same arguments (and, as the old cluster's, no data
    /// checksums), `pg_upgrade` (copying the files) from the old one, and started with `conf`
    /// (the old `postgresql.conf` is not carried over: its lines are written again). Returns
    /// the new cluster (the old data directory stays, as pg_upgrade leaves it) and what
    /// pg_upgrade printed.
    pub fn upgraded_to(self, new_bin: &str, conf: &[String]) -> (Cluster, String) {
        self.stop();
        let port = next_port();
        let dir = cluster_dir(port);
        let data = dir.join("data");
        let new_major = run(
            "postgres --version",
            Command::new(format!("{new_bin}/postgres")).arg("--version"),
        );
        let mut initdb = as_postgres(&format!("{new_bin}/initdb"));
        initdb
            .args(["-D", data.to_str().unwrap()])
            .args(INITDB_ARGS);
        if major_of(&new_major) >= 18 {
            // (18 makes data checksums by default, and pg_upgrade needs both sides alike)
            initdb.arg("--no-data-checksums");
        }
        run("initdb of the new version", &mut initdb);
        let mut lines = server_conf(port, &dir);
        lines.push("shared_preload_libraries = 'indexnow'".to_string());
        lines.extend(conf.iter().cloned());
        append_conf(&data, &lines);
        let out = as_postgres(&format!("{new_bin}/pg_upgrade"))
            .current_dir(&dir)
            .args(["-b", &self.bin, "-B", new_bin])
            .args(["-d", self.data().to_str().unwrap()])
            .args(["-D", data.to_str().unwrap()])
            .args([
                "-p",
                &next_port().to_string(),
                "-P",
                &next_port().to_string(),
            ])
            .args(["-s", dir.to_str().unwrap(), "-U", "postgres"])
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout).to_string();
        if !out.status.success() {
            // (what went wrong is in its logs, which go with the folder)
            let logs = run(
                "pg_upgrade's logs",
                Command::new("sh").arg("-c").arg(format!(
                    "tail -n 20 {}/pg_upgrade_output.d/*/log/*.log",
                    data.display()
                )),
            );
            panic!("pg_upgrade failed: {said}\n{logs}");
        }
        let upgraded = Cluster {
            dir,
            port,
            bin: new_bin.to_string(),
        };
        upgraded.pg_ctl(&["start", "-w", "-t", "60"]);
        (upgraded, said)
    }

    /// Runs a PostgreSQL client program (psql, pg_dump, pgbench) against this cluster. One that
    /// runs ten minutes is ended and fails the test (a restore's jobs waiting on each other
    /// outside the server's deadlock detection would otherwise hold the suite until CI's limit).
    pub fn client_program(&self, program: &str, args: &[&str]) -> String {
        run(
            program,
            Command::new("timeout")
                .args(["--kill-after=10", "600"])
                .arg(format!("{}/{program}", self.bin))
                .args([
                    "-h",
                    &self.socket_dir(),
                    "-p",
                    &self.port.to_string(),
                    "-U",
                    "postgres",
                ])
                .args(args),
        )
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // A test that failed shows the end of its server's log (a worker's LOG and WARNING lines
        // say what it was doing): the folder goes with the cluster.
        if std::thread::panicking() {
            let log = self.log();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(60)..];
            eprintln!(
                "--- the last {} lines of the server log ({}):\n{}\n---",
                tail.len(),
                self.dir.display(),
                tail.join("\n")
            );
        }
        let _ = as_postgres(&format!("{}/pg_ctl", self.bin))
            .args([
                "-D",
                self.data().to_str().unwrap(),
                "stop",
                "-m",
                "immediate",
                "-w",
            ])
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The release before the one this checkout makes: what the upgrade test and the restore test
/// start from on every version.
pub const PREVIOUS_RELEASE: &str = "0.8.1";

/// The library (`indexnow.so`) of an earlier release for the PostgreSQL the tests run against,
/// built from its source archive (`releases/indexnow-<version>.tar.gz`, kept in the repository so
/// that the test needs no git history or tags) in `target/v<version>-pg<major>/` the first time
/// it is asked for, the library kept in the temporary folder (`indexnow-e2e-releases/`), where the
/// server's user can read it. (0.1.0 builds for PostgreSQL 15 only.)
/// [`Cluster::use_library`] makes a cluster load it instead of the installed one. The release's
/// install script (`sql/indexnow--<version>.sql`) is put in the server's extension folder when it
/// is not there: scripts/install.sh installs only the install scripts today's library can run
/// (`shipped_scripts` in scripts/versions.sh), and an older release's may name a C function
/// only its own library has.
pub fn release_library(version: &str) -> PathBuf {
    let library = release_library_built(version);
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let script = format!("indexnow--{version}.sql");
    let installed = extension_dir().join(&script);
    static COPYING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = COPYING.lock().unwrap_or_else(|e| e.into_inner());
    if !installed.exists() {
        let copy = installed.with_extension(format!("sql.{}", std::process::id()));
        std::fs::copy(root.join("sql").join(&script), &copy).unwrap();
        std::fs::rename(&copy, &installed).unwrap();
    }
    library
}

/// The extension folder of the PostgreSQL the tests run against.
pub fn extension_dir() -> PathBuf {
    let out = Command::new(format!("{}/pg_config", pg_bin()))
        .arg("--sharedir")
        .output()
        .expect("pg_config runs");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join("extension")
}

fn release_library_built(version: &str) -> PathBuf {
    build_release_library(version, pg_major())
}

/// The library of release `version` for PostgreSQL `major`, built the first time it is asked for
/// (see [`release_library`]). `scripts/test.sh` builds the ones the suite uses ahead of the tests
/// (`cargo run --bin old-releases`), beside the other builds, so that no test waits for one.
pub fn build_release_library(version: &str, major: u32) -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let root = root.canonicalize().unwrap();
    let base = root.join(format!("target/v{version}-pg{major}"));
    // (the library where the postgres user can read it: the checkout may be closed to others)
    let lib_dir = std::env::temp_dir().join(format!("indexnow-e2e-releases/v{version}-pg{major}"));
    let library = lib_dir.join("indexnow.so");
    if library.exists() {
        return library;
    }
    let archive = root.join(format!("releases/indexnow-{version}.tar.gz"));
    assert!(
        archive.exists(),
        "no source archive of release {version}: {} (docs/releases.md, step 9)",
        archive.display()
    );
    let source = base.join("src");
    let _ = std::fs::remove_dir_all(&source);
    std::fs::create_dir_all(&source).unwrap();
    run(
        &format!("unpacking release {version}"),
        Command::new("tar")
            .arg("-xzf")
            .arg(&archive)
            .arg("-C")
            .arg(&source),
    );
    // One target folder for every release and version: what they have in common (the
    // dependencies, and for two releases on one version pgrx's bindings too) is built once. The
    // build and the copy of its library hold a lock, as another test may build another release
    // into the same folder at the same time.
    let shared = root.join("target/releases");
    std::fs::create_dir_all(&lib_dir).unwrap();
    run(
        &format!("cargo build of release {version}"),
        Command::new("flock")
            .arg(root.join("target/releases.lock"))
            .args(["sh", "-c", "cd \"$1\" && cargo build --lib --offline --quiet --no-default-features --features \"$2\" && cp \"$3\" \"$4.$$\" && mv \"$4.$$\" \"$4\""])
            .arg("build")
            .arg(&source)
            .arg(format!("pg{major}"))
            .arg(shared.join("debug/libindexnow.so"))
            .arg(&library)
            .env("CARGO_TARGET_DIR", &shared),
    );
    library
}

/// Every URL the receiver was sent, sorted (a URL sent twice is there twice).
pub fn sent_urls(receiver: &indexnow_receiver::Receiver) -> Vec<String> {
    let mut urls: Vec<String> = receiver
        .received()
        .iter()
        .filter_map(|r| r.request.as_ref())
        .flat_map(|r| r.url_list.clone())
        .collect();
    urls.sort();
    urls
}

/// The one bigint a query returns.
pub fn count(db: &mut Client, sql: &str) -> i64 {
    db.query_one(sql, &[]).unwrap().get(0)
}

/// What is pending (`url reason`, by URL), after deriving what the saves recorded (as every
/// reader of the queue does: saves record, and a worker may not have derived them yet).
pub fn queued(db: &mut Client) -> Vec<String> {
    db.batch_execute("SELECT indexnow_derive()").unwrap();
    db.query(
        "SELECT url || ' ' || reason FROM indexnow_urls WHERE request_seq > settled_seq ORDER BY url",
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// `indexnow_status().worker`: what the database's workers are doing, or why none runs.
pub fn worker_state(db: &mut Client) -> String {
    db.query_one("SELECT worker FROM indexnow_status()", &[])
        .unwrap()
        .get(0)
}

/// Waits until no queued URL has a request pending (every push is recorded) and no change set waits
/// to be derived; panics naming `what` after `limit`.
pub fn wait_until_settled(db: &mut Client, what: &str, limit: std::time::Duration) {
    // (saves are recorded, and in the queue once a worker has derived them: none may wait)
    wait_until(what, limit, || {
        count(
            db,
            "SELECT (SELECT count(*) FROM indexnow_urls WHERE request_seq > settled_seq) \
                  + (SELECT count(*) FROM indexnow_changes)",
        ) == 0
    });
}

/// Polls `ready` every 50 ms until it holds; panics naming `what` after `limit`.
pub fn wait_until(what: &str, limit: std::time::Duration, mut ready: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !ready() {
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting until {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// `postgresql.conf` lines for a cluster that sends to `endpoint` at once: no debounce, no gap,
/// a short naptime and time limit; `extra` lines override.
pub fn sending_conf(endpoint: &str, extra: &[&str]) -> Vec<String> {
    let mut conf = vec![
        format!("indexnow.endpoint = '{endpoint}'"),
        "indexnow.debounce = 0".to_string(),
        "indexnow.min_gap = 0".to_string(),
        "indexnow.naptime = '200ms'".to_string(),
        "indexnow.http_timeout = '2s'".to_string(),
    ];
    conf.extend(extra.iter().map(|s| s.to_string()));
    conf
}

/// `kill -9 pid`: a process that dies without cleaning up (the postmaster restarts every process).
pub fn sigkill(pid: i32) {
    let status = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -9 {pid}");
}
