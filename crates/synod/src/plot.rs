//! Charts as self-contained SVG strings, drawn with plotters, for the pictures beside the bench
//! tables (docs/results/*.svg): grouped bars on a linear axis from 0.
//!
//! Nothing here panics on odd data: a value that is not finite is left out (a missing bar or
//! point), and a chart with nothing to draw is an SVG that says "no data".

use plotters::prelude::*;

/// The colours of the series, in order (matplotlib's "tab10", readable on white).
const COLOURS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

fn colour(i: usize) -> RGBColor {
    COLOURS[i % COLOURS.len()]
}

/// One panel of grouped bars: its caption, the categories along x, and the series (a name and
/// one value per category; a missing or non-finite value draws no bar).
pub struct BarPanel {
    pub caption: String,
    pub categories: Vec<String>,
    pub series: Vec<(String, Vec<f64>)>,
}

impl BarPanel {
    fn has_data(&self) -> bool {
        !self.categories.is_empty()
            && self
                .series
                .iter()
                .any(|(_, vs)| vs.iter().take(self.categories.len()).any(|v| v.is_finite()))
    }

    /// The top of the y axis: the largest value plus room, never 0.
    fn y_max(&self) -> f64 {
        let max = self
            .series
            .iter()
            .flat_map(|(_, vs)| vs.iter().take(self.categories.len()))
            .copied()
            .filter(|v| v.is_finite())
            .fold(0.0, f64::max);
        if max > 0.0 {
            max * 1.1
        } else {
            1.0
        }
    }
}

/// Grouped bar charts side by side, each with its own linear y axis from 0 (so that each panel
/// uses its height), under one title and one legend (the series of all panels, by name).
pub fn bar_panels(
    title: &str,
    y_label: &str,
    panels: &[BarPanel],
    width: u32,
    height: u32,
) -> String {
    let drawn: Vec<&BarPanel> = panels.iter().filter(|p| p.has_data()).collect();
    if drawn.is_empty() {
        return no_data(title, width, height);
    }
    let mut names: Vec<&str> = Vec::new();
    for p in &drawn {
        for (n, _) in &p.series {
            if !names.contains(&n.as_str()) {
                names.push(n);
            }
        }
    }
    let mut svg = String::new();
    let result = (|| -> Result<(), Box<dyn std::error::Error>> {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let body = root.titled(title, ("sans-serif", 20))?;
        let (legend, body) = body.split_vertically(28);
        draw_legend(&legend, &names, width)?;
        let areas = body.split_evenly((1, drawn.len()));
        for (k, (p, area)) in drawn.iter().zip(areas.iter()).enumerate() {
            let n = p.categories.len();
            // x in thousandths of a category (plotters formats integer axes with key points).
            let centres: Vec<i32> = (0..n as i32).map(|i| i * 1000 + 500).collect();
            let mut b = ChartBuilder::on(area);
            b.margin(8).x_label_area_size(28).y_label_area_size(58);
            if !p.caption.is_empty() {
                b.caption(&p.caption, ("sans-serif", 17));
            }
            let mut chart = b.build_cartesian_2d(
                (0..n as i32 * 1000).with_key_points(centres),
                0f64..p.y_max(),
            )?;
            let cats = &p.categories;
            let x_fmt = |x: &i32| {
                cats.get((x / 1000).max(0) as usize)
                    .cloned()
                    .unwrap_or_default()
            };
            let y_fmt = |y: &f64| short(*y);
            let mut mesh = chart.configure_mesh();
            mesh.disable_x_mesh()
                .x_label_formatter(&x_fmt)
                .y_label_formatter(&y_fmt)
                .y_labels(8)
                .label_style(("sans-serif", 14))
                .axis_desc_style(("sans-serif", 15));
            if k == 0 {
                mesh.y_desc(y_label);
            }
            mesh.draw()?;
            let width = 800 / p.series.len().max(1) as i32;
            for (name, vs) in &p.series {
                let si = names.iter().position(|x| x == name).unwrap_or(0);
                let c = colour(si);
                let col = p.series.iter().position(|(x, _)| x == name).unwrap_or(0);
                chart.draw_series(vs.iter().take(n).enumerate().filter_map(|(ci, v)| {
                    let x0 = ci as i32 * 1000 + 100 + col as i32 * width;
                    v.is_finite().then(|| {
                        Rectangle::new([(x0, 0.0), (x0 + width * 9 / 10, v.max(0.0))], c.filled())
                    })
                }))?;
            }
        }
        root.present()?;
        Ok(())
    })();
    match result {
        Ok(()) => svg,
        Err(e) => no_data(&format!("{title}: {e}"), width, height),
    }
}

