//! Stroke templates of the ten digits: polylines in a unit box (x right,
//! y down), some digits with a few handwriting variants.

/// A polyline: points joined by straight segments.
pub(crate) type Stroke = Vec<(f32, f32)>;

/// Points of an elliptic arc, angles in degrees (0 = right, 90 = down).
fn arc(cx: f32, cy: f32, rx: f32, ry: f32, from: f32, to: f32) -> Stroke {
    let steps = (((to - from).abs() / 15.0).ceil() as usize).max(2);
    (0..=steps)
        .map(|i| {
            let t = (from + (to - from) * i as f32 / steps as f32).to_radians();
            (cx + rx * t.cos(), cy + ry * t.sin())
        })
        .collect()
}

fn line(points: &[(f32, f32)]) -> Stroke {
    points.to_vec()
}

/// Number of variants of `digit`.
pub(crate) fn variants(digit: u8) -> u32 {
    match digit {
        1 | 4 | 7 => 2,
        _ => 1,
    }
}

/// The strokes of `digit` (0..=9) in `variant` (0..variants(digit)).
pub(crate) fn strokes(digit: u8, variant: u32) -> Vec<Stroke> {
    match (digit, variant) {
        (0, _) => vec![arc(0.5, 0.5, 0.28, 0.42, -90.0, 275.0)],
        (1, 0) => vec![line(&[(0.52, 0.08), (0.48, 0.92)])],
        (1, _) => vec![
            line(&[(0.33, 0.27), (0.54, 0.08), (0.5, 0.92)]),
            line(&[(0.33, 0.92), (0.67, 0.92)]),
        ],
        (2, _) => {
            let mut s = arc(0.5, 0.32, 0.28, 0.24, -190.0, 30.0);
            s.extend([(0.22, 0.9), (0.82, 0.9)]);
            vec![s]
        }
        (3, _) => {
            let mut s = arc(0.48, 0.29, 0.25, 0.2, -160.0, 90.0);
            s.extend(arc(0.48, 0.71, 0.3, 0.21, -90.0, 160.0));
            vec![s]
        }
        (4, 0) => vec![
            line(&[(0.5, 0.08), (0.18, 0.62), (0.85, 0.62)]),
            line(&[(0.68, 0.3), (0.66, 0.92)]),
        ],
        (4, _) => vec![line(&[
            (0.66, 0.92),
            (0.66, 0.08),
            (0.15, 0.64),
            (0.85, 0.64),
        ])],
        (5, _) => {
            let mut s = line(&[(0.76, 0.1), (0.32, 0.1), (0.29, 0.47)]);
            s.extend(arc(0.48, 0.66, 0.29, 0.25, -130.0, 150.0));
            vec![s]
        }
        (6, _) => vec![
            arc(0.62, 0.62, 0.37, 0.52, -80.0, -180.0),
            arc(0.5, 0.68, 0.25, 0.23, 0.0, 360.0),
        ],
        (7, 0) => vec![line(&[(0.18, 0.1), (0.82, 0.1), (0.42, 0.92)])],
        (7, _) => vec![
            line(&[(0.18, 0.1), (0.82, 0.1), (0.42, 0.92)]),
            line(&[(0.38, 0.52), (0.78, 0.52)]),
        ],
        (8, _) => vec![
            arc(0.5, 0.29, 0.22, 0.2, 0.0, 360.0),
            arc(0.5, 0.71, 0.27, 0.22, 0.0, 360.0),
        ],
        _ => {
            let mut s = arc(0.5, 0.32, 0.25, 0.22, 0.0, 360.0);
            s.extend([(0.72, 0.62), (0.62, 0.92)]);
            vec![s]
        }
    }
}
