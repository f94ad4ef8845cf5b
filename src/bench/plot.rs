//! The scale soak's plot: memory and change → kernel latency over time, one line per run
//! (e.g. per iptables backend), drawn as SVG from the soak's samples (`soak.tsv`).

use std::path::Path;

use anyhow::{anyhow, Context};
use plotters::prelude::*;

/// One row of `soak.tsv` that the plot reads.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub t: f64,
    pub rss_mib: f64,
    pub p50: Option<f64>,
    pub p99: Option<f64>,
}

/// The rows of a `soak.tsv` (its header names the columns).
pub fn read_tsv(text: &str) -> anyhow::Result<Vec<Point>> {
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().ok_or_else(|| anyhow!("empty"))?.split('\t').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).ok_or_else(|| anyhow!("no column {name}"));
    let (t, rss, p50, p99) = (col("t_s")?, col("rss_mib")?, col("p50_s")?, col("p99_s")?);
    let mut out = Vec::new();
    for (n, line) in lines.enumerate() {
        let f: Vec<&str> = line.split('\t').collect();
        let num = |i: usize| -> anyhow::Result<f64> {
            f.get(i).ok_or_else(|| anyhow!("line {}: too few columns", n + 2))?.parse().with_context(|| format!("line {}", n + 2))
        };
        let opt = |i: usize| f.get(i).and_then(|v| v.parse().ok());
        out.push(Point { t: num(t)?, rss_mib: num(rss)?, p50: opt(p50), p99: opt(p99) });
    }
    Ok(out)
}

const COLOURS: [RGBColor; 4] = [RGBColor(0x1f, 0x77, 0xb4), RGBColor(0xd6, 0x27, 0x28), RGBColor(0x2c, 0xa0, 0x2c), RGBColor(0x94, 0x67, 0xbd)];

/// Draws `runs` (label, points) into an SVG at `path`: RSS above, latency (p99 solid, p50
/// thin) below.
pub fn soak_svg(runs: &[(String, Vec<Point>)], title: &str, path: &Path) -> anyhow::Result<()> {
    let draw = || -> Result<(), Box<dyn std::error::Error>> {
        let root = SVGBackend::new(path, (900, 700)).into_drawing_area();
        root.fill(&WHITE)?;
        let root = root.titled(title, ("sans-serif", 18))?;
        let (top, bottom) = root.split_vertically(330);
        let t_max = runs.iter().flat_map(|(_, p)| p.iter().map(|p| p.t)).fold(1.0, f64::max);
        let rss_max = runs.iter().flat_map(|(_, p)| p.iter().map(|p| p.rss_mib)).fold(1.0, f64::max) * 1.1;
        let lat_max = runs.iter().flat_map(|(_, p)| p.iter().filter_map(|p| p.p99)).fold(0.1, f64::max) * 1.1;

        let mut rss = ChartBuilder::on(&top).margin(10).x_label_area_size(35).y_label_area_size(55).build_cartesian_2d(0.0..t_max, 0.0..rss_max)?;
        rss.configure_mesh().x_desc("seconds").y_desc("RSS MiB").draw()?;
        for (i, (label, points)) in runs.iter().enumerate() {
            let c = COLOURS[i % COLOURS.len()];
            rss.draw_series(LineSeries::new(points.iter().map(|p| (p.t, p.rss_mib)), c.stroke_width(2)))?
                .label(label.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
        }
        rss.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw()?;

        let mut lat = ChartBuilder::on(&bottom).margin(10).x_label_area_size(35).y_label_area_size(55).build_cartesian_2d(0.0..t_max, 0.0..lat_max)?;
        lat.configure_mesh().x_desc("seconds").y_desc("change -> kernel, s (p99 thick, p50 thin)").draw()?;
        for (i, (label, points)) in runs.iter().enumerate() {
            let c = COLOURS[i % COLOURS.len()];
            lat.draw_series(LineSeries::new(points.iter().filter_map(|p| Some((p.t, p.p99?))), c.stroke_width(2)))?
                .label(format!("{label} p99"))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
            lat.draw_series(LineSeries::new(points.iter().filter_map(|p| Some((p.t, p.p50?))), c.stroke_width(1)))?;
        }
        lat.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw()?;
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| anyhow!("{}: cannot draw the plot: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_read_by_column_name_and_drawn() {
        let tsv = "t_s\tphase\trss_mib\tcpu_s\tchanges\tfull_syncs\tpartial_syncs\tp50_s\tp99_s\n\
            0.0\tchanges\t100.0\t1.00\t0\t1\t0\t-\t-\n\
            5.0\tchanges\t120.5\t2.00\t250\t1\t5\t0.200\t0.900\n";
        let points = read_tsv(tsv).unwrap();
        assert_eq!(points[1], Point { t: 5.0, rss_mib: 120.5, p50: Some(0.2), p99: Some(0.9) });
        assert_eq!(points[0].p99, None);
        let path = std::env::temp_dir().join(format!("svcproxy-plot-{}.svg", std::process::id()));
        soak_svg(&[("nft".into(), points)], "soak", &path).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        assert!(svg.starts_with("<svg") && svg.contains("RSS MiB") && svg.contains("nft p99"), "{svg:.300}");
        assert!(read_tsv("t_s\trss_mib\n").is_err(), "a file without the latency columns is refused");
    }
}
