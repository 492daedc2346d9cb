//! The payload codec's cost (README "Security"): time to seal and to open one value and the
//! bytes it adds, for a few value sizes. No services needed.
//!
//! `cargo run --release -p savepoint-benches --bin codec -- --iterations 200000`

use clap::Parser;
use std::hint::black_box;
use std::time::Instant;

use savepoint_runtime::security::{Binding, PayloadCodec};

#[derive(Parser, Debug)]
struct Args {
    /// Seals (and opens) per size.
    #[arg(long, default_value_t = 100_000)]
    iterations: u32,
    /// Plaintext sizes in bytes (repeatable).
    #[arg(long = "size", default_values_t = vec![16, 128, 1024, 16 * 1024])]
    sizes: Vec<usize>,
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let codec = PayloadCodec::parse(&PayloadCodec::new_key_entry("bench")?)?;
    let binding = Binding::Run {
        thread: "chain-0123456789abcdef",
        field: "j:12",
    };
    println!("size_bytes  sealed_bytes  overhead  seal_ns  open_ns");
    for &size in &a.sizes {
        let plain = vec![b'x'; size];
        let started = Instant::now();
        let mut sealed = String::new();
        for _ in 0..a.iterations {
            sealed = codec.seal(binding, black_box(&plain));
        }
        let seal_ns = started.elapsed().as_nanos() as f64 / f64::from(a.iterations);
        let started = Instant::now();
        for _ in 0..a.iterations {
            black_box(codec.open(binding, black_box(sealed.as_bytes()))?);
        }
        let open_ns = started.elapsed().as_nanos() as f64 / f64::from(a.iterations);
        println!(
            "{size:>10}  {:>12}  {:>8}  {seal_ns:>7.0}  {open_ns:>7.0}",
            sealed.len(),
            sealed.len() - size
        );
    }
    Ok(())
}
