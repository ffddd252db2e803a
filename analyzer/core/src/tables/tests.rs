use std::collections::HashSet;

use serde::Serialize;

use super::flatten::Walk;
use super::schema::{Kind, KEYS, TABLES};
use super::*;
use crate::report::values::{Digits, Inline, Maybe};

#[test]
fn column_names_are_unique_within_each_table() {
    for table in Tables::new().tables {
        let mut seen = HashSet::new();
        for c in &table.columns {
            assert!(
                seen.insert(c.name.clone()),
                "{}: {} twice",
                table.name,
                c.name
            );
        }
    }
    assert_eq!(TABLES.len(), KEYS.len());
}

#[derive(Serialize)]
struct Inner {
    a: u64,
    b: Option<f64>,
}

#[derive(Serialize)]
struct Part {
    n: Maybe<u64>,
    absent: Maybe<u64>,
    rows: Digits,
    big: Digits,
    inner: Inner,
    inlined: Inline<Inner>,
    frames: Vec<u64>,
    hist: std::collections::BTreeMap<u64, u64>,
    objects: Vec<Inner>,
    child: Vec<Inner>,
    extra: bool,
}

#[test]
fn a_part_fills_its_columns_as_the_json_nests_it() {
    let own = [
        ("n", Kind::Int, ""),
        ("absent", Kind::Int, ""),
        ("rows", Kind::Int, ""),
        ("big", Kind::Int, ""),
        ("inner.a", Kind::Int, ""),
        ("inner.b", Kind::Float, ""),
        ("a", Kind::Int, ""),
        ("b", Kind::Float, ""),
        ("frames", Kind::IntList, ""),
        ("hist", Kind::IntMap, ""),
        ("objects", Kind::Json, ""),
    ];
    let mut table = Table::new("t", &[], &own);
    table.begin_row();
    let part = Part {
        n: Maybe(Some(3)),
        absent: Maybe(None),
        rows: Digits("10000".into()),
        big: Digits("123456789012345678901234567890".into()),
        inner: Inner { a: 1, b: None },
        inlined: Inline(Some(Inner { a: 2, b: Some(2.5) })),
        frames: vec![4, 5],
        hist: [(8192, 3), (42, 1)].into_iter().collect(),
        objects: vec![Inner { a: 7, b: Some(1.0) }],
        child: vec![Inner { a: 9, b: None }],
        extra: true,
    };
    let mut walk = Walk {
        table: &mut table,
        path: String::new(),
        skip: &["child"],
    };
    assert!(part.serialize(&mut walk).is_ok());
    let col = |name: &str| {
        (table.columns.iter())
            .find(|c| c.name == name)
            .map(|c| c.values.clone())
    };
    assert_eq!(col("n"), Some(Values::Int(vec![Some(3)])));
    assert_eq!(col("absent"), Some(Values::Int(vec![None])));
    assert_eq!(col("rows"), Some(Values::Int(vec![Some(10000)])));
    assert_eq!(col("big"), Some(Values::Int(vec![None])));
    assert_eq!(col("inner_a"), Some(Values::Int(vec![Some(1)])));
    assert_eq!(col("inner_b"), Some(Values::Float(vec![None])));
    assert_eq!(col("a"), Some(Values::Int(vec![Some(2)])));
    assert_eq!(col("b"), Some(Values::Float(vec![Some(2.5)])));
    assert_eq!(col("frames"), Some(Values::IntList(vec![Some(vec![4, 5])])));
    let hist = vec![("42".to_string(), 1), ("8192".to_string(), 3)];
    assert_eq!(col("hist"), Some(Values::IntMap(vec![Some(hist)])));
    let objects = r#"[{"a":7,"b":1.0}]"#;
    let Some(Values::Text(texts)) = col("objects") else {
        panic!("objects is a text column");
    };
    assert_eq!(texts.rows(), vec![Some(objects)]);
    // a field no column declares is said, not lost in silence; a skipped one is neither
    assert_eq!(table.unknown.iter().collect::<Vec<_>>(), vec!["extra"]);
}

#[test]
fn a_text_column_holds_its_rows_as_arrow_lays_them_out() {
    let mut table = Table::new("t", &[], &[("s", Kind::Text, "")]);
    table.begin_row();
    table.set_str("s", "first");
    table.begin_row(); // null
    table.begin_row();
    table.set_str("s", "dropped");
    table.set_str("s", "kept"); // set twice: the last one stands
    table.begin_row();
    table.set_str("s", "");
    let Some(Values::Text(t)) = table.columns.first().map(|c| c.values.clone()) else {
        panic!("s is a text column");
    };
    assert_eq!(t.rows(), vec![Some("first"), None, Some("kept"), Some("")]);
    assert_eq!(t.offsets, vec![0, 5, 5, 9, 9]);
    assert_eq!(t.bytes, b"firstkept");
    assert!(table.unknown.is_empty());
}
