//! What a diagram draws. The pass keeps every connection's packets and what each segment
//! completed (record.rs); once the report says what to draw, a selection is read back and
//! made the ladder's rows (rows.rs), folded (fold.rs), and measured for the plots (plot.rs).

pub mod fold;
pub mod plot;
pub mod record;
pub mod rows;
pub mod teach;

use std::collections::{HashMap, HashSet};

pub use record::{Detail, Drawn, Label, Packet, Recorder, Recording, Shared};
pub use rows::{Acks, Kind, Lanes, Row, Rows};

use fold::{Folded, Item};

/// The maps of a drawing: a fast hasher (foldhash), as the engine's tables use.
pub type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
pub type Set<K> = HashSet<K, foldhash::fast::RandomState>;

/// A selection drawn: its rows, how they fold, and (when asked) its plots.
#[derive(Debug)]
pub struct Drawing {
    pub rows: Rows,
    /// Rows and groups of repeated blocks.
    pub items: Vec<Item>,
    /// The items with bulk transfers folded.
    pub phases: Vec<Folded>,
    /// What its plots show, measured from its packets before they were dropped.
    pub plot: Option<plot::Plot>,
    /// The selection had more packets than were kept.
    pub cut: bool,
    /// The capture's first packet's time, which row times count from.
    pub start: f64,
}

impl Drawing {
    /// `drawn`'s rows for the connections in `lanes`; `owners`: (connection, frame) -> a
    /// pooler's marks on the request it sent; `start`: the capture's first packet's time;
    /// `openers`: the lanes whose requests open exchanges (fold::openers); `plots`: measure
    /// what the plots show too (the packets are not kept past this).
    pub fn new(
        drawn: Drawn,
        lanes: &Map<u64, Lanes>,
        owners: &Map<(u64, u64), Vec<String>>,
        start: f64,
        openers: &[u16],
        plots: bool,
    ) -> Self {
        let plot = plots.then(|| plot::plot(&drawn.packets, lanes, &drawn.swapped, start));
        let rows = rows::rows(&drawn, lanes, owners, start);
        let cut = drawn.cut;
        drop(drawn);
        let items = fold::collapse(
            &fold::signatures(&rows),
            &fold::sizes(&rows),
            &fold::openers(&rows, openers),
        );
        let phases = fold::phases(&rows, &items);
        Drawing {
            rows,
            items,
            phases,
            plot,
            cut,
            start,
        }
    }
}
