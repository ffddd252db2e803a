//! The report as tables ("pktflow.tables/1"): a row per capture, connection, direction,
//! query, relay, relay pair and finding, with the columns `schema.rs` declares, filled from
//! the report's own records (the values the JSON holds, not a reading of it). The binding
//! hands them to Arrow; Python writes them as Parquet.

pub mod flatten;
pub mod schema;
pub mod table;

#[cfg(test)]
mod tests;

use serde::Serialize;

use crate::report::{Report, ReportError};
use flatten::Walk;
use schema::{KEYS, TABLES};
pub use table::{Cell, ColumnValues, Table, Values};

/// Every table of one capture's report.
pub struct Tables {
    pub tables: Vec<Table>,
}

const NO_SKIP: &[&str] = &[];

/// Rows a table holds before they are handed on (`write_report`).
pub const CHUNK: usize = 8192;

impl Default for Tables {
    fn default() -> Self {
        Self::new()
    }
}

impl Tables {
    /// Every table, empty.
    pub fn new() -> Self {
        let tables = (TABLES.iter())
            .map(|&(name, own)| {
                let keys = (KEYS.iter())
                    .find(|(n, _)| *n == name)
                    .map_or(&[][..], |(_, k)| *k);
                Table::new(name, keys, own)
            })
            .collect();
        Tables { tables }
    }

    /// The table called `name`.
    pub fn get(&self, name: &str) -> Option<&Table> {
        self.tables.iter().find(|t| t.name == name)
    }

    fn table(&mut self, name: &str) -> Result<&mut Table, ReportError> {
        (self.tables.iter_mut())
            .find(|t| t.name == name)
            .ok_or_else(|| ReportError::Write(format!("no table {name}")))
    }

    /// The rows of `report`, handed to `out` a chunk at a time: a table's rows once it holds
    /// CHUNK of them, and at the end what every table holds (each table at least once, empty
    /// or not, so every table has its schema). Fails on a field no column declares.
    pub fn write_report(
        &mut self,
        report: &Report,
        mut out: impl FnMut(Table) -> Result<(), ReportError>,
    ) -> Result<(), ReportError> {
        let mut handed = vec![false; self.tables.len()];
        self.add(report, &mut |tables: &mut Tables| {
            for (table, handed) in tables.tables.iter_mut().zip(handed.iter_mut()) {
                if table.rows >= CHUNK {
                    *handed = true;
                    out(table.take())?;
                }
            }
            Ok(())
        })?;
        let unknown = self.unknown();
        if !unknown.is_empty() {
            return Err(ReportError::Write(format!(
                "fields the tables do not declare: {}",
                unknown.join(", ")
            )));
        }
        for (table, handed) in self.tables.iter_mut().zip(handed) {
            if table.rows > 0 || !handed {
                out(table.take())?;
            }
        }
        Ok(())
    }

    /// The rows of `report`, each table's after those already in.
    pub fn add_report(&mut self, report: &Report) -> Result<(), ReportError> {
        self.add(report, &mut |_: &mut Tables| Ok(()))
    }

    /// The rows of `report`; `chunk` runs after each connection's and relay's rows.
    fn add(
        &mut self,
        report: &Report,
        chunk: &mut dyn FnMut(&mut Tables) -> Result<(), ReportError>,
    ) -> Result<(), ReportError> {
        let file = report.capture.file.clone();
        let captures = self.table("captures")?;
        captures.begin_row();
        captures.set("schema", Cell::Text(crate::report::document::SCHEMA.into()));
        captures.set("tool.name", Cell::Text("pktflow".into()));
        captures.set("tool.version", Cell::Text(report.version().into()));
        row(captures, &report.capture, NO_SKIP)?;
        for i in 0..report.len() {
            let record = report.connection(i)?;
            let connections = self.table("connections")?;
            connections.begin_row();
            connections.set("capture", Cell::Text(file.clone()));
            row(connections, &record, &["directions", "queries"])?;
            let directions = self.table("directions")?;
            let d = &record.directions;
            for (name, direction) in [
                ("client_to_server", &d.client_to_server),
                ("server_to_client", &d.server_to_client),
            ] {
                directions.begin_row();
                directions.set("capture", Cell::Text(file.clone()));
                directions.set("connection", Cell::Text(record.id.clone()));
                directions.set("direction", Cell::Text(name.into()));
                row(directions, direction, NO_SKIP)?;
            }
            if let Some(postgres) = &record.postgres.0 {
                let queries = self.table("queries")?;
                for (n, query) in postgres.queries.iter().enumerate() {
                    queries.begin_row();
                    queries.set("capture", Cell::Text(file.clone()));
                    queries.set("connection", Cell::Text(record.id.clone()));
                    queries.set("query_index", Cell::Int(n as i64));
                    row(queries, query, NO_SKIP)?;
                }
            }
            chunk(self)?;
        }
        for (n, relay) in report.relays.iter().enumerate() {
            let relays = self.table("relays")?;
            relays.begin_row();
            relays.set("capture", Cell::Text(file.clone()));
            relays.set("relay", Cell::Int(n as i64));
            row(relays, relay, &["queries"])?;
            // the pairs are spooled: read back one at a time, as the JSON writer reads them
            let mut read = relay.queries.reader();
            for i in 0..relay.queries.len() {
                let pair = read.get(i)?;
                let pairs = self.table("relay_pairs")?;
                pairs.begin_row();
                pairs.set("capture", Cell::Text(file.clone()));
                pairs.set("relay", Cell::Int(n as i64));
                row(pairs, &pair, NO_SKIP)?;
                chunk(self)?;
            }
            chunk(self)?;
        }
        let findings = self.table("findings")?;
        for finding in &report.findings {
            findings.begin_row();
            findings.set("capture", Cell::Text(file.clone()));
            row(findings, finding, NO_SKIP)?;
        }
        Ok(())
    }

    /// Paths that held a value no column declares, by table (empty when the schema knows
    /// every field).
    pub fn unknown(&self) -> Vec<String> {
        (self.tables.iter())
            .flat_map(|t| t.unknown.iter().map(move |p| format!("{}: {p}", t.name)))
            .collect()
    }
}

/// `value`'s fields into the current row of `table`, but those named in `skip`.
fn row<T: Serialize>(
    table: &mut Table,
    value: &T,
    skip: &'static [&'static str],
) -> Result<(), ReportError> {
    let mut walk = Walk {
        table,
        path: String::new(),
        skip,
    };
    value
        .serialize(&mut walk)
        .map_err(|e| ReportError::Write(e.to_string()))
}
