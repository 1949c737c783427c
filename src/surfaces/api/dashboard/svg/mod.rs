//! Charts drawn as SVG on the server: line charts (`line_chart.rs`), a sweep's members
//! (`member_chart.rs`), a pbt sweep's lineage (`lineage.rs`), bar charts (`bars.rs`) and the stage timeline (`timeline.rs`), with the
//! box and scale they share.

mod bars;
mod line_chart;
mod lineage;
mod member_chart;
mod timeline;

pub use bars::bar_chart;
pub use line_chart::{LineChart, Series};
pub use lineage::lineage;
pub use member_chart::{MEMBER_COLOURS, MemberChart, MemberLine};
pub use timeline::{StageSpan, timeline};

const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 220.0;
const PAD_LEFT: f64 = 48.0;
const PAD_RIGHT: f64 = 12.0;
const PAD_Y: f64 = 16.0;

/// From data to the plot's box: (x0, x1) to (left, right), (y0, y1) to (bottom, top).
struct Scale {
    x0: f64,
    x1: f64,
    y0: f64,
    y1: f64,
    right: f64,
    bottom: f64,
}

impl Scale {
    /// The line charts' box: the whole width, less the axis labels.
    fn new(x0: f64, x1: f64, y0: f64, y1: f64) -> Scale {
        Scale { x0, x1, y0, y1, right: WIDTH - PAD_RIGHT, bottom: HEIGHT - PAD_Y }
    }
    fn x(&self, x: f64) -> f64 {
        let span = if self.x1 > self.x0 { self.x1 - self.x0 } else { 1.0 };
        PAD_LEFT + (x - self.x0) / span * (self.right - PAD_LEFT)
    }
    fn y(&self, y: f64) -> f64 {
        let span = if self.y1 > self.y0 { self.y1 - self.y0 } else { 1.0 };
        self.bottom - (y - self.y0) / span * (self.bottom - PAD_Y)
    }
}

const COLOURS: [&str; 6] = ["#2b6cb0", "#c05621", "#2f855a", "#6b46c1", "#b83280", "#4a5568"];

fn fmt_num(v: f64) -> String {
    if v.abs() >= 100.0 || v == v.trunc() { format!("{v:.0}") } else { format!("{v:.3}") }
}
