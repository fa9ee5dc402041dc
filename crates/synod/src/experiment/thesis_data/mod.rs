//! The thesis's reported figures, generated from ../shared/research/zab.md by
//! scripts/thesis_data.py: rows are WR = 10 … 100 %, columns N = 3, 5, 7, 9; NaN where the
//! thesis reports nothing. Each entry is (protocol, with the (25, 75) ms wait-time, grid).

mod app_f;
mod coin;
mod gains;

pub use app_f::{D_MS, LAMBDA};
pub use coin::{ACKS, COIN_P};
pub use gains::{LATENCY, THROUGHPUT};

/// Rows WR = 10, 20, …, 100 %; columns N = 3, 5, 7, 9.
pub type Grid = [[f64; 4]; 10];
