//! `soak`: the long soak (see `indexnow_e2e::soak`). Settings from the environment:
//! `SOAK_SECONDS` (default 1800), `SOAK_SEED` (default 1). Prints its figures; exits 1 when it
//! found a violation.

fn main() {
    let setting = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .map(|v| {
                v.parse()
                    .unwrap_or_else(|_| panic!("{name}={v}: not a number"))
            })
            .unwrap_or(default)
    };
    let seconds = setting("SOAK_SECONDS", 1800);
    let seed = setting("SOAK_SEED", 1);
    let plan = if seconds <= 60 {
        indexnow_e2e::soak::Plan::short(seed)
    } else {
        indexnow_e2e::soak::Plan::long(seconds, seed)
    };
    println!("soak: {seconds} s, seed {seed}: {plan:?}");
    let report = indexnow_e2e::soak::run(&plan);
    report.print();
    if !report.violations.is_empty() {
        std::process::exit(1);
    }
}
