//! Prints weft's parse outcome for each file in the format of `tools/parser-oracle.py`, so the
//! two can be compared line by line:
//!
//! ```text
//! cargo run -q -p weft-tests --example parser_outcome -- FILE... > weft.txt
//! tools/parser-oracle.py FILE... > reference.txt
//! diff weft.txt reference.txt
//! ```
//!
//! An unexpected end of file is reported on the line after the last one, as the reference does.
//! With `--detail`, every diagnostic follows on its own indented line.

use weft_tests::parser::{parse_diagnostics, render_diagnostics, weft_outcome};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let detail = args.iter().any(|a| a == "--detail");
    for path in args.iter().filter(|a| *a != "--detail") {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("{path}: {e}");
                std::process::exit(2);
            }
        };
        let src = String::from_utf8_lossy(&bytes);
        let diagnostics = parse_diagnostics(&src);
        println!("{path}\t{}", weft_outcome(&src, &diagnostics));
        if detail {
            for line in render_diagnostics(&src, &diagnostics).lines() {
                println!("    {line}");
            }
        }
    }
}
