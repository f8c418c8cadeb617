//! The Debian package, installed as a user installs it: `scripts/test.sh` builds
//! `postgresql-15-indexnow` (scripts/package.sh), installs it with `dpkg -i` on Debian's own
//! PostgreSQL 15 and runs this file, naming the package in `INDEXNOW_PACKAGE`; then it removes the
//! package. A fresh cluster with the library preloaded creates the extension from the package's
//! files and sends a queued URL.

use indexnow_e2e::{count, sending_conf, sent_urls, wait_until, Cluster, Options};
use indexnow_receiver::Receiver;
use std::process::Command;
use std::time::Duration;

/// What `dpkg` says of the package `INDEXNOW_PACKAGE` names: its name and version as installed.
fn installed(field: &str) -> String {
    let package = std::env::var("INDEXNOW_PACKAGE")
        .expect("INDEXNOW_PACKAGE names the installed package (scripts/test.sh sets it)");
    let out = Command::new("dpkg-query")
        .args(["-W", &format!("-f=${{{field}}}"), &package])
        .output()
        .unwrap();
    assert!(out.status.success(), "{package} is not installed");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn the_installed_debian_package_creates_the_extension_and_sends() {
    assert_eq!(installed("db:Status-Status"), "installed");
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(installed("Version"), format!("{version}-1"));
    // The server's library and scripts are the package's own files.
    let owner = Command::new("dpkg")
        .args(["-S", "/usr/lib/postgresql/15/lib/indexnow.so"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&owner.stdout).starts_with(&installed("Package")),
        "the library is not the package's: {}",
        String::from_utf8_lossy(&owner.stdout)
    );
    let receiver = Receiver::start("127.0.0.1:0").unwrap();
    let cluster = Cluster::start(Options {
        preload: true,
        conf: sending_conf(&receiver.endpoint(), &[]),
    });
    let mut db = cluster.create_db_with_extension("site");
    assert_eq!(
        db.query_one(
            "SELECT extversion FROM pg_extension WHERE extname = 'indexnow'",
            &[]
        )
        .unwrap()
        .get::<_, String>(0),
        version
    );
    db.batch_execute(
        "SELECT indexnow_add_host('www.example.com', 'abcdefgh12'); \
         SELECT indexnow_queue('https://www.example.com/from-the-package')",
    )
    .unwrap();
    wait_until("the URL is sent", Duration::from_secs(30), || {
        sent_urls(&receiver) == ["https://www.example.com/from-the-package"]
    });
    assert_eq!(
        count(
            &mut db,
            "SELECT count(*) FROM indexnow_urls WHERE request_seq > settled_seq"
        ),
        0
    );
}
