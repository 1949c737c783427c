//! A pbt sweep's lineage: a lane per member along the metric's steps, and an arrow for each
//! exploit, from the donor's lane at the checkpoint's step to the loser's lane at the boundary
//! where it was compared (its tooltip says what changed).

use std::fmt::Write;

use super::MEMBER_COLOURS;
use crate::api::dashboard::html::esc;
use crate::model::sweep::pbt::ExploitRecord;

const WIDTH: f64 = 780.0;
const LABEL_WIDTH: f64 = 80.0;
const RIGHT_PAD: f64 = 20.0;
const LANE: f64 = 22.0;
const TOP: f64 = 12.0;

/// The SVG over `members` (their k, in lane order), or None without an exploit.
pub fn lineage(members: &[u64], exploits: &[ExploitRecord]) -> Option<String> {
    if exploits.is_empty() || members.is_empty() {
        return None;
    }
    let last = exploits.iter().map(|e| e.boundary.max(e.step)).max().unwrap_or(1).max(1) as f64;
    let span = WIDTH - LABEL_WIDTH - RIGHT_PAD;
    let x = |step: i64| LABEL_WIDTH + step.max(0) as f64 / last * span;
    let lane_of = |k: u64| members.iter().position(|m| *m == k);
    let y = |lane: usize| TOP + lane as f64 * LANE + LANE / 2.0;
    let height = TOP * 2.0 + members.len() as f64 * LANE + 14.0;
    let mut svg = format!(
        "<svg class=\"lineage\" viewBox=\"0 0 {WIDTH} {height}\" width=\"{WIDTH}\" height=\"{height}\" role=\"img\" \
         aria-label=\"which member continued from which member's checkpoint, by step\">\
         <defs><marker id=\"lineage-arrow\" viewBox=\"0 0 8 8\" refX=\"7\" refY=\"4\" markerWidth=\"7\" markerHeight=\"7\" \
         orient=\"auto\"><path d=\"M0,0 L8,4 L0,8 z\" fill=\"#4a5568\"/></marker></defs>"
    );
    for (lane, k) in members.iter().enumerate() {
        let colour = MEMBER_COLOURS[lane % MEMBER_COLOURS.len()];
        let _ = write!(
            svg,
            "<g class=\"lane\" data-k=\"{k}\"><text class=\"tick\" x=\"{lx}\" y=\"{ty:.1}\" text-anchor=\"end\">member {k}</text>\
             <line x1=\"{LABEL_WIDTH}\" y1=\"{ly:.1}\" x2=\"{rx:.1}\" y2=\"{ly:.1}\" stroke=\"{colour}\" stroke-width=\"2\" opacity=\"0.5\"/></g>",
            lx = LABEL_WIDTH - 6.0,
            ty = y(lane) + 4.0,
            ly = y(lane),
            rx = WIDTH - RIGHT_PAD,
        );
    }
    for e in exploits {
        let (Some(from), Some(to)) = (lane_of(e.donor), lane_of(e.k)) else { continue };
        let state = if e.applied_at.is_some() { "applied" } else { "stopping" };
        let _ = write!(
            svg,
            "<g class=\"exploit\" data-k=\"{k}\" data-donor=\"{d}\" data-interval=\"{n}\" data-state=\"{state}\"><title>{title}</title>\
             <circle cx=\"{x1:.1}\" cy=\"{y1:.1}\" r=\"3\" fill=\"#4a5568\"/>\
             <line x1=\"{x1:.1}\" y1=\"{y1:.1}\" x2=\"{x2:.1}\" y2=\"{y2:.1}\" stroke=\"#4a5568\" stroke-width=\"1.5\" marker-end=\"url(#lineage-arrow)\"/></g>",
            k = e.k,
            d = e.donor,
            n = e.interval,
            title = esc(&format!("step {}: {}", e.boundary, e.describe())),
            x1 = x(e.step),
            y1 = y(from),
            x2 = x(e.boundary),
            y2 = y(to),
        );
    }
    let _ = write!(
        svg,
        "<text class=\"tick\" x=\"{LABEL_WIDTH}\" y=\"{b:.1}\">step 0</text><text class=\"tick\" x=\"{r:.1}\" y=\"{b:.1}\" text-anchor=\"end\">step {last}</text></svg>",
        b = height - 4.0,
        r = WIDTH - RIGHT_PAD,
    );
    Some(svg)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;
    use uuid::Uuid;

    use super::*;

    fn exploit(k: u64, donor: u64, step: i64, boundary: i64, applied: bool) -> ExploitRecord {
        ExploitRecord {
            sweep: Uuid::nil(),
            k,
            run: Uuid::nil(),
            interval: boundary / 10,
            boundary,
            donor,
            donor_run: Uuid::nil(),
            step,
            path: format!("ckpt/{donor}/{step}"),
            before: BTreeMap::from([("lr".to_string(), json!(1e-5))]),
            values: BTreeMap::from([("lr".to_string(), json!(1.2e-5))]),
            score: Some(1.0),
            donor_score: Some(2.0),
            attempt: 1,
            decided_at: 0,
            applied_at: applied.then_some(1),
        }
    }

    #[test]
    fn each_exploit_is_an_arrow_from_its_donor_to_its_loser() {
        assert_eq!(lineage(&[0, 1], &[]), None);
        let svg = lineage(&[0, 1, 2], &[exploit(2, 0, 10, 10, true), exploit(1, 2, 15, 20, false)]).unwrap();
        assert_eq!(svg.matches("class=\"lane\"").count(), 3);
        assert_eq!(svg.matches("class=\"exploit\"").count(), 2);
        assert!(
            svg.contains("data-k=\"2\" data-donor=\"0\" data-interval=\"1\" data-state=\"applied\""),
            "{svg}"
        );
        assert!(svg.contains("data-state=\"stopping\""), "{svg}");
        assert!(
            svg.contains(
                "step 10: member 2 continues from member 0&#39;s checkpoint at step 10: lr 1e-05 → 1.2e-05"
            ),
            "{svg}"
        );
        // A donor no longer among the members draws no arrow, and nothing panics.
        let svg = lineage(&[0], &[exploit(0, 7, 10, 10, true)]).unwrap();
        assert_eq!(svg.matches("class=\"exploit\"").count(), 0);
    }
}
