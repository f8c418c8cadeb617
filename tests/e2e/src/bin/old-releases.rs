//! Builds the libraries of earlier releases that the upgrade and restore tests load, before the
//! tests ask for them: `old-releases first:15 previous:15 previous:18` (a release, `first`
//! for 0.1.0 or `previous` for [`indexnow_e2e::PREVIOUS_RELEASE`], and a PostgreSQL major
//! version). A build takes a minute or two on a clean machine; `scripts/test.sh` runs this beside
//! the other builds so that it is not at the end of a version's tests.

fn main() {
    for wanted in std::env::args().skip(1) {
        let (release, major) = wanted
            .split_once(':')
            .unwrap_or_else(|| panic!("{wanted}: expected RELEASE:MAJOR (previous:18)"));
        let release = match release {
            "first" => "0.1.0",
            "previous" => indexnow_e2e::PREVIOUS_RELEASE,
            other => other,
        };
        let major: u32 = major
            .parse()
            .unwrap_or_else(|_| panic!("{wanted}: {major} is not a major version"));
        let library = indexnow_e2e::build_release_library(release, major);
        println!("{release} for PostgreSQL {major}: {}", library.display());
    }
}
