//! The load chart of the outage-then-recovery model, as SVG.

use std::fmt::Write as _;
use std::time::Duration;

use crate::sim::Summary;

/// A line chart of calls per second, one line per policy.
pub(crate) fn svg(rows: &[Summary], title: &str, outage: (Duration, Duration)) -> String {
    let (width, height, pad) = (960.0, 520.0, 60.0);
    let seconds = rows.iter().map(|r| r.load.len()).max().unwrap_or(1).max(2) as f64;
    let peak = rows.iter().map(|r| r.peak).max().unwrap_or(1).max(1) as f64;
    let x = |s: f64| pad + s / (seconds - 1.0) * (width - 2.0 * pad);
    let y = |c: f64| height - pad - c / peak * (height - 2.0 * pad);
    let colours = [
        "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
        "#bcbd22", "#17becf", "#aec7e8", "#ff9896",
    ];
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    let _ = writeln!(out, "<text x=\"{pad}\" y=\"24\" font-size=\"15\">{title}</text>");
    let (x0, x1) = (x(outage.0.as_secs_f64()), x(outage.1.as_secs_f64()));
    let _ = writeln!(
        out,
        "<rect x=\"{x0:.1}\" y=\"{pad}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"#f4dede\"/>",
        x1 - x0,
        height - 2.0 * pad
    );
    for tick in 0..=5 {
        let c = peak * f64::from(tick) / 5.0;
        let _ = writeln!(
            out,
            "<line x1=\"{pad}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#ddd\"/><text x=\"8\" y=\"{:.1}\">{c:.0}</text>",
            width - pad,
            y(c),
            y(c),
            y(c) + 4.0
        );
    }
    for s in (0..seconds as usize).step_by(10) {
        let _ = writeln!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{s}s</text>",
            x(s as f64),
            height - pad + 18.0
        );
    }
    for (i, r) in rows.iter().enumerate() {
        // The crate's default stands out: black, solid and thick.
        let default = r.name == "new default";
        let colour = if default { "#000000" } else { colours[i % colours.len()] };
        let stroke = if default { 3.0 } else { 1.5 };
        let points: Vec<String> = r
            .load
            .iter()
            .enumerate()
            .map(|(s, c)| format!("{:.1},{:.1}", x(s as f64), y(f64::from(*c))))
            .collect();
        let budgeted = default || r.name.contains("budget");
        let dash = if budgeted { "" } else { " stroke-dasharray=\"5,3\"" };
        let _ = writeln!(
            out,
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"{stroke}\"{dash} points=\"{}\"/>",
            points.join(" ")
        );
        let ly = pad + 16.0 * i as f64;
        let _ = writeln!(
            out,
            "<line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{ly:.1}\" y2=\"{ly:.1}\" stroke=\"{colour}\" stroke-width=\"{stroke}\"{dash}/><text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            width - pad - 250.0,
            width - pad - 225.0,
            width - pad - 220.0,
            ly + 4.0,
            r.name
        );
    }
    out.push_str("</svg>\n");
    out
}
