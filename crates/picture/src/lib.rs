//! A picture of what indexnow did for a site: URLs sent per period by the endpoint's answer
//! (accepted, refused, or no usable answer: a pause), the periods with a pause, and the backlog
//! (URLs waiting) at the end of each period, drawn into an SVG file with `plotters`.
//!
//! Read from `indexnow_pushes` (one row per request, its URL count and answer) and `indexnow_urls`
//! (the queue). The queue keeps each URL's last request only, so the backlog of a past period is
//! the URLs requested before its end and, as far as the queue still says, not pushed by then: a
//! URL requested again since counts from its last request.

use chrono::{DateTime, Utc};
use plotters::prelude::*;
use std::error::Error;

/// One period: its start, the URLs the requests made in it carried, by answer, whether sending
/// was paused in it, and the backlog at its end.
#[derive(Debug, Clone)]
pub struct Period {
    pub start: DateTime<Utc>,
    pub accepted: i64,
    pub refused: i64,
    pub unanswered: i64,
    pub paused: bool,
    pub backlog: i64,
}

/// The last `count` periods of `seconds` each, up to now, read from the extension's tables
/// (the client must be able to read them: the extension's owner, or a role granted SELECT).
pub fn read(
    client: &mut postgres::Client,
    seconds: i32,
    count: i32,
) -> Result<Vec<Period>, postgres::Error> {
    let rows = client.query(
        "WITH a AS (SELECT $1::int4 AS secs, $2::int4 AS count), \
         p AS ( \
           SELECT to_timestamp(floor(extract(epoch FROM now()) / a.secs) * a.secs) \
                  - make_interval(secs => a.secs * g) AS start \
             FROM a, generate_series(0, a.count - 1) g) \
         SELECT p.start, \
                coalesce(sum(r.url_count) FILTER (WHERE r.status BETWEEN 200 AND 299), 0)::int8, \
                coalesce(sum(r.url_count) FILTER (WHERE r.status IN (400, 403, 422)), 0)::int8, \
                coalesce(sum(r.url_count) FILTER (WHERE r.status NOT BETWEEN 200 AND 299 \
                                                    AND r.status NOT IN (400, 403, 422) \
                                                    AND r.note IS DISTINCT FROM 'dry_run'), 0)::int8, \
                coalesce(bool_or(r.status = 429 OR r.status >= 500 \
                                 OR (r.status = 0 AND r.note IS DISTINCT FROM 'dry_run')), false), \
                (SELECT count(*) FROM indexnow_urls u \
                  WHERE u.queued_at < p.start + make_interval(secs => $1) \
                    AND (u.request_seq > u.settled_seq \
                         OR u.last_pushed_at >= p.start + make_interval(secs => $1))) \
           FROM p LEFT JOIN indexnow_pushes r \
             ON r.pushed_at >= p.start AND r.pushed_at < p.start + make_interval(secs => $1) \
          GROUP BY p.start ORDER BY p.start",
        &[&seconds, &count],
    )?;
    Ok(rows
        .iter()
        .map(|r| Period {
            start: r.get(0),
            accepted: r.get(1),
            refused: r.get(2),
            unanswered: r.get(3),
            paused: r.get(4),
            backlog: r.get(5),
        })
        .collect())
}

/// Draws `periods` into the SVG file `path`: stacked bars of the URLs sent (accepted, refused,
/// no usable answer), a shade over each period with a pause, and the backlog as a line.
pub fn draw(periods: &[Period], path: &std::path::Path) -> Result<(), Box<dyn Error>> {
    let root = SVGBackend::new(path, (960, 420)).into_drawing_area();
    root.fill(&WHITE)?;
    let n = periods.len().max(1);
    let top = periods
        .iter()
        .map(|p| (p.accepted + p.refused + p.unanswered).max(p.backlog))
        .max()
        .unwrap_or(0)
        .max(1) as f64
        * 1.1;
    let label = |x: &f64| {
        periods
            .get(x.round() as usize)
            .map(|p| p.start.format("%m-%d %H:%M:%S").to_string())
            .unwrap_or_default()
    };
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "indexnow: URLs sent by answer, pauses, backlog",
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.5..(n as f64 - 0.5), 0.0..top)?;
    chart
        .configure_mesh()
        .x_labels(8.min(n))
        .x_label_formatter(&label)
        .y_desc("URLs")
        .draw()?;
    let bar = |i: usize, from: f64, to: f64| [(i as f64 - 0.4, from), (i as f64 + 0.4, to)];
    chart
        .draw_series(
            periods
                .iter()
                .enumerate()
                .filter(|(_, p)| p.paused)
                .map(|(i, _)| {
                    Rectangle::new(
                        [(i as f64 - 0.5, 0.0), (i as f64 + 0.5, top)],
                        RED.mix(0.12).filled(),
                    )
                }),
        )?
        .label("paused")
        .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], RED.mix(0.25).filled()));
    // (its name, its colour, and the span of a period's bar it fills)
    type Layer = (&'static str, RGBColor, fn(&Period) -> (i64, i64));
    let layers: [Layer; 3] = [
        ("accepted", GREEN, |p| (0, p.accepted)),
        ("refused (4xx)", RGBColor(230, 120, 0), |p| {
            (p.accepted, p.accepted + p.refused)
        }),
        ("no usable answer", RGBColor(120, 120, 120), |p| {
            let below = p.accepted + p.refused;
            (below, below + p.unanswered)
        }),
    ];
    for (name, color, span) in layers {
        chart
            .draw_series(periods.iter().enumerate().map(|(i, p)| {
                let (from, to) = span(p);
                Rectangle::new(bar(i, from as f64, to as f64), color.filled())
            }))?
            .label(name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    chart
        .draw_series(LineSeries::new(
            periods
                .iter()
                .enumerate()
                .map(|(i, p)| (i as f64, p.backlog as f64)),
            BLUE.stroke_width(2),
        ))?
        .label("backlog")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 12, y)], BLUE.stroke_width(2)));
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.9))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()?;
    root.present()?;
    Ok(())
}