/// A legend in one row, centred: a square of each series' colour and its name.
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    names: &[&str],
    width: u32,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    const SIZE: f64 = 15.0;
    // plotters' own estimate of a text's width without a font (its "naive" layout).
    let text_w = |s: &str| (SIZE / 1.24 / 1.24 * 0.7 * s.chars().count() as f64) as i32;
    let total: i32 = names.iter().map(|n| 14 + 6 + text_w(n) + 24).sum::<i32>() - 24;
    let mut x = ((width as i32 - total) / 2).max(4);
    for (i, n) in names.iter().enumerate() {
        area.draw(&Rectangle::new([(x, 8), (x + 14, 22)], colour(i).filled()))?;
        area.draw(&Text::new(
            n.to_string(),
            (x + 20, 9),
            ("sans-serif", SIZE).into_font(),
        ))?;
        x += 14 + 6 + text_w(n) + 24;
    }
    Ok(())
}

fn no_data(title: &str, width: u32, height: u32) -> String {
    let esc = |s: &str| {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    };
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         font-family=\"sans-serif\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"30\" font-size=\"18\" text-anchor=\"middle\">{}</text>\n\
         <text x=\"{}\" y=\"{}\" font-size=\"16\" text-anchor=\"middle\" fill=\"#888\">no data</text>\n</svg>\n",
        width / 2,
        esc(title),
        width / 2,
        height / 2
    )
}

/// A number for an axis label: 1.5M, 20k, 12, 3.5, 0.25.
fn short(v: f64) -> String {
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    let a = v.abs();
    if a >= 1e6 {
        format!("{}M", trim(format!("{:.1}", v / 1e6)))
    } else if a >= 1e3 {
        format!("{}k", trim(format!("{:.1}", v / 1e3)))
    } else if a >= 10.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        trim(format!("{v:.1}"))
    } else {
        trim(format!("{v:.2}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> String {
        v.to_string()
    }

    /// One panel of grouped bars, as the bench documents draw each of theirs.
    fn grouped_bars(
        title: &str,
        y_label: &str,
        categories: &[String],
        series: &[(String, Vec<f64>)],
    ) -> String {
        let panel = BarPanel {
            caption: String::new(),
            categories: categories.to_vec(),
            series: series.to_vec(),
        };
        bar_panels(title, y_label, &[panel], 640, 440)
    }

    #[test]
    fn bars_name_every_series_and_category() {
        let cats = vec![s("1 client"), s("32 clients"), s("256 clients")];
        let series = vec![
            (s("synod (zab)"), vec![22592.0, 166334.0, 160430.0]),
            (s("zookeeper"), vec![6380.0, 60132.0, 86709.0]),
            (s("etcd"), vec![5411.0, 18200.0, 15182.0]),
        ];
        let svg = grouped_bars("Throughput", "ops/s", &cats, &series);
        assert!(svg.starts_with("<svg"), "{svg}");
        for name in cats.iter().chain(series.iter().map(|(n, _)| n)) {
            assert!(svg.contains(name.as_str()), "{name} missing:\n{svg}");
        }
        assert!(!svg.contains("no data"));
        // Linear from 0: the axis is labelled with 0 and thousands, not powers of ten (plotters
        // writes a text element's content on a line of its own).
        assert!(svg.contains("\n0\n") && svg.contains("k\n"), "{svg}");
    }

    #[test]
    fn panels_name_every_series_category_and_caption() {
        let panel = |c: &str| BarPanel {
            caption: s(c),
            categories: vec![s("put"), s("range")],
            series: vec![
                (s("synod"), vec![2.0, 3.0]),
                (s("etcd"), vec![1.0, f64::NAN]),
            ],
        };
        let svg = bar_panels(
            "t",
            "ops/s",
            &[panel("32 clients"), panel("256 clients")],
            900,
            400,
        );
        for w in ["32 clients", "256 clients", "put", "range", "synod", "etcd"] {
            assert!(svg.contains(w), "{w} missing:\n{svg}");
        }
    }

    #[test]
    fn empty_or_nan_data_says_no_data_and_does_not_panic() {
        let nan = vec![(s("a"), vec![f64::NAN, f64::INFINITY])];
        for svg in [
            grouped_bars("empty", "y", &[], &[]),
            grouped_bars("no series", "y", &[s("x")], &[]),
            grouped_bars("nan", "y", &[s("x"), s("y")], &nan),
            bar_panels("no panels", "y", &[], 800, 400),
        ] {
            assert!(svg.starts_with("<svg") && svg.contains("no data"), "{svg}");
        }
        // Some NaN among real values: the rest is drawn.
        let some = vec![(s("a"), vec![f64::NAN, 3.0, -1.0])];
        let svg = grouped_bars("some", "y", &[s("x"), s("y"), s("z")], &some);
        assert!(!svg.contains("no data") && svg.contains("\ny\n"), "{svg}");
    }

    #[test]
    fn axis_numbers_are_short() {
        assert_eq!(short(0.0), "0");
        assert_eq!(short(20000.0), "20k");
        assert_eq!(short(162500.0), "162.5k");
        assert_eq!(short(1_500_000.0), "1.5M");
        assert_eq!(short(12.0), "12");
        assert_eq!(short(3.5), "3.5");
        assert_eq!(short(0.25), "0.25");
    }
}
