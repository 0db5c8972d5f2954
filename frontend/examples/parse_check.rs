//! Parses each file given on the command line and prints `OK` or the first error as
//! `ERR <line> <kind> <message>`: the format the differential parser test scripts compare.
use weft_ir::{Interner, SourceFile, SourceMap};

fn main() {
    for path in std::env::args().skip(1) {
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) => {
                println!("== {path}\nIOERR {e}");
                continue;
            }
        };
        let mut map = SourceMap::new();
        let id = map.add(SourceFile::new(path.clone(), text.as_str()));
        let arena = bumpalo::Bump::new();
        let mut interner = Interner::new();
        let out = weft_frontend::parse_file(&arena, &text, id, &mut interner);
        println!("== {path}");
        match out.diagnostics.iter().find(|d| d.is_error()) {
            None => println!("OK"),
            Some(d) => {
                let lc = d.primary_location().map(|l| map.line_col(l));
                let line = lc.map_or(0, |l| l.line);
                let line = if d.code == weft_ir::diagnostic::codes::UNEXPECTED_EOF { line + 1 } else { line };
                println!("ERR {line} {} {}", d.kind, d.message);
            }
        }
    }
}
