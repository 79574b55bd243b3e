//! SVG line charts for the benchmarks' reports (plotters, SVG backend:
//! text stays SVG `<text>`, so no font files are needed).

use std::path::Path;

/// A line chart of `series` (x, y points), both axes logarithmic, as SVG
/// at `path`.
pub fn plot(path: &Path, title: &str, x_label: &str, y_label: &str, series: &[(String, Vec<(f64, f64)>)]) {
    use plotters::prelude::*;
    let points = || series.iter().flat_map(|(_, s)| s.iter().copied()).filter(|&(x, y)| x > 0.0 && y > 0.0);
    if points().next().is_none() {
        return;
    }
    let (x_max, y_min, y_max) =
        points().fold((1.0f64, f64::MAX, 0.0f64), |(a, b, c), (x, y)| (a.max(x), b.min(y), c.max(y)));
    let root = SVGBackend::new(path, (760, 440)).into_drawing_area();
    root.fill(&WHITE).unwrap();
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d((0.7..x_max * 1.5).log_scale(), (y_min / 1.5..y_max * 1.5).log_scale())
        .unwrap();
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| if *y >= 10.0 { format!("{y:.0}") } else { format!("{y:.2}") })
        .draw()
        .unwrap();
    for (i, (name, points)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let points: Vec<(f64, f64)> = points.iter().copied().filter(|&(x, y)| x > 0.0 && y > 0.0).collect();
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
            .unwrap()
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled()))).unwrap();
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .unwrap();
    root.present().unwrap();
}
