//! The round-trip bench's chart: two panels of grouped bars (round trip p50 per placement,
//! pipelined throughput per placement), one bar per subject, as hand-written SVG.

use std::fmt::Write;

/// One panel: a title, a unit, and per group (placement) one value per series (subject).
pub struct Panel<'a> {
    pub title: String,
    pub unit: &'a str,
    pub groups: Vec<(&'a str, Vec<Option<f64>>)>,
}

const COLORS: [&str; 6] = [
    "#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
];
const PANEL_W: f64 = 460.0;
const PANEL_H: f64 = 300.0;
const TOP: f64 = 60.0;

/// The SVG text: panels side by side, a legend of `series` below, `caption` at the top.
pub fn render(caption: &str, series: &[&str], panels: &[Panel]) -> String {
    let width = PANEL_W * panels.len() as f64 + 40.0;
    let height = TOP + PANEL_H + 40.0 + 20.0 * series.len() as f64;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        svg,
        r#"<rect width="100%" height="100%" fill="white"/><text x="20" y="24" font-size="14" font-weight="bold">{}</text>"#,
        escape(caption)
    );
    for (i, panel) in panels.iter().enumerate() {
        draw_panel(&mut svg, 20.0 + PANEL_W * i as f64, panel);
    }
    for (i, name) in series.iter().enumerate() {
        let y = TOP + PANEL_H + 30.0 + 20.0 * i as f64;
        let _ = writeln!(
            svg,
            r#"<rect x="40" y="{}" width="14" height="14" fill="{}"/><text x="60" y="{}">{}</text>"#,
            y - 11.0,
            COLORS[i % COLORS.len()],
            y,
            escape(name)
        );
    }
    svg.push_str("</svg>\n");
    svg
}

fn draw_panel(svg: &mut String, x0: f64, panel: &Panel) {
    let (plot_x, plot_w) = (x0 + 50.0, PANEL_W - 80.0);
    let (plot_top, plot_h) = (TOP + 20.0, PANEL_H - 60.0);
    let max = panel
        .groups
        .iter()
        .flat_map(|(_, vs)| vs.iter().flatten())
        .fold(0.0f64, |a, &b| a.max(b))
        .max(1e-9);
    let _ = writeln!(
        svg,
        r#"<text x="{x0}" y="{}" font-weight="bold">{} ({})</text>"#,
        TOP + 5.0,
        escape(&panel.title),
        escape(panel.unit)
    );
    let base = plot_top + plot_h;
    let _ = writeln!(
        svg,
        r##"<line x1="{plot_x}" y1="{base}" x2="{}" y2="{base}" stroke="#333"/><line x1="{plot_x}" y1="{plot_top}" x2="{plot_x}" y2="{base}" stroke="#333"/>"##,
        plot_x + plot_w
    );
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="end">{}</text><text x="{}" y="{base}" text-anchor="end">0</text>"#,
        plot_x - 4.0,
        plot_top + 4.0,
        number(max),
        plot_x - 4.0
    );
    let group_w = plot_w / panel.groups.len().max(1) as f64;
    for (g, (label, values)) in panel.groups.iter().enumerate() {
        let gx = plot_x + group_w * g as f64;
        let bar_w = (group_w - 16.0) / values.len().max(1) as f64;
        for (s, value) in values.iter().enumerate() {
            let Some(v) = value else { continue };
            let h = plot_h * v / max;
            let x = gx + 8.0 + bar_w * s as f64;
            let _ = writeln!(
                svg,
                r#"<rect x="{x:.1}" y="{:.1}" width="{:.1}" height="{h:.1}" fill="{}"/><text x="{:.1}" y="{:.1}" font-size="9" text-anchor="middle">{}</text>"#,
                base - h,
                bar_w - 2.0,
                COLORS[s % COLORS.len()],
                x + (bar_w - 2.0) / 2.0,
                base - h - 3.0,
                number(*v)
            );
        }
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            gx + group_w / 2.0,
            base + 16.0,
            escape(label)
        );
    }
}

fn number(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
