//! The parser never panics and never hangs, whatever its input.
//!
//! Two generators feed it: arbitrary bytes (turned into text the way the compiler turns an
//! invalid UTF-8 file into text, lossily), and token-level mutations of real programs (the
//! conformance corpus and the parser fixtures), which reach far deeper into the grammar than
//! random bytes do. For every input the parse must finish within a deadline, every diagnostic
//! span must lie inside the file on character boundaries (so that rendering a diagnostic can
//! slice the source), and the AST dump must render.
//!
//! Case counts are kept small so that the suite runs in a few seconds in a debug build; the
//! cargo-fuzz target in `fuzz/` explores the same property for as long as one lets it run.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::mpsc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::sample::Index;
use weft_frontend::lexer::{Lexer, TokenKind};
use weft_ir::FileId;
use weft_tests::parser::parse_and_dump;

/// Far more than any input here needs (they parse in well under a millisecond); only a hang
/// gets near it.
const DEADLINE: Duration = Duration::from_secs(10);

/// Parses `src` on a separate thread and checks the invariants; a parse that does not finish
/// before the deadline fails the case as a hang.
fn check_parse(src: String) -> Result<(), TestCaseError> {
    let (tx, rx) = mpsc::channel();
    let input = src.clone();
    std::thread::spawn(move || {
        let (dump, diagnostics) = parse_and_dump(&input);
        let _ = tx.send((dump, diagnostics));
    });
    let (dump, diagnostics) = match rx.recv_timeout(DEADLINE) {
        Ok(result) => result,
        Err(mpsc::RecvTimeoutError::Timeout) => {
            return Err(TestCaseError::fail(format!("parse did not finish: {src:?}")));
        }
        // The parsing thread panicked: its message is already on stderr.
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            return Err(TestCaseError::fail(format!("parse panicked: {src:?}")));
        }
    };
    prop_assert!(dump.starts_with("File"));
    for d in &diagnostics {
        for label in &d.labels {
            let span = label.location.span;
            let (start, end) = (span.start as usize, span.end as usize);
            prop_assert!(
                start <= end && end <= src.len(),
                "diagnostic `{}` has span {start}..{end} outside the file of {} bytes: {src:?}",
                d.message,
                src.len()
            );
            prop_assert!(
                src.is_char_boundary(start) && src.is_char_boundary(end),
                "diagnostic `{}` has span {start}..{end} inside a character: {src:?}",
                d.message
            );
        }
    }
    Ok(())
}

/// Real programs: every `.cf` file of the conformance corpus and of the parser fixtures.
fn corpus() -> &'static [String] {
    static CORPUS: OnceLock<Vec<String>> = OnceLock::new();
    CORPUS.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = Vec::new();
        collect_cf_files(&root.join("conformance"), &mut files);
        collect_cf_files(&root.join("fixtures/parser/ok"), &mut files);
        files.sort();
        let sources: Vec<String> =
            files.iter().map(|p| std::fs::read_to_string(p).expect("corpus file is UTF-8")).collect();
        assert!(sources.len() > 100, "the corpus should hold the conformance cases; found {} files", sources.len());
        sources
    })
}

fn collect_cf_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            collect_cf_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "cf") {
            out.push(path);
        }
    }
}

/// Splits a program into pieces that concatenate back to it: each token together with the
/// whitespace and comments before it, and the trailing trivia as a last piece. Mutating whole
/// pieces keeps most of the program well-formed, which is what drives the parser into its
/// deeper states.
fn pieces(src: &str) -> Vec<&str> {
    let mut lexer = Lexer::new(src, FileId(0));
    let mut out = Vec::new();
    let mut from = 0;
    loop {
        let token = lexer.next_token();
        let end = token.span.end as usize;
        if token.kind == TokenKind::Eof {
            out.push(&src[from..]);
            return out;
        }
        out.push(&src[from..end]);
        from = end;
    }
}

/// Snippets inserted by mutations: keywords, operators and literals in forms that often make a
/// program wrong in an interesting way.
const SNIPPETS: &[&str] = &[
    " not ",
    " in ",
    " and ",
    " or ",
    "?",
    ":",
    " = ",
    "+=",
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    ",",
    ".",
    " -1",
    " - ",
    "**",
    " is defined",
    " for ",
    " if ",
    " else ",
    " elif ",
    " end ",
    "\n",
    " A ",
    " a ",
    "::",
    "\"s\"",
    "\"\"\"m\"\"\"",
    " entity ",
    " implement ",
    " typedef ",
    " index ",
    " import ",
    " using ",
    " when ",
    " parents ",
    " matching /x/ ",
    " true ",
    " null ",
    " dict ",
    "[0:]",
    " -- ",
    " undef ",
    "\"{{x}}\"",
    "f\"{x}\"",
    "r\"x\"",
    "\"\"\"",
    "\"",
    "'",
    "\\",
    "é",
    "\u{feff}",
    "\r",
    "#",
    "/",
    "<-",
];

