-- indexnow_status(): one row per host that has a key, a pending URL or a failed one.
-- $1 now; $2, $3, $4 the due rule's debounce, min_gap and repeat_after (seconds); $5 whether
-- indexnow.enabled is on for the database's workers; $6 whether they send in a dry run.
-- The {names} are the rules written once in Rust (src/status.rs fills them in):
--   {pending} {due} {due_at} {failed}  the queue's rules (src/queue/due.rs)
--   {claimable} {undecided}            what a sender may take now (src/send/sql.rs)
--   {paused}                           the pause that applies to the host (src/send/sql.rs)
--   {held}                             why nothing goes out for the host (src/hosts.rs)
WITH pending AS (
    SELECT host, count(*) AS pending,
           count(*) FILTER (WHERE {due} AND {claimable}) AS due_now,
           min({due_at}) FILTER (WHERE {undecided}) AS first_due_at
      FROM @extschema@.indexnow_urls WHERE {pending} GROUP BY host),
failed AS (
    SELECT host, count(*) AS failed FROM @extschema@.indexnow_urls WHERE {failed} GROUP BY host),
names AS (
    SELECT host FROM @extschema@.indexnow_hosts UNION SELECT host FROM pending UNION SELECT host FROM failed),
hosts AS (
    SELECT n.host, h.key IS NOT NULL AS has_key, coalesce(h.enabled, false) AS enabled,
           coalesce(p.pending, 0) AS pending, coalesce(p.due_now, 0) AS due_now,
           coalesce(f.failed, 0) AS failed, p.first_due_at,
           {paused} AS backoff_until,
           {held} AS held,
           h.key_state, h.key_state_at, h.key_state_note
      FROM names n
      LEFT JOIN @extschema@.indexnow_hosts h USING (host)
      LEFT JOIN pending p USING (host)
      LEFT JOIN failed f USING (host))
-- next_due_at: when a URL can really go out (its due time, or the end of a pause if later; none
-- while the host is held). oldest_due_age: how long the URL due the longest has waited.
SELECT s.host, s.has_key, s.enabled, s.pending, s.due_now, s.failed,
       CASE WHEN s.held IS NULL AND s.first_due_at IS NOT NULL
            THEN greatest(s.first_due_at, s.backoff_until) END AS next_due_at,
       lp.pushed_at AS last_push_at, lp.status AS last_status, s.backoff_until, s.held,
       CASE WHEN s.first_due_at <= $1 THEN $1 - s.first_due_at END AS oldest_due_age,
       s.key_state, s.key_state_at, s.key_state_note
  FROM hosts s
  LEFT JOIN LATERAL (SELECT x.pushed_at, x.status FROM @extschema@.indexnow_pushes x
                      WHERE x.host = s.host ORDER BY x.pushed_at DESC LIMIT 1) lp ON true
 ORDER BY s.host
