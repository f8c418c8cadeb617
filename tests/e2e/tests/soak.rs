//! The short soak (about a minute, a few faults): see `indexnow_e2e::soak` and
//! docs/reliability.md. The long one is `scripts/soak.sh`.

#[test]
fn a_minute_of_load_and_faults_loses_nothing_leaks_nothing_and_resends_nothing() {
    let seed = std::env::var("SOAK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let report = indexnow_e2e::soak::run(&indexnow_e2e::soak::Plan::short(seed));
    report.print();
    let injected = |kind: &str| {
        report
            .faults
            .iter()
            .find(|(k, _)| k == kind)
            .map_or(0, |(_, n)| *n)
    };
    assert_eq!(injected("worker SIGKILLed"), 2);
    assert_eq!(injected("server restarted -m immediate"), 1);
    assert_eq!(injected("launcher terminated"), 1);
    assert!(injected("receiver throttled") + injected("receiver unavailable") > 0);
    assert!(report.edits > 1_000, "{} edits", report.edits);
    assert!(report.urls_sent > 1_000, "{} URLs sent", report.urls_sent);
    assert!(report.violations.is_empty(), "{:#?}", report.violations);
    assert_eq!(report.checker_catches.len(), 4);
    for (tamper, caught) in &report.checker_catches {
        assert!(caught, "the checker missed: {tamper}");
    }
}
