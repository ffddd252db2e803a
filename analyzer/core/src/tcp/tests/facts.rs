//! The facts' shapes as Python receives them (serde: what pythonize and json.loads give).

use super::flow::*;
use serde_json::json;

#[test]
fn facts_serialise_with_the_report_names_and_shapes() {
    let mut f = Flow::new();
    f.handshake();
    f.send(0, b"hello");
    f.fin(0);
    f.fin(1);
    let ran = run(&f.packets);
    let v = serde_json::to_value(ran.only().facts()).unwrap();
    assert_eq!(v["number"], json!(1));
    assert_eq!(v["client"], json!(["10.0.0.1", 40000]));
    assert_eq!(v["server"], json!(["10.0.0.2", 5432]));
    assert_eq!(v["role_source"], json!("handshake"));
    assert_eq!(v["closed_by"], json!("fin"));
    assert_eq!(v["start_ts"], json!(T0 + 0.0001));
    assert_eq!(v["syn_frames"], json!([1, 2]));
    let c2s = &v["directions"][0];
    assert_eq!(c2s["payload_bytes"], json!(5));
    assert_eq!(c2s["mss"], json!(1460));
    assert_eq!(
        (&c2s["window_scale"], &c2s["window_scale_lower_bound"]),
        (&json!(7), &json!(null))
    );
    assert_eq!(c2s["segments_above_mss"], json!(0));
    assert_eq!(c2s["ev_gap"], json!([]));
    assert_eq!(
        c2s["syn"],
        json!({"mss": 1460, "window_scale": 7, "sack_permitted": true, "timestamps": true,
               "cut": false})
    );
    // a connection without handshake, and the engine's own facts
    let mut g = Flow::new();
    g.send(1, b"x");
    let ran = run(&g.packets);
    let v = serde_json::to_value(ran.only().facts()).unwrap();
    assert_eq!(
        (&v["role_source"], &v["closed_by"]),
        (&json!("port"), &json!(null))
    );
    assert_eq!(v["directions"][1]["window_scale_lower_bound"], json!(0));
    let e = serde_json::to_value(&ran.engine).unwrap();
    assert_eq!(
        e,
        json!({"late_packets": 0, "late_frames": [], "settled_linger": 2.0, "opened": 1})
    );
}
