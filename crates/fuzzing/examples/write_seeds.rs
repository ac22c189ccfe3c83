//! Writes every fuzz target's seed inputs into `<dir>/<target>/` (the corpus directories
//! cargo-fuzz reads): `cargo run -p flumen-fuzzing --example write_seeds -- fuzz/corpus`.

fn main() -> std::io::Result<()> {
    let dir = std::env::args().nth(1).unwrap_or_else(|| "fuzz/corpus".to_string());
    for target in flumen_fuzzing::TARGETS {
        let out = std::path::Path::new(&dir).join(target.name);
        std::fs::create_dir_all(&out)?;
        let seeds = (target.seeds)();
        for (i, seed) in seeds.iter().enumerate() {
            std::fs::write(out.join(format!("seed-{i}")), seed)?;
        }
        println!("{}: {} seeds in {}", target.name, seeds.len(), out.display());
    }
    Ok(())
}