#[derive(Clone, Debug)]
enum Mutation {
    Delete(Index),
    Duplicate(Index),
    Insert(Index, Index),
    Swap(Index, Index),
    /// Replaces a piece with another piece of the same program.
    Replace(Index, Index),
    /// Cuts the program at a character inside a piece: unterminated strings, half operators.
    Truncate(Index, Index),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<Index>().prop_map(Mutation::Delete),
        any::<Index>().prop_map(Mutation::Duplicate),
        (any::<Index>(), any::<Index>()).prop_map(|(a, b)| Mutation::Insert(a, b)),
        (any::<Index>(), any::<Index>()).prop_map(|(a, b)| Mutation::Swap(a, b)),
        (any::<Index>(), any::<Index>()).prop_map(|(a, b)| Mutation::Replace(a, b)),
        (any::<Index>(), any::<Index>()).prop_map(|(a, b)| Mutation::Truncate(a, b)),
    ]
}

fn mutate(src: &str, mutations: &[Mutation]) -> String {
    let mut parts: Vec<String> = pieces(src).into_iter().map(str::to_string).collect();
    for m in mutations {
        if parts.is_empty() {
            break;
        }
        match m {
            Mutation::Delete(i) => {
                parts.remove(i.index(parts.len()));
            }
            Mutation::Duplicate(i) => {
                let i = i.index(parts.len());
                parts.insert(i, parts[i].clone());
            }
            Mutation::Insert(i, s) => {
                let i = i.index(parts.len() + 1);
                parts.insert(i, SNIPPETS[s.index(SNIPPETS.len())].to_string());
            }
            Mutation::Swap(a, b) => {
                let (a, b) = (a.index(parts.len()), b.index(parts.len()));
                parts.swap(a, b);
            }
            Mutation::Replace(a, b) => {
                let (a, b) = (a.index(parts.len()), b.index(parts.len()));
                parts[a] = parts[b].clone();
            }
            Mutation::Truncate(a, b) => {
                let a = a.index(parts.len());
                let piece = &parts[a];
                let cut = piece.char_indices().map(|(i, _)| i).nth(b.index(piece.chars().count().max(1))).unwrap_or(0);
                parts[a] = piece[..cut].to_string();
                parts.truncate(a + 1);
            }
        }
    }
    parts.concat()
}

/// The number of cases: `default`, or `PROPTEST_CASES` from the environment for a longer run.
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(2000), ..ProptestConfig::default() })]

    /// Arbitrary bytes, mostly garbage for the lexer.
    #[test]
    fn arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        check_parse(String::from_utf8_lossy(&bytes).into_owned())?;
    }

    /// Arbitrary text over the language's own characters, which gets past the lexer more often.
    #[test]
    fn arbitrary_source_characters(src in "[a-zA-Z0-9_ \n\t\"'#:.,=+*/%?()\\[\\]{}<>!-]{0,200}") {
        check_parse(src)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(2000), ..ProptestConfig::default() })]

    /// Real programs with one to four token-level mutations.
    #[test]
    fn mutated_programs(file in any::<Index>(), mutations in proptest::collection::vec(mutation(), 1..5)) {
        let corpus = corpus();
        let src = &corpus[file.index(corpus.len())];
        check_parse(mutate(src, &mutations))?;
    }
}

/// The mutation machinery itself: splitting into pieces loses nothing.
#[test]
fn pieces_concatenate_back_to_the_program() {
    for src in corpus() {
        assert_eq!(pieces(src).concat(), *src);
    }
}

/// Pathologically deep input is reported, never a stack overflow: the parser bounds the depth
/// of the tree, and every later pass relies on that bound. Run in a thread with a small stack
/// (1 MB, less than a test thread's default) to keep a margin.
#[test]
fn deep_nesting_is_an_error_not_a_crash() {
    let cases = [
        format!("x = {}1{}\n", "(".repeat(100_000), ")".repeat(100_000)),
        format!("x = {}{}\n", "[".repeat(50_000), "]".repeat(50_000)),
        format!("x = {}true\n", "not ".repeat(100_000)),
        format!("{}{}", "if true:\n".repeat(20_000), "end\n".repeat(20_000)),
        format!("x = 1{}\n", " + 1".repeat(200_000)),
        format!("x = a{}\n", ".b".repeat(100_000)),
        format!("x = d{}\n", "[1]".repeat(100_000)),
        format!("if a:\n{}end\n", "elif a:\n".repeat(100_000)),
        format!("x = {}1{}\n", "a ? ".repeat(50_000), " : 2".repeat(50_000)),
    ];
    for src in cases {
        let shown: String = src.chars().take(20).collect();
        let handle = std::thread::Builder::new()
            .stack_size(1024 * 1024)
            .spawn(move || {
                let arena = bumpalo::Bump::new();
                let mut interner = weft_ir::Interner::new();
                let out = weft_frontend::parse_file(&arena, &src, weft_ir::FileId(0), &mut interner);
                out.diagnostics.iter().any(|d| d.code == weft_ir::diagnostic::codes::NESTED_TOO_DEEPLY)
            })
            .expect("spawn");
        assert_eq!(handle.join().ok(), Some(true), "input starting with {shown:?}");
    }
    // Deep but reasonable code still parses.
    let arena = bumpalo::Bump::new();
    let mut interner = weft_ir::Interner::new();
    let src = format!("x = {}1{}\ny = 1{}\n", "(".repeat(500), ")".repeat(500), " + 1".repeat(500));
    let out = weft_frontend::parse_file(&arena, &src, weft_ir::FileId(0), &mut interner);
    assert!(out.diagnostics.is_empty(), "{:?}", out.diagnostics);
}
